package models

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// gateWorld is a repository whose branches the table below pushes to:
//
//	work/10   PR #10 closes #3; #3 was a1's (token 1), lapsed, is a2's (token 2)
//	work/20   PR #20, claimed itself by a1 (token 1), for 10 minutes
//	person/30 PR #30, claimed by alice, a person (no agent)
//	both      PR #40 closes #41; both are claimed (#41 by a1, #40 by a2): #40's own claim fences it
//	closed    PR #50, closed, its #50 claimed by a1
//	free      PR #60, open, unclaimed
//
// and repository 2 has its own #3 on work/10, a1's with token 7.
func gateWorld(t *testing.T, e engine) (*Store, func(time.Duration)) {
	t.Helper()
	s, clock, _ := e.open(t)
	bot := who("bot")
	a1, a2 := bot, bot
	a1.Agent, a2.Agent = "a1", "a2"
	author := who("bot")
	for _, p := range []Pull{
		{RepoID: 1, Number: 10, Head: "h10", Branch: "work/10", Author: author, Open: true, Version: 1, Links: []int64{3, 10}},
		{RepoID: 1, Number: 20, Head: "h20", Branch: "work/20", Author: author, Open: true, Version: 1, Links: []int64{20}},
		{RepoID: 1, Number: 30, Head: "h30", Branch: "person/30", Author: who("alice"), Open: true, Version: 1, Links: []int64{30}},
		{RepoID: 1, Number: 40, Head: "h40", Branch: "both", Author: author, Open: true, Version: 1, Links: []int64{40, 41}},
		{RepoID: 1, Number: 50, Head: "h50", Branch: "closed", Author: author, Open: false, Version: 1, Links: []int64{50}},
		{RepoID: 1, Number: 60, Head: "h60", Branch: "free", Author: author, Open: true, Version: 1, Links: []int64{60}},
		{RepoID: 2, Number: 10, Head: "x10", Branch: "work/10", Author: author, Open: true, Version: 1, Links: []int64{3, 10}},
	} {
		if _, err := s.RecordPull(bg, p, ""); err != nil {
			t.Fatal(err)
		}
	}
	for tok := range int64(7) { // repository 2's #3 reaches token 7
		mustAcquireAs(t, s, Key{RepoID: 2, Issue: 3}, a1, time.Minute)
		if tok < 6 {
			if _, err := s.Release(bg, Key{RepoID: 2, Issue: 3}, a1); err != nil {
				t.Fatal(err)
			}
		}
	}
	mustAcquireAs(t, s, Key{RepoID: 1, Issue: 3}, a1, time.Minute)
	clock.Advance(2 * time.Minute)
	if l := mustAcquireAs(t, s, Key{RepoID: 1, Issue: 3}, a2, 30*time.Minute); l.Token != 2 {
		t.Fatalf("a2's token on #3: %d, want 2", l.Token)
	}
	mustAcquireAs(t, s, Key{RepoID: 1, Issue: 20}, a1, 10*time.Minute)
	mustAcquireAs(t, s, Key{RepoID: 1, Issue: 30}, who("alice"), 10*time.Minute)
	mustAcquireAs(t, s, Key{RepoID: 1, Issue: 41}, a1, 10*time.Minute)
	mustAcquireAs(t, s, Key{RepoID: 1, Issue: 40}, a2, 10*time.Minute)
	mustAcquireAs(t, s, Key{RepoID: 1, Issue: 50}, a1, 10*time.Minute)
	return s, clock.Advance
}

func gatePush(pusher string, refs []string, opts ...string) GatePush {
	p := GatePush{RepoID: 1, Repo: "acme/widgets", Pusher: who(pusher), Options: opts}
	if pusher == "" {
		p.Pusher = Holder{}
	}
	for _, r := range refs {
		p.Refs = append(p.Refs, GateRef{Old: strings.Repeat("1", 40), New: strings.Repeat("2", 40), Name: r})
	}
	return p
}

