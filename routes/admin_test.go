package routes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/lease"
)

// adminFixture is the operators' handler over the fixture's ledger, with a
// Gitea check that answers giteaErr (and counts its calls) and a metrics
// handler.
type adminFixture struct {
	*fixture
	admin    http.Handler
	mu       sync.Mutex
	giteaErr error
	calls    atomic.Int64
}

func newAdminFixture(t *testing.T) *adminFixture {
	a := &adminFixture{fixture: newFixture(t)}
	var err error
	a.admin, err = NewAdmin(AdminOptions{
		Database: a.store.Ping,
		Ready: func(ctx context.Context) error {
			a.calls.Add(1)
			if _, ok := ctx.Deadline(); !ok {
				return errors.New("no deadline")
			}
			a.mu.Lock()
			defer a.mu.Unlock()
			return a.giteaErr
		},
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "collab_lease_live_leases 0\n")
		}),
		Clock: a.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (a *adminFixture) get(path string) reply {
	a.t.Helper()
	rec := httptest.NewRecorder()
	a.admin.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return reply{Code: rec.Code, Header: rec.Result().Header, Body: rec.Body.String()}
}

func (a *adminFixture) setGitea(err error) {
	a.mu.Lock()
	a.giteaErr = err
	a.mu.Unlock()
}

// TestPublicHandlerHidesOperatorEndpoints: the public listener tells
// nobody how many leases are live anywhere, nor lets anyone make it ask
// Gitea: /readyz and /metrics are 404 there, as any unknown path.
func TestPublicHandlerHidesOperatorEndpoints(t *testing.T) {
	f := newFixture(t)
	for _, p := range []string{"/readyz", "/metrics"} {
		expectReply(t, p, f.do("GET", p), 404, notFoundBody)
	}
	expectReply(t, "healthz", f.do("GET", "/healthz"), 200, "ok\n")
}

func TestAdminHandlerServesHealthReadinessAndMetrics(t *testing.T) {
	a := newAdminFixture(t)
	expectReply(t, "healthz", a.get("/healthz"), 200, "ok\n")
	expectReply(t, "ready", a.get("/readyz"), 200, `{"status":"ready","checks":{"database":"ok","gitea":"ok"}}`)
	expectReply(t, "metrics", a.get("/metrics"), 200, "collab_lease_live_leases 0\n")
	for _, p := range []string{"/api/v1/session", "/oauth/login", "/assets/collab-lease.js", "/"} {
		expectReply(t, p, a.get(p), 404, notFoundBody)
	}

	a.setGitea(fmt.Errorf("GET /api/v1/user on http://10.0.0.5:3000: %w", forge.ErrUnavailable))
	a.clock.Advance(ReadyCacheTTL)
	expectReply(t, "gitea down", a.get("/readyz"), 503, `{"error":"not ready","checks":{"database":"ok","gitea":"unreachable"}}`)
	a.setGitea(fmt.Errorf("token rejected: %w", forge.ErrConfig))
	a.clock.Advance(ReadyCacheTTL)
	expectReply(t, "bad token", a.get("/readyz"), 503, `{"error":"not ready","checks":{"database":"ok","gitea":"misconfigured (see the sidecar's log)"}}`)

	a.setGitea(nil)
	a.clock.Advance(ReadyCacheTTL)
	_ = a.store.Close()
	r := a.get("/readyz")
	if r.Code != 503 || !strings.Contains(r.Body, `"gitea":"ok"`) || strings.Contains(r.Body, `"database":"ok"`) {
		t.Fatalf("database closed: %d %s", r.Code, r.Body)
	}
	expectReply(t, "healthz while not ready", a.get("/healthz"), 200, "ok\n")
}

// TestReadyzAsksGiteaAtMostOncePerInterval: probes at any rate, all at
// once or one after another, cost Gitea one request per ReadyCacheTTL.
func TestReadyzAsksGiteaAtMostOncePerInterval(t *testing.T) {
	a := newAdminFixture(t)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if r := a.get("/readyz"); r.Code != 200 {
				t.Errorf("readyz: %d %s", r.Code, r.Body)
			}
		})
	}
	wg.Wait()
	a.clock.Advance(ReadyCacheTTL - time.Millisecond)
	a.get("/readyz")
	if n := a.calls.Load(); n != 1 {
		t.Fatalf("21 probes within %s asked Gitea %d times", ReadyCacheTTL, n)
	}
	// An outage shows at the first probe after the interval.
	a.setGitea(forge.ErrUnavailable)
	a.clock.Advance(time.Millisecond)
	if r := a.get("/readyz"); r.Code != 503 || a.calls.Load() != 2 {
		t.Fatalf("after the interval: %d, %d calls", r.Code, a.calls.Load())
	}
	if r := a.get("/readyz"); r.Code != 503 || a.calls.Load() != 2 {
		t.Fatalf("the outage is remembered too: %d, %d calls", r.Code, a.calls.Load())
	}
}

// A probe that hangs up does not make the others' answer "unreachable":
// the check it started runs to its end.
func TestReadyzCheckOutlivesTheProbeThatStartedIt(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	c := &cachedCheck{now: time.Now, ttl: time.Minute, timeout: time.Minute, check: func(ctx context.Context) error {
		close(started)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() { first <- c.run(ctx) }()
	<-started
	second := make(chan error, 1)
	go func() { second <- c.run(context.Background()) }()
	cancel()
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("first: %v", err)
	}
	if err := <-second; err != nil {
		t.Fatalf("second: %v", err)
	}
}

func TestNewAdminNeedsTheDatabase(t *testing.T) {
	if _, err := NewAdmin(AdminOptions{}); err == nil {
		t.Fatal("NewAdmin without Database: no error")
	}
}

// What /readyz says of each kind of failure, in a few public words.
func TestReadyzNamesTheProblem(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("ping ledger: %w", lease.ErrLedgerUnreachable), "unreachable"},
		{fmt.Errorf("ping ledger: %w", lease.ErrBusy), "busy"},
		{fmt.Errorf("GET /api/v1/user: %w", forge.ErrUnavailable), "unreachable"},
		{fmt.Errorf("token: %w", forge.ErrConfig), "misconfigured (see the sidecar's log)"},
		{errors.New("disk I/O error at /var/lib/collab"), "failing (see the sidecar's log)"},
	} {
		if got := problem(c.err); got != c.want {
			t.Errorf("problem(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
