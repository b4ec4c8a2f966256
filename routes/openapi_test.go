package routes

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/gin-gonic/gin"

	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/forgetest"
)

// The OpenAPI document (openapi.json) against the handlers: it is a valid
// OpenAPI 3 document, it describes every route gin serves but the few that
// are not for programs, and every request these tests send and every
// answer they get is checked against it with kin-openapi's openapi3filter:
// a request the document calls valid must be one, an invalid one must be
// refused, and every answer (status, headers, body) must be one the
// document describes, its objects having no field it does not name.
// Every status the document names for an operation must be seen.

// notForPrograms are the routes the document leaves out, and why.
var notForPrograms = map[string]string{
	"OPTIONS /*any":            "CORS preflights, answered for every path",
	"GET /oauth/login":         "sign-in: a browser redirect to Gitea",
	"GET /oauth/callback":      "sign-in: Gitea's redirect back",
	"POST /oauth/logout":       "sign-in: the browser's sign-out",
	"POST /hooks/gitea":        "Gitea's system webhook, signed with a secret only Gitea has",
	"GET /assets/:name":        "the badge bundle that Gitea's footer loads",
	"HEAD /assets/:name":       "the badge bundle that Gitea's footer loads",
	"GET /:owner/:repo/claims": "the board, an HTML page for people",
	"GET /-/claims":            "the board of every repository, an HTML page for people",
}

// apiSpec is the document as served, ready to check exchanges with.
type apiSpec struct {
	doc    *openapi3.T
	router routers.Router
	opts   *openapi3filter.Options
	seen   map[string]bool // "METHOD /path status" of every checked answer
}

// loadSpec fetches the document from f's handler, validates it, and makes
// a copy whose objects admit no undocumented field.
func loadSpec(t *testing.T, f *fixture) *apiSpec {
	t.Helper()
	r := f.do("GET", OpenAPIPath)
	if r.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", OpenAPIPath, r.Code, r.Body)
	}
	doc, err := openapi3.NewLoader().LoadFromData([]byte(r.Body))
	if err != nil {
		t.Fatalf("load the document: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("the document is not valid OpenAPI 3: %v", err)
	}
	// The document's server is relative to where it is served; requests
	// here carry the paths alone.
	doc.Servers = nil
	closeObjects(doc)
	// An event stream's body is text, checked as a string.
	openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.FileBodyDecoder)
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &apiSpec{
		doc:    doc,
		router: router,
		seen:   map[string]bool{},
		opts: &openapi3filter.Options{
			IncludeResponseStatus:             true,
			RejectWhenRequestBodyNotSpecified: true,
			MultiError:                        true,
			AuthenticationFunc:                credentialsPresent,
			SchemaValidationOptions:           []openapi3.SchemaValidationOption{openapi3.EnableFormatValidation()},
		},
	}
}

// closeObjects makes every object schema of doc that lists its properties,
// and says nothing of others, refuse others: the published document lets
// clients meet new fields; the test wants to see each one documented.
func closeObjects(doc *openapi3.T) {
	seen := map[*openapi3.Schema]bool{}
	var walk func(ref *openapi3.SchemaRef)
	walk = func(ref *openapi3.SchemaRef) {
		if ref == nil || ref.Value == nil || seen[ref.Value] {
			return
		}
		s := ref.Value
		seen[s] = true
		if s.Type.Is("object") && len(s.Properties) > 0 && s.AdditionalProperties.Has == nil && s.AdditionalProperties.Schema == nil {
			no := false
			s.AdditionalProperties.Has = &no
		}
		for _, p := range s.Properties {
			walk(p)
		}
		walk(s.Items)
		walk(s.AdditionalProperties.Schema)
		for _, l := range [][]*openapi3.SchemaRef{s.AllOf, s.OneOf, s.AnyOf} {
			for _, sub := range l {
				walk(sub)
			}
		}
	}
	for _, s := range doc.Components.Schemas {
		walk(s)
	}
	content := func(c openapi3.Content) {
		for _, mt := range c {
			walk(mt.Schema)
		}
	}
	for _, r := range doc.Components.Responses {
		content(r.Value.Content)
	}
	for _, b := range doc.Components.RequestBodies {
		content(b.Value.Content)
	}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			for _, r := range op.Responses.Map() {
				content(r.Value.Content)
			}
			if op.RequestBody != nil {
				content(op.RequestBody.Value.Content)
			}
		}
	}
}

