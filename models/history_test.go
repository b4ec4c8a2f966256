package models

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/clocktest"
)

// One issue through every way a tenure ends, read back newest first with
// the instant and reason of each end.
func TestTenuresNameHowEachEnded(t *testing.T) { forEachEngine(t, testTenuresNameHowEachEnded) }

func testTenuresNameHowEachEnded(t *testing.T, e engine) {
	s, clock, _ := e.open(t)
	at := func(d time.Duration) time.Time { return clocktest.Start.Add(d) }
	k := k42

	mustAcquire(t, s, k, "alice", time.Minute) // token 1, released at +10s
	clock.Advance(10 * time.Second)
	if _, err := s.Release(bg, k, who("alice")); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, s, k, "bob", time.Minute) // token 2 at +10s, lapses at +70s, taken over at +100s
	clock.Advance(90 * time.Second)
	mustAcquire(t, s, k, "carol", 2*time.Minute) // token 3 at +100s; renewed to +160s+5m
	clock.Advance(time.Minute)
	if _, err := s.Renew(bg, k, who("carol"), 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute) // +220s: root forces it
	if _, err := s.ForceRelease(bg, k, who("root")); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, s, k, "dave", time.Minute) // token 4 at +220s; released late, at +300s: it lapsed at +280s
	clock.Advance(80 * time.Second)
	if _, err := s.Release(bg, k, who("dave")); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, s, k, "erin", 0) // token 5 at +300s, open-ended, closed at +310s
	clock.Advance(10 * time.Second)
	if _, err := s.EndIssue(bg, k, ReasonClosed, 1, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReopenIssue(bg, k, 2, ""); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, s, k, "frank", time.Minute) // token 6 at +310s, lapses at +370s; nobody since
	clock.Advance(5 * time.Minute)
	mustAcquire(t, s, Key{RepoID: 7, Issue: 43}, "gina", 0) // another issue's history stays apart

	got, err := s.Tenures(bg, k, MaxTenures)
	if err != nil {
		t.Fatal(err)
	}
	ptr := func(t time.Time) *time.Time { return &t }
	want := []Tenure{
		{Token: 6, Holder: who("frank"), AcquiredAt: at(310 * time.Second), EndedAt: ptr(at(370 * time.Second)), EndedBy: EndExpired},
		{Token: 5, Holder: who("erin"), AcquiredAt: at(300 * time.Second), EndedAt: ptr(at(310 * time.Second)), EndedBy: EndClosed},
		{Token: 4, Holder: who("dave"), AcquiredAt: at(220 * time.Second), EndedAt: ptr(at(280 * time.Second)), EndedBy: EndExpired},
		{Token: 3, Holder: who("carol"), AcquiredAt: at(100 * time.Second), EndedAt: ptr(at(220 * time.Second)), EndedBy: EndForceReleased, ForcedBy: "root"},
		{Token: 2, Holder: who("bob"), AcquiredAt: at(10 * time.Second), EndedAt: ptr(at(70 * time.Second)), EndedBy: EndTakenOver},
		{Token: 1, Holder: who("alice"), AcquiredAt: at(0), EndedAt: ptr(at(10 * time.Second)), EndedBy: EndReleased},
	}
	checkTenures(t, got, want)

	// The limit keeps the newest.
	got, err = s.Tenures(bg, k, 2)
	if err != nil {
		t.Fatal(err)
	}
	checkTenures(t, got, want[:2])
}

func TestTenuresOfALiveLeaseAndOfNothing(t *testing.T) {
	forEachEngine(t, testTenuresOfALiveLeaseAndOfNothing)
}

