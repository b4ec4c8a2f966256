package routes

import (
	"net/http"
	"strings"
	"testing"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/forgetest"
)

// newWriteFixture: bob and carol write acme/widgets, which has issue 1
// (open), 2 (closed) and pull request 3; tokens with write:issue
// ("…-write") and with the read scopes only ("bob-read").
func newWriteFixture(t *testing.T, mod ...func(o *Options)) *fixture {
	return writable(newFixture(t, mod...))
}

// writable is f with newWriteFixture's writers, issues and tokens.
func writable(f *fixture) *fixture {
	f.forge.Grant("acme/widgets", "bob", forgetest.Write)
	f.forge.Grant("acme/widgets", "carol", forgetest.Write)
	f.forge.AddIssue("acme/widgets", 1, false, false)
	f.forge.AddIssue("acme/widgets", 2, false, true)
	f.forge.AddIssue("acme/widgets", 3, true, false)
	f.forge.AddIssue("acme/secret", 5, false, false)
	f.forge.AddToken("bob", "bob-write", forgetest.AllScopes)
	f.forge.AddToken("bob", "bob-read", forgetest.ReadScopes)
	f.forge.AddToken("carol", "carol-write", forgetest.AllScopes)
	return f
}

const lease1 = "/api/v1/repos/acme/widgets/issues/1/lease"

func (f *fixture) current(repoID, n int64) *models.Lease {
	f.t.Helper()
	l, err := f.store.Current(bg, models.Key{RepoID: repoID, Issue: n})
	if err != nil {
		f.t.Fatal(err)
	}
	return l
}

// The life of a lease through HTTP, with the replies of the SSH verbs.
func TestWritesWithAToken(t *testing.T) {
	f := newWriteFixture(t)
	bob := "Authorization: token bob-write"

	r := f.doBody("POST", lease1, "", bob)
	expectReply(t, "acquire", r, 201, `{"status":"acquired","repo":"acme/widgets","issue":1,"holder":"bob","agent":null,"token":1,"acquired_at":"2026-09-05T12:00:00Z","expires_at":null}`)
	if r.Header.Get("Location") != lease1 || r.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("acquire headers: %v", r.Header)
	}
	r = f.doBody("POST", lease1, `{"ttl":"30m"}`, bob, "Content-Type: application/json")
	expectReply(t, "re-acquire", r, 201, `{"status":"acquired","repo":"acme/widgets","issue":1,"holder":"bob","agent":null,"token":1,"acquired_at":"2026-09-05T12:00:00Z","expires_at":"2026-09-05T12:30:00Z"}`)

	held := `{"status":"held","repo":"acme/widgets","issue":1,"holder":"bob","agent":null,"expires_at":"2026-09-05T12:30:00Z"}`
	expectReply(t, "acquire held", f.doBody("POST", lease1, "", "Authorization: token carol-write"), 409, held)
	expectReply(t, "renew by another", f.doBody("PATCH", lease1, `{"ttl":"1h"}`, "Authorization: token carol-write"), 409,
		`{"status":"not_holder","repo":"acme/widgets","issue":1,"holder":"bob","agent":null,"expires_at":"2026-09-05T12:30:00Z"}`)
	expectReply(t, "release by another", f.doBody("DELETE", lease1, "", "Authorization: token carol-write"), 409,
		`{"status":"not_holder","repo":"acme/widgets","issue":1,"holder":"bob","agent":null,"expires_at":"2026-09-05T12:30:00Z"}`)

	expectReply(t, "renew", f.doBody("PATCH", lease1, `{"ttl":"3600"}`, bob), 200,
		`{"status":"renewed","repo":"acme/widgets","issue":1,"holder":"bob","agent":null,"token":1,"acquired_at":"2026-09-05T12:00:00Z","expires_at":"2026-09-05T13:00:00Z"}`)
	released := `{"status":"released","repo":"acme/widgets","issue":1}`
	expectReply(t, "release", f.doBody("DELETE", lease1, "", bob), 200, released)
	expectReply(t, "release of nothing", f.doBody("DELETE", lease1, "", bob), 200, released)
	if l := f.current(1, 1); l != nil {
		t.Fatalf("after release: %+v", l)
	}
	r = f.doBody("POST", lease1, "", "Authorization: token carol-write")
	if r.Code != 201 || !strings.Contains(r.Body, `"holder":"carol","agent":null,"token":2`) {
		t.Fatalf("carol's acquire after bob's release: %d %s", r.Code, r.Body)
	}
	// A pull request is claimed the same way.
	if r := f.doBody("POST", "/api/v1/repos/acme/widgets/issues/3/lease", "", bob); r.Code != 201 {
		t.Fatalf("pull request: %d %s", r.Code, r.Body)
	}
}

