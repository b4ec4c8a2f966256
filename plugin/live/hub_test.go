package live_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/changes"
	"github.com/collab-lease/collab-lease/plugin/clocktest"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/live"
)

// ledger is an in-memory one, whose List of one repository can be held.
// Its reservations are live by its clock (now): those of a claim while
// the claim is held, by their holder, the others until they expire.
type ledger struct {
	mu           sync.Mutex
	leases       map[models.Key]models.Lease
	reservations []models.Reservation
	now          func() time.Time
	hold         int64         // List of this repository waits for release
	held         chan struct{} // closed once it waits
	free         chan struct{}
}

func (l *ledger) Current(_ context.Context, k models.Key) (*models.Lease, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if x, ok := l.leases[k]; ok {
		return &x, nil
	}
	return nil, nil
}

func (l *ledger) List(ctx context.Context, repoID int64) ([]models.Lease, error) {
	if repoID == l.hold {
		close(l.held)
		<-l.free
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []models.Lease
	for k, x := range l.leases {
		if k.RepoID == repoID {
			out = append(out, x)
		}
	}
	return out, nil
}

func (l *ledger) Reservations(_ context.Context, repoID int64, path string) ([]models.Reservation, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []models.Reservation
	for _, x := range l.reservations {
		claim, held := l.leases[models.Key{RepoID: x.RepoID, Issue: x.Issue}]
		switch {
		case x.RepoID != repoID:
		case x.Issue != 0 && (!held || claim.Holder != x.Holder):
		case x.Issue == 0 && x.ExpiresAt != nil && !x.ExpiresAt.After(l.now()):
		default:
			out = append(out, x)
		}
	}
	return out, nil
}

func next(t *testing.T, s *live.Sub) *live.Event {
	t.Helper()
	select {
	case e := <-s.C:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}
	return nil
}

// A feed whose read is slow (here its seed, stuck in the ledger) delays
// no other repository's events: each feed reads on its own goroutine.
func TestASlowFeedDelaysNoOther(t *testing.T) {
	c := clocktest.New()
	l := &ledger{leases: map[models.Key]models.Lease{}, now: c.Now, hold: 2, held: make(chan struct{}), free: make(chan struct{})}
	bus := changes.New(c.Now, c.After)
	h := live.New(l, bus, c.Now, c.After, live.Options{})
	one, err := h.Subscribe(context.Background(), 1, "")
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	go func() {
		if s, err := h.Subscribe(context.Background(), 2, ""); err == nil {
			s.Close()
		}
	}()
	<-l.held // repository 2's feed is seeding, and stuck there
	k1, k2 := models.Key{RepoID: 1, Issue: 7}, models.Key{RepoID: 2, Issue: 7}
	l.mu.Lock()
	l.leases[k1] = models.Lease{Key: k1, Holder: models.Holder{ID: 1, Login: "alice", Agent: "a"}, Token: 1, AcquiredAt: c.Now()}
	l.mu.Unlock()
	bus.Publish(changes.Set{Origin: changes.Committed, Changes: []changes.Change{{Key: k2}, {Key: k1}}})
	e := next(t, one)
	var got contract.LeaseView
	if err := json.Unmarshal(e.Data, &got); err != nil || e.Type != contract.EventLease || got.Issue != 7 || got.Agent == nil || *got.Agent != "a" {
		t.Fatalf("repository 1's event: %s %s %v", e.Type, e.Data, err)
	}
	close(l.free)
	h.Settle()
}

// hubWorld is a hub on an in-memory ledger and a fake clock, repository
// 1 of which a test watches.
type hubWorld struct {
	c   *clocktest.Clock
	l   *ledger
	bus *changes.Bus
	h   *live.Hub
}

func newHubWorld(t *testing.T) *hubWorld {
	t.Helper()
	c := clocktest.New()
	l := &ledger{leases: map[models.Key]models.Lease{}, now: c.Now}
	bus := changes.New(c.Now, c.After)
	w := &hubWorld{c: c, l: l, bus: bus, h: live.New(l, bus, c.Now, c.After, live.Options{})}
	t.Cleanup(w.h.Settle)
	return w
}

// watch subscribes to repository 1 from lastID, and returns its first
// events.
func (w *hubWorld) watch(t *testing.T, lastID string) (*live.Sub, []*live.Event) {
	t.Helper()
	s, err := w.h.Subscribe(context.Background(), 1, lastID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, s.First
}

var (
	alice = models.Holder{ID: 1, Login: "alice", Agent: "a1"}
	bob   = models.Holder{ID: 2, Login: "bob"}
)

// reserve adds x to the ledger as the reservation of ID id and
// publishes it as a reserve would.
func (w *hubWorld) reserve(id int64, x models.Reservation) models.Reservation {
	x.ID, x.RepoID = id, 1
	w.l.mu.Lock()
	w.l.reservations = append(w.l.reservations, x)
	w.l.mu.Unlock()
	w.bus.Publish(changes.Set{Origin: changes.Committed, Changes: []changes.Change{{Key: models.Key{RepoID: 1}, Reservations: true}}})
	return x
}

// unreserve removes the reservation of ID id and publishes it as an
// unreserve would.
func (w *hubWorld) unreserve(id int64) {
	w.l.mu.Lock()
	for i, x := range w.l.reservations {
		if x.ID == id {
			w.l.reservations = append(w.l.reservations[:i], w.l.reservations[i+1:]...)
			break
		}
	}
	w.l.mu.Unlock()
	w.bus.Publish(changes.Set{Origin: changes.Committed, Changes: []changes.Change{{Key: models.Key{RepoID: 1}, Reservations: true}}})
}

// expectReservation reads the next event and checks it is typ, about
// the reservation of glob, whose claim is issue (0: none).
func expectReservation(t *testing.T, e *live.Event, typ, glob string, issue int64) contract.Reservation {
	t.Helper()
	var got contract.Reservation
	if err := json.Unmarshal(e.Data, &got); err != nil || e.Type != typ || got.Glob != glob || (issue == 0) != (got.Issue == nil) ||
		(issue != 0 && *got.Issue != issue) {
		t.Fatalf("event %s %s, want %s of %s (claim %d)", e.Type, e.Data, typ, glob, issue)
	}
	return got
}

// quietHub checks that s has no event now, once the hub has read what
// it heard.
func quietHub(t *testing.T, h *live.Hub, s *live.Sub) {
	t.Helper()
	h.Settle()
	select {
	case e := <-s.C:
		t.Fatalf("an event nothing caused: %s %s", e.Type, e.Data)
	default:
	}
}

// A reserve is told as "reserved", an unreserve as "unreserved", each
// with the reservation; a reserve of the same glob by its holder is told
// again as made anew, with no "unreserved" of the one it replaced.
func TestReservesAndUnreservesAreTold(t *testing.T) {
	w := newHubWorld(t)
	s, _ := w.watch(t, "")
	exp := clocktest.Start.Add(time.Hour)
	w.reserve(1, models.Reservation{Glob: "src/auth/**", Holder: alice, ExpiresAt: &exp})
	got := expectReservation(t, next(t, s), contract.EventReserved, "src/auth/**", 0)
	if got.Holder != "alice" || got.Agent == nil || *got.Agent != "a1" || got.Shared || got.ExpiresAt == nil {
		t.Fatalf("reserved %+v", got)
	}
	w.reserve(2, models.Reservation{Glob: "docs/", Shared: true, Holder: bob, ExpiresAt: &exp})
	if got := expectReservation(t, next(t, s), contract.EventReserved, "docs/", 0); !got.Shared || got.Agent != nil {
		t.Fatalf("reserved %+v", got)
	}
	quietHub(t, w.h, s)

	w.unreserve(1)
	expectReservation(t, next(t, s), contract.EventUnreserved, "src/auth/**", 0)

	// bob reserves docs/ again: the ledger made it anew.
	w.l.mu.Lock()
	w.l.reservations = nil
	w.l.mu.Unlock()
	later := exp.Add(time.Hour)
	w.reserve(3, models.Reservation{Glob: "docs/", Holder: bob, ExpiresAt: &later})
	if got := expectReservation(t, next(t, s), contract.EventReserved, "docs/", 0); got.Shared {
		t.Fatalf("made anew %+v", got)
	}
	quietHub(t, w.h, s)
}

// The reservations of a claim end with its tenure: its release is told
// as "released", then each of them as "unreserved". A viewer who may not
// see the claim's number is given the event without it.
func TestAClaimsEndEndsItsReservations(t *testing.T) {
	w := newHubWorld(t)
	k := models.Key{RepoID: 1, Issue: 7}
	w.l.mu.Lock()
	w.l.leases[k] = models.Lease{Key: k, Holder: alice, Token: 3, AcquiredAt: w.c.Now()}
	w.l.mu.Unlock()
	s, _ := w.watch(t, "")
	w.reserve(1, models.Reservation{Glob: "a/**", Holder: alice, Issue: 7})
	w.reserve(2, models.Reservation{Glob: "b/x.go", Holder: alice, Issue: 7})
	e := next(t, s)
	expectReservation(t, e, contract.EventReserved, "a/**", 7)
	var hidden contract.Reservation
	if err := json.Unmarshal(e.WithoutNumber(), &hidden); err != nil || hidden.Issue != nil || hidden.Glob != "a/**" {
		t.Fatalf("without the number: %s", e.WithoutNumber())
	}
	expectReservation(t, next(t, s), contract.EventReserved, "b/x.go", 7)

	w.l.mu.Lock()
	delete(w.l.leases, k)
	w.l.mu.Unlock()
	w.bus.Publish(changes.Set{Origin: changes.Committed, Changes: []changes.Change{{Key: k, Ended: true}}})
	if e := next(t, s); e.Type != contract.EventReleased {
		t.Fatalf("event %s %s, want released", e.Type, e.Data)
	}
	expectReservation(t, next(t, s), contract.EventUnreserved, "a/**", 7)
	expectReservation(t, next(t, s), contract.EventUnreserved, "b/x.go", 7)
	quietHub(t, w.h, s)
}

// A reservation of no claim ends at its expiry's instant on the hub's
// clock, which nothing else publishes: the feed puts it on the bus's
// queue.
func TestAReservationsExpiryIsToldAtItsInstant(t *testing.T) {
	w := newHubWorld(t)
	soon, later := clocktest.Start.Add(10*time.Minute), clocktest.Start.Add(time.Hour)
	w.l.reservations = []models.Reservation{{ID: 1, RepoID: 1, Glob: "old/", Holder: bob, ExpiresAt: &later}}
	s, _ := w.watch(t, "") // seeded with old/, which it does not tell
	w.reserve(2, models.Reservation{Glob: "a/", Holder: alice, ExpiresAt: &soon})
	expectReservation(t, next(t, s), contract.EventReserved, "a/", 0)
	w.h.Settle() // its expiry is on the queue

	w.c.Advance(10*time.Minute - time.Second)
	quietHub(t, w.h, s)
	w.c.Advance(time.Second)
	expectReservation(t, next(t, s), contract.EventUnreserved, "a/", 0)
	w.h.Settle() // the next expiry is on the queue
	w.c.Advance(50 * time.Minute)
	expectReservation(t, next(t, s), contract.EventUnreserved, "old/", 0)
	quietHub(t, w.h, s)
}

// A client that reconnects with the last id it saw is sent the
// reservation events it missed.
func TestReservationEventsAreReplayed(t *testing.T) {
	w := newHubWorld(t)
	s, _ := w.watch(t, "")
	exp := clocktest.Start.Add(time.Hour)
	w.reserve(1, models.Reservation{Glob: "a/", Holder: alice, ExpiresAt: &exp})
	seen := next(t, s)
	s.Close() // the client went away; the feed lingers

	w.reserve(2, models.Reservation{Glob: "b/", Holder: bob, ExpiresAt: &exp})
	w.unreserve(1)
	w.h.Settle()
	_, first := w.watch(t, seen.ID)
	if len(first) != 2 {
		t.Fatalf("replayed %d events, want 2", len(first))
	}
	// One read saw both: what ended is told first.
	expectReservation(t, first[0], contract.EventUnreserved, "a/", 0)
	expectReservation(t, first[1], contract.EventReserved, "b/", 0)
}
