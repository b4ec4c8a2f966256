package changes_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/changes"
	"github.com/collab-lease/collab-lease/plugin/clocktest"
)

// heard collects what a subscriber was handed.
type heard struct {
	mu   sync.Mutex
	sets []changes.Set
}

func (h *heard) add(s changes.Set) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sets = append(h.sets, s)
}

func (h *heard) all() []changes.Set {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.sets)
}

// waitSets waits until h has n sets (the expiry queue publishes on its
// own goroutine) and returns them.
func waitSets(t *testing.T, h *heard, n int) []changes.Set {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(h.all()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("heard %d sets, want %d", len(h.all()), n)
		}
		time.Sleep(time.Millisecond)
	}
	return h.all()
}

var k1, k2 = models.Key{RepoID: 1, Issue: 1}, models.Key{RepoID: 1, Issue: 2}

// Every subscriber hears every set, once, until it cancels; an empty set
// is not published.
func TestPublishReachesEverySubscriber(t *testing.T) {
	c := clocktest.New()
	b := changes.New(c.Now, c.After)
	var x, y heard
	cancelX := b.Subscribe(x.add)
	b.Subscribe(y.add)
	set := changes.Set{Origin: changes.Committed, Changes: []changes.Change{{Key: k1, Ended: true}}}
	b.Publish(set)
	b.Publish(changes.Set{Origin: changes.Committed})
	cancelX()
	b.Publish(changes.Set{Origin: changes.Remote, Changes: []changes.Change{{Key: k2}}})
	if got := x.all(); len(got) != 1 || got[0].Changes[0] != set.Changes[0] {
		t.Fatalf("the cancelled subscriber heard %+v, want the first set alone", got)
	}
	if got := y.all(); len(got) != 2 || got[1].Origin != changes.Remote {
		t.Fatalf("the other subscriber heard %+v, want both sets", got)
	}
}

// The expiry queue publishes each key's soonest instant once, at that
// instant on the bus's clock, as a lease that may have ended: asking
// again for the same or a later instant while one waits changes nothing,
// an earlier one takes its place, and one already past comes at once.
func TestExpiriesArePublishedAtTheirInstant(t *testing.T) {
	c := clocktest.New()
	b := changes.New(c.Now, c.After)
	var h heard
	b.Subscribe(h.add)
	t0 := c.Now()
	b.ExpireAt(k1, t0.Add(time.Minute))
	b.ExpireAt(k1, t0.Add(time.Minute))   // again: one entry
	b.ExpireAt(k1, t0.Add(3*time.Minute)) // renewed since: waits for the first look
	b.ExpireAt(k2, t0.Add(5*time.Minute))
	b.ExpireAt(k2, t0.Add(2*time.Minute)) // shortened: the earlier wins
	if n := b.Pending(); n != 2 {
		t.Fatalf("%d keys pending, want 2", n)
	}
	if c.Timers() != 1 {
		t.Fatalf("%d timers, want the one of the soonest instant", c.Timers())
	}
	c.Advance(59 * time.Second)
	if got := h.all(); len(got) != 0 {
		t.Fatalf("published before the instant: %+v", got)
	}
	c.Advance(time.Second)
	got := waitSets(t, &h, 1)
	want := changes.Change{Key: k1, Ended: true}
	if got[0].Origin != changes.Expired || len(got[0].Changes) != 1 || got[0].Changes[0] != want {
		t.Fatalf("at the first instant: %+v, want %+v expired", got[0], want)
	}
	c.Advance(4 * time.Minute) // past k2's 2 and 5 minutes, and k1's 3
	got = waitSets(t, &h, 2)
	if len(got[1].Changes) != 1 || got[1].Changes[0].Key != k2 {
		t.Fatalf("at the later instants: %+v, want k2 once", got[1])
	}
	b.ExpireAt(k2, t0) // long past
	got = waitSets(t, &h, 3)
	if got[2].Changes[0].Key != k2 {
		t.Fatalf("a past instant: %+v", got[2])
	}
	if b.Pending() != 0 || c.Timers() != 0 {
		t.Fatalf("%d keys and %d timers left", b.Pending(), c.Timers())
	}
	if got := h.all(); len(got) != 3 {
		t.Fatalf("%d sets published, want 3: %+v", len(got), got)
	}
}

