package gitea

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/clocktest"
)

// Titles: a few numbers are asked one by one, many through the list of
// open issues; what Gitea said, a title or "no such issue", is kept for
// TitleTTL, so the same question asks nothing again until then.
func TestIssueTitles(t *testing.T) {
	issue := func(n int) map[string]any {
		return map[string]any{"number": n, "state": "open", "title": fmt.Sprintf("title <%d>", n)}
	}
	routes := map[string]http.HandlerFunc{
		issuesPath: func(w http.ResponseWriter, r *http.Request) {
			if q := r.URL.Query(); q.Get("state") != "open" || q.Get("type") != "" {
				http.Error(w, `{"message":"want open issues and pulls"}`, http.StatusTeapot)
				return
			}
			page, limit := pageParams(r, 50)
			var list []map[string]any
			for n := 120 - (page-1)*limit; n > 0 && len(list) < limit; n-- { // newest first
				list = append(list, issue(n))
			}
			w.Header().Set("X-Total-Count", "120")
			jsonBody(list)(w, r)
		},
	}
	for n := 1; n <= 120; n++ {
		routes["GET /api/v1/repos/acme/widgets/issues/"+strconv.Itoa(n)] = jsonBody(issue(n))
	}
	g := newFake(t, routes)
	clock := clocktest.New()
	f := newTestForge(t, g.srv.URL, clock, 5*time.Second)
	bg := context.Background()

	got, err := f.IssueTitles(bg, 1, "acme", "widgets", []int64{3, 7, 7, 500})
	if err != nil || len(got) != 2 || got[3] != "title <3>" || got[7] != "title <7>" {
		t.Fatalf("a few titles: %v %v", got, err)
	}
	if n := len(g.requests()); n != 3 {
		t.Fatalf("a few titles took %d requests, want 3 (one a number): %+v", n, g.requests())
	}
	g.reset()
	if got, err := f.IssueTitles(bg, 1, "acme", "widgets", []int64{3, 7, 500}); err != nil || len(got) != 2 || len(g.requests()) != 0 {
		t.Fatalf("asked again: %v %v, %d requests", got, err, len(g.requests()))
	}

	// Many: the open issues, newest first, a page of 50 at a time, until
	// each is found (#5 on the third page); #600, which Gitea lacks, is
	// asked alone.
	var many []int64
	for n := int64(80); n <= 120; n++ {
		many = append(many, n)
	}
	many = append(many, 5, 600)
	got, err = f.IssueTitles(bg, 1, "acme", "widgets", many)
	if err != nil || len(got) != 42 || got[5] != "title <5>" || got[120] != "title <120>" {
		t.Fatalf("many titles: %d of them, %v", len(got), err)
	}
	if n := len(g.requests()); n != 3+1 {
		t.Fatalf("many titles took %d requests, want 3 pages and #600: %+v", n, g.requests())
	}
	for _, r := range g.requests() {
		if r.Auth != "token "+adminToken || r.Sudo != "" {
			t.Errorf("%s asked as %q %q, want the admin", r.Path, r.Auth, r.Sudo)
		}
	}
	g.reset()
	if got, _ := f.IssueTitles(bg, 1, "acme", "widgets", many); len(got) != 42 || len(g.requests()) != 0 {
		t.Fatalf("many again: %d titles, %d requests", len(got), len(g.requests()))
	}
	// The same name under another ID (renamed away, and another made
	// under it) is another repository: its titles are asked anew.
	if got, err := f.IssueTitles(bg, 2, "acme", "widgets", []int64{3}); err != nil || got[3] != "title <3>" || len(g.requests()) != 1 {
		t.Fatalf("another repository of that name: %v %v, %d requests", got, err, len(g.requests()))
	}
	g.reset()
	clock.Advance(TitleTTL)
	if _, err := f.IssueTitles(bg, 1, "acme", "widgets", []int64{3}); err != nil || len(g.requests()) != 1 {
		t.Fatalf("after TitleTTL: %v, %d requests", err, len(g.requests()))
	}
}