func TestGateDecidesEveryRule(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s, _ := gateWorld(t, e)
		internal := gatePush("carol", []string{"refs/heads/work/10"})
		internal.Internal = true
		merge := gatePush("carol", []string{"refs/heads/work/10"})
		merge.Merge, merge.MergeOf = true, 10
		for _, c := range []struct {
			name    string
			push    GatePush
			allow   bool
			reasons []string
			line    string // a part of the one line, when refused
			carried []int64
		}{
			{"internal push", internal, true, nil, "", nil},
			{"a merge of a pull request an agent's claim fences, with no ticket", merge, false, []string{GateNoTicket},
				"collab-lease: merging acme/widgets!10 needs the current claim: merge with git collab merge", nil},
			{"the current token", gatePush("bot", []string{"refs/heads/work/10"}, "collab-lease=3:2"), true, nil, "", []int64{3}},
			{"the current token among other options", gatePush("bot", []string{"refs/heads/work/10"}, "ci.skip", "collab-lease=9:1", "collab-lease=3:2"), true, nil, "", []int64{3}},
			{"a stale token", gatePush("bot", []string{"refs/heads/work/10"}, "collab-lease=3:1"), false, []string{GateStale},
				"collab-lease: work/10 is claimed: acme/widgets#3 by bot · a2 (token 2); this push carries token 1, which is stale", nil},
			{"no token", gatePush("bot", []string{"refs/heads/work/10"}), false, []string{GateNoToken},
				"collab-lease: work/10 is claimed: acme/widgets#3 by bot · a2 (token 2); this push carries no token: push with -o collab-lease=3:2 (git collab run does it for you)", nil},
			{"a token of another issue", gatePush("bot", []string{"refs/heads/work/10"}, "collab-lease=99:2"), false, []string{GateNoToken},
				"this push carries no token of #3: push with -o collab-lease=3:2", nil},
			{"another repository's token of the same number", gatePush("bot", []string{"refs/heads/work/10"}, "collab-lease=3:7"), false, []string{GateBadToken},
				"this push carries token 7, which it never had", nil},
			{"a malformed option", gatePush("bot", []string{"refs/heads/work/10"}, "collab-lease=three"), false, []string{GateBadToken},
				`this push carries "collab-lease=three", which is no <issue>:<token>`, nil},
			{"another account with the current token", gatePush("carol", []string{"refs/heads/work/10"}, "collab-lease=3:2"), false, []string{GateOtherAccount},
				"acme/widgets#3 by bot · a2 (token 2); this push is by carol, not bot (it carries token 2)", nil},
			{"an unknown pusher", gatePush("", []string{"refs/heads/work/10"}, "collab-lease=3:2"), false, []string{GateOtherAccount},
				"this push is by an unknown account", nil},
			{"the pull request's own claim", gatePush("bot", []string{"refs/heads/work/20"}, "collab-lease=20:1"), true, nil, "", []int64{20}},
			{"a person's claim admits its account without a token", gatePush("alice", []string{"refs/heads/person/30"}), true, nil, "", nil},
			{"a person's claim, its current token carried", gatePush("alice", []string{"refs/heads/person/30"}, "collab-lease=30:1"), true, nil, "", []int64{30}},
			{"a person's claim refuses another account", gatePush("bot", []string{"refs/heads/person/30"}), false, []string{GateOtherAccount},
				"acme/widgets#30 by alice (token 1); this push is by bot, not alice (it carries no token)", nil},
			{"the pull request's own claim fences, not its issue's", gatePush("bot", []string{"refs/heads/both"}, "collab-lease=41:1"), false, []string{GateNoToken},
				"acme/widgets#40 by bot · a2 (token 1); this push carries no token of #40", nil},
			{"the own claim's token", gatePush("bot", []string{"refs/heads/both"}, "collab-lease=40:1"), true, nil, "", []int64{40}},
			{"a closed pull request's branch", gatePush("carol", []string{"refs/heads/closed"}), true, nil, "", nil},
			{"an unclaimed pull request's branch", gatePush("carol", []string{"refs/heads/free"}), true, nil, "", nil},
			{"a branch of no pull request", gatePush("carol", []string{"refs/heads/main"}), true, nil, "", nil},
			{"a tag of a claimed branch's name", gatePush("carol", []string{"refs/tags/work/10"}), true, nil, "", nil},
			{"one ref refused refuses the push", gatePush("bot", []string{"refs/heads/work/10", "refs/heads/work/20"}, "collab-lease=3:2"), false, []string{GateNoToken},
				"collab-lease: work/20 is claimed: acme/widgets#20 by bot · a1 (token 1); this push carries no token of #20", nil},
			{"two refs, two tokens", gatePush("bot", []string{"refs/heads/work/10", "refs/heads/work/20", "refs/heads/free"}, "collab-lease=3:2", "collab-lease=20:1"), true, nil, "", []int64{3, 20}},
		} {
			t.Run(c.name, func(t *testing.T) {
				v, err := s.Gate(bg, c.push)
				if err != nil {
					t.Fatal(err)
				}
				if v.Allow != c.allow || len(v.Lines) != len(c.reasons) || strings.Join(v.Refused, ",") != strings.Join(c.reasons, ",") {
					t.Fatalf("verdict %+v, want allow=%v reasons %v", v, c.allow, c.reasons)
				}
				if c.line != "" && !strings.Contains(v.Lines[0], c.line) {
					t.Fatalf("line %q, want it to say %q", v.Lines[0], c.line)
				}
				var carried []int64
				for _, l := range v.Carried {
					carried = append(carried, l.Issue)
				}
				if !slices.Equal(carried, c.carried) {
					t.Fatalf("carried %v, want %v", carried, c.carried)
				}
			})
		}
	})
}

