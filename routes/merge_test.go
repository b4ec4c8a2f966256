package routes

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/lease"
)

// mergeService is the routes tests' lease service with a merge of its
// own, so that the route is tested against the answers it may get: it
// first asks the service what the viewer may read of the pull request
// (Lease), so that an invisible repository, Gitea down or refusing, and
// a ledger gone answer as they would; then it answers by the pull
// request's number from answers, merged if it has none. It keeps what it
// was asked, and how long it was given.
type mergeService struct {
	Leases
	answers map[int64]error
	pause   time.Duration // how long a merge takes

	mu    sync.Mutex
	asked []mergeAsked
}

// mergeAsked is one merge the service was asked for.
type mergeAsked struct {
	viewer lease.Viewer
	repo   string
	m      lease.MergeRequest
	left   time.Duration // until the merge's deadline, when it was asked
}

func (s *mergeService) Merge(ctx context.Context, v lease.Viewer, owner, name string, m lease.MergeRequest, _ func(ahead int)) (contract.Merged, error) {
	a := mergeAsked{viewer: v, repo: owner + "/" + name, m: m}
	if dl, ok := ctx.Deadline(); ok {
		a.left = time.Until(dl)
	}
	s.mu.Lock()
	s.asked = append(s.asked, a)
	s.mu.Unlock()
	if _, err := s.Lease(ctx, v, owner, name, m.Pull); err != nil {
		return contract.Merged{}, err
	}
	select {
	case <-time.After(s.pause):
	case <-ctx.Done():
		return contract.Merged{}, ctx.Err()
	}
	if err := s.answers[m.Pull]; err != nil {
		return contract.Merged{}, err
	}
	token := m.Token
	if token == 0 {
		token = 4
	}
	return contract.Merged{Status: contract.StatusMerged, Repo: "acme/widgets", Pull: m.Pull, SHA: "6f1c0e2d9b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e", Issue: m.Pull, Token: token}, nil
}

// merges are the merges the service was asked for.
func (s *mergeService) merges() []mergeAsked {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]mergeAsked(nil), s.asked...)
}

// The pull requests whose merge mergeAnswers refuses, and how.
const (
	pullRefused   = 11
	pullBusy      = 12
	pullStale     = 13
	pullNotHolder = 14
	pullReadOnly  = 15
)

// mergeAnswers are mergeService's answers of the tests.
func mergeAnswers() map[int64]error {
	six := int64(6)
	return map[int64]error{
		pullRefused: &lease.ConflictError{Reply: contract.MergeRefused{Status: contract.StatusRefused, Repo: "acme/widgets", Pull: pullRefused,
			Reason: "Please try again later: the pull request is being tested"}},
		pullBusy:      &lease.ConflictError{Reply: contract.MergeBusy{Status: contract.StatusBusy, Repo: "acme/widgets", Pull: pullBusy, Ahead: 2}},
		pullStale:     &lease.ConflictError{Reply: contract.Stale{Status: contract.StatusStale, Repo: "acme/widgets", Issue: 1, Token: &six}},
		pullNotHolder: &lease.ConflictError{Reply: contract.Conflict{Status: contract.StatusNotHolder, Repo: "acme/widgets", Issue: pullNotHolder}},
		pullReadOnly:  &lease.WriteRequiredError{Repo: "acme/widgets", Unit: "pulls"},
	}
}

// newMergeFixture is newWriteFixture whose service merges as
// mergeService does.
func newMergeFixture(t *testing.T, mod ...func(o *Options)) (*fixture, *mergeService) {
	var ms *mergeService
	f := newWriteFixture(t, append([]func(o *Options){func(o *Options) {
		ms = &mergeService{Leases: o.Leases, answers: mergeAnswers()}
		o.Leases = ms
	}}, mod...)...)
	return f, ms
}

func mergePathOf(n string) string { return "/api/v1/repos/acme/widgets/pulls/" + n + "/merge" }