// credentialsPresent is the test's authentication: a scheme is satisfied
// when its credential is sent (whether it is valid is the handler's
// question, answered 401).
func credentialsPresent(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	req, s := in.RequestValidationInput.Request, in.SecurityScheme
	switch s.In {
	case "header":
		if req.Header.Get(s.Name) != "" {
			return nil
		}
	case "cookie":
		if _, err := req.Cookie(s.Name); err == nil {
			return nil
		}
	}
	return fmt.Errorf("no %s credential", in.SecuritySchemeName)
}

// apiCall is one request of the tests and what its answer must be.
type apiCall struct {
	name         string
	method, path string
	body         string
	headers      []string // "Name: value"
	valid        bool     // the document calls the request valid
	code         int
}

// do sends e to f's handler and checks the request and the answer against
// the document; it returns the answer.
func (s *apiSpec) do(t *testing.T, f *fixture, e apiCall) reply {
	t.Helper()
	newReq := func() *http.Request {
		req := httptest.NewRequest(e.method, e.path, strings.NewReader(e.body))
		if e.body == "" {
			req.Body = http.NoBody
		}
		for _, h := range e.headers {
			k, v, _ := strings.Cut(h, ": ")
			req.Header.Add(k, v)
		}
		return req
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, newReq())
	body := rec.Body.Bytes()
	got := reply{Code: rec.Code, Header: rec.Result().Header, Body: string(body)}
	if got.Code != e.code {
		t.Errorf("%s: %s %s answered %d %s, want %d", e.name, e.method, e.path, got.Code, got.Body, e.code)
	}

	ctx := context.Background()
	req := newReq()
	route, params, err := s.router.FindRoute(req)
	if err != nil {
		t.Errorf("%s: %s %s is not in the document: %v", e.name, e.method, e.path, err)
		return got
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: s.opts}
	err = openapi3filter.ValidateRequest(ctx, in)
	switch {
	case e.valid && err != nil:
		t.Errorf("%s: the document refuses the request %s %s: %v", e.name, e.method, e.path, err)
	case !e.valid && err == nil:
		t.Errorf("%s: the document accepts the request %s %s, which the test sends as invalid", e.name, e.method, e.path)
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: got.Code, Header: got.Header,
		Body: io.NopCloser(bytes.NewReader(body)), Options: s.opts,
	}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		t.Errorf("%s: the answer %d %s to %s %s does not match the document: %v", e.name, got.Code, got.Body, e.method, e.path, err)
	}
	if got.Code == http.StatusNotModified {
		// openapi3filter skips 304s: their headers are checked here.
		if got.Header.Get("ETag") == "" || len(body) != 0 {
			t.Errorf("%s: 304 without an ETag or with a body: %v %q", e.name, got.Header, body)
		}
	}
	s.seen[fmt.Sprintf("%s %s %d", route.Method, route.Path, got.Code)] = true
	return got
}

// doStream opens path on srv as a browser's EventSource would, reads the
// answer up to its first line and checks it against the document; it
// returns what closes the stream (a refusal is closed already).
func (s *apiSpec) doStream(t *testing.T, srv *httptest.Server, name, path string, code int) (closeStream func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil && err != io.EOF {
		t.Fatalf("%s: reading the answer: %v", name, err)
	}
	if resp.StatusCode != code {
		t.Errorf("%s: GET %s answered %d %q, want %d", name, path, resp.StatusCode, line, code)
	}
	check := httptest.NewRequest(http.MethodGet, path, nil)
	route, params, err := s.router.FindRoute(check)
	if err != nil {
		t.Fatalf("%s: GET %s is not in the document: %v", name, path, err)
	}
	in := &openapi3filter.RequestValidationInput{Request: check, PathParams: params, Route: route, Options: s.opts}
	if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
		t.Errorf("%s: the document refuses the request GET %s: %v", name, path, err)
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Body: io.NopCloser(strings.NewReader(line)), Options: s.opts}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		t.Errorf("%s: the answer %d %q to GET %s does not match the document: %v", name, resp.StatusCode, line, path, err)
	}
	if code == http.StatusOK && line != "retry: 2000\n" {
		t.Errorf("%s: the stream began with %q", name, line)
	}
	s.seen[fmt.Sprintf("GET %s %d", route.Path, resp.StatusCode)] = true
	return func() { cancel(); resp.Body.Close() }
}

