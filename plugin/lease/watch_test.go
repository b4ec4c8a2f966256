package lease_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/forgetest"
	"github.com/collab-lease/collab-lease/plugin/lease"
	"github.com/collab-lease/collab-lease/plugin/leasetest"
	"github.com/collab-lease/collab-lease/plugin/live"
)

// liveWorld is newWorld with the live events bounded by o.
func liveWorld(t *testing.T, o live.Options) *world {
	t.Helper()
	return worldOf(leasetest.New(t, leasetest.Options{Forge: leasetest.Acme(), Live: o}))
}

func (w *world) watch(t *testing.T, login, repo, lastID string) *lease.Watch {
	t.Helper()
	w.hub.Settle() // what was written before is in the feed
	owner, name, _ := cut(repo)
	wt, err := w.svc.Watch(bg, w.as(login), owner, name, lastID)
	if err != nil {
		t.Fatalf("watch %s as %q: %v", repo, login, err)
	}
	t.Cleanup(wt.Close)
	return wt
}

// next is the stream's next event; the test fails if none comes soon.
func next(t *testing.T, wt *lease.Watch) live.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	e, err := wt.Next(ctx)
	if err != nil {
		t.Fatalf("next event: %v", err)
	}
	return e
}

// quiet checks that the stream has nothing to say now.
func quiet(t *testing.T, wt *lease.Watch) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
	defer cancel()
	if e, err := wt.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an event nobody should see: %s %s %v", e.Type, e.Data, err)
	}
}

// expectEvent reads the next event and checks its type and data.
func expectEvent(t *testing.T, wt *lease.Watch, typ, data string) live.Event {
	t.Helper()
	e := next(t, wt)
	if e.Type != typ || string(e.Data) != data {
		t.Fatalf("event %s %s, want %s %s", e.Type, e.Data, typ, data)
	}
	return e
}

// started reads the stream's first message, its position.
func started(t *testing.T, wt *lease.Watch) string {
	t.Helper()
	e := next(t, wt)
	if e.Type != "" || e.ID == "" || e.Data != nil {
		t.Fatalf("first message %+v, want the stream's position", e)
	}
	return e.ID
}

func leaseJSON(n int64, holder string, token int64, acquired time.Time, expires *time.Time) string {
	b, _ := json.Marshal(contract.LeaseView{Issue: n, Holder: holder, Token: token, AcquiredAt: contract.Time(acquired), ExpiresAt: contract.TimePtr(expires)})
	return string(b)
}

func released(n int64) string { return fmt.Sprintf(`{"issue":%d}`, n) }

