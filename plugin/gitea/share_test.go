package gitea

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/clocktest"
	"github.com/collab-lease/collab-lease/plugin/fence"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/lease"
)

// A request past its caller's budget is not sent: Gitea sees nothing, and
// the caller is told ErrRateLimited, which is never remembered as a miss.
func TestABudgetSpentSendsNothing(t *testing.T) {
	g := newFake(t, map[string]http.HandlerFunc{"GET /api/v1/user": jsonBody(map[string]any{"id": 3, "login": "alice", "active": true})})
	c := clocktest.New()
	f := newTestForge(t, g.srv.URL, c, time.Second)
	budgets := forge.NewAddrBudgets(1, 2, c.Now)
	ctx := forge.WithBudget(context.Background(), budgets.For("192.0.2.7"))
	for _, tok := range []string{"t1", "t2"} {
		if _, err := f.UserByToken(ctx, tok); err != nil {
			t.Fatalf("within the burst: %v", err)
		}
	}
	_, err := f.UserByToken(ctx, "t3")
	if !errors.Is(err, forge.ErrRateLimited) || errors.Is(err, forge.ErrNotFound) || errors.Is(err, forge.ErrUnavailable) {
		t.Fatalf("past the burst: %v, want ErrRateLimited only", err)
	}
	if n := len(g.requests()); n != 2 {
		t.Fatalf("%d requests reached Gitea, want the 2 within the budget", n)
	}
	// Cached answers cost nothing; another address has its own bucket,
	// and so has another /64 of IPv6, while one /64 shares one.
	if _, err := f.UserByToken(ctx, "t1"); err != nil {
		t.Fatalf("a cached answer was charged: %v", err)
	}
	for _, addr := range []string{"192.0.2.8", "2001:db8:0:1::1"} {
		other := forge.WithBudget(context.Background(), budgets.For(addr))
		if _, err := f.UserByToken(other, "t3"); err != nil {
			t.Fatalf("another address %s: %v", addr, err)
		}
		f.tokens = newCache[forge.User](c.Now, DefaultKeyCacheTTL) // forget t3
	}
	six := forge.WithBudget(context.Background(), budgets.For("2001:db8:0:1::2"))
	if _, err := f.UserByToken(six, "t4"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.UserByToken(six, "t5"); !errors.Is(err, forge.ErrRateLimited) {
		t.Fatalf("a third request from one IPv6 /64: %v, want ErrRateLimited", err)
	}
	// The bucket refills on the budgets' clock.
	c.Advance(time.Second)
	if _, err := f.UserByToken(ctx, "t6"); err != nil {
		t.Fatalf("a second later: %v", err)
	}
	// No budget in the context (the sidecar's own work, SSH): no limit.
	for i := 0; i < 5; i++ {
		if _, err := f.UserByToken(context.Background(), fmt.Sprintf("free%d", i)); err != nil {
			t.Fatal(err)
		}
	}
}

// A junk token asks Gitea once per DefaultMissTTL; a valid one once per
// key-cache lifetime; an outage is never remembered.
func TestTokensAreRemembered(t *testing.T) {
	var mu sync.Mutex
	answer := status(401, `{"message":"token is required"}`)
	g := newFake(t, map[string]http.HandlerFunc{"GET /api/v1/user": func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		h := answer
		mu.Unlock()
		h(w, r)
	}})
	set := func(h http.HandlerFunc) { mu.Lock(); answer = h; mu.Unlock() }
	c := clocktest.New()
	f := newTestForge(t, g.srv.URL, c, time.Second)
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		if _, err := f.UserByToken(ctx, "junk"); !errors.Is(err, forge.ErrNotFound) {
			t.Fatalf("junk token: %v", err)
		}
	}
	if n := len(g.requests()); n != 1 {
		t.Fatalf("10 tries of one junk token made %d requests, want 1", n)
	}
	g.reset()
	set(status(500, ""))
	for i := 0; i < 2; i++ {
		if _, err := f.UserByToken(ctx, "good"); !errors.Is(err, forge.ErrUnavailable) {
			t.Fatalf("Gitea failing: %v", err)
		}
	}
	if n := len(g.requests()); n != 2 {
		t.Fatalf("an outage was remembered: %d requests for 2 tries", n)
	}
	g.reset()
	set(jsonBody(map[string]any{"id": 3, "login": "alice", "active": true}))
	for i := 0; i < 3; i++ {
		if u, err := f.UserByToken(ctx, "good"); err != nil || u.Login != "alice" {
			t.Fatalf("valid token: %+v %v", u, err)
		}
	}
	if n := len(g.requests()); n != 1 {
		t.Fatalf("3 uses of a valid token made %d requests, want 1", n)
	}
	c.Advance(DefaultKeyCacheTTL)
	g.reset()
	if _, err := f.UserByToken(ctx, "good"); err != nil {
		t.Fatal(err)
	}
	if n := len(g.requests()); n != 1 {
		t.Fatalf("after the cache lifetime: %d requests, want 1", n)
	}
}

// Key lookups have connections of their own: with every general
// connection held by slow requests, a key still resolves.
func TestKeyLookupsHaveTheirOwnConnections(t *testing.T) {
	release := make(chan struct{})
	var held sync.WaitGroup
	g := newFake(t, map[string]http.HandlerFunc{
		"GET /api/v1/repos/acme/widgets": func(w http.ResponseWriter, r *http.Request) {
			held.Done()
			select {
			case <-release:
			case <-r.Context().Done():
			}
			status(503, "")(w, r)
		},
		"GET /api/v1/user/keys": jsonBody([]map[string]any{userKey(trickyFP, 3, "alice", true, false)}),
	})
	f, err := New(Options{URL: g.srv.URL, Token: adminToken, Timeout: 10 * time.Second, MaxConns: 2, KeyConns: 1, Clock: clocktest.New().Now})
	if err != nil {
		t.Fatal(err)
	}
	defer close(release)
	held.Add(2)
	for _, login := range []string{"bob", "carol"} {
		go func() { _, _ = f.Repo(context.Background(), login, "acme", "widgets") }()
	}
	held.Wait() // both general connections are taken
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if u, err := f.UserByKey(ctx, trickyFP); err != nil || u.Login != "alice" {
		t.Fatalf("a key lookup with the general connections all taken: %+v %v", u, err)
	}
}

// The Forge serves every consumer's interface.
var (
	_ lease.Forge = (*Forge)(nil)
	_ fence.Forge = (*Forge)(nil)
)
