package models

import (
	"errors"
	"math"
	"testing"
	"time"
)

var k42 = Key{RepoID: 7, Issue: 42}

func TestAcquireFreeIssueReturnsToken1(t *testing.T) {
	forEachEngine(t, testAcquireFreeIssueReturnsToken1)
}

func testAcquireFreeIssueReturnsToken1(t *testing.T, e engine) {
	s, clock, _ := e.open(t)
	l := mustAcquire(t, s, k42, "alice", 0)
	if l.Token != 1 || l.Holder.Login != "alice" || l.Key != k42 {
		t.Fatalf("got %+v, want alice token 1", l)
	}
	if !l.AcquiredAt.Equal(clock.Now()) {
		t.Fatalf("acquired_at %v, want %v", l.AcquiredAt, clock.Now())
	}
}

func TestAcquireTTLSetsExpiryAndNoTTLIsOpenEnded(t *testing.T) {
	forEachEngine(t, testAcquireTTLSetsExpiryAndNoTTLIsOpenEnded)
}

func testAcquireTTLSetsExpiryAndNoTTLIsOpenEnded(t *testing.T, e engine) {
	s, clock, _ := e.open(t)
	l := mustAcquire(t, s, k42, "alice", 5*time.Minute)
	if l.ExpiresAt == nil || !l.ExpiresAt.Equal(clock.Now().Add(5*time.Minute)) {
		t.Fatalf("expires_at %v, want now+5m", l.ExpiresAt)
	}
	l = mustAcquire(t, s, Key{7, 43}, "alice", 0)
	if l.ExpiresAt != nil {
		t.Fatalf("open-ended lease has expires_at %v", l.ExpiresAt)
	}
}

func TestSecondAcquirerIsHeld(t *testing.T) { forEachEngine(t, testSecondAcquirerIsHeld) }

func testSecondAcquirerIsHeld(t *testing.T, e engine) {
	s, clock, _ := e.open(t)
	mustAcquire(t, s, k42, "alice", time.Minute)
	_, err := s.Acquire(bg, k42, who("bob"), time.Minute, Observed{Kind: KindIssue})
	var held *HeldError
	if !errors.As(err, &held) || !errors.Is(err, ErrHeld) {
		t.Fatalf("err %v, want *HeldError", err)
	}
	if held.Holder != "alice" || held.ExpiresAt == nil || !held.ExpiresAt.Equal(clock.Now().Add(time.Minute)) {
		t.Fatalf("held %+v", held)
	}
}

func TestReacquireByHolderIsIdempotent(t *testing.T) {
	forEachEngine(t, testReacquireByHolderIsIdempotent)
}

func testReacquireByHolderIsIdempotent(t *testing.T, e engine) {
	s, clock, _ := e.open(t)
	first := mustAcquire(t, s, k42, "alice", time.Minute)
	clock.Advance(30 * time.Second)
	again := mustAcquire(t, s, k42, "alice", 10*time.Minute)
	if again.Token != first.Token || !again.AcquiredAt.Equal(first.AcquiredAt) {
		t.Fatalf("re-acquire changed tenure: %+v then %+v", first, again)
	}
	if !again.ExpiresAt.Equal(clock.Now().Add(10 * time.Minute)) {
		t.Fatalf("re-acquire expiry %v, want now+10m", again.ExpiresAt)
	}
	// Re-acquire without ttl makes it open-ended: expiry comes from this call.
	open := mustAcquire(t, s, k42, "alice", 0)
	if open.ExpiresAt != nil || open.Token != first.Token {
		t.Fatalf("open re-acquire %+v", open)
	}
}

func TestAcquireAfterExpiryTakesOverAndBumpsToken(t *testing.T) {
	forEachEngine(t, testAcquireAfterExpiryTakesOverAndBumpsToken)
}

func testAcquireAfterExpiryTakesOverAndBumpsToken(t *testing.T, e engine) {
	s, clock, _ := e.open(t)
	mustAcquire(t, s, k42, "alice", time.Minute)
	clock.Advance(time.Minute + time.Second)
	l := mustAcquire(t, s, k42, "bob", time.Minute)
	if l.Token != 2 || l.Holder.Login != "bob" {
		t.Fatalf("takeover %+v, want bob token 2", l)
	}
}