// A repository's reservations have an instant of their own, apart from
// the lease of its key of no issue, published as a change of its
// reservations and of no lease.
func TestReservationExpiriesAreTheirOwn(t *testing.T) {
	c := clocktest.New()
	b := changes.New(c.Now, c.After)
	var h heard
	b.Subscribe(h.add)
	repo := models.Key{RepoID: 1}
	b.ExpireReservationsAt(1, c.Now().Add(time.Minute))
	b.ExpireReservationsAt(1, c.Now().Add(2*time.Minute)) // later: waits for the first look
	b.ExpireAt(repo, c.Now().Add(time.Minute))
	if n := b.Pending(); n != 2 {
		t.Fatalf("%d keys pending, want 2", n)
	}
	c.Advance(time.Minute)
	got := waitSets(t, &h, 1)
	want := []changes.Change{{Key: repo, Reservations: true}, {Key: repo, Ended: true}}
	if len(got[0].Changes) != 2 || !slices.ContainsFunc(got[0].Changes, func(c changes.Change) bool { return c == want[0] }) ||
		!slices.ContainsFunc(got[0].Changes, func(c changes.Change) bool { return c == want[1] }) {
		t.Fatalf("at the instant: %+v, want %+v", got[0].Changes, want)
	}
}

// However often a lease is renewed, the queue holds one instant for it.
func TestExpiriesStaySmallUnderRenewals(t *testing.T) {
	c := clocktest.New()
	b := changes.New(c.Now, c.After)
	for i := range 2000 {
		b.ExpireAt(k1, c.Now().Add(time.Duration(i+1)*time.Second))
		b.ExpireAt(k2, c.Now().Add(time.Duration(2000-i)*time.Second))
	}
	if n := b.Pending(); n != 2 {
		t.Fatalf("%d keys pending after 4000 renewals of 2 leases, want 2", n)
	}
}

// An alarm set again for another instant fires once, for the last one;
// one turned off does not fire.
func TestAlarmFiresOnceForItsLastInstant(t *testing.T) {
	c := clocktest.New()
	fired := make(chan time.Time, 4)
	a := changes.NewAlarm(c.Now, c.After, func() { fired <- c.Now() })
	t0 := c.Now()
	a.Set(t0.Add(time.Minute))
	a.Set(t0.Add(2 * time.Minute))
	a.Set(t0.Add(2 * time.Minute)) // the same: nothing new
	if c.Timers() != 1 {
		t.Fatalf("%d timers, want 1", c.Timers())
	}
	c.Advance(time.Minute)
	c.Advance(time.Minute)
	select {
	case at := <-fired:
		if !at.Equal(t0.Add(2 * time.Minute)) {
			t.Fatalf("fired at %s, want at the second instant", at)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the alarm did not fire")
	}
	a.Set(t0.Add(3 * time.Minute))
	a.Set(time.Time{})
	c.Advance(time.Hour)
	if c.Timers() != 0 || len(fired) != 0 {
		t.Fatalf("an alarm turned off: %d timers, %d fires", c.Timers(), len(fired))
	}
}

// feed is a ledger shared by replicas, in memory: what is announced comes
// back to Changes.
type feed struct {
	mu        sync.Mutex
	announced []models.Key
	back      chan models.Key
}

func (f *feed) Announce(ks ...models.Key) {
	f.mu.Lock()
	f.announced = append(f.announced, ks...)
	f.mu.Unlock()
}

func (f *feed) Changes(ctx context.Context, fn func(models.Key)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case k := <-f.back:
			fn(k)
		}
	}
}

func (f *feed) got() []models.Key {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.announced)
}

// Follow announces this process's committed changes, not its expiries
// nor what it heard from others, and publishes the others' as Remote
// changes that may have ended a lease.
func TestFollowAnnouncesCommittedChangesAndPublishesRemoteOnes(t *testing.T) {
	c := clocktest.New()
	b := changes.New(c.Now, c.After)
	f := &feed{back: make(chan models.Key)}
	var h heard
	b.Subscribe(h.add)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- changes.Follow(ctx, f, b) }()
	f.back <- models.Everything // Changes is running, so Follow has subscribed
	waitSets(t, &h, 1)
	b.Publish(changes.Set{Origin: changes.Committed, Changes: []changes.Change{{Key: k1}, {Key: k2, Ended: true}}})
	b.Publish(changes.Set{Origin: changes.Expired, Changes: []changes.Change{{Key: k1, Ended: true}}})
	f.back <- k2
	sets := waitSets(t, &h, 4)
	if got := f.got(); !slices.Equal(got, []models.Key{k1, k2}) {
		t.Fatalf("announced %v, want the committed keys alone", got)
	}
	if r := sets[3]; r.Origin != changes.Remote || r.Changes[0] != (changes.Change{Key: k2, Ended: true}) {
		t.Fatalf("a remote change published as %+v", r)
	}
	if r := sets[0]; r.Origin != changes.Remote || r.Changes[0].Key != models.Everything {
		t.Fatalf("a remote everything published as %+v", r)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	b.Publish(changes.Set{Origin: changes.Committed, Changes: []changes.Change{{Key: k1}}})
	if got := f.got(); len(got) != 2 {
		t.Fatalf("announced %v after Follow returned", got)
	}
}
