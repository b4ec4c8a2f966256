package models

import (
	"errors"
	"testing"
	"time"
)

// A handoff ends the tenure handed_off and begins the target's in one
// write: the next token, the old expiry but at least ten minutes ahead,
// the history naming who handed it off. Only the holder's account hands
// off (or force: an admin); the target's caps apply.
func TestHandoff(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s, clock, _ := e.open(t, WithClaimCaps(0, 1))
		k := Key{RepoID: 1, Issue: 42}
		alice, bob, bob7, carol := Holder{ID: 1, Login: "alice"}, Holder{ID: 2, Login: "bob"}, Holder{ID: 2, Login: "bob", Agent: "b7"}, Holder{ID: 3, Login: "carol"}
		first := mustAcquireAs(t, s, k, alice, time.Minute)
		if _, _, err := s.Handoff(bg, k, carol, bob, false); !errors.Is(err, ErrNotHolder) {
			t.Fatalf("carol hands off alice's claim: %v, want not the holder", err)
		}
		if _, _, err := s.Handoff(bg, k, alice, alice, false); !errors.Is(err, ErrAlreadyHolder) {
			t.Fatalf("alice hands it to herself: %v, want already the holder", err)
		}
		got, from, err := s.Handoff(bg, k, alice, bob7, false)
		if err != nil || got.Holder != bob7 || got.Token != first.Token+1 || from.Token != first.Token || from.Holder != alice {
			t.Fatalf("alice hands off to bob's b7: %+v from %+v, %v", got, from, err)
		}
		if want := clock.Now().Add(MinHandoffLife); !got.ExpiresAt.Equal(want) {
			t.Fatalf("the handed-off tenure expires %s, want at least ten minutes ahead (%s)", got.ExpiresAt, want)
		}
		// bob's account holds its cap of one now: a handoff to bob fails.
		mustAcquireAs(t, s, Key{RepoID: 1, Issue: 7}, carol, 0)
		if _, _, err := s.Handoff(bg, Key{RepoID: 1, Issue: 7}, carol, bob, false); !errors.Is(err, ErrLimit) {
			t.Fatalf("a handoff past bob's cap: %v, want limit", err)
		}
		// Between bob's agents the account's count does not change: the
		// cap does not refuse it.
		if got, _, err := s.Handoff(bg, k, bob7, bob, false); err != nil || got.Holder != bob {
			t.Fatalf("b7 hands off to bob under bob's cap of one: %+v %v", got, err)
		}
		// An admin (force) hands it on.
		if _, _, err := s.Handoff(bg, k, carol, alice, true); err != nil {
			t.Fatalf("a forced handoff: %v", err)
		}
		ts, err := s.Tenures(bg, k, 10)
		if err != nil || len(ts) != 4 {
			t.Fatalf("tenures %+v %v", ts, err)
		}
		if ts[1].Holder != bob || ts[1].EndedBy != EndHandedOff || ts[1].EndedByHolder == nil || *ts[1].EndedByHolder != carol {
			t.Fatalf("bob's tenure %+v (ended by %+v), want handed off by carol", ts[1], ts[1].EndedByHolder)
		}
		if ts[2].Holder != bob7 || ts[2].EndedBy != EndHandedOff || *ts[2].EndedByHolder != bob7 {
			t.Fatalf("b7's tenure %+v, want handed off by b7", ts[2])
		}
		if ts[3].Holder != alice || ts[3].EndedBy != EndHandedOff || *ts[3].EndedByHolder != alice {
			t.Fatalf("alice's tenure %+v, want handed off by alice", ts[3])
		}
		// A lapsed claim is nobody's to hand off.
		clock.Advance(time.Hour)
		if _, _, err := s.Handoff(bg, k, alice, bob, false); !errors.Is(err, ErrNotHolder) {
			t.Fatalf("the handoff of a lapsed claim: %v, want not the holder", err)
		}
		// An open-ended claim stays open-ended.
		mustAcquireAs(t, s, Key{RepoID: 2, Issue: 1}, alice, 0)
		if got, _, err := s.Handoff(bg, Key{RepoID: 2, Issue: 1}, alice, bob, false); err != nil || got.ExpiresAt != nil {
			t.Fatalf("the handoff of an open-ended claim: %+v %v", got, err)
		}
	})
}

// Under a maximum TTL shorter than MinHandoffLife, a handed-off tenure
// lasts no longer than any acquire could make it.
func TestHandoffWithinTheMaxTTL(t *testing.T) {
	s, clock, _ := sqliteEngine.open(t, WithMaxTTL(5*time.Minute))
	k := Key{RepoID: 1, Issue: 1}
	mustAcquireAs(t, s, k, Holder{ID: 1, Login: "alice"}, time.Minute)
	got, _, err := s.Handoff(bg, k, Holder{ID: 1, Login: "alice"}, Holder{ID: 2, Login: "bob"}, false)
	if want := clock.Now().Add(5 * time.Minute); err != nil || got.ExpiresAt == nil || !got.ExpiresAt.Equal(want) {
		t.Fatalf("handoff under a 5m maximum: %+v %v, want expiry %s", got, err, want)
	}
}
