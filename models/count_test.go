package models

import (
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"
)

// TestCountLiveReadsOnlyLiveRows: the live-lease gauge is read on every
// metrics scrape, and lease rows are never deleted, so counting must not
// scan the table: SQLite's plan for every statement CountLive runs
// searches an index, and it counts right (open-ended, expiring, expired
// and free rows).
func TestCountLiveReadsOnlyLiveRows(t *testing.T) {
	s, clock, _ := openTestStore(t)
	mustAcquire(t, s, Key{RepoID: 1, Issue: 1}, "alice", 0)             // open-ended
	mustAcquire(t, s, Key{RepoID: 1, Issue: 2}, "bob", time.Hour)       // live
	mustAcquire(t, s, Key{RepoID: 2, Issue: 3}, "carol", time.Minute)   // expires
	mustAcquire(t, s, Key{RepoID: 2, Issue: 4}, "alice", 2*time.Minute) // expires at the count
	mustAcquire(t, s, Key{RepoID: 2, Issue: 5}, "bob", time.Hour)       // released
	if _, err := s.Release(bg, Key{RepoID: 2, Issue: 5}, who("bob")); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Minute)

	type stmt struct {
		sql  string
		vars []any
	}
	var (
		mu   sync.Mutex
		seen []stmt
	)
	capture := func(db *gorm.DB) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, stmt{db.Statement.SQL.String(), append([]any(nil), db.Statement.Vars...)})
	}
	if err := s.db.Callback().Query().After("gorm:query").Register("test:capture", capture); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Callback().Raw().After("gorm:raw").Register("test:capture", capture); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Callback().Row().After("gorm:row").Register("test:capture", capture); err != nil {
		t.Fatal(err)
	}
	n, err := s.CountLive(bg)
	_ = s.db.Callback().Query().Remove("test:capture")
	_ = s.db.Callback().Raw().Remove("test:capture")
	_ = s.db.Callback().Row().Remove("test:capture")
	if err != nil || n != 2 {
		t.Fatalf("CountLive = %d, %v; want 2", n, err)
	}
	if len(seen) == 0 {
		t.Fatal("CountLive ran no statement that was seen")
	}
	for _, st := range seen {
		var plan []struct {
			ID, Parent, Notused int
			Detail              string
		}
		if err := s.db.Raw("EXPLAIN QUERY PLAN "+st.sql, st.vars...).Scan(&plan).Error; err != nil {
			t.Fatal(err)
		}
		var details []string
		for _, p := range plan {
			details = append(details, p.Detail)
		}
		if d := strings.Join(details, "; "); strings.Contains(d, "SCAN leases") || !strings.Contains(d, "SEARCH leases USING INDEX") {
			t.Errorf("%s\nplan: %s (want index searches, no scan of leases)", st.sql, d)
		}
	}
}