// The document is the embedded file, cached by anyone for a few minutes,
// revalidated by ETag, and readable by Gitea's pages as the reads are.
func TestOpenAPIDocumentIsServed(t *testing.T) {
	f := newFixture(t)
	r := f.do("GET", OpenAPIPath, "Origin: "+giteaURL)
	if r.Code != http.StatusOK || r.Body != string(openAPIDoc) || r.Header.Get("Content-Type") != "application/json; charset=utf-8" {
		t.Fatalf("GET %s: %d %s, %q", OpenAPIPath, r.Code, r.Header.Get("Content-Type"), r.Body[:min(len(r.Body), 80)])
	}
	if cc := r.Header.Get("Cache-Control"); cc != "public, max-age=300, must-revalidate" {
		t.Errorf("Cache-Control %q", cc)
	}
	if r.Header.Get("Access-Control-Allow-Origin") != giteaURL {
		t.Errorf("not readable by Gitea's pages: %v", r.Header)
	}
	if r := f.do("GET", OpenAPIPath, "Origin: http://evil.example"); r.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("readable by another origin: %v", r.Header)
	}
	etag := r.Header.Get("ETag")
	if r := f.do("GET", OpenAPIPath, "If-None-Match: "+etag); r.Code != http.StatusNotModified || r.Body != "" || r.Header.Get("ETag") != etag {
		t.Errorf("revalidation: %d %q ETag %q", r.Code, r.Body, r.Header.Get("ETag"))
	}
}

// ginToOpenAPI writes gin's /a/:b/*c as OpenAPI's /a/{b}/{c}.
func ginToOpenAPI(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		if strings.HasPrefix(s, ":") || strings.HasPrefix(s, "*") {
			parts[i] = "{" + s[1:] + "}"
		}
	}
	return strings.Join(parts, "/")
}

// Every route gin serves is in the document, or named above as not for
// programs; and the document describes no route that is not served.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	f := newFixture(t, func(o *Options) {
		o.Webhook = &Webhook{Secret: bytes.Repeat([]byte{1}, 16), Parse: func(string, string, []byte) (forge.Event, bool, error) {
			return forge.Event{}, false, nil
		}}
	})
	spec := loadSpec(t, f)
	engine, ok := f.h.(*gin.Engine)
	if !ok {
		t.Fatalf("New returned a %T, not gin's engine", f.h)
	}
	served := map[string]bool{}
	for _, r := range engine.Routes() {
		key := r.Method + " " + r.Path
		if _, skip := notForPrograms[key]; skip {
			continue
		}
		path := ginToOpenAPI(r.Path)
		served[r.Method+" "+path] = true
		item := spec.doc.Paths.Value(path)
		if item == nil || item.GetOperation(r.Method) == nil {
			t.Errorf("%s %s is served but not described in routes/openapi.json (or listed in notForPrograms with a reason)", r.Method, r.Path)
		}
	}
	for path, item := range spec.doc.Paths.Map() {
		for method := range item.Operations() {
			if !served[method+" "+path] {
				t.Errorf("the document describes %s %s, which is not served", method, path)
			}
		}
	}
	if len(served) < 10 {
		t.Fatalf("only %d routes checked: %v", len(served), served)
	}
}

// The test's own check fails when it should: a route the document lacks
// is reported, and so is an answer with a field it does not name.
func TestOpenAPICheckCanFail(t *testing.T) {
	f := newFixture(t)
	spec := loadSpec(t, f)
	if spec.doc.Paths.Value(ginToOpenAPI("/api/v1/repos/:owner/:repo/leases/frobnicate")) != nil {
		t.Fatal("a path nobody serves is in the document")
	}
	req := httptest.NewRequest("GET", "/api/v1/repos/acme/widgets/issues/1/lease", nil)
	route, params, err := spec.router.FindRoute(req)
	if err != nil {
		t.Fatal(err)
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: spec.opts}
	for name, c := range map[string]struct {
		code int
		body string
	}{
		"an extra field":      {200, `{"lease":null,"extra":1}`},
		"a missing field":     {200, `{}`},
		"a time with nanos":   {200, `{"lease":{"issue":1,"holder":"a","agent":null,"token":1,"acquired_at":"2026-09-05T12:00:00.5Z","expires_at":null}}`},
		"an undocumented 418": {418, `{"error":"teapot"}`},
	} {
		h := http.Header{"Content-Type": {"application/json; charset=utf-8"}, "Etag": {`"x"`}, "Cache-Control": {"private, no-cache"}}
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: c.code, Header: h,
			Body: io.NopCloser(strings.NewReader(c.body)), Options: spec.opts}
		if err := openapi3filter.ValidateResponse(context.Background(), out); err == nil {
			t.Errorf("%s: the check passed %d %s", name, c.code, c.body)
		}
	}
}

