package routes

import (
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/forgetest"
)

func TestCheckLease(t *testing.T) {
	f := newFixture(t)
	f.acquire(1, 42, "alice", time.Minute)
	expectReply(t, "current", f.do("GET", "/api/v1/repos/acme/widgets/issues/42/lease/check?token=1"), 200,
		`{"status":"current","repo":"acme/widgets","issue":42,"holder":"alice","agent":null,"token":1,"acquired_at":"2026-09-05T12:00:00Z","expires_at":"2026-09-05T12:01:00Z","reservations":[]}`)
	expectReply(t, "stale", f.do("GET", "/api/v1/repos/acme/widgets/issues/42/lease/check?token=2"), 409,
		`{"status":"stale","repo":"acme/widgets","issue":42,"token":1}`)
	expectReply(t, "nobody", f.do("GET", "/api/v1/repos/acme/widgets/issues/7/lease/check?token=1"), 409,
		`{"status":"stale","repo":"acme/widgets","issue":7,"token":null}`)
	for _, q := range []string{"", "?token=", "?token=0", "?token=-1", "?token=x", "?token=+1", "?token=99999999999999999999"} {
		expectReply(t, "token "+q, f.do("GET", "/api/v1/repos/acme/widgets/issues/42/lease/check"+q), 400,
			`{"error":"token must be a positive integer of at most 9223372036854775807"}`)
	}
	expectReply(t, "private", f.do("GET", "/api/v1/repos/acme/secret/issues/1/lease/check?token=1"), 404, notFoundBody)
}

func TestLeaseHistory(t *testing.T) {
	f := newFixture(t)
	f.acquire(1, 42, "alice", time.Minute)
	f.clock.Advance(2 * time.Minute)
	f.acquire(1, 42, "bob", 0)
	expectReply(t, "history", f.do("GET", "/api/v1/repos/acme/widgets/issues/42/lease/history"), 200,
		`{"repo":"acme/widgets","issue":42,"tenures":[`+
			`{"token":2,"holder":"bob","agent":null,"acquired_at":"2026-09-05T12:02:00Z","ended_at":null,"ended_by":null},`+
			`{"token":1,"holder":"alice","agent":null,"acquired_at":"2026-09-05T12:00:00Z","ended_at":"2026-09-05T12:01:00Z","ended_by":"taken_over"}]}`)
	expectReply(t, "limit 1", f.do("GET", "/api/v1/repos/acme/widgets/issues/42/lease/history?limit=1"), 200,
		`{"repo":"acme/widgets","issue":42,"tenures":[{"token":2,"holder":"bob","agent":null,"acquired_at":"2026-09-05T12:02:00Z","ended_at":null,"ended_by":null}]}`)
	expectReply(t, "never claimed", f.do("GET", "/api/v1/repos/acme/widgets/issues/9/lease/history"), 200,
		`{"repo":"acme/widgets","issue":9,"tenures":[]}`)
	expectReply(t, "limit 201", f.do("GET", "/api/v1/repos/acme/widgets/issues/42/lease/history?limit=201"), 400,
		`{"error":"limit must be a positive integer of at most 200"}`)
	expectReply(t, "private", f.do("GET", "/api/v1/repos/acme/secret/issues/1/lease/history"), 404, notFoundBody)
}

func TestForceReleaseButton(t *testing.T) {
	f := newFixture(t)
	f.forge.Grant("acme/widgets", "alice", forgetest.Admin)
	f.forge.Grant("acme/widgets", "carol", forgetest.Write)
	f.acquire(1, 42, "bob", 0)
	path := "/api/v1/repos/acme/widgets/issues/42/lease/force-release"
	origin := "Origin: " + giteaURL

	expectReply(t, "no origin", f.do("POST", path, f.sessionFor("alice")), 403, `{"error":"cross-origin request refused"}`)
	expectReply(t, "other origin", f.do("POST", path, f.sessionFor("alice"), "Origin: http://evil.example"), 403,
		`{"error":"cross-origin request refused"}`)
	expectReply(t, "anonymous", f.do("POST", path, origin), 401, `{"error":"invalid token"}`)
	expectReply(t, "writer", f.do("POST", path, f.sessionFor("carol"), origin), 403,
		`{"error":"admin access to acme/widgets is required"}`)
	// An admin's token without write:issue is refused, as Gitea would.
	f.forge.AddToken("alice", "alice-read", forgetest.ReadScopes)
	expectReply(t, "token holder", f.do("POST", path, "Authorization: token alice-read", origin), 403,
		`{"error":"admin access to acme/widgets is required"}`)
	expectReply(t, "still held", f.do("GET", "/api/v1/repos/acme/widgets/issues/42/lease"), 200,
		`{"lease":{"issue":42,"holder":"bob","agent":null,"token":1,"acquired_at":"2026-09-05T12:00:00Z","expires_at":null}}`)

	r := f.do("POST", path, f.sessionFor("alice"), origin)
	expectReply(t, "admin", r, 200, `{"status":"released","repo":"acme/widgets","issue":42}`)
	if r.Header.Get("Access-Control-Allow-Origin") != giteaURL {
		t.Fatalf("the button's answer is not readable by Gitea's page: %v", r.Header)
	}
	expectReply(t, "released", f.do("GET", "/api/v1/repos/acme/widgets/issues/42/lease"), 200, `{"lease":null}`)
	expectReply(t, "named in the history", f.do("GET", "/api/v1/repos/acme/widgets/issues/42/lease/history"), 200,
		`{"repo":"acme/widgets","issue":42,"tenures":[{"token":1,"holder":"bob","agent":null,"acquired_at":"2026-09-05T12:00:00Z","ended_at":"2026-09-05T12:00:00Z","ended_by":"force_released","forced_by":"alice","ended_by_login":"alice","ended_by_agent":null}]}`)
	expectReply(t, "private", f.do("POST", "/api/v1/repos/acme/secret/issues/1/lease/force-release", f.sessionFor("erin"), origin), 404, notFoundBody)
}