// Every way a lease changes is told, in order, with the lease as list
// shows it: acquire, renew, release, next, force-release, expiry (at its
// instant, with one timer for the soonest expiry), the forge's close.
func TestWatchToldEveryChange(t *testing.T) {
	w := liveWorld(t, live.Options{})
	w.forge.Grant("acme/widgets", "eve", forgetest.Admin)
	alice, bob := w.as("alice"), w.as("bob")
	wt := w.watch(t, "reader", "acme/widgets", "")
	started(t, wt)
	t0 := w.clock.Now()

	if _, err := w.svc.Acquire(bg, alice, "acme", "widgets", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	exp := t0.Add(time.Hour)
	expectEvent(t, wt, contract.EventLease, leaseJSON(1, "alice", 1, t0, &exp))
	if _, err := w.svc.Renew(bg, alice, "acme", "widgets", 1, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	exp = t0.Add(2 * time.Hour)
	expectEvent(t, wt, contract.EventLease, leaseJSON(1, "alice", 1, t0, &exp))
	if _, err := w.svc.Release(bg, alice, "acme", "widgets", 1); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, wt, contract.EventReleased, released(1))
	// Releasing nothing, and a refused acquire, change nothing: no event.
	if _, err := w.svc.Release(bg, alice, "acme", "widgets", 1); err != nil {
		t.Fatal(err)
	}
	quiet(t, wt)

	if _, err := w.svc.Next(bg, bob, "acme", "widgets", forge.IssueFilter{}, 0); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, wt, contract.EventLease, leaseJSON(1, "bob", 2, t0, nil))
	if _, err := w.svc.Acquire(bg, alice, "acme", "widgets", 1, time.Hour); err == nil {
		t.Fatal("acquire of a held issue succeeded")
	}
	quiet(t, wt)
	if _, err := w.svc.ForceRelease(bg, w.as("eve"), "acme", "widgets", 1); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, wt, contract.EventReleased, released(1))

	// Three expiring leases: the hub holds one timer (besides the
	// stream's recheck), and each expiry is told at its instant.
	for n, ttl := range map[int64]time.Duration{1: 3 * time.Minute, 2: time.Minute, 4: 2 * time.Minute} {
		if _, err := w.svc.Acquire(bg, alice, "acme", "widgets", n, ttl); err != nil {
			t.Fatal(err)
		}
		e := next(t, wt)
		if e.Type != contract.EventLease {
			t.Fatalf("event %s %s", e.Type, e.Data)
		}
	}
	if got := w.clock.Timers(); got != 2 {
		t.Fatalf("%d timers pending, want 2: the stream's recheck and one for the soonest expiry", got)
	}
	for _, n := range []int64{2, 4, 1} {
		w.clock.Advance(time.Minute - time.Second)
		quiet(t, wt)
		w.clock.Advance(time.Second)
		expectEvent(t, wt, contract.EventReleased, released(n))
	}

	// The forge closes an issue: its webhook ends the lease.
	l, err := w.svc.Acquire(bg, bob, "acme", "widgets", 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	expectEvent(t, wt, contract.EventLease, leaseJSON(4, "bob", l.Token, w.clock.Now(), nil))
	w.forge.Close("acme/widgets", 4, false)
	if _, err := w.svc.Apply(bg, forge.Event{Kind: forge.EventClosed, RepoID: 1, Number: 4, Updated: w.clock.Now(), Delivery: "d-4"}); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, wt, contract.EventReleased, released(4))

	// Another repository's changes are not this stream's.
	if _, err := w.svc.Acquire(bg, alice, "acme", "tools", 1, 0); err != nil {
		t.Fatal(err)
	}
	quiet(t, wt)
}

// A stream shows what its viewer may see: nothing at all of a repository
// they may not read; of a repository they read one unit of, only that
// unit's numbers.
func TestWatchShowsWhatTheViewerMaySee(t *testing.T) {
	w := liveWorld(t, live.Options{})
	if _, err := w.svc.Watch(bg, w.as(""), "acme", "tools", ""); !errors.Is(err, lease.ErrRepoNotFound) {
		t.Fatalf("anonymous watch of a private repository: %v", err)
	}
	if _, err := w.svc.Watch(bg, w.as("alice"), "acme", "nothing", ""); !errors.Is(err, lease.ErrRepoNotFound) {
		t.Fatalf("watch of a repository that does not exist: %v", err)
	}
	alice := w.as("alice")
	dave := w.watch(t, "dave", "acme/tools", "") // issues only
	reader := w.watch(t, "reader", "acme/tools", "")
	started(t, dave)
	started(t, reader)

	if _, err := w.svc.Acquire(bg, alice, "acme", "tools", 2, 0); err != nil { // a pull request
		t.Fatal(err)
	}
	expectEvent(t, reader, contract.EventLease, leaseJSON(2, "alice", 1, w.clock.Now(), nil))
	if _, err := w.svc.Acquire(bg, alice, "acme", "tools", 1, 0); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, reader, contract.EventLease, leaseJSON(1, "alice", 1, w.clock.Now(), nil))
	expectEvent(t, dave, contract.EventLease, leaseJSON(1, "alice", 1, w.clock.Now(), nil)) // not the pull request
	if _, err := w.svc.Release(bg, alice, "acme", "tools", 2); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, reader, contract.EventReleased, released(2))
	quiet(t, dave)
}

// The viewer's access is asked again every recheck interval: a viewer who
// lost it has their stream ended; while the forge cannot answer, the
// stream goes on.
func TestWatchEndsWhenAccessIsLost(t *testing.T) {
	w := liveWorld(t, live.Options{Recheck: time.Minute})
	wt := w.watch(t, "reader", "acme/tools", "")
	started(t, wt)

	w.forge.SetDown(true)
	w.clock.Advance(time.Minute)
	quiet(t, wt) // rechecked, unanswered: still streaming
	w.forge.SetDown(false)
	if _, err := w.svc.Acquire(bg, w.as("alice"), "acme", "tools", 1, 0); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, wt, contract.EventLease, leaseJSON(1, "alice", 1, w.clock.Now(), nil))

	w.forge.Grant("acme/tools", "reader", forgetest.None)
	w.clock.Advance(time.Minute)
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	if e, err := wt.Next(ctx); !errors.Is(err, lease.ErrRepoNotFound) {
		t.Fatalf("after the viewer lost access: %+v %v, want ErrRepoNotFound", e, err)
	}
}

