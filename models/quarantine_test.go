package models

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// lapseAs gives k a tenure of h that lapses a minute later, and moves the
// clock to that instant.
func lapseAs(t *testing.T, s *Store, clock interface{ Advance(time.Duration) }, k Key, h Holder) Lease {
	t.Helper()
	l := mustAcquireAs(t, s, k, h, time.Minute)
	clock.Advance(time.Minute)
	return l
}

// Quarantine after two involuntary endings: from the instant the second
// lapses, acquire refuses the issue and next skips it, before anything
// recorded it; recording it is done once; a forced acquire overrides it
// and leaves it; a lift ends it, and only the tenures after it count.
func TestQuarantineAfterInvoluntaryEndings(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s, clock, _ := e.open(t, WithQuarantineAfter(2))
		k, other := Key{RepoID: 1, Issue: 1}, Key{RepoID: 1, Issue: 2}
		alice, bob, admin := Holder{ID: 1, Login: "alice", Agent: "a1"}, Holder{ID: 2, Login: "bob"}, Holder{ID: 3, Login: "root"}
		lapseAs(t, s, clock, k, alice)
		if q, err := s.QuarantineOf(bg, k); err != nil || q.Since != nil {
			t.Fatalf("after one lapse: %+v %v, want no quarantine", q, err)
		}
		second := lapseAs(t, s, clock, k, bob) // a takeover of the first
		_, err := s.Acquire(bg, k, alice, time.Minute, Observed{Kind: KindIssue})
		var qe *QuarantinedError
		if !errors.As(err, &qe) || !qe.Since.Equal(*second.ExpiresAt) {
			t.Fatalf("acquire at the second lapse's instant: %v, want quarantined since %s", err, second.ExpiresAt)
		}
		cands := []Candidate{{Issue: 1, Observed: Observed{Kind: KindIssue}, Verified: true}, {Issue: 2, Observed: Observed{Kind: KindIssue}, Verified: true}}
		got, err := s.AcquireFirst(bg, 1, cands, alice, time.Minute)
		if err != nil || got.Key != other {
			t.Fatalf("next over a quarantined issue: %+v %v, want issue 2", got, err)
		}
		q, err := s.QuarantineOf(bg, k)
		if err != nil || q.Since == nil || q.Recorded || q.Token != second.Token || len(q.Tenures) != 2 ||
			q.Tenures[0].EndedBy != EndExpired || q.Tenures[1].EndedBy != EndTakenOver || q.Tenures[1].Holder.Agent != "a1" {
			t.Fatalf("worked-out quarantine: %+v %v", q, err)
		}
		// Recorded once, however many replicas notice it.
		q, recorded, err := s.RecordQuarantine(bg, k)
		if err != nil || !recorded || !q.Recorded || q.Forged || len(q.Tenures) != 2 {
			t.Fatalf("record: %+v %v %v", q, recorded, err)
		}
		if _, recorded, err := s.RecordQuarantine(bg, k); err != nil || recorded {
			t.Fatalf("record again: %v %v, want nothing new", recorded, err)
		}
		if keys, err := s.QuarantinesToForge(bg); err != nil || !slices.Equal(keys, []Key{k}) {
			t.Fatalf("to tell the forge: %v %v", keys, err)
		}
		if err := s.MarkQuarantineForged(bg, k, q.Token, true); err != nil {
			t.Fatal(err)
		}
		if keys, err := s.QuarantinesToForge(bg); err != nil || len(keys) != 0 {
			t.Fatalf("to tell the forge once told: %v %v", keys, err)
		}
		if _, err := s.Release(bg, other, alice); err != nil {
			t.Fatal(err)
		}
		if got, err := s.AcquireFirst(bg, 1, cands[:1], alice, time.Minute); !errors.Is(err, ErrNoneFree) {
			t.Fatalf("next with only the quarantined issue: %+v %v, want none", got, err)
		}
		// A repository admin's forced acquire takes it; the quarantine
		// stays for everyone else.
		forced, err := s.AcquireForced(bg, k, admin, time.Minute, Observed{Kind: KindIssue})
		if err != nil || forced.Token != second.Token+1 {
			t.Fatalf("forced acquire: %+v %v", forced, err)
		}
		if _, err := s.Release(bg, k, admin); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Acquire(bg, k, bob, time.Minute, Observed{Kind: KindIssue}); !errors.Is(err, ErrQuarantined) {
			t.Fatalf("acquire after the forced tenure: %v, want quarantined", err)
		}
		// Lifted: the label is still on (the worker removes it).
		if lifted, err := s.LiftQuarantine(bg, k, false); err != nil || !lifted {
			t.Fatalf("lift: %v %v", lifted, err)
		}
		if keys, err := s.QuarantinesToForge(bg); err != nil || !slices.Equal(keys, []Key{k}) {
			t.Fatalf("to tell the forge after a lift: %v %v", keys, err)
		}
		if lifted, err := s.LiftQuarantine(bg, k, false); err != nil || lifted {
			t.Fatalf("lift again: %v %v, want nothing to lift", lifted, err)
		}
		// One lapse after the lift is not two.
		lapseAs(t, s, clock, k, bob)
		if q, err := s.QuarantineOf(bg, k); err != nil || q.Since != nil || !q.Labeled {
			t.Fatalf("one lapse after the lift: %+v %v, want none, the label still on", q, err)
		}
		third := lapseAs(t, s, clock, k, alice)
		if _, err := s.Acquire(bg, k, bob, time.Minute, Observed{Kind: KindIssue}); !errors.Is(err, ErrQuarantined) {
			t.Fatalf("acquire after two more lapses: %v, want quarantined", err)
		}
		if keys, err := s.LapsedUnquarantined(bg); err != nil || !slices.Equal(keys, []Key{k}) {
			t.Fatalf("lapsed and not recorded: %v %v", keys, err)
		}
		// The label removed by hand lifts it, and nobody need remove it.
		if lifted, err := s.LiftQuarantine(bg, k, true); err != nil || !lifted {
			t.Fatalf("lift by the label: %v %v", lifted, err)
		}
		if keys, err := s.QuarantinesToForge(bg); err != nil || len(keys) != 0 {
			t.Fatalf("to tell the forge after the label went: %v %v", keys, err)
		}
		if l := mustAcquireAs(t, s, k, bob, time.Minute); l.Token != third.Token+1 {
			t.Fatalf("acquire after the lift: token %d, want %d", l.Token, third.Token+1)
		}
	})
}

