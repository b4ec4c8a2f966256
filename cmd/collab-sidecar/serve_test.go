package main

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
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
	go func() { done <- runServers(ctx, slog.New(slog.DiscardHandler), time.Second, runners...) }()
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