// A merge through HTTP: the body's fields are the SSH verb's flags, each
// optional, and the answer is the verb's JSON.
func TestMergeWithAToken(t *testing.T) {
	f, ms := newMergeFixture(t)
	bob := "Authorization: token bob-write"
	merged := `{"status":"merged","repo":"acme/widgets","pull":3,"sha":"6f1c0e2d9b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e","issue":3,"token":`

	r := f.doBody("POST", mergePathOf("3"), "", bob)
	expectReply(t, "merge", r, 200, merged+`4}`)
	if r.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("headers: %v", r.Header)
	}
	r = f.doBody("POST", mergePathOf("3"), `{"token":3,"style":"squash","delete_branch":true,"wait":"30s","agent":"agent-7"}`, bob, "Content-Type: application/json")
	expectReply(t, "merge with every field", r, 200, merged+`3}`)

	asked := ms.merges()
	if len(asked) != 2 {
		t.Fatalf("asked %+v", asked)
	}
	if a := asked[0]; a.repo != "acme/widgets" || a.viewer.Login != "bob" || a.viewer.Agent != "" ||
		a.m != (lease.MergeRequest{Pull: 3, Wait: contract.DefaultMergeWait}) {
		t.Errorf("a merge without a body asked %+v", a)
	}
	if a := asked[1]; a.viewer.Login != "bob" || a.viewer.Agent != "agent-7" ||
		a.m != (lease.MergeRequest{Pull: 3, Token: 3, Style: "squash", DeleteBranch: true, Wait: 30 * time.Second}) {
		t.Errorf("a merge with every field asked %+v", a)
	}
	// The merge may take its turn and the merge itself on top of a
	// request's bound.
	for _, a := range asked {
		if min := a.m.Wait + contract.MergeTicketMax; a.left <= min || a.left > min+DefaultRequestTimeout {
			t.Errorf("a merge waiting %s was given %s", a.m.Wait, a.left)
		}
	}
}