// Every other status of the writes.
func TestWriteStatuses(t *testing.T) {
	f := newWriteFixture(t)
	bob := "Authorization: token bob-write"
	needToken := `{"error":"writes need an API token: Authorization: token \u003cgitea token\u003e"}`
	for _, c := range []struct {
		name, method, path, body string
		headers                  []string
		code                     int
		want                     string // "" for the unknown repository's reply
	}{
		{"no credentials", "POST", lease1, "", nil, 401, needToken},
		{"a session cookie alone (CSRF)", "POST", lease1, "", []string{f.sessionFor("bob")}, 401, needToken},
		{"a session cookie alone renews nothing", "PATCH", lease1, `{"ttl":"1h"}`, []string{f.sessionFor("bob")}, 401, needToken},
		{"a session cookie alone releases nothing", "DELETE", lease1, "", []string{f.sessionFor("bob")}, 401, needToken},
		{"an invalid token", "POST", lease1, "", []string{"Authorization: token revoked"}, 401, `{"error":"invalid token"}`},
		{"a token without write:issue", "POST", lease1, "", []string{"Authorization: token bob-read"}, 403,
			`{"error":"write access to acme/widgets issues is required"}`},
		{"renew without write:issue", "PATCH", lease1, `{"ttl":"1h"}`, []string{"Authorization: token bob-read"}, 403,
			`{"error":"write access to acme/widgets issues is required"}`},
		{"a reader's token with every scope", "POST", lease1, "", []string{"Authorization: token alice-token"}, 403,
			`{"error":"write access to acme/widgets issues is required"}`},
		{"a closed issue", "POST", "/api/v1/repos/acme/widgets/issues/2/lease", "", []string{bob}, 409, `{"error":"issue is closed"}`},
		{"an issue that does not exist", "POST", "/api/v1/repos/acme/widgets/issues/99/lease", "", []string{bob}, 404, notFoundBody},
		{"an invisible repository", "POST", "/api/v1/repos/acme/secret/issues/5/lease", "", []string{bob}, 404, ""},
		{"an unknown repository", "POST", "/api/v1/repos/acme/nope/issues/5/lease", "", []string{bob}, 404, ""},
		{"release in an invisible repository", "DELETE", "/api/v1/repos/acme/secret/issues/5/lease", "", []string{bob}, 404, ""},
		{"a malformed number", "POST", "/api/v1/repos/acme/widgets/issues/x/lease", "", []string{bob}, 400,
			`{"error":"issue number must be a positive integer"}`},
		{"renew without ttl", "PATCH", lease1, "", []string{bob}, 422, `{"error":"ttl is required, e.g. {\"ttl\":\"30m\"}"}`},
		{"renew with an empty object", "PATCH", lease1, `{}`, []string{bob}, 422, `{"error":"ttl is required, e.g. {\"ttl\":\"30m\"}"}`},
		{"ttl not a duration", "POST", lease1, `{"ttl":"soon"}`, []string{bob}, 422,
			`{"error":"ttl \"soon\" is not a duration; use whole seconds (300) or a Go duration (90s, 30m, 2h)"}`},
		{"ttl over the maximum", "POST", lease1, `{"ttl":"169h"}`, []string{bob}, 422,
			`{"error":"ttl \"169h\" is more than the maximum of 168h"}`},
		{"ttl a number", "POST", lease1, `{"ttl":30}`, []string{bob}, 422, `{"error":"the body must be a JSON object like {\"ttl\":\"30m\"}"}`},
		{"an unknown field", "POST", lease1, `{"ttl":"1h","wait":"5m","x":1}`, []string{bob}, 422, `{"error":"the body must be a JSON object like {\"ttl\":\"30m\"}"}`},
		{"not JSON", "POST", lease1, `ttl=1h`, []string{bob}, 422, `{"error":"the body must be a JSON object like {\"ttl\":\"30m\"}"}`},
		{"two objects", "POST", lease1, `{"ttl":"1h"}{}`, []string{bob}, 422, `{"error":"the body must be a JSON object like {\"ttl\":\"30m\"}"}`},
		{"acquire with a handoff's to", "POST", lease1, `{"ttl":"1h","to":"alice"}`, []string{bob}, 422, `{"error":"only a handoff takes to"}`},
		{"release with a ttl", "DELETE", lease1, `{"ttl":"1h"}`, []string{bob}, 422, `{"error":"this write takes no ttl"}`},
		{"handoff with a ttl", "POST", lease1 + "/handoff", `{"to":"alice","ttl":"1h"}`, []string{bob}, 422, `{"error":"this write takes no ttl"}`},
		{"a body too large", "POST", lease1, `{"ttl":"` + strings.Repeat("1", 5000) + `"}`, []string{bob}, 422, `{"error":"the body is larger than 4096 bytes"}`},
	} {
		r := f.doBody(c.method, c.path, c.body, c.headers...)
		if c.want == "" {
			expectReply(t, c.name, r, 404, notFoundBody)
		} else {
			expectReply(t, c.name, r, c.code, c.want)
		}
		if c.code == 401 && r.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: no WWW-Authenticate", c.name)
		}
	}
	if l := f.current(1, 1); l != nil {
		t.Fatalf("a refused write wrote %+v", l)
	}
	// A cookie and a token: the token decides.
	if r := f.doBody("POST", lease1, "", f.sessionFor("alice"), bob); r.Code != 201 || !strings.Contains(r.Body, `"holder":"bob"`) {
		t.Fatalf("cookie and token: %d %s", r.Code, r.Body)
	}
	f.forge.SetDown(true)
	expectReply(t, "forge down", f.doBody("DELETE", "/api/v1/repos/acme/widgets/issues/3/lease", "", "Authorization: token carol-write"),
		http.StatusServiceUnavailable, `{"error":"temporarily unavailable, try again"}`)
}

