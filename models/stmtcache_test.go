package models

import (
	"testing"
	"time"
)

// A lease operation's statements are prepared once: the statements kept
// after one acquire and release are all there are after fifty more, and
// all of them are lease operations' (no PRAGMA, no DDL).
func TestStatementsArePreparedOnce(t *testing.T) {
	s, _, _ := openTestStore(t)
	p := s.db.ConnPool.(*stmtPool)
	cycle := func(n int64) {
		t.Helper()
		k := Key{RepoID: 1, Issue: n}
		if _, err := s.Acquire(bg, k, who("alice"), time.Minute, Observed{Kind: KindIssue}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Release(bg, k, who("alice")); err != nil {
			t.Fatal(err)
		}
	}
	kept := func() []string {
		p.mu.RLock()
		defer p.mu.RUnlock()
		var qs []string
		for q := range p.stmts {
			qs = append(qs, q)
		}
		return qs
	}
	cycle(1)
	after1 := kept()
	if len(after1) == 0 {
		t.Fatal("no statement was kept prepared")
	}
	for n := int64(2); n <= 51; n++ {
		cycle(n)
	}
	if after51 := kept(); len(after51) != len(after1) {
		t.Fatalf("%d statements kept after 51 cycles, %d after one: %q", len(after51), len(after1), after51)
	}
	for _, q := range after1 {
		if !cacheable(q) {
			t.Errorf("kept %q", q)
		}
	}
}

// Past its bound (here: nothing more), the pool runs statements unprepared, with the same
// outcomes.
func TestStatementsPastTheBoundRunUnprepared(t *testing.T) {
	s, _, _ := openTestStore(t)
	p := s.db.ConnPool.(*stmtPool)
	p.mu.Lock()
	p.limit = 0
	opened := len(p.stmts) // what opening the ledger prepared
	p.mu.Unlock()
	l, err := s.Acquire(bg, k42, who("alice"), time.Minute, Observed{Kind: KindIssue})
	if err != nil || l.Token != 1 {
		t.Fatalf("acquire: %+v, %v", l, err)
	}
	if _, err := s.Acquire(bg, k42, who("bob"), time.Minute, Observed{Kind: KindIssue}); err == nil {
		t.Fatal("bob acquired alice's lease")
	}
	if _, err := s.Release(bg, k42, who("alice")); err != nil {
		t.Fatal(err)
	}
	if n := len(p.stmts); n != opened {
		t.Fatalf("%d statements kept past a bound of 0, %d before", n, opened)
	}
}

func TestCacheable(t *testing.T) {
	for q, want := range map[string]bool{
		"SELECT * FROM leases":            true,
		"  insert INTO events VALUES (?)": true,
		"SAVEPOINT batch_member":          true,
		"ROLLBACK TO batch_member":        true,
		"ROLLBACK":                        false,
		"PRAGMA user_version = 10":        false,
		"CREATE TABLE x (a)":              false,
		"SEL":                             false,
	} {
		if got := cacheable(q); got != want {
			t.Errorf("cacheable(%q) = %v", q, got)
		}
	}
}
