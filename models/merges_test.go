package models

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

func mergePush(pusher string, pull int64) GatePush {
	p := gatePush(pusher, []string{"refs/heads/main"})
	p.Merge, p.MergeOf = true, pull
	return p
}

func ticket(pull int64, claim int64, token int64, h Holder, id string) MergeTicket {
	return MergeTicket{RepoID: 1, Base: "main", Pull: pull, Claim: Key{RepoID: 1, Issue: claim}, Token: token, Holder: h, ID: id}
}

// Rule 4: a merge of a pull request an agent's claim fences goes in only
// under a live ticket of that claim's current tenure, made by its
// account; a person's claim, or no claim, leaves merges alone.
func TestGateMergesOnlyUnderATicket(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s, advance := gateWorld(t, e)
		a1, a2 := who("bot"), who("bot")
		a1.Agent, a2.Agent = "a1", "a2"
		allowed := func(what string, p GatePush, want bool) {
			t.Helper()
			v, err := s.Gate(bg, p)
			if err != nil {
				t.Fatal(err)
			}
			if v.Allow != want {
				t.Fatalf("%s: allow=%v (%q), want %v", what, v.Allow, v.Lines, want)
			}
			if !want && (len(v.Refused) != 1 || v.Refused[0] != GateNoTicket ||
				!strings.Contains(v.Lines[0], "needs the current claim: merge with git collab merge")) {
				t.Fatalf("%s: refused with %v %q", what, v.Refused, v.Lines)
			}
		}
		allowed("PR 10 (closes #3, a2's) without a ticket", mergePush("bot", 10), false)
		allowed("PR 30 (a person's claim)", mergePush("carol", 30), true)
		allowed("PR 60 (unclaimed)", mergePush("carol", 60), true)
		allowed("a merge Gitea names no pull request of", mergePush("carol", 0), true)

		// a1's stale tenure (token 1) of #3 takes no ticket; a2's does.
		var stale *StaleTokenError
		if _, err := s.TakeMergeTicket(bg, ticket(10, 3, 1, a2, "m1"), time.Minute); !errors.As(err, &stale) || stale.Token != 2 {
			t.Fatalf("ticket under token 1: %v, want stale (current 2)", err)
		}
		var nh *NotHolderError
		if _, err := s.TakeMergeTicket(bg, ticket(10, 3, 2, a1, "m1"), time.Minute); !errors.As(err, &nh) || nh.Agent != "a2" {
			t.Fatalf("a1's ticket of a2's claim: %v, want not holder (a2)", err)
		}
		tk, err := s.TakeMergeTicket(bg, ticket(10, 3, 2, a2, "m1"), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		allowed("PR 10 under a2's ticket", mergePush("bot", 10), true)
		allowed("PR 10 under a2's ticket, merged by another account", mergePush("carol", 10), false)
		allowed("PR 20 (a1's own claim) while PR 10 holds the ticket", mergePush("bot", 20), false)
		if !tk.ExpiresAt.After(time.Unix(0, 0)) {
			t.Fatalf("ticket without an expiry: %+v", tk)
		}
		// The ticket ends with its bound.
		advance(time.Minute)
		allowed("PR 10 once the ticket's minute is over", mergePush("bot", 10), false)
		// And when dropped.
		if _, err := s.TakeMergeTicket(bg, ticket(10, 3, 2, a2, "m2"), time.Minute); err != nil {
			t.Fatal(err)
		}
		allowed("PR 10 under a new ticket", mergePush("bot", 10), true)
		if err := s.DropMergeTicket(bg, 1, "main", "m2"); err != nil {
			t.Fatal(err)
		}
		allowed("PR 10 once the ticket is dropped", mergePush("bot", 10), false)
		// The own claim of PR 40 (a2's) fences it, not #41's (a1's).
		if _, err := s.TakeMergeTicket(bg, ticket(40, 41, 1, a1, "m3"), time.Minute); err != nil {
			t.Fatal(err)
		}
		allowed("PR 40 under #41's ticket", mergePush("bot", 40), false)
		// A ticket of an earlier tenure admits nothing, even while it
		// lasts: a2 lets #3 go and claims it again (token 3).
		if err := s.DropMergeTicket(bg, 1, "main", "m3"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.TakeMergeTicket(bg, ticket(10, 3, 2, a2, "m4"), time.Hour); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Release(bg, Key{RepoID: 1, Issue: 3}, a2); err != nil {
			t.Fatal(err)
		}
		if l := mustAcquireAs(t, s, Key{RepoID: 1, Issue: 3}, a2, time.Hour); l.Token != 3 {
			t.Fatalf("a2's new token: %d", l.Token)
		}
		allowed("PR 10 under tenure 2's ticket, in tenure 3", mergePush("bot", 10), false)
	})
}