// A claim that lapsed fences nothing: any push goes in.
func TestGateLetsALapsedClaimGo(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s, advance := gateWorld(t, e)
		if v, err := s.Gate(bg, gatePush("carol", []string{"refs/heads/work/20"})); err != nil || v.Allow {
			t.Fatalf("before the lapse: %+v %v, want refused", v, err)
		}
		advance(10 * time.Minute) // #20's expiry instant: no longer live
		if v, err := s.Gate(bg, gatePush("carol", []string{"refs/heads/work/20"})); err != nil || !v.Allow {
			t.Fatalf("after the lapse: %+v %v, want allowed", v, err)
		}
		if _, err := s.Gate(bg, GatePush{RepoID: 0}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("repository 0: %v, want invalid", err)
		}
	})
}

// --renew-on-push renews the tenure the push carried by the TTL its
// holder last gave it, and no other tenure.
func TestRenewTenureByItsTTL(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s, advance := gateWorld(t, e)
		a2 := who("bot")
		a2.Agent = "a2"
		k := Key{RepoID: 1, Issue: 3}
		ttl, ok, err := s.TenureTTL(bg, k, 2)
		if err != nil || !ok || ttl != 30*time.Minute {
			t.Fatalf("TTL of #3's tenure 2: %v %v %v, want 30m", ttl, ok, err)
		}
		if _, ok, err := s.TenureTTL(bg, Key{RepoID: 1, Issue: 999}, 1); err != nil || ok {
			t.Fatalf("TTL of a tenure never held: %v %v, want none", ok, err)
		}
		advance(5 * time.Minute)
		l, err := s.RenewTenure(bg, k, a2, 2, ttl)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.ExpiresAt.Sub(l.AcquiredAt); got != 35*time.Minute { // acquired 2 minutes in, renewed 5 minutes later for 30
			t.Fatalf("renewed to %s after its start, want 35m", got)
		}
		var nh *NotHolderError
		if _, err := s.RenewTenure(bg, k, a2, 1, ttl); !errors.As(err, &nh) {
			t.Fatalf("renewing with tenure 1's token: %v, want not holder", err)
		}
		if _, err := s.RenewTenure(bg, k, a2, 0, ttl); !errors.Is(err, ErrInvalid) {
			t.Fatalf("token 0: %v, want invalid", err)
		}
	})
}
