package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/leasetest"
)

var errFakeClosed = errors.New("fake: closed")

// fakeServer serves until shut down, or fails at once if fail is set.
type fakeServer struct {
	fail     error
	stop     chan struct{}
	shutdown atomic.Bool
	returned atomic.Bool
}

func newFakeServer(fail error) *fakeServer { return &fakeServer{fail: fail, stop: make(chan struct{})} }

func (f *fakeServer) runner(name string) runner {
	return runner{name: name, closed: errFakeClosed,
		serve: func() error {
			defer f.returned.Store(true)
			if f.fail != nil {
				return f.fail
			}
			<-f.stop
			return errFakeClosed
		},
		shutdown: func(context.Context) {
			if f.shutdown.CompareAndSwap(false, true) {
				close(f.stop)
			}
		}}
}

func runFakes(t *testing.T, ctx context.Context, fakes ...*fakeServer) error {
	t.Helper()
	runners := make([]runner, len(fakes))
	for i, f := range fakes {
		runners[i] = f.runner([]string{"ssh server", "http server"}[i])
	}
	done := make(chan error, 1)
	go func() { done <- runServers(ctx, slog.New(slog.DiscardHandler), time.Second, nil, runners...) }()
	select {
	case err := <-done:
		// Ordered: nothing is still serving once runServers returns, so
		// the caller may close the ledger.
		for i, f := range fakes {
			if !f.shutdown.Load() || !f.returned.Load() {
				t.Errorf("server %d: shut down %v, returned %v", i, f.shutdown.Load(), f.returned.Load())
			}
		}
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("runServers did not return")
		return nil
	}
}

func TestRunServersStopsBothWhenCtxEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := runFakes(t, ctx, newFakeServer(nil), newFakeServer(nil)); err != nil {
		t.Fatalf("runServers = %v, want nil", err)
	}
}

func TestRunServersStopsBothWhenOneFails(t *testing.T) {
	boom := errors.New("accept: too many open files")
	for i := range 2 {
		fakes := []*fakeServer{newFakeServer(nil), newFakeServer(nil)}
		fakes[i] = newFakeServer(boom)
		err := runFakes(t, context.Background(), fakes...)
		want := []string{"ssh server: ", "http server: "}[i] + boom.Error()
		if !errors.Is(err, boom) || err.Error() != want {
			t.Errorf("server %d failing: runServers = %v, want %s", i, err, want)
		}
	}
}

// The loops run in the servers' errgroup: one that fails is logged and
// stops nothing; the others end only once the servers have shut down,
// and an end at shutdown is not logged.
func TestRunServersRunsTheLoops(t *testing.T) {
	logs := &leasetest.LogBuffer{}
	boom := errors.New("listen: connection refused")
	srv := newFakeServer(nil)
	var afterShutdown atomic.Bool
	loops := []loop{
		{name: "broken", run: func(context.Context) error { return boom }},
		{name: "steady", run: func(ctx context.Context) error {
			<-ctx.Done()
			afterShutdown.Store(srv.shutdown.Load())
			return ctx.Err()
		}},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runServers(ctx, slog.New(slog.NewTextHandler(logs, nil)), time.Second, loops, srv.runner("ssh server"))
	}()
	leasetest.WaitFor(t, "the failed loop logged", func() bool {
		return strings.Contains(logs.String(), `msg="a background task stopped; the servers go on without it" task=broken err="listen: connection refused"`)
	})
	if srv.shutdown.Load() {
		t.Fatal("a loop's failure shut the server down")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("runServers = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("runServers did not return")
	}
	if !afterShutdown.Load() {
		t.Error("the steady loop was stopped before the server had shut down")
	}
	if n := strings.Count(logs.String(), "background task stopped"); n != 1 {
		t.Errorf("%d loops logged as stopped, want the broken one alone:\n%s", n, logs)
	}
}

// startServe runs serve on free loopback ports until the test ends, and
// returns its log and the addresses it logged for the messages named.
func startServe(t *testing.T, args ...string) (*leasetest.LogBuffer, map[string]string) {
	t.Helper()
	base := []string{"--gitea-url", "http://127.0.0.1:1", "--data-dir", t.TempDir(),
		"--ssh-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}
	cfg, err := loadConfig("serve", append(base, args...), envOf(map[string]string{"COLLAB_GITEA_TOKEN": "t0k"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	logs := &leasetest.LogBuffer{}
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, logs) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	listening := regexp.MustCompile(`msg="(\w+) listening" addr=(\S+)`)
	deadline := time.Now().Add(20 * time.Second)
	for {
		addrs := map[string]string{}
		for _, m := range listening.FindAllStringSubmatch(logs.String(), -1) {
			addrs[m[1]] = m[2]
		}
		if addrs["http"] != "" && (addrs["admin"] != "" || strings.Contains(logs.String(), "admin endpoints off")) {
			return logs, addrs
		}
		select {
		case err := <-done:
			t.Fatalf("serve ended: %v\n%s", err, logs)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not listen:\n%s", logs)
		}
	}
}

func httpGet(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServeKeepsOperatorEndpointsOffThePublicListener: on the real
// listeners, /metrics and /readyz are the admin address's only; the public
// one answers them as any unknown path.
func TestServeKeepsOperatorEndpointsOffThePublicListener(t *testing.T) {
	_, addrs := startServe(t)
	public, admin := "http://"+addrs["http"], "http://"+addrs["admin"]
	if addrs["admin"] == "" {
		t.Fatalf("no admin address logged: %v", addrs)
	}
	for _, p := range []string{"/metrics", "/readyz"} {
		if code, body := httpGet(t, public+p); code != 404 || body != `{"error":"not found"}` {
			t.Errorf("public %s: %d %s", p, code, body)
		}
	}
	if code, body := httpGet(t, public+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("public /healthz: %d %s", code, body)
	}
	if code, body := httpGet(t, admin+"/metrics"); code != 200 || !strings.Contains(body, "\ncollab_lease_live_leases 0\n") {
		t.Errorf("admin /metrics: %d %.300s", code, body)
	}
	// Gitea is not there (port 1): not ready, but answered.
	if code, body := httpGet(t, admin+"/readyz"); code != 503 || !strings.Contains(body, `"database":"ok","gitea":"unreachable"`) {
		t.Errorf("admin /readyz: %d %s", code, body)
	}
	if code, body := httpGet(t, admin+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("admin /healthz: %d %s", code, body)
	}
	for _, p := range []string{"/api/v1/session", "/oauth/login", "/assets/collab-lease.js"} {
		if code, _ := httpGet(t, admin+p); code != 404 {
			t.Errorf("admin %s: %d", p, code)
		}
	}
}

func TestServeWithoutAdminEndpoints(t *testing.T) {
	logs, addrs := startServe(t, "--admin-listen", "off")
	if addrs["admin"] != "" || !strings.Contains(logs.String(), "admin endpoints off") {
		t.Fatalf("admin-listen off: %v\n%s", addrs, logs)
	}
	if code, _ := httpGet(t, "http://"+addrs["http"]+"/metrics"); code != 404 {
		t.Fatalf("public /metrics: %d", code)
	}
}
