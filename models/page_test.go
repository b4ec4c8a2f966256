package models

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"
)

// ListPage pages, filters and counts in the query: the same leases as
// List, in the same order, a page at a time.
func TestListPage(t *testing.T) { forEachEngine(t, testListPage) }

func testListPage(t *testing.T, e engine) {
	s, clock, _ := e.open(t)
	for n := int64(1); n <= 7; n++ {
		kind := KindIssue
		if n%3 == 0 {
			kind = KindPull
		}
		ttl := time.Duration(0)
		if n == 5 {
			ttl = time.Minute // expires below
		}
		if _, err := s.Acquire(bg, Key{RepoID: 1, Issue: 10 - n}, who("alice"), ttl, Observed{Kind: kind}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second)
	}
	mustAcquire(t, s, Key{RepoID: 2, Issue: 1}, "bob", 0) // another repository
	clock.Advance(time.Minute)                            // issue 5 has expired

	issues := func(ls []Lease) []int64 {
		out := []int64{}
		for _, l := range ls {
			out = append(out, l.Issue)
		}
		return out
	}
	all, err := s.List(bg, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		p     Page
		want  []int64
		total int
	}{
		{"everything", Page{RepoID: 1, Limit: 50}, issues(all), 6},
		{"first page", Page{RepoID: 1, Limit: 2}, []int64{9, 8}, 6},
		{"second page", Page{RepoID: 1, Offset: 2, Limit: 2}, []int64{7, 6}, 6},
		{"last page", Page{RepoID: 1, Offset: 4, Limit: 2}, []int64{4, 3}, 6},
		{"past the end", Page{RepoID: 1, Offset: 6, Limit: 2}, []int64{}, 6},
		{"some numbers", Page{RepoID: 1, Issues: []int64{3, 5, 9, 42}, Limit: 50}, []int64{9, 3}, 2},
		{"some numbers, paged", Page{RepoID: 1, Issues: []int64{3, 9}, Offset: 1, Limit: 1}, []int64{3}, 2},
		{"some numbers, past the end", Page{RepoID: 1, Issues: []int64{3, 9}, Offset: 1 << 40, Limit: 1 << 62}, []int64{}, 2},
		{"some numbers, the largest limit", Page{RepoID: 1, Issues: []int64{3, 8, 9}, Offset: 1, Limit: 1<<63 - 1}, []int64{8, 3}, 3},
		{"pull requests", Page{RepoID: 1, Kinds: []Kind{KindPull}, Limit: 50}, []int64{7, 4}, 2},
		{"issues and unknown", Page{RepoID: 1, Kinds: []Kind{KindIssue, KindUnknown}, Limit: 3}, []int64{9, 8, 6}, 4},
		{"another repository", Page{RepoID: 2, Limit: 50}, []int64{1}, 1},
		{"no leases", Page{RepoID: 3, Limit: 50}, []int64{}, 0},
	} {
		got, total, err := s.ListPage(bg, c.p)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if g := issues(got); total != c.total || len(g) != len(c.want) || (len(g) > 0 && !slices.Equal(g, c.want)) {
			t.Errorf("%s: %v of %d, want %v of %d", c.name, g, total, c.want, c.total)
		}
	}
	if got, _, _ := s.ListPage(bg, Page{RepoID: 1, Limit: 50}); len(got) > 0 && got[0] != all[0] {
		t.Errorf("ListPage's lease %+v differs from List's %+v", got[0], all[0])
	}
	many := make([]int64, MaxPageIssues+1)
	for i := range many {
		many[i] = int64(i + 1)
	}
	for _, p := range []Page{{RepoID: 0, Limit: 1}, {RepoID: 1, Limit: 0}, {RepoID: 1, Offset: -1, Limit: 1}, {RepoID: 1, Issues: many, Limit: 1}} {
		if _, _, err := s.ListPage(bg, p); !errors.Is(err, ErrInvalid) {
			t.Errorf("ListPage(%+v) = %v, want ErrInvalid", p, err)
		}
	}
}

// A page of some numbers (the badge's ?issue=…) costs the same however
// many leases the repository holds: every statement ListPage runs for it
// finds its rows by the primary key (repo_id, issue), none walks the
// repository's leases in another index or the table. The plans are
// SQLite's own (EXPLAIN QUERY PLAN of the statements as they ran).
func TestListPageOfNumbersReadsOnlyThoseRows(t *testing.T) {
	s, clock, _ := openTestStore(t)
	for n := int64(1); n <= 60; n++ {
		mustAcquire(t, s, Key{RepoID: 1, Issue: n}, "alice", 0)
		clock.Advance(time.Second)
	}
	type statement struct {
		sql  string
		vars []any
	}
	var ran []statement
	capture := func(db *gorm.DB) {
		ran = append(ran, statement{db.Statement.SQL.String(), slices.Clone(db.Statement.Vars)})
	}
	if err := errors.Join(
		s.db.Callback().Query().After("gorm:query").Register("test:capture-query", capture),
		s.db.Callback().Row().After("gorm:row").Register("test:capture-row", capture),
	); err != nil {
		t.Fatal(err)
	}
	numbers := make([]int64, MaxPageIssues)
	for i := range numbers {
		numbers[i] = int64(11 + i)
	}
	for _, p := range []Page{
		{RepoID: 1, Issues: numbers, Limit: 50},
		{RepoID: 1, Issues: numbers[:5], Offset: 2, Limit: 2},
		{RepoID: 1, Issues: numbers, Kinds: []Kind{KindIssue}, Limit: 50},
	} {
		ran = nil
		got, total, err := s.ListPage(bg, p)
		if err != nil {
			t.Fatal(err)
		}
		if want := min(p.Limit, len(p.Issues)-p.Offset); len(got) != want || total != len(p.Issues) {
			t.Fatalf("%d numbers, offset %d: %d leases of %d, want %d of %d", len(p.Issues), p.Offset, len(got), total, want, len(p.Issues))
		}
		if len(ran) == 0 {
			t.Fatal("no statement captured")
		}
		for _, st := range ran {
			var plan []string
			rows, err := s.db.Raw("EXPLAIN QUERY PLAN "+st.sql, st.vars...).Rows()
			if err != nil {
				t.Fatalf("explain %s: %v", st.sql, err)
			}
			for rows.Next() {
				var id, parent, notUsed int
				var detail string
				if err := rows.Scan(&id, &parent, &notUsed, &detail); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, detail)
			}
			_ = rows.Close()
			for _, step := range plan {
				if strings.HasPrefix(step, "SCAN") || (strings.Contains(step, " leases ") && !strings.Contains(step, "(repo_id=? AND issue=?)")) {
					t.Errorf("%d numbers, offset %d: %s\nruns as %q", len(p.Issues), p.Offset, st.sql, plan)
					break
				}
			}
		}
	}
}