// Every endpoint, through every status the tests can reach, checked
// against the document.
func TestAnswersMatchTheOpenAPIDocument(t *testing.T) {
	// One live event stream per address, so a second one is refused.
	f, _ := newMergeFixture(t, func(o *Options) { o.Streams = StreamOptions{PerAddress: 1} })
	f.forge.Grant("acme/widgets", "alice", forgetest.Admin)
	spec := loadSpec(t, f)

	const (
		widgets = "/api/v1/repos/acme/widgets"
		secret  = "/api/v1/repos/acme/secret"
		list    = widgets + "/leases"
		check   = lease1 + "/check?token=1"
		history = lease1 + "/history"
		force   = lease1 + "/force-release"
		claim   = lease1 + "/claim"
		unclaim = lease1 + "/release"
		handoff = lease1 + "/handoff"
		merge   = widgets + "/pulls/3/merge"
		res     = widgets + "/reservations"
		admin   = "Authorization: token alice-token"
		bob     = "Authorization: token bob-write"
		carol   = "Authorization: token carol-write"
		reader  = "Authorization: token bob-read"
		revoked = "Authorization: token revoked"
		json    = "Content-Type: application/json"
	)
	origin := "Origin: " + giteaURL
	ok := func(name, method, path string, code int, headers ...string) apiCall {
		return apiCall{name: name, method: method, path: path, headers: headers, valid: true, code: code}
	}
	bad := func(name, method, path string, code int, headers ...string) apiCall {
		return apiCall{name: name, method: method, path: path, headers: headers, code: code}
	}
	withBody := func(e apiCall, body string) apiCall { e.body = body; return e }
	// revalidate asks path again with the ETag of its last answer.
	revalidate := func(name, path string, headers ...string) {
		t.Helper()
		r := spec.do(t, f, ok(name, "GET", path, 200, headers...))
		spec.do(t, f, ok(name+", revalidated", "GET", path, 304, append(headers, "If-None-Match: "+r.Header.Get("ETag"))...))
	}

	for _, e := range []apiCall{
		ok("health", "GET", "/healthz", 200),
		ok("the session of nobody", "GET", "/api/v1/session", 200),
		ok("a session", "GET", "/api/v1/session", 200, f.sessionFor("alice")),

		ok("acquire", "POST", lease1, 201, bob),
		withBody(ok("acquire again, with a ttl", "POST", lease1, 201, bob, json), `{"ttl":"30m"}`),
		ok("acquire a held issue", "POST", lease1, 409, carol),
		ok("acquire a closed issue", "POST", widgets+"/issues/2/lease", 409, bob),
		bad("acquire without a token", "POST", lease1, 401),
		bad("acquire with a session cookie alone", "POST", lease1, 401, f.sessionFor("bob")),
		ok("acquire with an invalid token", "POST", lease1, 401, revoked),
		ok("acquire with a read-only token", "POST", lease1, 403, reader),
		ok("acquire an issue that does not exist", "POST", widgets+"/issues/99/lease", 404, bob),
		ok("acquire in an invisible repository", "POST", secret+"/issues/5/lease", 404, bob),
		bad("acquire a malformed number", "POST", widgets+"/issues/x/lease", 400, bob),
		withBody(ok("acquire with a ttl that is no duration", "POST", lease1, 422, bob, json), `{"ttl":"soon"}`),
		withBody(bad("acquire with a ttl that is a number", "POST", lease1, 422, bob, json), `{"ttl":30}`),
		withBody(bad("acquire with an unknown field", "POST", lease1, 422, bob, json), `{"ttl":"1h","wait":"5m"}`),

		withBody(ok("renew", "PATCH", lease1, 200, bob, json), `{"ttl":"1h"}`),
		withBody(ok("renew by another", "PATCH", lease1, 409, carol, json), `{"ttl":"1h"}`),
		bad("renew without a body", "PATCH", lease1, 422, bob),
		withBody(ok("renew past the maximum", "PATCH", lease1, 422, bob, json), `{"ttl":"169h"}`),
		withBody(bad("renew without a token", "PATCH", lease1, 401, json), `{"ttl":"1h"}`),
		withBody(ok("renew with a read-only token", "PATCH", lease1, 403, reader, json), `{"ttl":"1h"}`),
		withBody(ok("renew in an invisible repository", "PATCH", secret+"/issues/5/lease", 404, bob, json), `{"ttl":"1h"}`),
		withBody(bad("renew a malformed number", "PATCH", widgets+"/issues/0/lease", 400, bob, json), `{"ttl":"1h"}`),
		withBody(ok("renew with an invalid token", "PATCH", lease1, 401, revoked, json), `{"ttl":"1h"}`),

		ok("the lease", "GET", lease1, 200),
		ok("a free issue's lease", "GET", widgets+"/issues/43/lease", 200),
		ok("a lease in an invisible repository", "GET", secret+"/issues/5/lease", 404),
		ok("a lease with an invalid token", "GET", lease1, 401, revoked),
		bad("a lease of a malformed number", "GET", widgets+"/issues/-1/lease", 400),

		ok("acquire a pull request", "POST", widgets+"/issues/3/lease", 201, bob),
		ok("the list", "GET", list, 200),
		ok("a page of one", "GET", list+"?limit=1&page=1", 200),
		ok("the second page of one", "GET", list+"?limit=1&page=2", 200),
		ok("some numbers", "GET", list+"?issue=1&issue=3", 200, "Authorization: token alice-token"),
		bad("page 0", "GET", list+"?page=0", 400),
		bad("a malformed number to list", "GET", list+"?issue=x", 400),
		ok("an invisible repository's list", "GET", secret+"/leases", 404),
		ok("the list with an invalid token", "GET", list, 401, revoked),

		ok("check the current token", "GET", check, 200),
		ok("check a stale token", "GET", lease1+"/check?token=2", 409),
		bad("check without a token", "GET", lease1+"/check", 400),
		ok("check in an invisible repository", "GET", secret+"/issues/5/lease/check?token=1", 404),
		ok("check with an invalid token", "GET", check, 401, revoked),
		bad("check a malformed number", "GET", widgets+"/issues/x/lease/check?token=1", 400),

		ok("history", "GET", history, 200),
		ok("history of one", "GET", history+"?limit=1", 200),
		bad("history of 201", "GET", history+"?limit=201", 400),
		ok("history in an invisible repository", "GET", secret+"/issues/5/lease/history", 404),
		ok("history with an invalid token", "GET", history, 401, revoked),
		bad("history of a malformed number", "GET", widgets+"/issues/x/lease/history", 400),

		ok("release by another", "DELETE", lease1, 409, carol),
		ok("release with a read-only token", "DELETE", lease1, 403, reader),
		bad("release without a token", "DELETE", lease1, 401),
		ok("release with an invalid token", "DELETE", lease1, 401, revoked),
		ok("release in an invisible repository", "DELETE", secret+"/issues/5/lease", 404, bob),
		bad("release a malformed number", "DELETE", widgets+"/issues/x/lease", 400, bob),
		withBody(bad("release with a body that is not JSON", "DELETE", lease1, 422, bob, json), `ttl=1h`),
		ok("release", "DELETE", lease1, 200, bob),
		ok("release of nothing", "DELETE", lease1, 200, bob),

		ok("acquire for the button", "POST", lease1, 201, carol),
		bad("the button without an Origin", "POST", force, 403, f.sessionFor("alice")),
		ok("the button from another origin", "POST", force, 403, f.sessionFor("alice"), "Origin: http://evil.example"),
		bad("the button, anonymous", "POST", force, 401, origin),
		ok("the button with an invalid token", "POST", force, 401, origin, revoked),
		ok("the button, a writer", "POST", force, 403, origin, f.sessionFor("carol")),
		ok("the button in an invisible repository", "POST", secret+"/issues/5/lease/force-release", 404, origin, f.sessionFor("erin")),
		bad("the button on a malformed number", "POST", widgets+"/issues/x/lease/force-release", 400, origin, f.sessionFor("alice")),
		ok("the button, an admin", "POST", force, 200, origin, f.sessionFor("alice")),

		ok("claim with the button", "POST", claim, 200, origin, f.sessionFor("bob")),
		ok("claim with the button, for 2h", "POST", claim+"?ttl=2h", 200, origin, f.sessionFor("bob")),
		ok("claim a held issue with the button", "POST", claim, 409, origin, f.sessionFor("carol")),
		ok("release another's claim with the button", "POST", unclaim, 409, origin, f.sessionFor("carol")),
		bad("claim with the button without an Origin", "POST", claim, 403, f.sessionFor("bob")),
		ok("claim with the button from another origin", "POST", claim, 403, f.sessionFor("bob"), "Origin: http://evil.example"),
		ok("release with the button from another origin", "POST", unclaim, 403, f.sessionFor("bob"), "Origin: http://evil.example"),
		bad("claim with the button, anonymous", "POST", claim, 401, origin),
		bad("release with the button, anonymous", "POST", unclaim, 401, origin),
		ok("claim with the button, a reader", "POST", claim, 403, origin, f.sessionFor("erin")),
		ok("release with the button, a reader", "POST", unclaim, 403, origin, f.sessionFor("erin")),
		ok("claim with the button in an invisible repository", "POST", secret+"/issues/5/lease/claim", 404, origin, f.sessionFor("erin")),
		ok("release with the button in an invisible repository", "POST", secret+"/issues/5/lease/release", 404, origin, f.sessionFor("erin")),
		bad("claim with the button, a malformed number", "POST", widgets+"/issues/x/lease/claim", 400, origin, f.sessionFor("bob")),
		bad("release with the button, a malformed number", "POST", widgets+"/issues/x/lease/release", 400, origin, f.sessionFor("bob")),
		ok("claim with the button for no duration", "POST", claim+"?ttl=soon", 422, origin, f.sessionFor("bob")),
		ok("release with the button", "POST", unclaim, 200, origin, f.sessionFor("bob")),
		ok("unquarantine, a writer", "POST", widgets+"/issues/1/unquarantine", 403, bob),
		bad("unquarantine without a token", "POST", widgets+"/issues/1/unquarantine", 401),
		ok("unquarantine in an invisible repository", "POST", secret+"/issues/5/unquarantine", 404, bob),
		bad("unquarantine a malformed number", "POST", widgets+"/issues/x/unquarantine", 400, bob),
		withBody(ok("unquarantine with a ttl", "POST", widgets+"/issues/1/unquarantine", 422, "Authorization: token alice-token", json), `{"ttl":"1h"}`),
		ok("unquarantine, an admin", "POST", widgets+"/issues/1/unquarantine", 200, "Authorization: token alice-token"),

		ok("acquire to hand off", "POST", lease1, 201, bob),
		withBody(ok("hand off by another", "POST", handoff, 409, carol, json), `{"to":"carol"}`),
		withBody(ok("hand off to nobody who may claim", "POST", handoff, 422, bob, json), `{"to":"nobody-here"}`),
		withBody(ok("hand off to its holder", "POST", handoff, 422, bob, json), `{"to":"bob"}`),
		bad("hand off without a target", "POST", handoff, 422, bob),
		withBody(bad("hand off without a token", "POST", handoff, 401, json), `{"to":"carol"}`),
		withBody(ok("hand off with a read-only token", "POST", handoff, 403, reader, json), `{"to":"carol"}`),
		withBody(ok("hand off in an invisible repository", "POST", secret+"/issues/5/lease/handoff", 404, bob, json), `{"to":"carol"}`),
		withBody(bad("hand off a malformed number", "POST", widgets+"/issues/x/lease/handoff", 400, bob, json), `{"to":"carol"}`),
		withBody(ok("hand off", "POST", handoff, 200, bob, json), `{"to":"carol/agent-8","agent":"agent-7"}`),
		ok("release the handed-off lease", "DELETE", lease1, 200, carol),

		ok("merge", "POST", merge, 200, bob),
		withBody(ok("merge with every field", "POST", merge, 200, bob, json), `{"token":3,"style":"squash","delete_branch":true,"wait":"30s","agent":"agent-7"}`),
		withBody(ok("merge refused by Gitea", "POST", widgets+"/pulls/11/merge", 409, bob, json), `{}`),
		withBody(ok("merge whose turn did not come", "POST", widgets+"/pulls/12/merge", 409, bob, json), `{"wait":"5s"}`),
		withBody(ok("merge under a stale token", "POST", widgets+"/pulls/13/merge", 409, bob, json), `{"token":5}`),
		ok("merge by another", "POST", widgets+"/pulls/14/merge", 409, bob),
		ok("merge without write access", "POST", widgets+"/pulls/15/merge", 403, bob),
		ok("merge in an invisible repository", "POST", secret+"/pulls/5/merge", 404, bob),
		bad("merge without a token", "POST", merge, 401),
		ok("merge with an invalid token", "POST", merge, 401, revoked),
		bad("merge a malformed number", "POST", widgets+"/pulls/x/merge", 400, bob),
		withBody(bad("merge with token 0", "POST", merge, 422, bob, json), `{"token":0}`),
		withBody(bad("merge in an unknown style", "POST", merge, 422, bob, json), `{"style":"octopus"}`),
		withBody(bad("merge with a ttl", "POST", merge, 422, bob, json), `{"ttl":"1h"}`),
		withBody(ok("merge with a wait that is no duration", "POST", merge, 422, bob, json), `{"wait":"soon"}`),

		withBody(ok("reserve", "POST", res, 200, bob, json), `{"globs":["src/auth/**"],"ttl":"30m"}`),
		ok("acquire to reserve with", "POST", lease1, 201, bob),
		withBody(ok("reserve with a claim", "POST", res, 200, bob, json), `{"globs":["docs/","docs/"],"shared":true,"issue":1}`),
		withBody(ok("reserve in the way of another's", "POST", res, 409, carol, json), `{"globs":["src/auth/login.go"],"ttl":"5m","agent":"c1"}`),
		withBody(ok("reserve with another's claim", "POST", res, 409, carol, json), `{"globs":["lib/"],"issue":1}`),
		withBody(bad("reserve without globs", "POST", res, 422, bob, json), `{"ttl":"5m"}`),
		withBody(bad("reserve no glob", "POST", res, 422, bob, json), `{"globs":[],"ttl":"5m"}`),
		withBody(ok("reserve a glob out of the repository", "POST", res, 422, bob, json), `{"globs":["../x"],"ttl":"5m"}`),
		withBody(ok("reserve with no anchor", "POST", res, 422, bob, json), `{"globs":["lib/"]}`),
		withBody(ok("reserve with both anchors", "POST", res, 422, bob, json), `{"globs":["lib/"],"issue":1,"ttl":"5m"}`),
		withBody(bad("reserve with an unknown field", "POST", res, 422, bob, json), `{"globs":["lib/"],"ttl":"5m","to":"carol"}`),
		bad("reserve without a body", "POST", res, 422, bob),
		withBody(bad("reserve without a token", "POST", res, 401, json), `{"globs":["lib/"],"ttl":"5m"}`),
		withBody(ok("reserve with an invalid token", "POST", res, 401, revoked, json), `{"globs":["lib/"],"ttl":"5m"}`),
		withBody(ok("reserve with a read-only token", "POST", res, 403, reader, json), `{"globs":["lib/"],"ttl":"5m"}`),
		withBody(ok("reserve in an invisible repository", "POST", secret+"/reservations", 404, bob, json), `{"globs":["lib/"],"ttl":"5m"}`),
		withBody(bad("a reserve's fields on an acquire", "POST", widgets+"/issues/43/lease", 422, bob, json), `{"globs":["lib/"]}`),

		ok("the reservations", "GET", res, 200),
		ok("the reservations of a path", "GET", res+"?path=docs/index.md", 200, reader),
		ok("the reservations of a path out of the repository", "GET", res+"?path=/etc/passwd", 400),
		bad("the reservations of an empty path", "GET", res+"?path=", 400),
		ok("an invisible repository's reservations", "GET", secret+"/reservations", 404),
		ok("the reservations with an invalid token", "GET", res, 401, revoked),

		ok("unreserve with a read-only token", "DELETE", res, 403, reader),
		ok("unreserve by force, a writer", "DELETE", res+"?force=true", 403, carol),
		bad("unreserve without a token", "DELETE", res, 401),
		ok("unreserve with an invalid token", "DELETE", res, 401, revoked),
		ok("unreserve in an invisible repository", "DELETE", secret+"/reservations", 404, bob),
		ok("unreserve a glob out of the repository", "DELETE", res+"?glob=../x", 400, bob),
		bad("unreserve with force maybe", "DELETE", res+"?force=maybe", 400, bob),
		bad("unreserve of issue 0", "DELETE", res+"?issue=0", 400, bob),
		withBody(bad("unreserve with a body that is not JSON", "DELETE", res, 422, bob, json), `agent=a1`),
		withBody(ok("unreserve a glob", "DELETE", res+"?glob=src/auth/**&glob=lib/", 200, bob, json), `{}`),
		ok("unreserve by force, an admin", "DELETE", res+"?force=true&issue=1", 200, admin),
		ok("unreserve nothing", "DELETE", res, 200, bob),
	} {
		spec.do(t, f, e)
	}
	revalidate("the document", OpenAPIPath)
	revalidate("a session", "/api/v1/session", f.sessionFor("alice"))
	revalidate("the list", list)
	revalidate("a lease", lease1)
	spec.do(t, f, ok("acquire to check", "POST", lease1, 201, bob))
	revalidate("check", lease1+"/check?token=6")
	revalidate("history", history)
	revalidate("the reservations", res)

	// The live events: refusals answer at once; the stream itself is read
	// over a real connection up to its first line, then closed.
	events := list + "/events"
	spec.do(t, f, ok("events with an invalid token", "GET", events, 401, revoked))
	spec.do(t, f, ok("events of an invisible repository", "GET", secret+"/leases/events", 404))
	srv := httptest.NewServer(f.h)
	defer srv.Close()
	first := spec.doStream(t, srv, "events", events, 200)
	spec.doStream(t, srv, "events past the address's cap", events, 429)
	first()

	// Every operation on the repositories, as Gitea refuses the client
	// address's next request (429) and while Gitea is down (503).
	repoOps := []apiCall{
		ok("list", "GET", list, 0),
		ok("lease", "GET", lease1, 0),
		ok("acquire", "POST", lease1, 0, bob),
		withBody(ok("renew", "PATCH", lease1, 0, bob, json), `{"ttl":"1h"}`),
		ok("release", "DELETE", lease1, 0, bob),
		ok("check", "GET", check, 0),
		ok("history", "GET", history, 0),
		ok("the button", "POST", force, 0, origin, f.sessionFor("alice")),
		ok("the claim button", "POST", claim, 0, origin, f.sessionFor("bob")),
		ok("the release button", "POST", unclaim, 0, origin, f.sessionFor("bob")),
		withBody(ok("hand off", "POST", handoff, 0, bob, json), `{"to":"carol"}`),
		ok("merge", "POST", merge, 0, bob),
		ok("the reservations", "GET", res, 0),
		withBody(ok("reserve", "POST", res, 0, bob, json), `{"globs":["lib/"],"ttl":"5m"}`),
		ok("unreserve", "DELETE", res, 0, bob),
		ok("unquarantine", "POST", widgets+"/issues/1/unquarantine", 0, "Authorization: token alice-token"),
	}
	// (The events too: refused before any stream begins.)
	f.forge.SetHook(func(context.Context, string) error { return forge.ErrRateLimited })
	for _, e := range append(repoOps, ok("events", "GET", events, 0)) {
		e.name, e.code = e.name+", rate limited", http.StatusTooManyRequests
		spec.do(t, f, e)
	}
	f.forge.SetHook(nil)
	f.forge.SetDown(true)
	for _, e := range append(repoOps, ok("events", "GET", events, 0)) {
		e.name, e.code = e.name+", Gitea down", http.StatusServiceUnavailable
		spec.do(t, f, e)
	}
	f.forge.SetDown(false)
	// And with the ledger gone: 500.
	if err := f.store.Close(); err != nil {
		t.Fatal(err)
	}
	for _, e := range repoOps {
		e.name, e.code = e.name+", ledger closed", http.StatusInternalServerError
		spec.do(t, f, e)
	}

	// Every status the document names was answered.
	var missing []string
	for path, item := range spec.doc.Paths.Map() {
		for method, op := range item.Operations() {
			for code := range op.Responses.Map() {
				if key := fmt.Sprintf("%s %s %s", method, path, code); !spec.seen[key] {
					missing = append(missing, key)
				}
			}
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("statuses the document names that no request of this test was answered with:\n%s", strings.Join(missing, "\n"))
	}
}
