package routes

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/assets"
	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin"
)

var bg = context.Background()

// fakeForge is a forge whose repositories, readers and tokens the test
// sets. It records whether every call carried a deadline.
type fakeForge struct {
	mu          sync.Mutex
	repos       map[string]fakeRepo // lower-case "owner/name"
	tokens      map[string]string   // token -> login
	down        bool
	block       bool // wait for the caller's deadline
	calls       int
	noDeadline  int
	repoLogins  []string
	tokenLookup int
}

type fakeRepo struct {
	plugin.Repo
	readers map[string]bool // for a private repository
}

var _ plugin.Forge = (*fakeForge)(nil)

func newFakeForge() *fakeForge {
	widgets := fakeRepo{Repo: plugin.Repo{ID: 1, FullName: "acme/widgets", CanRead: true}}
	return &fakeForge{
		repos: map[string]fakeRepo{
			"acme/widgets": widgets,
			// The repository's old name still leads to it; replies name
			// it as it is called now.
			"acme/gadgets": widgets,
			"acme/secret":  {Repo: plugin.Repo{ID: 2, FullName: "acme/secret", Private: true, CanRead: true}, readers: map[string]bool{"alice": true, "carol": true}},
			"alice/notes":  {Repo: plugin.Repo{ID: 3, FullName: "alice/notes", Private: true, CanRead: true}, readers: map[string]bool{"alice": true}},
		},
		tokens: map[string]string{"alice-token": "alice", "erin-token": "erin"},
	}
}

func (f *fakeForge) enter(ctx context.Context) error {
	f.mu.Lock()
	f.calls++
	if _, ok := ctx.Deadline(); !ok {
		f.noDeadline++
	}
	down, block := f.down, f.block
	f.mu.Unlock()
	if block {
		<-ctx.Done()
		return fmt.Errorf("fake forge: %w: %w", plugin.ErrUnavailable, ctx.Err())
	}
	if down {
		return fmt.Errorf("fake forge: %w", plugin.ErrUnavailable)
	}
	return nil
}

func (f *fakeForge) set(fn func(f *fakeForge)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeForge) UserByKey(ctx context.Context, fp string) (plugin.User, error) {
	return plugin.User{}, plugin.ErrNotFound
}

func (f *fakeForge) UserByToken(ctx context.Context, token string) (plugin.User, error) {
	if err := f.enter(ctx); err != nil {
		return plugin.User{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tokenLookup++
	login, ok := f.tokens[token]
	if !ok {
		return plugin.User{}, fmt.Errorf("token: %w", plugin.ErrNotFound)
	}
	return plugin.User{Login: login}, nil
}

func (f *fakeForge) Repo(ctx context.Context, login, owner, name string) (plugin.Repo, error) {
	if err := f.enter(ctx); err != nil {
		return plugin.Repo{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.repoLogins = append(f.repoLogins, login)
	r, ok := f.repos[strings.ToLower(owner+"/"+name)]
	if !ok || (r.Private && !r.readers[login]) {
		return plugin.Repo{}, fmt.Errorf("repository %s/%s: %w", owner, name, plugin.ErrNotFound)
	}
	out := r.Repo
	out.CanReadIssues, out.CanReadPulls = true, true // unit-limited readers: ssh and integration tests
	return out, nil
}

func (f *fakeForge) Issue(ctx context.Context, login, owner, name string, n int64) (plugin.Issue, error) {
	return plugin.Issue{}, plugin.ErrNotFound
}

// TokenRepo is the token's user's view, read only: the fake's tokens carry
// every read scope.
func (f *fakeForge) TokenRepo(ctx context.Context, u plugin.User, token, owner, name string) (plugin.Repo, error) {
	r, err := f.Repo(ctx, u.Login, owner, name)
	r.CanWriteIssues, r.CanWritePulls = false, false
	return r, err
}

func (f *fakeForge) UserByLogin(ctx context.Context, login string) (plugin.User, error) {
	return plugin.User{}, fmt.Errorf("user %s: %w", login, plugin.ErrNotFound)
}

// clock is the one time of a test: the ledger and the routes read it.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
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
	forge *fakeForge
	clock *clock
	opts  Options
}

func newFixture(t *testing.T, mod ...func(o *Options)) *fixture {
	t.Helper()
	clk := &clock{t: time.Date(2026, 9, 5, 12, 0, 0, 0, time.UTC)}
	store, err := models.Open(filepath.Join(t.TempDir(), "collab.db"), models.WithClock(clk), models.WithMaxTTL(168*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	f := &fixture{t: t, store: store, forge: newFakeForge(), clock: clk}
	f.opts = Options{
		Leases: mustService(t, f.forge, store), Database: store.Ping, GiteaURL: giteaURL, PublicURL: publicURL,
		SignIn:     newFakeSignIn(t, giteaURL),
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
	l, err := f.store.Acquire(bg, models.Key{RepoID: repoID, Issue: issue}, account(holder), ttl, models.Observed{Kind: models.KindIssue})
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
	req := httptest.NewRequest(method, path, nil)
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Add(k, v)
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	body, _ := io.ReadAll(rec.Result().Body)
	return reply{Code: rec.Code, Header: rec.Result().Header, Body: string(body)}
}

// sessionFor is the Cookie header of a signed-in login, as the callback
// would set it now.
func (f *fixture) sessionFor(login string) string {
	rec := httptest.NewRecorder()
	f.hd.cookies.setSession(rec, plugin.User{ID: account(login).ID, Login: login}, f.clock.Now())
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

func mustService(t *testing.T, f plugin.Forge, l plugin.Ledger) *plugin.Service {
	t.Helper()
	svc, err := plugin.NewService(f, l)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// account is the test account with this login; the same login is always
// the same account.
func account(login string) models.Holder {
	h := fnv.New32a()
	_, _ = h.Write([]byte(login))
	return models.Holder{ID: int64(h.Sum32()) + 1, Login: login}
}
