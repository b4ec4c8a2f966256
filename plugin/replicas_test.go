package plugin_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/models/pgtest"
	"github.com/collab-lease/collab-lease/plugin"
	"github.com/collab-lease/collab-lease/plugin/contract"
)

// replicas is newWorld with a second service, b, on a ledger of its own
// connections to the same PostgreSQL database (another replica); both
// follow the changes of the database's replicas. w.svc is replica a.
func replicas(t *testing.T) (w *world, b *plugin.Service) {
	t.Helper()
	w = newWorld(t)
	db := pgtest.NewDatabase(t)
	var stores []*models.Store
	var svcs []*plugin.Service
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 2)
	for range 2 {
		store, err := models.Open(db, models.WithClock(w.clock), models.WithMaxTTL(168*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		svc, err := plugin.NewService(w.forge, store, plugin.WithClock(w.clock.Now), plugin.WithTimer(w.clock.After))
		if err != nil {
			t.Fatal(err)
		}
		go func() { done <- svc.FollowChanges(ctx) }()
		stores, svcs = append(stores, store), append(svcs, svc)
	}
	t.Cleanup(func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("FollowChanges: %v", err)
			}
		}
		for _, s := range stores {
			_ = s.Close()
		}
	})
	waitFor(t, "both replicas listening", func() bool { return stores[0].Listening() == 1 && stores[1].Listening() == 1 })
	w.svc, w.ledger = svcs[0], stores[0]
	return w, svcs[1]
}

// A waiter of acquire --wait on one replica is woken by a release through
// another, at once: its lease would not expire for an hour and its wait
// not end for ten minutes (the test clock stands still).
func TestWaiterWokenByAReleaseOnAnotherReplica(t *testing.T) {
	w, b := replicas(t)
	first, err := w.svc.Acquire(bg, w.as("alice"), "acme", "widgets", 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := w.svc.AcquireWait(bg, w.as("bob"), "acme", "widgets", 1, 0, 10*time.Minute)
		done <- outcome{r, err}
	}()
	waitFor(t, "bob waiting on replica a", func() bool { return w.svc.Waiting(1, 1) == 1 })
	if _, err := b.Release(bg, w.as("alice"), "acme", "widgets", 1); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-done:
		if o.err != nil || o.t.Holder != "bob" || o.t.Token != first.Token+1 {
			t.Fatalf("bob after alice's release on replica b: %+v %v; want token %d", o.t, o.err, first.Token+1)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("bob still waiting on replica a 10 s after alice released on replica b")
	}
}

// A live-event stream on one replica tells the changes made through
// another, and its own changes once only (their echo publishes nothing).
func TestWatchSeesChangesOnAnotherReplica(t *testing.T) {
	w, b := replicas(t)
	wt := w.watch(t, "alice", "acme/widgets", "")
	started(t, wt)
	if _, err := b.Acquire(bg, w.as("alice"), "acme", "widgets", 1, 0); err != nil {
		t.Fatal(err)
	}
	e := next(t, wt)
	if e.Type != contract.EventLease || !strings.Contains(string(e.Data), `"holder":"alice"`) {
		t.Fatalf("after an acquire on replica b: %s %s", e.Type, e.Data)
	}
	if _, err := b.Release(bg, w.as("alice"), "acme", "widgets", 1); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, wt, contract.EventReleased, released(1))
	if _, err := w.svc.Acquire(bg, w.as("bob"), "acme", "widgets", 4, 0); err != nil {
		t.Fatal(err)
	}
	if e := next(t, wt); e.Type != contract.EventLease {
		t.Fatalf("after an acquire on replica a: %s %s", e.Type, e.Data)
	}
	if _, err := b.Release(bg, w.as("bob"), "acme", "widgets", 4); err != nil {
		t.Fatal(err)
	}
	// The echo of a's own acquire comes back through the database, before
	// or after b's release: it publishes nothing.
	expectEvent(t, wt, contract.EventReleased, released(4))
	quiet(t, wt)
}
