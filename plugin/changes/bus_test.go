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

// The expiry queue publishes each instant once, at that instant on the
// bus's clock, as a lease that may have ended; an instant asked for twice
// is published once, and one already past at once.
func TestExpiriesArePublishedAtTheirInstant(t *testing.T) {
	c := clocktest.New()
	b := changes.New(c.Now, c.After)
	var h heard
	b.Subscribe(h.add)
	t0 := c.Now()
	b.ExpireAt(k1, t0.Add(time.Minute))
	b.ExpireAt(k1, t0.Add(time.Minute)) // again: one entry
	b.ExpireAt(k2, t0.Add(2*time.Minute))
	b.ExpireAt(k1, t0.Add(3*time.Minute)) // renewed since: its own instant
	if n := b.Pending(); n != 3 {
		t.Fatalf("%d instants pending, want 3", n)
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
	c.Advance(2 * time.Minute) // both later instants at once
	got = waitSets(t, &h, 2)
	if len(got[1].Changes) != 2 {
		t.Fatalf("at the later instants: %+v, want both keys in one set", got[1])
	}
	b.ExpireAt(k2, t0) // long past
	got = waitSets(t, &h, 3)
	if got[2].Changes[0].Key != k2 {
		t.Fatalf("a past instant: %+v", got[2])
	}
	if b.Pending() != 0 || c.Timers() != 0 {
		t.Fatalf("%d instants and %d timers left", b.Pending(), c.Timers())
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
