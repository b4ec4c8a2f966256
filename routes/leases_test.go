package routes

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

const notFoundBody = `{"error":"not found"}`

func TestListLeasesIsTheListReply(t *testing.T) {
	f := newFixture(t)
	r := f.do("GET", "/api/v1/repos/acme/widgets/leases")
	expectReply(t, "no leases", r, 200, `{"repo":"acme/widgets","leases":[]}`)
	if ct, cc := r.Header.Get("Content-Type"), r.Header.Get("Cache-Control"); ct != "application/json; charset=utf-8" || cc != "private, no-cache" {
		t.Fatalf("headers: Content-Type %q, Cache-Control %q", ct, cc)
	}

	f.acquire(1, 42, "alice", 0)
	f.clock.Advance(time.Minute)
	f.acquire(1, 7, "bob", 5*time.Minute)
	f.acquire(2, 9, "carol", 0) // another repository
	r = f.do("GET", "/api/v1/repos/acme/widgets/leases")
	expectReply(t, "two leases", r, 200, `{"repo":"acme/widgets","leases":[`+
		`{"issue":42,"holder":"alice","agent":null,"token":1,"acquired_at":"2026-09-05T12:00:00Z","expires_at":null},`+
		`{"issue":7,"holder":"bob","agent":null,"token":1,"acquired_at":"2026-09-05T12:01:00Z","expires_at":"2026-09-05T12:06:00Z"}]}`)

	// At the exact expiry instant bob's lease is gone.
	f.clock.Advance(5 * time.Minute)
	r = f.do("GET", "/api/v1/repos/acme/widgets/leases")
	expectReply(t, "after expiry", r, 200, `{"repo":"acme/widgets","leases":[`+
		`{"issue":42,"holder":"alice","agent":null,"token":1,"acquired_at":"2026-09-05T12:00:00Z","expires_at":null}]}`)

	// Asked by an old name, the reply names the repository as it is now.
	r = f.do("GET", "/api/v1/repos/acme/gadgets/leases")
	if r.Code != 200 || !strings.HasPrefix(r.Body, `{"repo":"acme/widgets",`) {
		t.Fatalf("renamed: %d %s", r.Code, r.Body)
	}
}

func TestIssueLease(t *testing.T) {
	f := newFixture(t)
	f.acquire(1, 42, "alice", 90*time.Second)
	r := f.do("GET", "/api/v1/repos/acme/widgets/issues/42/lease")
	expectReply(t, "held", r, 200, `{"lease":{"issue":42,"holder":"alice","agent":null,"token":1,"acquired_at":"2026-09-05T12:00:00Z","expires_at":"2026-09-05T12:01:30Z"}}`)
	expectReply(t, "free", f.do("GET", "/api/v1/repos/acme/widgets/issues/43/lease"), 200, `{"lease":null}`)
	f.clock.Advance(90 * time.Second)
	expectReply(t, "expired", f.do("GET", "/api/v1/repos/acme/widgets/issues/42/lease"), 200, `{"lease":null}`)

	for _, n := range []string{"0", "-1", "abc", "%2342", "1.5", "+4", "99999999999999999999", "4e2"} {
		r := f.do("GET", "/api/v1/repos/acme/widgets/issues/"+n+"/lease")
		expectReply(t, "issue "+n, r, 400, `{"error":"issue number must be a positive integer"}`)
	}
	// A bad number is refused before anyone is asked about the
	// repository, so it says nothing about private ones either.
	expectReply(t, "bad n, private repo", f.do("GET", "/api/v1/repos/acme/secret/issues/x/lease"),
		400, `{"error":"issue number must be a positive integer"}`)
}

