package models

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

var issueObs = Observed{Kind: KindIssue}

func seenAt(v int64) Observed { return Observed{Kind: KindIssue, Version: v} }

// The coherence invariant, one interleaving at a time: an acquire that
// looked at the forge at version 5, and a close recorded at version 10.
func TestCloseAndAcquireInterleavings(t *testing.T) {
	forEachEngine(t, testCloseAndAcquireInterleavings)
}

func testCloseAndAcquireInterleavings(t *testing.T, e engine) {
	t.Run("close recorded before the acquire commits", func(t *testing.T) {
		s, _, _ := e.open(t)
		if _, err := s.EndIssue(bg, k42, ReasonClosed, 10, ""); err != nil {
			t.Fatal(err)
		}
		for _, obs := range []Observed{seenAt(5), seenAt(10), issueObs} {
			if _, err := s.Acquire(bg, k42, who("alice"), time.Minute, obs); !errors.Is(err, ErrClosed) {
				t.Fatalf("acquire having seen version %d: %v, want ErrClosed", obs.Version, err)
			}
		}
		if cur, _ := s.Current(bg, k42); cur != nil {
			t.Fatalf("live lease on a closed issue: %+v", cur)
		}
	})
	t.Run("close recorded after the acquire committed", func(t *testing.T) {
		s, _, _ := e.open(t)
		l, err := s.Acquire(bg, k42, who("alice"), time.Minute, seenAt(5))
		if err != nil {
			t.Fatal(err)
		}
		ended, err := s.EndIssue(bg, k42, ReasonMerged, 10, "")
		if err != nil || len(ended.Leases) != 1 || ended.Leases[0].Token != l.Token {
			t.Fatalf("EndIssue = %+v %v, want alice's lease ended", ended, err)
		}
		if cur, _ := s.Current(bg, k42); cur != nil {
			t.Fatalf("live lease after the close: %+v", cur)
		}
		if _, err := s.Acquire(bg, k42, who("bob"), time.Minute, issueObs); !errors.Is(err, ErrClosed) {
			t.Fatalf("acquire after the close: %v, want ErrClosed", err)
		}
		evs, _ := s.History(bg, k42)
		last := evs[len(evs)-1]
		if last.Action != Action(ReasonMerged) || last.Previous != "alice" || last.Token != l.Token {
			t.Fatalf("history ends with %+v, want merged, ending alice's tenure %d", last, l.Token)
		}
		if _, err := s.Renew(bg, k42, who("alice"), time.Minute); !errors.Is(err, ErrNotHolder) {
			t.Fatalf("renew after the close: %v, want not the holder", err)
		}
	})
	t.Run("reopened", func(t *testing.T) {
		s, _, _ := e.open(t)
		first := mustAcquireAs(t, s, k42, who("alice"), 0)
		mustEnd(t, s, k42, ReasonClosed, 10, "")
		if _, err := s.ReopenIssue(bg, k42, 8, ""); err != nil { // older than the close: ignored
			t.Fatal(err)
		}
		if _, err := s.Acquire(bg, k42, who("bob"), 0, issueObs); !errors.Is(err, ErrClosed) {
			t.Fatalf("acquire after a stale reopen: %v, want ErrClosed", err)
		}
		if _, err := s.ReopenIssue(bg, k42, 20, ""); err != nil {
			t.Fatal(err)
		}
		if l, err := s.Acquire(bg, k42, who("bob"), 0, issueObs); err != nil || l.Token != first.Token+1 {
			t.Fatalf("acquire after the reopen: %+v %v, want token %d", l, err, first.Token+1)
		}
		// A close older than the reopen is stale too.
		if ended := mustEnd(t, s, k42, ReasonClosed, 15, ""); len(ended.Leases) != 0 {
			t.Fatalf("a stale close ended %+v", ended.Leases)
		}
	})
	t.Run("a missed reopen is repaired by a newer look at the forge", func(t *testing.T) {
		s, _, _ := e.open(t)
		mustEnd(t, s, k42, ReasonClosed, 10, "")
		if _, err := s.Acquire(bg, k42, who("alice"), 0, seenAt(11)); err != nil {
			t.Fatalf("acquire having seen the issue open at a newer version: %v", err)
		}
		st, err := s.Issue(bg, k42)
		if err != nil || st == nil || st.Closed || st.Version != 11 {
			t.Fatalf("state after the acquire = %+v %v, want open at version 11", st, err)
		}
	})
	t.Run("a repeated delivery has no second effect", func(t *testing.T) {
		s, _, _ := e.open(t)
		mustAcquireAs(t, s, k42, who("alice"), 0)
		if ended := mustEnd(t, s, k42, ReasonClosed, 10, "d-1"); len(ended.Leases) != 1 || ended.Duplicate {
			t.Fatalf("first delivery: %+v", ended)
		}
		if _, err := s.ReopenIssue(bg, k42, 20, "d-2"); err != nil {
			t.Fatal(err)
		}
		mustAcquireAs(t, s, k42, who("bob"), 0)
		if ended := mustEnd(t, s, k42, ReasonClosed, 10, "d-1"); len(ended.Leases) != 0 || !ended.Duplicate {
			t.Fatalf("repeated delivery: %+v, want a duplicate with no effect", ended)
		}
		if cur, _ := s.Current(bg, k42); cur == nil || cur.Holder.Login != "bob" {
			t.Fatalf("bob's lease after the repeated delivery: %+v", cur)
		}
	})
	t.Run("repository deleted", func(t *testing.T) {
		s, _, _ := e.open(t)
		mustAcquireAs(t, s, k42, who("alice"), 0)
		mustAcquireAs(t, s, Key{7, 43}, who("bob"), time.Hour)
		mustAcquireAs(t, s, Key{8, 1}, who("bob"), time.Hour) // another repository
		ended, err := s.EndRepo(bg, 7, "d-9")
		if err != nil || len(ended.Leases) != 2 {
			t.Fatalf("EndRepo = %+v %v, want two leases ended", ended, err)
		}
		if ls, _ := s.List(bg, 7); len(ls) != 0 {
			t.Fatalf("leases left in the deleted repository: %+v", ls)
		}
		if ls, _ := s.List(bg, 8); len(ls) != 1 {
			t.Fatalf("the other repository lost its lease: %+v", ls)
		}
		if _, err := s.Acquire(bg, Key{7, 43}, who("carol"), 0, seenAt(1<<40)); !errors.Is(err, ErrClosed) {
			t.Fatalf("acquire in a deleted repository: %v, want ErrClosed", err)
		}
		if repos, err := s.LiveRepos(bg); err != nil || len(repos) != 1 || repos[0] != 8 {
			t.Fatalf("LiveRepos = %v %v, want [8]", repos, err)
		}
	})
}

