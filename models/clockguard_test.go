package models

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/clocktest"
)

// A wall clock stepped backwards does not revive an expired lease: not in
// this process, and not after a restart on the same file. The step is
// reported once.
func TestClockStepBackDoesNotReviveLeases(t *testing.T) {
	forEachEngine(t, testClockStepBackDoesNotReviveLeases)
}

func testClockStepBackDoesNotReviveLeases(t *testing.T, e engine) {
	var (
		mu    sync.Mutex
		steps []time.Duration
	)
	onStep := func(d time.Duration) { mu.Lock(); steps = append(steps, d); mu.Unlock() }
	s, clock, path := e.open(t, WithClockStep(onStep))
	start := clock.Now()
	mustAcquire(t, s, k42, "alice", time.Minute)
	clock.Advance(2 * time.Minute)
	mustAcquire(t, s, Key{7, 43}, "bob", 0) // a write at the later time

	clock.Set(start.Add(30 * time.Second)) // NTP steps back 90 s
	if cur, _ := s.Current(bg, k42); cur != nil {
		t.Fatalf("the expired lease is live again after the clock stepped back: %+v", cur)
	}
	if l := mustAcquire(t, s, k42, "carol", time.Minute); l.Token != 2 || !l.AcquiredAt.Equal(start.Add(2*time.Minute)) {
		t.Fatalf("acquire after the step: %+v, want token 2 at the ledger's latest time", l)
	}
	_, _ = s.Current(bg, k42) // a second reading behind the same high water
	mu.Lock()
	if len(steps) != 1 || steps[0] != 90*time.Second {
		t.Fatalf("steps reported %v, want one of 90s", steps)
	}
	mu.Unlock()
	_ = s.Close()

	// After a restart the ledger still knows the latest time it used.
	clock2 := clocktest.New()
	clock2.Set(start.Add(30 * time.Second))
	s2, err := Open(path, WithClock(clock2))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if cur, _ := s2.Current(bg, Key{7, 42}); cur == nil || cur.Holder.Login != "carol" {
		t.Fatalf("carol's lease after the restart: %+v", cur)
	}
	clock2.Set(start.Add(2*time.Minute + 61*time.Second))
	if cur, _ := s2.Current(bg, Key{7, 42}); cur != nil {
		t.Fatalf("carol's lease outlived its expiry: %+v", cur)
	}
}

// Replicas on one PostgreSQL database whose own clocks disagree by two
// hours still decide as one: by the database server's clock. Their clocks
// step apart after they opened (so the offsets measured then are stale):
// a lease taken through the replica whose clock now lags is held for the
// replica whose clock now runs ahead (which, by its own clock, would find
// it long expired and give it away), its times are the server's, renewing
// it through the other replica keeps its token, and after a write each
// replica's Clock reads the server's time again.
func TestReplicasDecideByTheDatabaseClock(t *testing.T) {
	db := postgresEngine.newDB(t)
	open := func() (*Store, *atomic.Int64) {
		skew := new(atomic.Int64)
		s, err := Open(db, WithDatabaseClock(ClockFunc(func() time.Time { return time.Now().Add(time.Duration(skew.Load())) })))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s, skew
	}
	behind, behindSkew := open()
	ahead, aheadSkew := open()
	behindSkew.Store(int64(-time.Hour))
	aheadSkew.Store(int64(time.Hour))
	near := func(what string, got time.Time) {
		t.Helper()
		if d := time.Until(got); d < -5*time.Second || d > 5*time.Second {
			t.Fatalf("%s is %s off the server's clock", what, d.Round(time.Second))
		}
	}

	l := mustAcquire(t, behind, k42, "alice", 10*time.Minute)
	near("the lease's start", l.AcquiredAt)
	if _, err := ahead.Acquire(bg, k42, who("bob"), time.Minute, Observed{Kind: KindIssue}); !errors.Is(err, ErrHeld) {
		t.Fatalf("bob's acquire through the leading replica: %v, want ErrHeld (alice holds it for 10 minutes)", err)
	}
	cur, err := ahead.Current(bg, k42)
	if err != nil || cur == nil || cur.Holder.Login != "alice" {
		t.Fatalf("the leading replica reads %+v, %v; want alice's lease", cur, err)
	}
	r, err := ahead.Renew(bg, k42, who("alice"), 20*time.Minute)
	if err != nil || r.Token != l.Token || r.ExpiresAt == nil {
		t.Fatalf("alice's renew through the leading replica: %+v, %v", r, err)
	}
	near("the renewed expiry less its ttl", r.ExpiresAt.Add(-20*time.Minute))
	for name, s := range map[string]*Store{"lagging": behind, "leading": ahead} {
		near("the "+name+" replica's Clock", s.Clock().Now())
	}
	if off := ahead.ClockOffset(); off > -59*time.Minute || off < -61*time.Minute {
		t.Fatalf("the leading replica measured an offset of %s, want about -1h", off)
	}
}

