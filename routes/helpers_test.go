package routes

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/assets"
	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/clocktest"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/forgetest"
	"github.com/collab-lease/collab-lease/plugin/lease"
	"github.com/collab-lease/collab-lease/plugin/leasetest"
	"github.com/collab-lease/collab-lease/plugin/live"
)

var bg = context.Background()

// newForge is the forge of every routes test: a public repository whose
// old name still leads to it (replies name it as it is called now), two
// private ones with their readers, and API tokens carrying every read
// scope.
func newForge() *forgetest.Forge {
	f := forgetest.New()
	for _, login := range []string{"alice", "bob", "carol", "erin"} {
		f.AddUser(login)
	}
	f.AddRepo("acme/widgets", 1, false)
	f.Alias("acme/gadgets", "acme/widgets")
	f.AddRepo("acme/secret", 2, true)
	f.Grant("acme/secret", "alice", forgetest.Read)
	f.Grant("acme/secret", "carol", forgetest.Read)
	f.AddRepo("alice/notes", 3, true)
	f.Grant("alice/notes", "alice", forgetest.Read)
	f.AddToken("alice", "alice-token", forgetest.AllScopes)
	f.AddToken("erin", "erin-token", forgetest.AllScopes)
	return f
}

const (
	giteaURL  = "http://gitea.example:3000"
	publicURL = "http://gitea.example:8787"
)

var testKey = bytes.Repeat([]byte{7}, 32)

// fixture is the routes over a real ledger file and a fake forge.
type fixture struct {
	t     *testing.T
	h     http.Handler
	hd    *handler
	store *models.Store
	forge *forgetest.Forge
	clock *clocktest.Clock
	svc   *lease.Service
	hub   *live.Hub // the service's live hub
	opts  Options
}

func newFixture(t *testing.T, mod ...func(o *Options)) *fixture {
	t.Helper()
	return newFixtureWith(t, nil, mod...)
}

// newFixtureWith is newFixture whose ledger is opened with these
// options too (a cap, say).
func newFixtureWith(t *testing.T, ledger []models.Option, mod ...func(o *Options)) *fixture {
	t.Helper()
	lw := leasetest.New(t, leasetest.Options{Forge: newForge(), Ledger: ledger})
	clk := lw.Clock
	f := &fixture{t: t, store: lw.Ledger, forge: lw.Forge, clock: clk, svc: lw.Service, hub: lw.Hub}
	var err error
	f.opts = Options{
		Leases: f.svc, GiteaURL: giteaURL, PublicURL: publicURL,
		SignIn:     newFakeSignIn(t, giteaURL, f.forge.User("alice")),
		SessionKey: testKey, Assets: testBundle(), Clock: clk.Now,
	}
	for _, m := range mod {
		m(&f.opts)
	}
	f.h, err = New(f.opts)
	if err != nil {
		t.Fatal(err)
	}
	// The same options, for tests that reach into the handler's parts
	// (sealing a session cookie as the sign-in would).
	if f.hd, err = newHandler(f.opts); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) acquire(repoID, issue int64, holder string, ttl time.Duration) models.Lease {
	f.t.Helper()
	u := f.user(holder)
	l, err := f.store.Acquire(bg, models.Key{RepoID: repoID, Issue: issue}, models.Holder{ID: u.ID, Login: u.Login}, ttl, models.Observed{Kind: models.KindIssue})
	if err != nil {
		f.t.Fatal(err)
	}
	return l
}

// reply is one recorded answer.
type reply struct {
	Code   int
	Header http.Header
	Body   string
}

// do sends a request; headers are "Name: value" strings.
func (f *fixture) do(method, path string, headers ...string) reply {
	f.t.Helper()
	return f.doBody(method, path, "", headers...)
}

// doBody sends a request with a body.
func (f *fixture) doBody(method, path, body string, headers ...string) reply {
	f.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Add(k, v)
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	b, _ := io.ReadAll(rec.Result().Body)
	return reply{Code: rec.Code, Header: rec.Result().Header, Body: string(b)}
}

// sessionFor is the Cookie header of a signed-in login, as the callback
// would set it now.
func (f *fixture) sessionFor(login string) string {
	rec := httptest.NewRecorder()
	u := f.user(login)
	epoch, err := f.store.SessionEpoch(bg, u.ID)
	if err != nil {
		f.t.Fatal(err)
	}
	f.hd.cookies.setSession(rec, u, epoch, f.clock.Now())
	ck := rec.Result().Cookies()[0]
	return "Cookie: " + ck.Name + "=" + ck.Value
}

func expectReply(t *testing.T, what string, got reply, code int, body string) {
	t.Helper()
	if got.Code != code || got.Body != body {
		t.Fatalf("%s: %d %s, want %d %s", what, got.Code, got.Body, code, body)
	}
}

// testBundle is a small bundle whose script compresses well.
func testBundle() assets.Bundle {
	js := []byte(strings.Repeat("/* collab-lease badge */\n", 40) + "console.log('badge');\n")
	css := []byte(".collab-lease-badge{display:inline-block}\n")
	return assets.Bundle{
		"collab-lease.js":  testAsset("collab-lease.js", js, "text/javascript; charset=utf-8"),
		"collab-lease.css": testAsset("collab-lease.css", css, "text/css; charset=utf-8"),
	}
}

// user is the forge's account with this login, so that sessions and the
// ledger rows a test writes name the account the forge knows.
func (f *fixture) user(login string) forge.User {
	f.t.Helper()
	u := f.forge.User(login)
	if u.ID == 0 {
		f.t.Fatalf("the forge has no account %q", login)
	}
	return u
}

// newFixtureOn is f's sidecar restarted: a new lease service and handler
// on the same ledger file, forge, clock and session key.
func newFixtureOn(t *testing.T, f *fixture) *fixture {
	t.Helper()
	g := *f
	svc := leasetest.NewService(t, f.forge, f.store, f.clock)
	g.svc, g.hub, g.opts.Leases = svc.Service, svc.Hub, svc.Service
	var err error
	if g.h, err = New(g.opts); err != nil {
		t.Fatal(err)
	}
	if g.hd, err = newHandler(g.opts); err != nil {
		t.Fatal(err)
	}
	return &g
}