func testTenuresOfALiveLeaseAndOfNothing(t *testing.T, e engine) {
	s, clock, _ := e.open(t)
	got, err := s.Tenures(bg, k42, 20)
	if err != nil || len(got) != 0 || got == nil {
		t.Fatalf("no history: %v, %v; want [] and no error", got, err)
	}
	first := mustAcquire(t, s, k42, "alice", time.Minute)
	clock.Advance(59 * time.Second)
	mustAcquire(t, s, k42, "alice", time.Minute) // re-acquire: the same tenure
	got, err = s.Tenures(bg, k42, 20)
	if err != nil {
		t.Fatal(err)
	}
	checkTenures(t, got, []Tenure{{Token: 1, Holder: who("alice"), AcquiredAt: first.AcquiredAt}})

	// At the expiry instant it is no longer live: it ended then.
	clock.Advance(time.Minute)
	got, _ = s.Tenures(bg, k42, 20)
	end := clock.Now()
	checkTenures(t, got, []Tenure{{Token: 1, Holder: who("alice"), AcquiredAt: first.AcquiredAt, EndedAt: &end, EndedBy: EndExpired}})

	for _, limit := range []int{0, -1, MaxTenures + 1} {
		if _, err := s.Tenures(bg, k42, limit); !errors.Is(err, ErrInvalid) {
			t.Errorf("limit %d: %v, want ErrInvalid", limit, err)
		}
	}
}

func TestForceReleaseFreesAnyLeaseAndReleaseStillRefuses(t *testing.T) {
	forEachEngine(t, testForceReleaseFreesAnyLeaseAndReleaseStillRefuses)
}

func testForceReleaseFreesAnyLeaseAndReleaseStillRefuses(t *testing.T, e engine) {
	s, _, _ := e.open(t)
	mustAcquire(t, s, k42, "alice", time.Minute)
	var nh *NotHolderError
	if _, err := s.Release(bg, k42, who("root")); !errors.As(err, &nh) {
		t.Fatalf("plain release by another: %v, want *NotHolderError", err)
	}
	l, err := s.ForceRelease(bg, k42, who("root"))
	if err != nil || l == nil || l.Holder.Login != "alice" {
		t.Fatalf("force release: %+v, %v; want alice's lease", l, err)
	}
	if cur, _ := s.Current(bg, k42); cur != nil {
		t.Fatalf("still held after force release: %+v", cur)
	}
	// Forcing nothing does nothing, and the next tenure's token is larger.
	if l, err := s.ForceRelease(bg, k42, who("root")); err != nil || l != nil {
		t.Fatalf("force release of nothing: %+v, %v", l, err)
	}
	if l := mustAcquire(t, s, k42, "bob", 0); l.Token != 2 {
		t.Fatalf("token after force release %d, want 2", l.Token)
	}
}

func checkTenures(t *testing.T, got, want []Tenure) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d tenures %+v, want %d %+v", len(got), got, len(want), want)
	}
	for i := range want {
		g, w := got[i], want[i]
		sameEnd := (g.EndedAt == nil) == (w.EndedAt == nil) && (g.EndedAt == nil || g.EndedAt.Equal(*w.EndedAt))
		if g.Token != w.Token || g.Holder != w.Holder || !g.AcquiredAt.Equal(w.AcquiredAt) || !sameEnd ||
			g.EndedBy != w.EndedBy || g.ForcedBy != w.ForcedBy {
			t.Errorf("tenure %d:\n got %+v (ended %v)\nwant %+v (ended %v)", i, g, g.EndedAt, w, w.EndedAt)
		}
	}
}

func TestAcquireFirstTakesTheFirstFreeCandidate(t *testing.T) {
	forEachEngine(t, testAcquireFirstTakesTheFirstFreeCandidate)
}