func TestAcquireAtExactExpiryInstantTakesOver(t *testing.T) {
	forEachEngine(t, testAcquireAtExactExpiryInstantTakesOver)
}

func testAcquireAtExactExpiryInstantTakesOver(t *testing.T, e engine) {
	s, clock, _ := e.open(t)
	mustAcquire(t, s, k42, "alice", time.Minute)
	clock.Advance(time.Minute - time.Second)
	if _, err := s.Acquire(bg, k42, who("bob"), time.Minute, Observed{Kind: KindIssue}); !errors.Is(err, ErrHeld) {
		t.Fatalf("one second before expiry: err %v, want held", err)
	}
	clock.Advance(time.Second) // now == expires_at: not live any more
	if cur, _ := s.Current(bg, k42); cur != nil {
		t.Fatalf("current at expiry instant = %+v, want none", cur)
	}
	l := mustAcquire(t, s, k42, "bob", time.Minute)
	if l.Token != 2 {
		t.Fatalf("token %d, want 2", l.Token)
	}
}

func TestRenewExtendsAndKeepsToken(t *testing.T) { forEachEngine(t, testRenewExtendsAndKeepsToken) }

func testRenewExtendsAndKeepsToken(t *testing.T, e engine) {
	s, clock, _ := e.open(t)
	first := mustAcquire(t, s, k42, "alice", time.Minute)
	clock.Advance(50 * time.Second)
	l, err := s.Renew(bg, k42, who("alice"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if l.Token != first.Token || !l.ExpiresAt.Equal(clock.Now().Add(time.Hour)) || !l.AcquiredAt.Equal(first.AcquiredAt) {
		t.Fatalf("renewed %+v", l)
	}
	clock.Advance(30 * time.Minute) // past the original expiry, within the renewed one
	if cur, _ := s.Current(bg, k42); cur == nil || cur.Holder.Login != "alice" {
		t.Fatalf("lease lost after renew: %+v", cur)
	}
}

func TestRenewByNonHolderOrAfterExpiryIsNotHolder(t *testing.T) {
	forEachEngine(t, testRenewByNonHolderOrAfterExpiryIsNotHolder)
}

func testRenewByNonHolderOrAfterExpiryIsNotHolder(t *testing.T, e engine) {
	s, clock, _ := e.open(t)
	mustAcquire(t, s, k42, "alice", time.Minute)
	_, err := s.Renew(bg, k42, who("bob"), time.Minute)
	var nh *NotHolderError
	if !errors.As(err, &nh) || nh.Holder != "alice" || nh.ExpiresAt == nil {
		t.Fatalf("renew by bob: %v (%+v)", err, nh)
	}
	clock.Advance(time.Minute)
	_, err = s.Renew(bg, k42, who("alice"), time.Minute)
	if !errors.As(err, &nh) || nh.Holder != "" || nh.ExpiresAt != nil {
		t.Fatalf("renew after expiry: %v (%+v)", err, nh)
	}
	if _, err := s.Renew(bg, Key{7, 99}, who("alice"), time.Minute); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("renew of a never-claimed issue: %v", err)
	}
}

func TestReleaseRules(t *testing.T) { forEachEngine(t, testReleaseRules) }

func testReleaseRules(t *testing.T, e engine) {
	s, clock, _ := e.open(t)
	mustAcquire(t, s, k42, "alice", time.Minute)

	_, err := s.Release(bg, k42, who("bob"))
	var nh *NotHolderError
	if !errors.As(err, &nh) || nh.Holder != "alice" {
		t.Fatalf("release by non-holder: %v", err)
	}
	freed, err := s.Release(bg, k42, who("alice"))
	if err != nil || freed == nil || freed.Holder.Login != "alice" {
		t.Fatalf("release by holder: %+v %v", freed, err)
	}
	if cur, _ := s.Current(bg, k42); cur != nil {
		t.Fatalf("released issue still current: %+v", cur)
	}
	// Releasing nothing succeeds: twice, and on a never-claimed issue.
	for _, k := range []Key{k42, {7, 1000}} {
		if freed, err := s.Release(bg, k, who("alice")); err != nil || freed != nil {
			t.Fatalf("release of nothing on %v: %+v %v", k, freed, err)
		}
	}
	// Released issue is free to anyone, with the next token.
	if l := mustAcquire(t, s, k42, "bob", time.Minute); l.Token != 2 {
		t.Fatalf("after release bob got %+v, want token 2", l)
	}
	// An expired lease may be released by anyone.
	clock.Advance(2 * time.Minute)
	if _, err := s.Release(bg, k42, who("carol")); err != nil {
		t.Fatalf("release of expired lease by carol: %v", err)
	}
	if l := mustAcquire(t, s, k42, "alice", 0); l.Token != 3 {
		t.Fatalf("token after expired release %d, want 3", l.Token)
	}
}

func TestListShowsOnlyLiveLeasesOldestFirst(t *testing.T) {
	forEachEngine(t, testListShowsOnlyLiveLeasesOldestFirst)
}

func testListShowsOnlyLiveLeasesOldestFirst(t *testing.T, e engine) {
	s, clock, _ := e.open(t)
	mustAcquire(t, s, Key{7, 5}, "alice", time.Minute) // expires
	clock.Advance(time.Second)
	mustAcquire(t, s, Key{7, 9}, "bob", 0)
	mustAcquire(t, s, Key{7, 3}, "carol", time.Hour) // same instant as #9: issue order
	mustAcquire(t, s, Key{8, 1}, "alice", 0)         // another repo
	clock.Advance(time.Second)
	mustAcquire(t, s, Key{7, 1}, "dave", time.Hour)
	mustAcquire(t, s, Key{7, 2}, "erin", time.Hour)
	if _, err := s.Release(bg, Key{7, 2}, who("erin")); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)

	got, err := s.List(bg, 7)
	if err != nil {
		t.Fatal(err)
	}
	var issues []int64
	for _, l := range got {
		issues = append(issues, l.Issue)
	}
	want := []int64{3, 9, 1}
	if len(issues) != len(want) {
		t.Fatalf("list issues %v, want %v", issues, want)
	}
	for i := range want {
		if issues[i] != want[i] {
			t.Fatalf("list issues %v, want %v", issues, want)
		}
	}
	if n, _ := s.CountLive(bg); n != 4 {
		t.Fatalf("CountLive = %d, want 4", n)
	}
}

