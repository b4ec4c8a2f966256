package models

import (
	"sync"
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