// The answers of a merge that did not happen: the refusals as the other
// writes' (409 with the verb's JSON), and bad requests, which ask nothing.
func TestMergeStatuses(t *testing.T) {
	f, ms := newMergeFixture(t)
	bob := "Authorization: token bob-write"
	needToken := `{"error":"writes need an API token: Authorization: token \u003cgitea token\u003e"}`
	for _, c := range []struct {
		name, path, body string
		headers          []string
		code             int
		want             string
		asked            bool
	}{
		{"refused", mergePathOf("11"), "", []string{bob}, 409,
			`{"status":"refused","repo":"acme/widgets","pull":11,"reason":"Please try again later: the pull request is being tested"}`, true},
		{"busy", mergePathOf("12"), `{"wait":"5s"}`, []string{bob}, 409, `{"status":"busy","repo":"acme/widgets","pull":12,"ahead":2}`, true},
		{"stale", mergePathOf("13"), `{"token":5}`, []string{bob}, 409, `{"status":"stale","repo":"acme/widgets","issue":1,"token":6}`, true},
		{"not the holder", mergePathOf("14"), "", []string{bob}, 409,
			`{"status":"not_holder","repo":"acme/widgets","issue":14,"holder":null,"agent":null,"expires_at":null}`, true},
		{"no write access", mergePathOf("15"), "", []string{bob}, 403, `{"error":"write access to acme/widgets pulls is required"}`, true},
		{"an invisible repository", "/api/v1/repos/acme/secret/pulls/5/merge", "", []string{bob}, 404, notFoundBody, true},
		{"no credentials", mergePathOf("3"), "", nil, 401, needToken, false},
		{"a session cookie alone (CSRF)", mergePathOf("3"), "", []string{f.sessionFor("bob")}, 401, needToken, false},
		{"an invalid token", mergePathOf("3"), "", []string{"Authorization: token revoked"}, 401, `{"error":"invalid token"}`, false},
		{"a malformed number", mergePathOf("x"), "", []string{bob}, 400, `{"error":"pull request number must be a positive integer"}`, false},
		{"number zero", mergePathOf("0"), "", []string{bob}, 400, `{"error":"pull request number must be a positive integer"}`, false},
		{"token zero", mergePathOf("3"), `{"token":0}`, []string{bob}, 422, `{"error":"token must be a positive number, got 0"}`, false},
		{"token a string", mergePathOf("3"), `{"token":"3"}`, []string{bob}, 422, `{"error":"the body must be a JSON object like {\"style\":\"squash\"}"}`, false},
		{"an unknown style", mergePathOf("3"), `{"style":"octopus"}`, []string{bob}, 422,
			`{"error":"style must be one of merge, rebase, rebase-merge, squash, fast-forward-only, got \"octopus\""}`, false},
		{"wait not a duration", mergePathOf("3"), `{"wait":"soon"}`, []string{bob}, 422,
			`{"error":"wait \"soon\" is not a duration; use whole seconds (300) or a Go duration (90s, 30m, 2h)"}`, false},
		{"wait over the maximum", mergePathOf("3"), `{"wait":"169h"}`, []string{bob}, 422, `{"error":"wait \"169h\" is more than the maximum of 168h"}`, false},
		{"delete_branch a string", mergePathOf("3"), `{"delete_branch":"yes"}`, []string{bob}, 422,
			`{"error":"the body must be a JSON object like {\"style\":\"squash\"}"}`, false},
		{"a bad agent", mergePathOf("3"), `{"agent":"a b"}`, []string{bob}, 422,
			`{"error":"agent must be 1 to 40 of A-Z a-z 0-9 . _ - starting with a letter or digit, got \"a b\""}`, false},
		{"a ttl", mergePathOf("3"), `{"ttl":"1h"}`, []string{bob}, 422, `{"error":"this write takes no ttl"}`, false},
		{"a handoff's to", mergePathOf("3"), `{"to":"carol"}`, []string{bob}, 422, `{"error":"only a handoff takes to"}`, false},
		{"an unknown field", mergePathOf("3"), `{"style":"squash","x":1}`, []string{bob}, 422, `{"error":"the body must be a JSON object like {\"style\":\"squash\"}"}`, false},
		{"a merge's fields on an acquire", lease1, `{"style":"squash"}`, []string{bob}, 422,
			`{"error":"only a merge takes token, style, delete_branch and wait"}`, false},
		{"a merge's fields on a handoff", lease1 + "/handoff", `{"to":"carol","wait":"1m"}`, []string{bob}, 422,
			`{"error":"only a merge takes token, style, delete_branch and wait"}`, false},
	} {
		before := len(ms.merges())
		r := f.doBody("POST", c.path, c.body, c.headers...)
		expectReply(t, c.name, r, c.code, c.want)
		if asked := len(ms.merges()) > before; asked != c.asked {
			t.Errorf("%s: asked for a merge: %v", c.name, asked)
		}
		if c.code == 401 && r.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: no WWW-Authenticate", c.name)
		}
	}
	if l := f.current(1, 1); l != nil {
		t.Fatalf("a refused write wrote %+v", l)
	}
	f.forge.SetDown(true)
	r := f.doBody("POST", mergePathOf("3"), "", bob)
	if r.Code != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
		t.Errorf("Gitea down: %d %s %v", r.Code, r.Body, r.Header)
	}
}

// A merge runs past a request's bound, and its answer past the server's
// write timeout, which are meant for requests that do not wait their turn.
func TestMergeOutlivesARequestsBounds(t *testing.T) {
	f, ms := newMergeFixture(t, func(o *Options) { o.RequestTimeout = 100 * time.Millisecond })
	ms.pause = 400 * time.Millisecond
	srv := httptest.NewUnstartedServer(f.h)
	srv.Config.WriteTimeout = 200 * time.Millisecond
	srv.Start()
	defer srv.Close()

	req, err := http.NewRequest("POST", srv.URL+mergePathOf("3"), strings.NewReader(`{"wait":"1s"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "token bob-write")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("the merge's answer was cut: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"status":"merged"`) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}