func testAcquireFirstTakesTheFirstFreeCandidate(t *testing.T, e engine) {
	s, _, _ := e.open(t)
	cand := func(n int64, verified bool) Candidate {
		return Candidate{Issue: n, Observed: Observed{Kind: KindIssue}, Verified: verified}
	}
	all := []Candidate{cand(1, true), cand(2, true), cand(3, true), cand(4, false), cand(5, true)}
	mustAcquire(t, s, Key{RepoID: 7, Issue: 1}, "alice", 0) // held by alice: skipped, by alice too
	if _, err := s.EndIssue(bg, Key{RepoID: 7, Issue: 3}, ReasonClosed, 5, ""); err != nil {
		t.Fatal(err)
	}
	l, err := s.AcquireFirst(bg, 7, all, who("alice"), time.Minute)
	if err != nil || l.Issue != 2 || l.Holder != who("alice") || l.Token != 1 {
		t.Fatalf("first: %+v %v, want #2 for alice", l, err)
	}
	// 3 is closed; 4 is free but unchecked: nothing is written.
	_, err = s.AcquireFirst(bg, 7, all, who("bob"), time.Minute)
	var unverified *UnverifiedError
	if !errors.As(err, &unverified) || fmt.Sprint(unverified.Issues) != "[4]" {
		t.Fatalf("second: %v, want #4 unverified (5, the next free one, is verified)", err)
	}
	if cur, _ := s.Current(bg, Key{RepoID: 7, Issue: 4}); cur != nil {
		t.Fatalf("an unverified candidate was taken: %+v", cur)
	}
	all[3].Verified = true
	if l, err := s.AcquireFirst(bg, 7, all, who("bob"), time.Minute); err != nil || l.Issue != 4 {
		t.Fatalf("third: %+v %v, want #4", l, err)
	}
	if l, err := s.AcquireFirst(bg, 7, all, who("carol"), 0); err != nil || l.Issue != 5 {
		t.Fatalf("fourth: %+v %v, want #5", l, err)
	}
	if _, err := s.AcquireFirst(bg, 7, all, who("dave"), 0); !errors.Is(err, ErrNoneFree) {
		t.Fatalf("fifth: %v, want none free", err)
	}
	// A closed candidate whose forge state is newer than the close is free.
	all[2].Version = 6
	if l, err := s.AcquireFirst(bg, 7, all, who("dave"), 0); err != nil || l.Issue != 3 {
		t.Fatalf("reopened: %+v %v, want #3", l, err)
	}
	if _, err := s.AcquireFirst(bg, 7, []Candidate{{Issue: 9}}, who("dave"), 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a candidate of no kind: %v", err)
	}
}

// The first free candidates are reported together, up to the first
// verified one and at most MaxUnverified.
func TestAcquireFirstReportsTheFirstUnverifiedCandidatesTogether(t *testing.T) {
	forEachEngine(t, testAcquireFirstReportsTheFirstUnverifiedCandidatesTogether)
}

func testAcquireFirstReportsTheFirstUnverifiedCandidatesTogether(t *testing.T, e engine) {
	s, _, _ := e.open(t)
	var cands []Candidate
	for n := int64(1); n <= 12; n++ {
		cands = append(cands, Candidate{Issue: n, Observed: Observed{Kind: KindIssue}, Verified: n == 4})
	}
	mustAcquire(t, s, Key{RepoID: 7, Issue: 2}, "bob", 0)
	var unverified *UnverifiedError
	if _, err := s.AcquireFirst(bg, 7, cands, who("alice"), 0); !errors.As(err, &unverified) || fmt.Sprint(unverified.Issues) != "[1 3]" {
		t.Fatalf("%v, want 1 and 3 (2 is held, 4 verified)", err)
	}
	cands[0].Verified, cands[2].Verified, cands[3].Verified = true, true, false
	mustAcquire(t, s, Key{RepoID: 7, Issue: 1}, "bob", 0)
	mustAcquire(t, s, Key{RepoID: 7, Issue: 3}, "bob", 0)
	if _, err := s.AcquireFirst(bg, 7, cands, who("alice"), 0); !errors.As(err, &unverified) || fmt.Sprint(unverified.Issues) != "[4 5 6 7 8 9 10 11]" {
		t.Fatalf("%v, want the first eight", err)
	}
}
