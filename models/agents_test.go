package models

import (
	"errors"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// Agents of one account are holders of their own: another agent's
// acquire is held (naming the agent), its renew is not the holder's, and
// re-acquiring is idempotent only for the same pair; a takeover by
// another agent is a new tenure with the next token. Any agent of the
// account, or the account itself, may release.
func TestAgentsOfOneAccountAreDistinctHolders(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s, clock, _ := e.open(t)
		k := Key{RepoID: 1, Issue: 42}
		a7 := Holder{ID: 9, Login: "bot", Agent: "agent-7"}
		a8 := Holder{ID: 9, Login: "bot", Agent: "agent-8"}
		bot := Holder{ID: 9, Login: "bot"}
		first := mustAcquireAs(t, s, k, a7, time.Minute)
		if first.Holder != a7 || first.Token != 1 {
			t.Fatalf("first acquire: %+v", first)
		}
		_, err := s.Acquire(bg, k, a8, time.Minute, Observed{Kind: KindIssue})
		var held *HeldError
		if !errors.As(err, &held) || held.Holder != "bot" || held.Agent != "agent-7" {
			t.Fatalf("another agent's acquire: %v, want held by bot's agent-7", err)
		}
		if _, err := s.Acquire(bg, k, bot, time.Minute, Observed{Kind: KindIssue}); !errors.As(err, &held) {
			t.Fatalf("the account's own acquire of its agent's claim: %v, want held", err)
		}
		var notHolder *NotHolderError
		if _, err := s.Renew(bg, k, a8, time.Minute); !errors.As(err, &notHolder) || notHolder.Agent != "agent-7" {
			t.Fatalf("another agent's renew: %v, want not the holder (agent-7 is)", err)
		}
		again := mustAcquireAs(t, s, k, a7, 2*time.Minute)
		if again.Token != 1 {
			t.Fatalf("re-acquire by the same agent: token %d, want 1", again.Token)
		}
		// The lease lapses; another agent takes it over: the next token.
		clock.Advance(3 * time.Minute)
		taken := mustAcquireAs(t, s, k, a8, time.Minute)
		if taken.Token != 2 || taken.Holder.Agent != "agent-8" {
			t.Fatalf("takeover by another agent: %+v, want token 2 for agent-8", taken)
		}
		// The account itself releases its agent's claim.
		freed, err := s.Release(bg, k, bot)
		if err != nil || freed == nil || freed.Holder.Agent != "agent-8" {
			t.Fatalf("release by the account: %+v %v", freed, err)
		}
		if cur, err := s.Current(bg, k); err != nil || cur != nil {
			t.Fatalf("after the release: %+v %v", cur, err)
		}
		// Another account may not release an agent's claim.
		mustAcquireAs(t, s, k, a7, 0)
		if _, err := s.Release(bg, k, Holder{ID: 10, Login: "mallory", Agent: "agent-7"}); !errors.As(err, &notHolder) {
			t.Fatalf("another account's release: %v, want not the holder", err)
		}
		// The history tells the tenures' agents, and who ended each.
		if _, err := s.Release(bg, k, a8); err != nil {
			t.Fatal(err)
		}
		ts, err := s.Tenures(bg, k, 10)
		if err != nil || len(ts) != 3 {
			t.Fatalf("tenures: %+v %v", ts, err)
		}
		if ts[0].Holder.Agent != "agent-7" || ts[0].EndedBy != EndReleased || ts[0].EndedByHolder == nil || *ts[0].EndedByHolder != a8 {
			t.Fatalf("newest tenure %+v (ended by %+v), want agent-7's, released by agent-8", ts[0], ts[0].EndedByHolder)
		}
		if ts[1].Holder.Agent != "agent-8" || ts[1].EndedByHolder == nil || *ts[1].EndedByHolder != bot {
			t.Fatalf("second tenure %+v (ended by %+v), want agent-8's, released by the account", ts[1], ts[1].EndedByHolder)
		}
		if ts[2].Holder.Agent != "agent-7" || ts[2].EndedBy != EndTakenOver || ts[2].EndedByHolder != nil {
			t.Fatalf("first tenure %+v, want agent-7's, taken over", ts[2])
		}
		if _, err := s.Acquire(bg, k, Holder{ID: 9, Login: "bot", Agent: string(make([]byte, contract.MaxAgentLen+1))}, 0, Observed{Kind: KindIssue}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("an agent name over %d bytes: %v, want invalid", contract.MaxAgentLen, err)
		}
	})
}

// A ledger of schema 6, before agents, is upgraded in place: every row
// and token is kept, and its holders are their accounts themselves.
func TestUpgradeToAgentsKeepsEveryRow(t *testing.T) {
	s, _, path := sqliteEngine.open(t)
	k := Key{RepoID: 1, Issue: 7}
	for range 3 {
		mustAcquireAs(t, s, k, Holder{ID: 4, Login: "alice"}, 0)
		if _, err := s.Release(bg, k, Holder{ID: 4, Login: "alice"}); err != nil {
			t.Fatal(err)
		}
	}
	mustAcquireAs(t, s, k, Holder{ID: 4, Login: "alice"}, 0)
	// Back to schema 6's shape: no agent columns.
	s2 := reopenFrom(t, s, path, "ALTER TABLE leases DROP COLUMN agent", "ALTER TABLE lease_events DROP COLUMN agent", "PRAGMA user_version = 6")
	cur, err := s2.Current(bg, k)
	if err != nil || cur == nil || cur.Token != 4 || cur.Holder != (Holder{ID: 4, Login: "alice"}) {
		t.Fatalf("after the upgrade: %+v %v, want alice's token 4", cur, err)
	}
	if _, err := s2.Release(bg, k, Holder{ID: 4, Login: "alice", Agent: "a1"}); err != nil {
		t.Fatalf("an agent of the account releases the upgraded claim: %v", err)
	}
	ts, err := s2.Tenures(bg, k, 10)
	if err != nil || len(ts) != 4 {
		t.Fatalf("tenures after the upgrade: %d %v, want 4", len(ts), err)
	}
}
