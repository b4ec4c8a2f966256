package gitea

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/clocktest"
)

// Forty concurrent questions reach Gitea at most DefaultMaxConns at a time,
// and every one of them is answered.
func TestRequestsInFlightAreBounded(t *testing.T) {
	var inFlight, most atomic.Int32
	g := newFake(t, map[string]http.HandlerFunc{
		"GET /api/v1/repos/acme/widgets/issues/7": func(w http.ResponseWriter, r *http.Request) {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(5 * time.Millisecond)
			jsonBody(map[string]any{"number": 7, "state": "open"})(w, r)
		},
	})
	f := newTestForge(t, g.srv.URL, clocktest.New(), 10*time.Second)
	var wg sync.WaitGroup
	errs := make([]error, 40)
	for i := range errs {
		wg.Go(func() { _, errs[i] = f.Issue(context.Background(), "alice", "acme", "widgets", 7) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("question %d: %v", i, err)
		}
	}
	if m := most.Load(); m > DefaultMaxConns || m < 2 {
		t.Fatalf("%d requests in flight at once, want 2…%d", m, DefaultMaxConns)
	}
}