// The writes take the agent in the body, as --agent over SSH: agents of
// one account are holders of their own; a bad name is 422, before
// anything is written.
func TestWritesAsAnAgent(t *testing.T) {
	f := newWriteFixture(t)
	bob := "Authorization: token bob-write"
	expectReply(t, "acquire as agent-7", f.doBody("POST", lease1, `{"ttl":"30m","agent":"agent-7"}`, bob), 201,
		`{"status":"acquired","repo":"acme/widgets","issue":1,"holder":"bob","agent":"agent-7","token":1,"acquired_at":"2026-09-05T12:00:00Z","expires_at":"2026-09-05T12:30:00Z"}`)
	expectReply(t, "acquire as agent-8", f.doBody("POST", lease1, `{"agent":"agent-8"}`, bob), 409,
		`{"status":"held","repo":"acme/widgets","issue":1,"holder":"bob","agent":"agent-7","expires_at":"2026-09-05T12:30:00Z"}`)
	expectReply(t, "renew as the account", f.doBody("PATCH", lease1, `{"ttl":"1h"}`, bob), 409,
		`{"status":"not_holder","repo":"acme/widgets","issue":1,"holder":"bob","agent":"agent-7","expires_at":"2026-09-05T12:30:00Z"}`)
	r := f.doBody("POST", lease1, `{"agent":"no spaces"}`, bob)
	if r.Code != 422 || !strings.Contains(r.Body, "agent must be") {
		t.Fatalf("a bad agent name: %d %s", r.Code, r.Body)
	}
	if l := f.current(1, 1); l == nil || l.Holder.Agent != "agent-7" {
		t.Fatalf("the lease after the refused writes: %+v", l)
	}
	expectReply(t, "release as another agent", f.doBody("DELETE", lease1, `{"agent":"agent-8"}`, bob), 200,
		`{"status":"released","repo":"acme/widgets","issue":1}`)
}