// A client that reconnects with the id of the last event it saw is sent
// what it missed, while the repository's feed still has it; otherwise
// (too long ago, after the feed lingered out, an id of another process or
// none we made) a reset.
func TestWatchResumesWithinTheReplayWindow(t *testing.T) {
	w := liveWorld(t, live.Options{Replay: 4, Linger: 10 * time.Minute})
	alice := w.as("alice")
	wt := w.watch(t, "reader", "acme/widgets", "")
	start := started(t, wt)
	var ids []string
	for _, n := range []int64{1, 4} {
		if _, err := w.svc.Acquire(bg, alice, "acme", "widgets", n, 0); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, next(t, wt).ID)
	}
	wt.Close()
	if _, err := w.svc.Release(bg, alice, "acme", "widgets", 1); err != nil { // while nobody watches
		t.Fatal(err)
	}

	again := w.watch(t, "reader", "acme/widgets", ids[0])
	expectEvent(t, again, contract.EventLease, leaseJSON(4, "alice", 1, w.clock.Now(), nil))
	e := expectEvent(t, again, contract.EventReleased, released(1))
	ids = append(ids, e.ID)
	again.Close()
	from := w.watch(t, "reader", "acme/widgets", start)
	for range 3 {
		next(t, from)
	}
	quiet(t, from)
	from.Close()

	// Past the window of 4 events: a reset. Each change is seen told
	// before the next is made: the feed tells a lease's state, so a
	// release and acquire it learned of together would be one event.
	tail := w.watch(t, "reader", "acme/widgets", "")
	started(t, tail)
	for round := range 2 {
		for _, n := range []int64{1, 4} {
			if _, err := w.svc.Release(bg, alice, "acme", "widgets", n); err != nil {
				t.Fatal(err)
			}
			if round > 0 || n == 4 { // issue 1 was released already: no event
				next(t, tail)
			}
			if _, err := w.svc.Acquire(bg, alice, "acme", "widgets", n, 0); err != nil {
				t.Fatal(err)
			}
			next(t, tail)
		}
	}
	tail.Close()
	old := w.watch(t, "reader", "acme/widgets", ids[2])
	e = expectEvent(t, old, contract.EventReset, `{}`)
	quiet(t, old)
	newest := e.ID
	for _, bad := range []string{"nonsense", "x-1", "1", start[:len(start)-1] + "99"} {
		wt := w.watch(t, "reader", "acme/widgets", bad)
		if e := next(t, wt); e.Type != contract.EventReset || e.ID != newest {
			t.Fatalf("resume from %q: %+v, want a reset at %s", bad, e, newest)
		}
		wt.Close()
	}
	old.Close()

	// Past the linger, the feed is gone: a reset.
	w.clock.Advance(10 * time.Minute)
	leasetest.WaitFor(t, "the idle feed to go", func() bool { repos, _ := w.hub.Counts(); return repos == 0 })
	late := w.watch(t, "reader", "acme/widgets", newest)
	expectEvent(t, late, contract.EventReset, `{}`)
}

// A stream that does not take its events is dropped when its buffer is
// full, and the others get every event all the same; its client resumes
// from its last event.
func TestSlowStreamIsDroppedNotWaitedFor(t *testing.T) {
	w := liveWorld(t, live.Options{Buffer: 2})
	alice := w.as("alice")
	slow := w.watch(t, "reader", "acme/widgets", "")
	fast := w.watch(t, "bob", "acme/widgets", "")
	started(t, slow)
	started(t, fast)
	for _, n := range []int64{1, 2, 4} {
		if _, err := w.svc.Acquire(bg, alice, "acme", "widgets", n, 0); err != nil {
			t.Fatal(err)
		}
		if e := next(t, fast); e.Type != contract.EventLease {
			t.Fatalf("fast stream: %+v", e)
		}
	}
	if _, streams := w.hub.Counts(); streams != 1 {
		t.Fatalf("%d streams, want the slow one dropped", streams)
	}
	last := next(t, slow).ID
	next(t, slow)
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	if _, err := slow.Next(ctx); !errors.Is(err, live.ErrFellBehind) {
		t.Fatalf("the slow stream after its buffer: %v, want ErrFellBehind", err)
	}
	again := w.watch(t, "reader", "acme/widgets", last)
	next(t, again)
	expectEvent(t, again, contract.EventLease, leaseJSON(4, "alice", 1, w.clock.Now(), nil))
}