// Visibility (docs/http.md, Who sees what): who may see which repository's leases, and that
// everyone else gets exactly the reply of a repository that does not exist.
func TestVisibility(t *testing.T) {
	f := newFixture(t)
	f.acquire(2, 5, "alice", 0)
	f.acquire(3, 1, "alice", 0)
	unknown := f.do("GET", "/api/v1/repos/acme/nope/leases")
	expectReply(t, "unknown repository", unknown, 404, notFoundBody)

	expiredSession := func() string {
		// Signed in exactly one session lifetime ago.
		f.clock.Advance(-DefaultSessionTTL)
		defer f.clock.Advance(DefaultSessionTTL)
		return f.sessionFor("alice")
	}()
	forged := f.sessionFor("alice")
	forged = forged[:len(forged)-3] + "AAA"
	otherKey := newFixture(t, func(o *Options) { o.SessionKey = []byte(strings.Repeat("x", 32)) }).sessionFor("alice")

	cases := []struct {
		name    string
		path    string
		headers []string
		code    int // 200, or 404 meaning "exactly the unknown reply"
	}{
		{"public, anonymous", "/api/v1/repos/acme/widgets/leases", nil, 200},
		{"public issue, anonymous", "/api/v1/repos/acme/widgets/issues/1/lease", nil, 200},
		{"private, anonymous", "/api/v1/repos/acme/secret/leases", nil, 404},
		{"private issue, anonymous", "/api/v1/repos/acme/secret/issues/5/lease", nil, 404},
		{"private, reader's token", "/api/v1/repos/acme/secret/leases", []string{"Authorization: token alice-token"}, 200},
		{"private, reader's token as Bearer", "/api/v1/repos/alice/notes/leases", []string{"Authorization: Bearer alice-token"}, 200},
		{"private, non-reader's token", "/api/v1/repos/acme/secret/leases", []string{"Authorization: token erin-token"}, 404},
		{"private issue, non-reader's token", "/api/v1/repos/acme/secret/issues/5/lease", []string{"Authorization: token erin-token"}, 404},
		{"private, reader's session", "/api/v1/repos/acme/secret/leases", []string{f.sessionFor("alice")}, 200},
		{"private, another reader's session", "/api/v1/repos/acme/secret/issues/5/lease", []string{f.sessionFor("carol")}, 200},
		{"private, non-reader's session", "/api/v1/repos/alice/notes/leases", []string{f.sessionFor("carol")}, 404},
		{"private, expired session", "/api/v1/repos/acme/secret/leases", []string{expiredSession}, 404},
		{"private, forged session", "/api/v1/repos/acme/secret/leases", []string{forged}, 404},
		{"private, session signed with another key", "/api/v1/repos/acme/secret/leases", []string{otherKey}, 404},
		{"public, forged session", "/api/v1/repos/acme/widgets/leases", []string{forged}, 200},
		{"unknown route", "/api/v1/repos/acme/secret", nil, 404},
		{"trailing slash", "/api/v1/repos/acme/secret/leases/", nil, 404},
		{"wrong method", "/api/v1/repos/acme/secret/leases", nil, 404},
	}
	for _, c := range cases {
		method := "GET"
		if c.name == "wrong method" {
			method = "DELETE"
		}
		r := f.do(method, c.path, c.headers...)
		if c.code == 404 {
			if r.Code != unknown.Code || r.Body != unknown.Body || r.Header.Get("Content-Type") != unknown.Header.Get("Content-Type") {
				t.Errorf("%s: %d %q, want the unknown repository's %d %q", c.name, r.Code, r.Body, unknown.Code, unknown.Body)
			}
			continue
		}
		if r.Code != 200 || !strings.Contains(r.Body, `"lease`) {
			t.Errorf("%s: %d %s, want 200", c.name, r.Code, r.Body)
		}
	}
	// The session's login (not anonymous) was what the forge was asked.
	if got := f.forge.Asked("Repo"); !contains(got, "carol") || !contains(got, "alice") || !contains(got, "") {
		t.Errorf("forge asked as %q", got)
	}
}

func contains(xs []string, x string) bool {
	for _, s := range xs {
		if s == x {
			return true
		}
	}
	return false
}