func TestCurrentNoneAfterExpiryAndOpenEndedNeverExpires(t *testing.T) {
	forEachEngine(t, testCurrentNoneAfterExpiryAndOpenEndedNeverExpires)
}

func testCurrentNoneAfterExpiryAndOpenEndedNeverExpires(t *testing.T, e engine) {
	s, clock, _ := e.open(t)
	mustAcquire(t, s, k42, "alice", time.Second)
	mustAcquire(t, s, Key{7, 43}, "bob", 0)
	clock.Advance(time.Second)
	if cur, _ := s.Current(bg, k42); cur != nil {
		t.Fatalf("current after expiry: %+v", cur)
	}
	clock.Set(time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC))
	cur, err := s.Current(bg, Key{7, 43})
	if err != nil || cur == nil || cur.Holder.Login != "bob" {
		t.Fatalf("open-ended lease after 170 years: %+v %v", cur, err)
	}
}

func TestTokensIncreaseAcrossHolders(t *testing.T) { forEachEngine(t, testTokensIncreaseAcrossHolders) }

func testTokensIncreaseAcrossHolders(t *testing.T, e engine) {
	s, clock, _ := e.open(t)
	for i, h := range []string{"alice", "bob", "alice"} {
		l := mustAcquire(t, s, k42, h, time.Minute)
		if l.Token != int64(i+1) {
			t.Fatalf("tenure %d (%s) token %d, want %d", i, h, l.Token, i+1)
		}
		clock.Advance(time.Minute)
	}
}