// However concurrent changes reach the hub, the last event about an issue
// says what the ledger says after the last change.
func TestConcurrentChangesEndWithTheLedgersState(t *testing.T) {
	w := liveWorld(t, live.Options{Buffer: 10000})
	wt := w.watch(t, "reader", "acme/widgets", "")
	started(t, wt)
	var wg sync.WaitGroup
	for _, who := range []string{"alice", "bob"} {
		v := w.as(who)
		wg.Go(func() {
			for range 30 {
				_, _ = w.svc.Acquire(bg, v, "acme", "widgets", 1, 0)
				_, _ = w.svc.Release(bg, v, "acme", "widgets", 1)
				_, _ = w.svc.Acquire(bg, v, "acme", "widgets", 1, 0)
			}
		})
	}
	wg.Wait()
	cur, err := w.svc.Lease(bg, w.as("reader"), "acme", "widgets", 1)
	if err != nil {
		t.Fatal(err)
	}
	var last live.Event
	for {
		ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
		e, err := wt.Next(ctx)
		cancel()
		if err != nil {
			break
		}
		last = e
	}
	want := contract.EventReleased
	if cur.Lease != nil {
		want = contract.EventLease
		b, _ := json.Marshal(cur.Lease)
		if string(last.Data) != string(b) {
			t.Fatalf("last event %s %s, the ledger says %s", last.Type, last.Data, b)
		}
	}
	if last.Type != want {
		t.Fatalf("last event %s %s, want %s", last.Type, last.Data, want)
	}
}

// Streams leave no goroutine behind: closed, dropped or ended by lost
// access, and once the feeds linger out, the goroutine count is back to
// where it was.
func TestWatchLeavesNoGoroutine(t *testing.T) {
	w := liveWorld(t, live.Options{Buffer: 1, Linger: time.Minute, Recheck: time.Hour})
	base := runtime.NumGoroutine()
	alice := w.as("alice")
	if _, err := w.svc.Acquire(bg, alice, "acme", "widgets", 1, 30*time.Minute); err != nil {
		t.Fatal(err)
	}
	closed := w.watch(t, "reader", "acme/widgets", "")
	dropped := w.watch(t, "bob", "acme/widgets", "")
	lost := w.watch(t, "reader", "acme/tools", "")
	for range 3 {
		if _, err := w.svc.Renew(bg, alice, "acme", "widgets", 1, 30*time.Minute); err != nil {
			t.Fatal(err)
		}
		w.clock.Advance(time.Second)
	}
	closed.Close()
	dropped.Close()
	w.forge.Grant("acme/tools", "reader", forgetest.None)
	w.clock.Advance(time.Hour)
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	for {
		if _, err := lost.Next(ctx); err != nil {
			if !errors.Is(err, lease.ErrRepoNotFound) {
				t.Fatalf("lost access: %v", err)
			}
			break
		}
	}
	lost.Close()
	w.clock.Advance(time.Minute)
	leasetest.WaitFor(t, "the feeds to linger out", func() bool { repos, streams := w.hub.Counts(); return repos == 0 && streams == 0 })
	leasetest.WaitFor(t, "the goroutines to end", func() bool { return runtime.NumGoroutine() <= base })
	if got := w.clock.Timers(); got != 0 {
		t.Fatalf("%d timers left", got)
	}
}