// A token that is sent but not valid is refused outright, the same way
// whatever repository it is sent for.
func TestInvalidTokenIs401Everywhere(t *testing.T) {
	f := newFixture(t)
	var first reply
	for i, c := range []struct{ path, auth string }{
		{"/api/v1/repos/acme/widgets/leases", "token revoked"},
		{"/api/v1/repos/acme/secret/leases", "token revoked"},
		{"/api/v1/repos/acme/nope/leases", "token revoked"},
		{"/api/v1/repos/acme/secret/issues/5/lease", "Bearer revoked"},
		{"/api/v1/repos/acme/widgets/leases", "Basic YWxpY2U6cHc="},
		{"/api/v1/repos/acme/widgets/leases", "token"},
		{"/api/v1/repos/acme/widgets/leases", "token a b"},
	} {
		r := f.do("GET", c.path, "Authorization: "+c.auth)
		expectReply(t, c.auth+" "+c.path, r, 401, `{"error":"invalid token"}`)
		if r.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: no WWW-Authenticate", c.auth)
		}
		if i == 0 {
			first = r
		} else if r.Body != first.Body {
			t.Errorf("401 bodies differ: %q vs %q", r.Body, first.Body)
		}
	}
	// A valid session does not rescue an invalid token: the token is
	// what the client chose to send.
	r := f.do("GET", "/api/v1/repos/acme/secret/leases", "Authorization: token revoked", f.sessionFor("alice"))
	expectReply(t, "bad token with session", r, 401, `{"error":"invalid token"}`)
}

func TestForgeUnavailableIs503NeverNotFound(t *testing.T) {
	f := newFixture(t)
	f.forge.SetDown(true)
	for _, c := range []struct{ path, auth string }{
		{"/api/v1/repos/acme/widgets/leases", ""},
		{"/api/v1/repos/acme/secret/leases", ""},
		{"/api/v1/repos/acme/secret/issues/5/lease", ""},
		{"/api/v1/repos/acme/secret/leases", "Authorization: token alice-token"},
		{"/api/v1/repos/acme/secret/leases", f.sessionFor("alice")},
	} {
		var headers []string
		if c.auth != "" {
			headers = append(headers, c.auth)
		}
		r := f.do("GET", c.path, headers...)
		expectReply(t, c.path+" "+c.auth, r, 503, `{"error":"temporarily unavailable, try again"}`)
		if r.Header.Get("Retry-After") == "" {
			t.Errorf("%s: no Retry-After", c.path)
		}
	}
}

// Every forge call carries the request's deadline, and a forge that never
// answers ends in a 503 when it passes.
func TestForgeCallsAreBounded(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.RequestTimeout = 30 * time.Millisecond })
	var noDeadline atomic.Int32
	f.forge.SetHook(func(ctx context.Context, _ string) error {
		if _, ok := ctx.Deadline(); !ok {
			noDeadline.Add(1)
		}
		return nil
	})
	f.do("GET", "/api/v1/repos/acme/widgets/leases", "Authorization: token alice-token")
	if calls := f.forge.Calls(""); calls != 2 || noDeadline.Load() != 0 {
		t.Fatalf("%d forge calls, %d without a deadline", calls, noDeadline.Load())
	}
	f.forge.SetHang(true)
	start := time.Now()
	r := f.do("GET", "/api/v1/repos/acme/widgets/leases")
	if r.Code != http.StatusServiceUnavailable || time.Since(start) > 5*time.Second {
		t.Fatalf("hanging forge: %d after %s", r.Code, time.Since(start))
	}
}

func TestLedgerFailureIs500WithTheErrorShape(t *testing.T) {
	f := newFixture(t)
	_ = f.store.Close()
	r := f.do("GET", "/api/v1/repos/acme/widgets/leases")
	if r.Code < 500 || (r.Body != `{"error":"internal error"}` && r.Body != `{"error":"temporarily unavailable, try again"}`) {
		t.Fatalf("closed ledger: %d %s", r.Code, r.Body)
	}
}
