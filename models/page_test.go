package models

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// ListPage pages, filters and counts in the query: the same leases as
// List, in the same order, a page at a time.
func TestListPage(t *testing.T) {
	s, clock, _ := openTestStore(t)
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
