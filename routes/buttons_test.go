package routes

import (
	"testing"

	"github.com/collab-lease/collab-lease/models"
)

const crossOrigin = `{"error":"cross-origin request refused"}`

// The issue page's Claim and Release buttons write with the session
// cookie under force-release's rules: Gitea's (or the sidecar's) Origin,
// else 403 before anything is looked up; signed in, else 401; and the
// viewer's own rights, checked by the lease service.
func TestClaimButtonRules(t *testing.T) {
	f := newWriteFixture(t)
	claim := lease1 + "/claim"
	origin := "Origin: " + giteaURL

	expectReply(t, "no origin", f.do("POST", claim, f.sessionFor("bob")), 403, crossOrigin)
	expectReply(t, "another origin", f.do("POST", claim, f.sessionFor("bob"), "Origin: http://evil.example"), 403, crossOrigin)
	expectReply(t, "another origin, bad ttl", f.do("POST", claim+"?ttl=soon", f.sessionFor("bob"), "Origin: http://evil.example"), 403, crossOrigin)
	expectReply(t, "no cookie", f.do("POST", claim, origin), 401, `{"error":"invalid token"}`)
	// Erin may read the public repository, not write it.
	expectReply(t, "a reader", f.do("POST", claim, f.sessionFor("erin"), origin), 403,
		`{"error":"write access to acme/widgets issues is required"}`)
	expectReply(t, "a bad ttl", f.do("POST", claim+"?ttl=soon", f.sessionFor("bob"), origin), 422,
		`{"error":"ttl \"soon\" is not a duration; use whole seconds (300) or a Go duration (90s, 30m, 2h)"}`)
	expectReply(t, "past the maximum", f.do("POST", claim+"?ttl=169h", f.sessionFor("bob"), origin), 422,
		`{"error":"ttl \"169h\" is more than the maximum of 168h"}`)
	if l := f.current(1, 1); l != nil {
		t.Fatalf("refused claims left a lease: %+v", l)
	}

	// A writer claims, open-ended by default, as an assignment is.
	r := f.do("POST", claim, f.sessionFor("bob"), origin)
	expectReply(t, "a writer", r, 200,
		`{"status":"acquired","repo":"acme/widgets","issue":1,"holder":"bob","agent":null,"token":1,"acquired_at":"2026-09-05T12:00:00Z","expires_at":null}`)
	if r.Header.Get("Access-Control-Allow-Origin") != giteaURL || r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("the button's answer: %v", r.Header)
	}
	// Claiming it again with a ttl sets its expiry; from the sidecar's
	// own pages as well.
	expectReply(t, "again, for 30m", f.do("POST", claim+"?ttl=30m", f.sessionFor("bob"), "Origin: "+publicURL), 200,
		`{"status":"acquired","repo":"acme/widgets","issue":1,"holder":"bob","agent":null,"token":1,"acquired_at":"2026-09-05T12:00:00Z","expires_at":"2026-09-05T12:30:00Z"}`)
	expectReply(t, "held by another", f.do("POST", claim, f.sessionFor("carol"), origin), 409,
		`{"status":"held","repo":"acme/widgets","issue":1,"holder":"bob","agent":null,"expires_at":"2026-09-05T12:30:00Z"}`)
	expectReply(t, "a closed issue", f.do("POST", "/api/v1/repos/acme/widgets/issues/2/lease/claim", f.sessionFor("bob"), origin), 409,
		`{"error":"issue is closed"}`)
	expectReply(t, "an invisible repository", f.do("POST", "/api/v1/repos/acme/secret/issues/5/lease/claim", f.sessionFor("erin"), origin), 404, notFoundBody)
	expectReply(t, "a malformed number", f.do("POST", "/api/v1/repos/acme/widgets/issues/x/lease/claim", f.sessionFor("bob"), origin), 400,
		`{"error":"issue number must be a positive integer"}`)
}

func TestReleaseButtonRules(t *testing.T) {
	f := newWriteFixture(t)
	release := lease1 + "/release"
	origin := "Origin: " + giteaURL
	bob := f.user("bob")
	if _, err := f.store.Acquire(bg, models.Key{RepoID: 1, Issue: 1}, models.Holder{ID: bob.ID, Login: bob.Login, Agent: "agent-7"}, 0,
		models.Observed{Kind: models.KindIssue}); err != nil {
		t.Fatal(err)
	}

	expectReply(t, "no origin", f.do("POST", release, f.sessionFor("bob")), 403, crossOrigin)
	expectReply(t, "another origin", f.do("POST", release, f.sessionFor("bob"), "Origin: http://evil.example"), 403, crossOrigin)
	expectReply(t, "no cookie", f.do("POST", release, origin), 401, `{"error":"invalid token"}`)
	expectReply(t, "a reader", f.do("POST", release, f.sessionFor("erin"), origin), 403,
		`{"error":"write access to acme/widgets issues is required"}`)
	// Carol writes the repository too, but the claim is of bob's account.
	expectReply(t, "another account's claim", f.do("POST", release, f.sessionFor("carol"), origin), 409,
		`{"status":"not_holder","repo":"acme/widgets","issue":1,"holder":"bob","agent":"agent-7","expires_at":null}`)
	if l := f.current(1, 1); l == nil || l.Holder.Agent != "agent-7" {
		t.Fatalf("refused releases freed the claim: %+v", l)
	}

	// The account releases its agent's claim, as over SSH.
	expectReply(t, "the account's own", f.do("POST", release, f.sessionFor("bob"), origin), 200,
		`{"status":"released","repo":"acme/widgets","issue":1}`)
	expectReply(t, "released", f.do("GET", lease1), 200, `{"lease":null}`)
	expectReply(t, "nothing to release", f.do("POST", release, f.sessionFor("bob"), origin), 200,
		`{"status":"released","repo":"acme/widgets","issue":1}`)
	expectReply(t, "named in the history", f.do("GET", lease1+"/history"), 200,
		`{"repo":"acme/widgets","issue":1,"tenures":[{"token":1,"holder":"bob","agent":"agent-7","acquired_at":"2026-09-05T12:00:00Z","ended_at":"2026-09-05T12:00:00Z","ended_by":"released","ended_by_login":"bob","ended_by_agent":null}]}`)
	expectReply(t, "an invisible repository", f.do("POST", "/api/v1/repos/acme/secret/issues/5/lease/release", f.sessionFor("erin"), origin), 404, notFoundBody)
}
