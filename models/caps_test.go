package models

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// The claim caps: a holder (an account and an agent) and an account (all
// its agents) hold at most so many live leases, over every repository; a
// re-acquire or renew of what is held never counts; a lapsed or released
// lease frees its place.
func TestClaimCaps(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s, clock, _ := e.open(t, WithClaimCaps(2, 3))
		a1, a2, a3 := Holder{ID: 9, Login: "bot", Agent: "a1"}, Holder{ID: 9, Login: "bot", Agent: "a2"}, Holder{ID: 9, Login: "bot", Agent: "a3"}
		key := func(repo, n int64) Key { return Key{RepoID: repo, Issue: n} }
		mustAcquireAs(t, s, key(1, 1), a1, time.Minute)
		mustAcquireAs(t, s, key(2, 1), a1, 0) // another repository counts too
		mustAcquireAs(t, s, key(1, 1), a1, time.Hour)
		if _, err := s.Renew(bg, key(1, 1), a1, time.Minute); err != nil {
			t.Fatalf("a renew at the cap: %v", err)
		}
		_, err := s.Acquire(bg, key(1, 2), a1, 0, Observed{Kind: KindIssue})
		var limit *LimitError
		if !errors.As(err, &limit) || *limit != (LimitError{Scope: "holder", Limit: 2, Live: 2}) {
			t.Fatalf("a1's third claim: %v, want the holder's cap", err)
		}
		mustAcquireAs(t, s, key(1, 3), a2, 0)
		_, err = s.AcquireFirst(bg, 1, []Candidate{{Issue: 4, Observed: Observed{Kind: KindIssue}, Verified: true}}, a3, 0)
		if !errors.As(err, &limit) || *limit != (LimitError{Scope: "account", Limit: 3, Live: 3}) {
			t.Fatalf("a3's next past the account's cap: %v", err)
		}
		// a1's first claim lapses: a place for a3.
		clock.Advance(time.Minute)
		mustAcquireAs(t, s, key(1, 4), a3, 0)
		if _, err := s.Release(bg, key(1, 4), a3); err != nil {
			t.Fatal(err)
		}
		mustAcquireAs(t, s, key(1, 5), a2, 0)
		if _, err := s.Acquire(bg, key(1, 6), Holder{ID: 10, Login: "alice"}, 0, Observed{Kind: KindIssue}); err != nil {
			t.Fatalf("another account's claim: %v", err)
		}
	})
}

// The caps hold exactly under a race: twenty claims of one account on
// twenty issues at once, with a cap of three, give three leases; the
// claims go through two stores on the one database (two replicas on
// PostgreSQL, two processes' handles on SQLite).
func TestClaimCapsUnderARace(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s1, clock, db := e.open(t, WithClaimCaps(0, 3))
		s2, err := Open(db, WithClock(clock), WithClaimCaps(0, 3))
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Close()
		stores := []*Store{s1, s2}
		var wg sync.WaitGroup
		var mu sync.Mutex
		won, capped := 0, 0
		for i := range 20 {
			wg.Go(func() {
				h := Holder{ID: 9, Login: "bot", Agent: string(rune('a' + i))}
				_, err := stores[i%2].Acquire(bg, Key{RepoID: 1 + int64(i%3), Issue: int64(1 + i)}, h, 0, Observed{Kind: KindIssue})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					won++
				case errors.Is(err, ErrLimit):
					capped++
				default:
					t.Errorf("claim %d: %v", i, err)
				}
			})
		}
		wg.Wait()
		if won != 3 || capped != 17 {
			t.Fatalf("%d claims won and %d capped, want 3 and 17", won, capped)
		}
	})
}