// On PostgreSQL, reads decide a claim's liveness by the same clock as the
// writes, the server's, read in the statement: this process's clock,
// corrected by an offset measured a while ago, may run ahead of it (a
// step of the host's clock since, or an offset taken from a slow reading
// a few milliseconds off), and a read that judged by it would call a
// claim lapsed that the next write still finds live. Here the process's
// clock steps to just past the claim's expiry; the server's is a minute
// before it. Every read still shows alice's claim, as bob's release,
// refused for it, does.
func TestReadsDecideByTheServersClockAsWritesDo(t *testing.T) {
	db := postgresEngine.newDB(t)
	skew := new(atomic.Int64)
	s, err := Open(db, WithDatabaseClock(ClockFunc(func() time.Time { return time.Now().Add(time.Duration(skew.Load())) })))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	alice := inSessionOf(who("alice"), openSession(t, s, who("alice"), time.Minute))
	l, err := s.Acquire(bg, k42, alice, time.Minute, Observed{Kind: KindIssue})
	if err != nil || l.ExpiresAt == nil {
		t.Fatalf("alice's acquire: %+v, %v", l, err)
	}
	// Ahead by 5 ms past the expiry, from the process's view.
	skew.Store(int64(l.ExpiresAt.Add(5 * time.Millisecond).Sub(s.Clock().Now())))
	if ahead := s.Clock().Now(); !ahead.After(*l.ExpiresAt) {
		t.Fatalf("the process's clock reads %v, want past the expiry %v", ahead, *l.ExpiresAt)
	}
	live := func(what string, got []Lease, err error) {
		t.Helper()
		if err != nil || len(got) != 1 || got[0].Holder.Login != "alice" {
			t.Errorf("%s: %+v, %v; want alice's claim, live by the server's clock", what, got, err)
		}
	}
	cur, err := s.Current(bg, k42)
	if cur == nil {
		live("Current", nil, err)
	} else {
		live("Current", []Lease{*cur}, err)
	}
	got, err := s.List(bg, k42.RepoID)
	live("List", got, err)
	got, _, err = s.ListPage(bg, Page{RepoID: k42.RepoID, Limit: 10})
	live("ListPage", got, err)
	got, _, err = s.ListPage(bg, Page{RepoID: k42.RepoID, Issues: []int64{k42.Issue}, Limit: 10})
	live("ListPage of the issue", got, err)
	got, err = s.SessionLeases(bg, alice.Session.ID)
	live("SessionLeases", got, err)
	if n, err := s.CountLive(bg); err != nil || n != 1 {
		t.Errorf("CountLive: %d, %v; want 1", n, err)
	}
	if repos, err := s.LiveRepos(bg); err != nil || len(repos) != 1 || repos[0] != k42.RepoID {
		t.Errorf("LiveRepos: %v, %v; want [%d]", repos, err, k42.RepoID)
	}
	if ts, err := s.Tenures(bg, k42, 10); err != nil || len(ts) != 1 || ts[0].EndedAt != nil {
		t.Errorf("Tenures: %+v, %v; want alice's, not ended", ts, err)
	}
	_, err = s.Release(bg, k42, who("bob"))
	var nh *NotHolderError
	if !errors.As(err, &nh) || nh.Holder != "alice" {
		t.Fatalf("bob's release: %v, want refused for alice's live claim", err)
	}
}