// Only involuntary endings count: a release between two lapses resets
// the count; a session's claim lost with its session counts.
func TestQuarantineCountsOnlyInvoluntaryEndings(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s, clock, _ := e.open(t, WithQuarantineAfter(2))
		k := Key{RepoID: 1, Issue: 7}
		alice, bob := Holder{ID: 1, Login: "alice"}, Holder{ID: 2, Login: "bob"}
		lapseAs(t, s, clock, k, alice)
		mustAcquireAs(t, s, k, bob, time.Minute)
		if _, err := s.Release(bg, k, bob); err != nil {
			t.Fatal(err)
		}
		lapseAs(t, s, clock, k, alice)
		if _, err := s.Acquire(bg, k, bob, time.Minute, Observed{Kind: KindIssue}); err != nil {
			t.Fatalf("acquire after lapse, release, lapse: %v", err)
		}
		clock.Advance(time.Minute) // that one lapsed too: two in a row
		if _, err := s.Acquire(bg, k, alice, time.Minute, Observed{Kind: KindIssue}); !errors.Is(err, ErrQuarantined) {
			t.Fatalf("acquire after two lapses in a row: %v, want quarantined", err)
		}
		// A session's claim, lost with its session.
		k2 := Key{RepoID: 1, Issue: 8}
		lapseAs(t, s, clock, k2, bob)
		ref, err := s.OpenSession(bg, alice, 10*time.Second, 0)
		if err != nil {
			t.Fatal(err)
		}
		in := alice
		in.Session = &ref
		if _, err := s.Acquire(bg, k2, in, 0, Observed{Kind: KindIssue}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(10 * time.Second) // no heartbeat: lost
		q, err := s.QuarantineOf(bg, k2)
		if err != nil || q.Since == nil || len(q.Tenures) != 2 || q.Tenures[0].EndedBy != EndSessionLost {
			t.Fatalf("after a lapse and a lost session: %+v %v", q, err)
		}
	})
}

// Off (the default), nothing is ever quarantined.
func TestQuarantineOff(t *testing.T) {
	s, clock, _ := openTestStore(t)
	k := Key{RepoID: 1, Issue: 1}
	for range 3 {
		lapseAs(t, s, clock, k, Holder{ID: 1, Login: "alice"})
	}
	mustAcquireAs(t, s, k, Holder{ID: 2, Login: "bob"}, time.Minute)
	if keys, err := s.LapsedUnquarantined(bg); err != nil || len(keys) != 0 {
		t.Fatalf("lapsed with quarantine off: %v %v", keys, err)
	}
}

// Replicas on one ledger record a quarantine once.
func TestQuarantineRecordedOnceAcrossReplicas(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s, clock, db := e.open(t, WithQuarantineAfter(1))
		r, err := Open(db, WithClock(clock), WithMaxTTL(168*time.Hour), WithQuarantineAfter(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close() })
		k := Key{RepoID: 1, Issue: 1}
		lapseAs(t, s, clock, k, Holder{ID: 1, Login: "alice"})
		var wg sync.WaitGroup
		var mu sync.Mutex
		recorded := 0
		for _, st := range []*Store{s, r, s, r} {
			wg.Go(func() {
				_, rec, err := st.RecordQuarantine(bg, k)
				if err != nil {
					t.Error(err)
				}
				if rec {
					mu.Lock()
					recorded++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if recorded != 1 {
			t.Fatalf("recorded %d times, want once", recorded)
		}
	})
}
