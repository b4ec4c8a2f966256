package models

import (
	"errors"
	"testing"
)

func TestSessionEpochsOnlyGrowAndOutliveTheStore(t *testing.T) {
	forEachEngine(t, testSessionEpochsOnlyGrowAndOutliveTheStore)
}

func testSessionEpochsOnlyGrowAndOutliveTheStore(t *testing.T, e engine) {
	s, clock, path := e.open(t)
	alice, bob := who("alice").ID, who("bob").ID
	epoch := func(s *Store, id int64) int64 {
		t.Helper()
		e, err := s.SessionEpoch(bg, id)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	if e := epoch(s, alice); e != 0 {
		t.Fatalf("epoch before any sign-out: %d", e)
	}
	for want := int64(1); want <= 3; want++ {
		if e, err := s.EndSessions(bg, alice); err != nil || e != want {
			t.Fatalf("EndSessions = %d, %v; want %d", e, err, want)
		}
	}
	if a, b := epoch(s, alice), epoch(s, bob); a != 3 || b != 0 {
		t.Fatalf("epochs: alice %d, bob %d", a, b)
	}
	for _, id := range []int64{0, -1} {
		if _, err := s.EndSessions(bg, id); !errors.Is(err, ErrInvalid) {
			t.Fatalf("EndSessions(%d): %v", id, err)
		}
	}
	// Another process on the same file sees it.
	other, err := Open(path, WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if e := epoch(other, alice); e != 3 {
		t.Fatalf("epoch seen by another store: %d", e)
	}
}