// Many acquirers racing one close: whatever the interleaving, once the
// close has been recorded no lease on the issue is live, and every acquire
// that succeeded committed before the close (its tenure is what the close
// ended, or an earlier one).
func TestCloseRacingAcquires(t *testing.T) { forEachEngine(t, testCloseRacingAcquires) }

func testCloseRacingAcquires(t *testing.T, e engine) {
	s, _, _ := e.open(t)
	for round := range 20 {
		k := Key{RepoID: 9, Issue: int64(round + 1)} // an issue of its own
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 8 {
			wg.Go(func() {
				<-start
				_, err := s.Acquire(bg, k, who(fmt.Sprint("agent-", i)), time.Minute, seenAt(5))
				if err != nil && !errors.Is(err, ErrHeld) && !errors.Is(err, ErrClosed) {
					t.Errorf("acquire: %v", err)
				}
			})
		}
		var ended Ended
		wg.Go(func() {
			<-start
			var err error
			if ended, err = s.EndIssue(bg, k, ReasonClosed, 10, ""); err != nil {
				t.Errorf("EndIssue: %v", err)
			}
		})
		close(start)
		wg.Wait()
		if cur, _ := s.Current(bg, k); cur != nil {
			t.Fatalf("round %d: live lease %+v after the close was recorded", round, cur)
		}
		evs, _ := s.History(bg, k)
		closedAt := -1
		for i, e := range evs {
			if e.Action == Action(ReasonClosed) {
				closedAt = i
			} else if closedAt >= 0 {
				t.Fatalf("round %d: %+v recorded after the close", round, e)
			}
		}
		if acquired := len(evs) > 0 && evs[0].Action == ActionAcquire; acquired != (len(ended.Leases) == 1) {
			t.Fatalf("round %d: history %+v, but the close ended %+v", round, evs, ended.Leases)
		}
	}
}

func mustEnd(t *testing.T, s *Store, k Key, why Reason, version int64, delivery string) Ended {
	t.Helper()
	e, err := s.EndIssue(bg, k, why, version, delivery)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