// A feed whose seeding fails ends its streams and is not kept.
func TestWatchOfABrokenLedgerFails(t *testing.T) {
	w := newWorld(t)
	store, err := models.Open(filepath.Join(t.TempDir(), "other.db"), models.WithClock(w.clock))
	if err != nil {
		t.Fatal(err)
	}
	svc := leasetest.NewService(t, w.forge, store, w.clock)
	_ = store.Close()
	if _, err := svc.Watch(bg, w.as("reader"), "acme", "widgets", ""); err == nil {
		t.Fatal("watch over a closed ledger succeeded")
	}
	if repos, streams := svc.Hub.Counts(); repos != 0 || streams != 0 {
		t.Fatalf("%d feeds and %d streams kept after a failed watch", repos, streams)
	}
}

// A stream's event ids say nothing of other repositories: changes to a
// private repository the viewer cannot read leave the ids of a public
// one's stream where they were.
func TestEventIDsSayNothingOfOtherRepositories(t *testing.T) {
	w := liveWorld(t, live.Options{})
	alice := w.as("alice")
	public := w.watch(t, "reader", "acme/widgets", "")
	before := started(t, public)
	private := w.watch(t, "alice", "acme/secret", "")
	started(t, private)
	for range 3 {
		if _, err := w.svc.Acquire(bg, alice, "acme", "secret", 1, time.Hour); err != nil {
			t.Fatal(err)
		}
		next(t, private)
		if _, err := w.svc.Release(bg, alice, "acme", "secret", 1); err != nil {
			t.Fatal(err)
		}
		next(t, private)
	}
	if after := started(t, w.watch(t, "reader", "acme/widgets", "")); after != before {
		t.Fatalf("the public repository's position moved from %s to %s with changes to a private one", before, after)
	}
	// And resuming from it still works.
	if _, err := w.svc.Acquire(bg, alice, "acme", "widgets", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	e := next(t, public)
	resumed := w.watch(t, "reader", "acme/widgets", before)
	if got := next(t, resumed); got.ID != e.ID || got.Type != contract.EventLease {
		t.Fatalf("resumed from %s: %+v, want %s", before, got, e.ID)
	}
}

// Reservations are told to every reader of the repository: each made as
// "reserved", each ended as "unreserved", however it ended (here at its
// ttl's instant, and with its claim's release), with the claim's number
// only to who reads both issues and pull requests.
func TestWatchToldReservations(t *testing.T) {
	w := liveWorld(t, live.Options{})
	alice := w.as("alice")
	if _, err := w.svc.Acquire(bg, alice, "acme", "tools", 1, 0); err != nil {
		t.Fatal(err)
	}
	reader := w.watch(t, "reader", "acme/tools", "")
	dave := w.watch(t, "dave", "acme/tools", "") // issues only
	started(t, reader)
	started(t, dave)
	both := func(typ, withNumber, withoutNumber string) {
		t.Helper()
		expectEvent(t, reader, typ, withNumber)
		expectEvent(t, dave, typ, withoutNumber)
	}

	if _, err := w.svc.Reserve(bg, alice, "acme", "tools", lease.ReserveRequest{Globs: []string{"src/**"}, Issue: 1}); err != nil {
		t.Fatal(err)
	}
	both(contract.EventReserved, `{"glob":"src/**","shared":false,"holder":"alice","agent":null,"issue":1,"expires_at":null}`,
		`{"glob":"src/**","shared":false,"holder":"alice","agent":null,"issue":null,"expires_at":null}`)
	if _, err := w.svc.Reserve(bg, alice, "acme", "tools", lease.ReserveRequest{Globs: []string{"docs/"}, Shared: true, TTL: 10 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	docs := `{"glob":"docs/","shared":true,"holder":"alice","agent":null,"issue":null,"expires_at":"` +
		w.clock.Now().Add(10*time.Minute).UTC().Format(time.RFC3339) + `"}`
	both(contract.EventReserved, docs, docs)

	w.hub.Settle() // its expiry is on the bus's queue
	w.clock.Advance(10 * time.Minute)
	both(contract.EventUnreserved, docs, docs)

	if _, err := w.svc.Release(bg, alice, "acme", "tools", 1); err != nil {
		t.Fatal(err)
	}
	both(contract.EventReleased, released(1), released(1))
	both(contract.EventUnreserved, `{"glob":"src/**","shared":false,"holder":"alice","agent":null,"issue":1,"expires_at":null}`,
		`{"glob":"src/**","shared":false,"holder":"alice","agent":null,"issue":null,"expires_at":null}`)
	quiet(t, reader)
	quiet(t, dave)
}
