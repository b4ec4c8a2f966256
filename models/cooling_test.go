package models

import (
	"errors"
	"testing"
	"time"
)

// The lock-delay: after a lease lapses, for the delay nobody but its
// holder may claim the issue, by acquire or by next; its holder may at
// once (a new tenure). A release is voluntary: no delay. Decided by the
// ledger's clock.
func TestLockDelayAfterALapse(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s, clock, _ := e.open(t, WithLockDelay(30*time.Second))
		k := Key{RepoID: 1, Issue: 1}
		alice, bob, alice2 := Holder{ID: 1, Login: "alice"}, Holder{ID: 2, Login: "bob"}, Holder{ID: 1, Login: "alice", Agent: "a2"}
		first := mustAcquireAs(t, s, k, alice, time.Minute)
		clock.Advance(time.Minute) // lapsed at its expiry instant
		for _, h := range []Holder{bob, alice2} {
			_, err := s.Acquire(bg, k, h, time.Minute, Observed{Kind: KindIssue})
			var cooling *CoolingError
			if !errors.As(err, &cooling) || !cooling.Until.Equal(first.ExpiresAt.Add(30*time.Second)) {
				t.Fatalf("%+v's acquire in the lock-delay: %v, want cooling until %s", h, err, first.ExpiresAt.Add(30*time.Second))
			}
		}
		if _, err := s.AcquireFirst(bg, 1, []Candidate{{Issue: 1, Observed: Observed{Kind: KindIssue}, Verified: true}}, bob, 0); !errors.Is(err, ErrNoneFree) {
			t.Fatalf("bob's next in the lock-delay: %v, want none free", err)
		}
		// Nor does another's release end the delay: there is nothing of
		// his to free, and the row stays cooling.
		if l, err := s.Release(bg, k, bob); err != nil || l != nil {
			t.Fatalf("bob's release in the lock-delay: %+v %v, want nothing freed", l, err)
		}
		if _, err := s.Acquire(bg, k, bob, time.Minute, Observed{Kind: KindIssue}); !errors.Is(err, ErrCooling) {
			t.Fatalf("bob's acquire after his release in the lock-delay: %v, want cooling", err)
		}
		// Its holder may claim it again at once: a new tenure.
		again := mustAcquireAs(t, s, k, alice, time.Minute)
		if again.Token != first.Token+1 {
			t.Fatalf("the lapsed holder's acquire: token %d, want %d", again.Token, first.Token+1)
		}
		// A release is voluntary: the issue is anyone's at once.
		if _, err := s.Release(bg, k, alice); err != nil {
			t.Fatal(err)
		}
		mustAcquireAs(t, s, k, bob, time.Minute)
		// Another lapse; the delay runs out 30 s later, to the second.
		clock.Advance(time.Minute + 29*time.Second)
		if _, err := s.Acquire(bg, k, alice, 0, Observed{Kind: KindIssue}); !errors.Is(err, ErrCooling) {
			t.Fatalf("alice's acquire a second before the delay ends: %v, want cooling", err)
		}
		clock.Advance(time.Second)
		l, err := s.AcquireFirst(bg, 1, []Candidate{{Issue: 1, Observed: Observed{Kind: KindIssue}, Verified: true}}, alice, 0)
		if err != nil || l.Holder != alice || l.Token != again.Token+2 {
			t.Fatalf("alice's next once the delay ended: %+v %v", l, err)
		}
	})
}

// Without a lock-delay (the default) a lapsed lease is anyone's at once;
// a delay that is not whole seconds up to five minutes does not open.
func TestNoLockDelayByDefault(t *testing.T) {
	s, clock, path := sqliteEngine.open(t)
	k := Key{RepoID: 1, Issue: 1}
	mustAcquireAs(t, s, k, Holder{ID: 1, Login: "alice"}, time.Minute)
	clock.Advance(time.Minute)
	mustAcquireAs(t, s, k, Holder{ID: 2, Login: "bob"}, time.Minute)
	for _, d := range []time.Duration{-time.Second, 1500 * time.Millisecond, MaxLockDelay + time.Second} {
		if _, err := Open(path, WithLockDelay(d)); !errors.Is(err, ErrInvalid) {
			t.Errorf("a lock-delay of %s: %v, want invalid", d, err)
		}
	}
}

// A release of a lapsed claim does not end its lock-delay, whoever sends
// it: the account, another of its agents, an admin's force-release, or
// the lapsed holder itself. Each answers that nothing was freed, and the
// issue cools on for everyone but the holder whose claim lapsed, who may
// take it back early.
func TestLockDelayOutlivesEveryRelease(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s, clock, _ := e.open(t, WithLockDelay(30*time.Second))
		k := Key{RepoID: 1, Issue: 1}
		z1, z2, account := Holder{ID: 7, Login: "bot", Agent: "z1"}, Holder{ID: 7, Login: "bot", Agent: "z2"}, Holder{ID: 7, Login: "bot"}
		admin, bob := Holder{ID: 1, Login: "root"}, Holder{ID: 2, Login: "bob"}
		first := mustAcquireAs(t, s, k, z1, time.Second)
		clock.Advance(2 * time.Second)
		releases := []struct {
			who   string
			force bool
			h     Holder
		}{{"another agent of the account", false, z2}, {"the account", false, account}, {"an admin's force-release", true, admin}, {"the lapsed holder", false, z1}}
		for _, r := range releases {
			release := s.Release
			if r.force {
				release = s.ForceRelease
			}
			if l, err := release(bg, k, r.h); err != nil || l != nil {
				t.Fatalf("%s's release of the lapsed claim: %+v %v, want nothing freed", r.who, l, err)
			}
			for _, h := range []Holder{z2, account, bob} {
				_, err := s.Acquire(bg, k, h, time.Minute, Observed{Kind: KindIssue})
				var cooling *CoolingError
				if !errors.As(err, &cooling) || !cooling.Until.Equal(first.ExpiresAt.Add(30*time.Second)) {
					t.Fatalf("after %s's release, %+v's acquire: %v, want cooling until %s", r.who, h, err, first.ExpiresAt.Add(30*time.Second))
				}
			}
			if _, err := s.AcquireFirst(bg, 1, []Candidate{{Issue: 1, Observed: Observed{Kind: KindIssue}, Verified: true}}, z2, 0); !errors.Is(err, ErrNoneFree) {
				t.Fatalf("after %s's release, z2's next: %v, want none free", r.who, err)
			}
		}
		again := mustAcquireAs(t, s, k, z1, time.Minute)
		if again.Token != first.Token+1 {
			t.Fatalf("the lapsed holder's acquire: token %d, want %d", again.Token, first.Token+1)
		}
		// Once the delay is over, a release frees a lapsed claim as before.
		clock.Advance(2 * time.Minute)
		if l, err := s.Release(bg, k, z2); err != nil || l != nil {
			t.Fatalf("z2's release after the delay: %+v %v", l, err)
		}
		if l := mustAcquireAs(t, s, k, bob, time.Minute); l.Token != again.Token+1 {
			t.Fatalf("bob's acquire after the delay: token %d, want %d", l.Token, again.Token+1)
		}
	})
}