func TestTokenNeverResetsAfterReleaseExpiryOrReads(t *testing.T) {
	forEachEngine(t, testTokenNeverResetsAfterReleaseExpiryOrReads)
}

func testTokenNeverResetsAfterReleaseExpiryOrReads(t *testing.T, e engine) {
	s, clock, _ := e.open(t)
	mustAcquire(t, s, k42, "alice", time.Minute)
	if _, err := s.Release(bg, k42, who("alice")); err != nil {
		t.Fatal(err)
	}
	if l := mustAcquire(t, s, k42, "alice", time.Minute); l.Token != 2 {
		t.Fatalf("token after release %d, want 2", l.Token)
	}
	clock.Advance(time.Hour)
	// Reads of an expired lease must not reap it (the bug the seed plan pins).
	for i := 0; i < 3; i++ {
		if _, err := s.List(bg, 7); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Current(bg, k42); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CountLive(bg); err != nil {
			t.Fatal(err)
		}
	}
	if l := mustAcquire(t, s, k42, "bob", 0); l.Token != 3 {
		t.Fatalf("token after expiry and reads %d, want 3", l.Token)
	}
}

func TestZombieHolderCannotRenewOrReleaseAfterTakeover(t *testing.T) {
	forEachEngine(t, testZombieHolderCannotRenewOrReleaseAfterTakeover)
}

func testZombieHolderCannotRenewOrReleaseAfterTakeover(t *testing.T, e engine) {
	s, clock, _ := e.open(t)
	mustAcquire(t, s, k42, "alice", time.Minute)
	clock.Advance(time.Minute)
	bob := mustAcquire(t, s, k42, "bob", time.Minute)
	if _, err := s.Renew(bg, k42, who("alice"), time.Minute); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("zombie renew: %v", err)
	}
	if _, err := s.Release(bg, k42, who("alice")); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("zombie release: %v", err)
	}
	if cur, _ := s.Current(bg, k42); cur == nil || cur.Holder.Login != "bob" || cur.Token != bob.Token {
		t.Fatalf("bob's lease damaged by zombie: %+v", cur)
	}
}

func TestBoundaries(t *testing.T) { forEachEngine(t, testBoundaries) }

func testBoundaries(t *testing.T, e engine) {
	s, clock, _ := e.open(t)
	// ttl of one second: live for exactly that second.
	l := mustAcquire(t, s, Key{1, 1}, "alice", time.Second)
	if !l.ExpiresAt.Equal(clock.Now().Add(time.Second)) {
		t.Fatalf("1s ttl expiry %v", l.ExpiresAt)
	}
	// The largest allowed ttl, and one second more.
	mustAcquire(t, s, Key{1, 2}, "alice", 168*time.Hour)
	if _, err := s.Acquire(bg, Key{1, 3}, who("alice"), 168*time.Hour+time.Second, Observed{Kind: KindIssue}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("ttl above max: %v", err)
	}
	// Largest issue number and repository ID.
	big := Key{RepoID: math.MaxInt64, Issue: math.MaxInt64}
	if l := mustAcquire(t, s, big, "alice", 0); l.Key != big {
		t.Fatalf("big key round trip: %+v", l.Key)
	}
	if cur, _ := s.Current(bg, big); cur == nil || cur.Issue != math.MaxInt64 {
		t.Fatalf("big key current: %+v", cur)
	}
	// Unicode holder names survive byte for byte.
	name := "Zoë-李-🚀"
	mustAcquire(t, s, Key{1, 4}, name, 0)
	if cur, _ := s.Current(bg, Key{1, 4}); cur == nil || cur.Holder.Login != name {
		t.Fatalf("unicode holder: %+v", cur)
	}
	if _, err := s.Acquire(bg, Key{1, 4}, who("Zoe-李-🚀"), 0, Observed{Kind: KindIssue}); !errors.Is(err, ErrHeld) {
		t.Fatalf("near-identical name is a different holder: %v", err)
	}
}

