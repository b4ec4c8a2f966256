package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/models/pgtest"
	"github.com/collab-lease/collab-lease/plugin/changes"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/lease"
	"github.com/collab-lease/collab-lease/plugin/leasetest"
)

// replicas is newWorld with a second service, b, on a ledger of its own
// connections to the same PostgreSQL database (another replica); both
// follow the changes of the database's replicas. w.svc is replica a.
func replicas(t *testing.T) (w *world, b *lease.Service) {
	t.Helper()
	w = newWorld(t)
	db := pgtest.NewDatabase(t)
	var stores []*models.Store
	var svcs []*leasetest.Service
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 2)
	for range 2 {
		store, err := models.Open(db, models.WithClock(w.clock), models.WithMaxTTL(168*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		svc := leasetest.NewService(t, w.forge, store, w.clock)
		go func() { done <- changes.Follow(ctx, store, svc.Bus) }()
		stores, svcs = append(stores, store), append(svcs, svc)
	}
	t.Cleanup(func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("Follow: %v", err)
			}
		}
		for _, s := range stores {
			_ = s.Close()
		}
	})
	listening(t, stores[0], svcs)
	w.svc, w.ledger, w.bus, w.hub = svcs[0].Service, stores[0], svcs[0].Bus, svcs[0].Hub
	return w, svcs[1].Service
}

// listening waits until every replica listens: until an announcement
// through from reaches the bus of each (a replica hears nothing announced
// before it listens). The announcement is of a repository nobody uses.
func listening(t *testing.T, from *models.Store, svcs []*leasetest.Service) {
	t.Helper()
	probe := models.Key{RepoID: 999}
	heard := make([]atomic.Bool, len(svcs))
	for i, svc := range svcs {
		stop := svc.Bus.Subscribe(func(s changes.Set) {
			for _, k := range changes.KeysOf(s) {
				if s.Origin == changes.Remote && k == probe {
					heard[i].Store(true)
				}
			}
		})
		defer stop()
	}
	leasetest.WaitFor(t, "every replica listening", func() bool {
		from.Announce(probe)
		for i := range heard {
			if !heard[i].Load() {
				return false
			}
		}
		return true
	})
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
	leasetest.WaitFor(t, "bob waiting on replica a", func() bool { return w.svc.Waiting(1, 1) == 1 })
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

// A reserve and an unreserve through one replica reach a stream on
// another, which hears of them only as a key of the repository.
func TestWatchSeesReservationsOnAnotherReplica(t *testing.T) {
	w, b := replicas(t)
	wt := w.watch(t, "alice", "acme/widgets", "")
	started(t, wt)
	one := `{"glob":"src/**","shared":false,"holder":"bob","agent":null,"issue":null,"expires_at":"` +
		w.clock.Now().Add(time.Hour).UTC().Format(time.RFC3339) + `"}`
	if _, err := b.Reserve(bg, w.as("bob"), "acme", "widgets", lease.ReserveRequest{Globs: []string{"src/**"}, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, wt, contract.EventReserved, one)
	if _, err := b.Unreserve(bg, w.as("bob"), "acme", "widgets", nil, 0, false); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, wt, contract.EventUnreserved, one)
	quiet(t, wt)
}

// Replicas take turns at the reconcile: while one sweeps, another's
// Reconcile does nothing and says so; afterwards it sweeps.
func TestReconcileOnOneReplicaAtATime(t *testing.T) {
	w, b := replicas(t)
	if _, err := w.svc.Acquire(bg, w.as("alice"), "acme", "widgets", 1, 0); err != nil {
		t.Fatal(err)
	}
	w.forge.Close("acme/widgets", 1, false)
	entered, proceed := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	w.forge.SetHook(func(ctx context.Context, method string) error {
		if method == "RepoName" && first.CompareAndSwap(false, true) {
			close(entered) // b's sweep waits here, in the middle
			<-proceed
		}
		return nil
	})
	type result struct {
		ended int
		err   error
	}
	done := make(chan result, 1)
	go func() {
		n, err := b.Reconcile(bg, w.clock.Now())
		done <- result{n, err}
	}()
	<-entered
	if n, err := w.svc.Reconcile(bg, w.clock.Now()); !errors.Is(err, lease.ErrReconciling) || n != 0 {
		t.Fatalf("reconcile on a while b reconciles: %d %v, want ErrReconciling", n, err)
	}
	w.forge.SetHook(nil)
	close(proceed)
	if r := <-done; r.err != nil || r.ended != 1 {
		t.Fatalf("reconcile on b: %d %v, want 1 lease ended", r.ended, r.err)
	}
	if n, err := w.svc.Reconcile(bg, w.clock.Now()); err != nil || n != 0 {
		t.Fatalf("reconcile on a after b: %d %v, want nothing left to do", n, err)
	}
}

// A webhook delivery that reaches two replicas at once (a retry, or a
// load balancer's) has effect once: one ends the lease, the other is told
// it is a repeat.
func TestDeliveryOnTwoReplicasAtOnceHasEffectOnce(t *testing.T) {
	w, b := replicas(t)
	alice := w.as("alice")
	for round := range 10 {
		l, err := w.svc.Acquire(bg, alice, "acme", "widgets", 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		w.clock.Advance(time.Second)
		e := forge.Event{Kind: forge.EventClosed, RepoID: 1, Number: 1, Updated: w.clock.Now(), Delivery: fmt.Sprint("d-", round)}
		start := make(chan struct{})
		got := make(chan lease.Applied, 2)
		for _, svc := range []*lease.Service{w.svc, b} {
			go func() {
				<-start
				a, err := svc.Apply(bg, e)
				if err != nil {
					t.Error(err)
				}
				got <- a
			}()
		}
		close(start)
		x, y := <-got, <-got
		if x.Duplicate == y.Duplicate || len(x.Leases)+len(y.Leases) != 1 {
			t.Fatalf("round %d: %+v and %+v, want one to end token %d and the other a repeat", round, x, y, l.Token)
		}
		if ended := append(x.Leases, y.Leases...); ended[0].Token != l.Token {
			t.Fatalf("round %d: ended token %d, want %d", round, ended[0].Token, l.Token)
		}
		w.clock.Advance(time.Second)
		if _, err := b.Apply(bg, forge.Event{Kind: forge.EventReopened, RepoID: 1, Number: 1, Updated: w.clock.Now()}); err != nil {
			t.Fatal(err)
		}
	}
}