// One merge at a time into a base branch; another base is another turn;
// a ticket is freed by its bound, by its claim's end, and by its merge.
func TestMergeTicketTakesTurns(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s, advance := gateWorld(t, e)
		a1, a2 := who("bot"), who("bot")
		a1.Agent, a2.Agent = "a1", "a2"
		if _, err := s.TakeMergeTicket(bg, ticket(10, 3, 2, a2, "m1"), 5*time.Minute); err != nil {
			t.Fatal(err)
		}
		var busy *MergeBusyError
		if _, err := s.TakeMergeTicket(bg, ticket(20, 20, 1, a1, "m2"), 5*time.Minute); !errors.As(err, &busy) || busy.Pull != 10 {
			t.Fatalf("second merge into main: %v, want busy with PR 10", err)
		}
		other := ticket(20, 20, 1, a1, "m2")
		other.Base = "release"
		if _, err := s.TakeMergeTicket(bg, other, 5*time.Minute); err != nil {
			t.Fatalf("a merge into another base: %v", err)
		}
		// The same merge extends its own ticket.
		if _, err := s.TakeMergeTicket(bg, ticket(10, 3, 2, a2, "m1"), 5*time.Minute); err != nil {
			t.Fatalf("extending its own ticket: %v", err)
		}
		// A ticket lasts its bound, whatever its claim's expiry (a
		// session's is a grace away, and moves on): the claim's end ends
		// it (below).
		if err := s.DropMergeTicket(bg, 1, "release", "m2"); err != nil {
			t.Fatal(err)
		}
		tk, err := s.TakeMergeTicket(bg, other, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if l, _ := s.Current(bg, Key{RepoID: 1, Issue: 20}); l == nil || !tk.ExpiresAt.After(*l.ExpiresAt) {
			t.Fatalf("ticket until %v, want its hour, past the claim's expiry %v", tk.ExpiresAt, l)
		}
		// Dropped by another merge's ID: nothing happens.
		if err := s.DropMergeTicket(bg, 1, "main", "m9"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.TakeMergeTicket(bg, ticket(20, 20, 1, a1, "m2"), 5*time.Minute); !errors.As(err, &busy) {
			t.Fatalf("after a stranger's drop: %v, want busy", err)
		}
		// The claim under the ticket ends: the base branch is free.
		if _, err := s.Release(bg, Key{RepoID: 1, Issue: 3}, a2); err != nil {
			t.Fatal(err)
		}
		if _, err := s.TakeMergeTicket(bg, ticket(20, 20, 1, a1, "m2"), 5*time.Minute); err != nil {
			t.Fatalf("after the ticket's claim ended: %v", err)
		}
		// The bound ends it too (#40's claim lasts 10 minutes; the
		// ticket one).
		if _, err := s.TakeMergeTicket(bg, ticket(40, 40, 1, a2, "m3"), time.Minute); !errors.As(err, &busy) {
			t.Fatalf("while m2 merges: %v, want busy", err)
		}
		advance(5 * time.Minute)
		if _, err := s.TakeMergeTicket(bg, ticket(40, 40, 1, a2, "m3"), time.Minute); err != nil {
			t.Fatalf("after m2's bound: %v", err)
		}
		if _, err := s.TakeMergeTicket(bg, MergeTicket{RepoID: 1, Base: "main", Pull: 40, Claim: Key{RepoID: 1, Issue: 40}, Token: 1, Holder: a2}, time.Minute); !errors.Is(err, ErrInvalid) {
			t.Fatalf("a ticket without an ID: %v, want invalid", err)
		}
	})
}

// Twenty merges racing for one base branch through two replicas of one
// ledger (two Stores on one database): exactly one takes it.
func TestMergeTicketOneAtATime(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s, clock, db := e.open(t)
		other := replica(t, db, clock)
		replicas := []*Store{s, other}
		var hs []Holder
		for i := range 20 {
			h := who("bot")
			h.Agent = "a" + string(rune('a'+i))
			mustAcquireAs(t, s, Key{RepoID: 1, Issue: int64(100 + i)}, h, time.Hour)
			hs = append(hs, h)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		won := 0
		for i, h := range hs {
			wg.Go(func() {
				_, err := replicas[i%2].TakeMergeTicket(bg, ticket(int64(100+i), int64(100+i), 1, h, h.Agent), time.Minute)
				var busy *MergeBusyError
				switch {
				case err == nil:
					mu.Lock()
					won++
					mu.Unlock()
				case !errors.As(err, &busy):
					t.Errorf("%s: %v", h.Agent, err)
				}
			})
		}
		wg.Wait()
		if won != 1 {
			t.Fatalf("%d merges took the base branch at once, want 1", won)
		}
	})
}