func TestInvalidRequestsChangeNothing(t *testing.T) {
	forEachEngine(t, testInvalidRequestsChangeNothing)
}

func testInvalidRequestsChangeNothing(t *testing.T, e engine) {
	s, _, _ := e.open(t)
	cases := []struct {
		name string
		call func() error
	}{
		{"zero issue", func() error { _, err := s.Acquire(bg, Key{1, 0}, who("a"), 0, Observed{Kind: KindIssue}); return err }},
		{"negative repo", func() error { _, err := s.Acquire(bg, Key{-1, 1}, who("a"), 0, Observed{Kind: KindIssue}); return err }},
		{"empty holder", func() error { _, err := s.Acquire(bg, Key{1, 1}, who(""), 0, Observed{Kind: KindIssue}); return err }},
		{"negative ttl", func() error {
			_, err := s.Acquire(bg, Key{1, 1}, who("a"), -time.Second, Observed{Kind: KindIssue})
			return err
		}},
		{"sub-second ttl", func() error {
			_, err := s.Acquire(bg, Key{1, 1}, who("a"), 500*time.Millisecond, Observed{Kind: KindIssue})
			return err
		}},
		{"fractional ttl", func() error {
			_, err := s.Acquire(bg, Key{1, 1}, who("a"), 1500*time.Millisecond, Observed{Kind: KindIssue})
			return err
		}},
		{"renew without ttl", func() error { _, err := s.Renew(bg, Key{1, 1}, who("a"), 0); return err }},
		{"release empty holder", func() error { _, err := s.Release(bg, Key{1, 1}, who("")); return err }},
		{"current zero", func() error { _, err := s.Current(bg, Key{0, 1}); return err }},
		{"list zero", func() error { _, err := s.List(bg, 0); return err }},
	}
	for _, c := range cases {
		if err := c.call(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err %v, want ErrInvalid", c.name, err)
		}
	}
	if n, _ := s.CountLive(bg); n != 0 {
		t.Fatalf("invalid requests wrote %d leases", n)
	}
	if h, _ := s.History(bg, Key{1, 1}); len(h) != 0 {
		t.Fatalf("invalid requests wrote history %+v", h)
	}
}

func TestHistoryRecordsEveryChange(t *testing.T) { forEachEngine(t, testHistoryRecordsEveryChange) }

func testHistoryRecordsEveryChange(t *testing.T, e engine) {
	s, clock, _ := e.open(t)
	mustAcquire(t, s, k42, "alice", time.Minute)                         // acquire 1
	mustAcquire(t, s, k42, "alice", 2*time.Minute)                       // reacquire 1
	if _, err := s.Renew(bg, k42, who("alice"), time.Hour); err != nil { // renew 1
		t.Fatal(err)
	}
	_, _ = s.Acquire(bg, k42, who("bob"), 0, Observed{Kind: KindIssue}) // held: no event
	clock.Advance(2 * time.Hour)
	mustAcquire(t, s, k42, "bob", 0)                          // takeover 2
	if _, err := s.Release(bg, k42, who("bob")); err != nil { // release 2
		t.Fatal(err)
	}
	_, _ = s.Release(bg, k42, who("bob")) // nothing: no event

	h, err := s.History(bg, k42)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		a     Action
		who   string
		prev  string
		token int64
	}{
		{ActionAcquire, "alice", "", 1},
		{ActionReacquire, "alice", "", 1},
		{ActionRenew, "alice", "", 1},
		{ActionTakeover, "bob", "alice", 2},
		{ActionRelease, "bob", "bob", 2},
	}
	if len(h) != len(want) {
		t.Fatalf("history %+v, want %d events", h, len(want))
	}
	for i, w := range want {
		if h[i].Action != w.a || h[i].Holder != w.who || h[i].Previous != w.prev || h[i].Token != w.token {
			t.Errorf("event %d = %+v, want %+v", i, h[i], w)
		}
	}
	if h[3].At != clock.Now().Unix() || h[0].ExpiresAt == nil {
		t.Errorf("event times wrong: %+v", h)
	}
}
