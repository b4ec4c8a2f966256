package models

import (
	"fmt"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/clocktest"
)

// The involuntary endings of a day: expired (with nobody since, released
// too late, or taken over), force-released; not a release in time, not a
// close, not one before the window, not another repository's.
func TestInvoluntaryEnds(t *testing.T) { forEachEngine(t, testInvoluntaryEnds) }

func testInvoluntaryEnds(t *testing.T, e engine) {
	s, clock, _ := e.open(t)
	at := func(d time.Duration) time.Time { return clocktest.Start.Add(d) }
	key := func(n int64) Key { return Key{RepoID: 7, Issue: n} }

	mustAcquire(t, s, key(1), "old", time.Minute) // lapses at +1m, before the window
	clock.Advance(25 * time.Hour)
	start := at(25 * time.Hour) // the window: a day back from +49h
	mustAcquire(t, s, key(2), "alice", time.Minute)
	if _, err := s.Release(bg, key(2), who("alice")); err != nil { // in time: not shown
		t.Fatal(err)
	}
	mustAcquire(t, s, key(3), "bob", time.Minute)   // lapses at start+1m, nobody since
	mustAcquire(t, s, key(4), "carol", time.Minute) // lapses at start+1m, taken over at +2m
	mustAcquire(t, s, key(5), "dave", time.Hour)    // force-released at +2m
	mustAcquire(t, s, key(6), "erin", time.Minute)  // released at +2m, too late
	mustAcquire(t, s, key(7), "frank", 0)           // closed at +2m: not shown
	mustAcquire(t, s, Key{RepoID: 8, Issue: 3}, "gina", time.Minute)
	clock.Advance(2 * time.Minute)
	mustAcquire(t, s, key(4), "dave", time.Hour)
	if _, err := s.ForceRelease(bg, key(5), who("root")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Release(bg, key(6), who("erin")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EndIssue(bg, key(7), ReasonClosed, 1, ""); err != nil {
		t.Fatal(err)
	}
	clock.Advance(24*time.Hour - 2*time.Minute) // +49h: the window starts at start

	got, err := s.InvoluntaryEnds(bg, 7, at(49*time.Hour).Add(-24*time.Hour), MaxInvoluntary)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, x := range got {
		lines = append(lines, fmt.Sprintf("#%d %d %s %s %s kind=%d", x.Issue, x.Token, x.Holder.Login, x.EndedBy, x.EndedAt.Sub(start), x.Kind))
	}
	want := []string{
		"#4 2 dave expired 1h2m0s kind=1", // the takeover's own lapse
		"#5 1 dave force_released 2m0s kind=1",
		"#3 1 bob expired 1m0s kind=1",
		"#4 1 carol taken_over 1m0s kind=1",
		"#6 1 erin expired 1m0s kind=1",
	}
	if fmt.Sprint(lines) != fmt.Sprint(want) {
		t.Fatalf("involuntary ends:\n got %q\nwant %q", lines, want)
	}
	if got[1].ForcedBy != "root" {
		t.Errorf("force-released by %q, want root", got[1].ForcedBy)
	}
	if got, err := s.InvoluntaryEnds(bg, 7, at(49*time.Hour).Add(-24*time.Hour), 2); err != nil || len(got) != 2 || got[1].Issue != 5 {
		t.Errorf("limit 2: %v %v", got, err)
	}
	if got, err := s.InvoluntaryEnds(bg, 9, start, 10); err != nil || len(got) != 0 {
		t.Errorf("a repository without history: %v %v", got, err)
	}
	if _, err := s.InvoluntaryEnds(bg, 7, start, MaxInvoluntary+1); err == nil {
		t.Error("a limit past MaxInvoluntary was accepted")
	}
}
