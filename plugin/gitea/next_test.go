package gitea

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/clocktest"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// Tests of OpenIssues and Blocked against a fake of Gitea's issue list
// and dependency list that pages the way Gitea 1.26 does.

// tracker is the fake's issues and pull requests of acme/widgets.
type tracker struct {
	mu     sync.Mutex
	issues []fakeIssue // by number, from 1
	most   int         // the largest page it serves ([api] MAX_RESPONSE_ITEMS)
	// before, if set, runs before the answer to the n-th list request
	// (from 1), e.g. to change the list between two requests.
	before func(n int, tr *tracker)
	n      int
}

type fakeIssue struct {
	pull   bool
	closed bool
	labels []string
}

// newTracker has n open issues, #1 … #n, without labels.
func newTracker(n int) *tracker {
	return &tracker{issues: make([]fakeIssue, n), most: 50}
}

// add creates the next issue (the newest).
func (tr *tracker) add(is fakeIssue) { tr.issues = append(tr.issues, is) }

// pageParams is Gitea's reading of page and limit (utils.GetListOptions).
func pageParams(r *http.Request, most int) (page, limit int) {
	page, _ = strconv.Atoi(r.URL.Query().Get("page"))
	limit, _ = strconv.Atoi(r.URL.Query().Get("limit"))
	page = max(page, 1)
	switch {
	case limit <= 0:
		limit = 30
	case limit > most:
		limit = most
	}
	return page, limit
}

// list answers GET /repos/acme/widgets/issues: open issues or pulls,
// newest first, one page, with X-Total-Count. It ignores labels= (the
// Forge must not send it).
func (tr *tracker) list(w http.ResponseWriter, r *http.Request) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.n++
	if tr.before != nil {
		tr.before(tr.n, tr)
	}
	q := r.URL.Query()
	if q.Get("state") != "open" || (q.Get("type") != "issues" && q.Get("type") != "pulls") {
		http.Error(w, `{"message":"the fake wants state=open and a type"}`, http.StatusTeapot)
		return
	}
	var match []map[string]any
	for i := len(tr.issues) - 1; i >= 0; i-- {
		is := tr.issues[i]
		if is.closed || is.pull != (q.Get("type") == "pulls") {
			continue
		}
		labels := []map[string]any{}
		for _, l := range is.labels {
			labels = append(labels, map[string]any{"id": len(l), "name": l})
		}
		j := map[string]any{
			"number": i + 1, "state": "open", "labels": labels,
			"updated_at": time.Date(2026, 12, 1, 0, 0, i, 0, time.UTC).Format(time.RFC3339),
		}
		if is.pull {
			j["pull_request"] = map[string]any{"merged": false}
		}
		match = append(match, j)
	}
	page, limit := pageParams(r, tr.most)
	start := min((page-1)*limit, len(match))
	end := min(start+limit, len(match))
	w.Header().Set("X-Total-Count", strconv.Itoa(len(match)))
	jsonBody(match[start:end])(w, r)
}

const issuesPath = "GET /api/v1/repos/acme/widgets/issues"

func trackerForge(t *testing.T, tr *tracker) (*Forge, *fake) {
	t.Helper()
	g := newFake(t, map[string]http.HandlerFunc{issuesPath: tr.list})
	return newTestForge(t, g.srv.URL, clocktest.New(), 5*time.Second), g
}

func numbers(issues []forge.Issue) []int64 {
	out := []int64{}
	for _, is := range issues {
		out = append(out, is.Number)
	}
	return out
}

// oldest is the expected answer: the numbers of the first limit open
// issues (or pulls) that carry every label, ascending.
func oldest(tr *tracker, pulls bool, labels []string, limit int) []int64 {
	out := []int64{}
	for i, is := range tr.issues {
		if len(out) == limit {
			break
		}
		if is.closed || is.pull != pulls {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && slices.Contains(is.labels, l)
		}
		if ok {
			out = append(out, int64(i+1))
		}
	}
	return out
}

func TestOpenIssuesPaging(t *testing.T) {
	tests := []struct {
		total, limit int
		requests     int // 0: only check the answer
	}{
		{0, 5, 1}, {1, 5, 1}, {1, 1, 1}, {49, 50, 1}, {50, 5, 1}, {50, 50, 1}, {50, 100, 1},
		// The last page holds one issue; the first page, read first, the rest.
		{51, 5, 2}, {51, 1, 2}, {51, 51, 2}, {51, 100, 2},
		// Offsets 0…119: the oldest 30 are offsets 90…119, page 3 of 45.
		{120, 1, 2}, {120, 5, 2}, {120, 20, 2}, {120, 30, 2}, {120, 50, 3}, {120, 120, 3}, {120, 500, 3},
		{100, 50, 2}, {101, 50, 3}, {250, 10, 2}, {250, 49, 2}, {1000, 7, 2}, {1000, 200, 5},
	}
	for _, most := range []int{50, 20} {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%d open, limit %d, %d a page", tt.total, tt.limit, most), func(t *testing.T) {
				tr := newTracker(tt.total)
				tr.most = most
				f, g := trackerForge(t, tr)
				got, requests, err := f.OpenIssues(context.Background(), "acme", "widgets", forge.IssueFilter{}, tt.limit)
				if err != nil {
					t.Fatal(err)
				}
				if want := oldest(tr, false, nil, tt.limit); !slices.Equal(numbers(got), want) {
					t.Fatalf("OpenIssues = %v, want %v", numbers(got), want)
				}
				for _, is := range got {
					if is.IsPull || is.Closed || is.Updated.IsZero() {
						t.Errorf("%+v: want an open issue with its update time", is)
					}
				}
				reqs := g.requests()
				if requests != len(reqs) {
					t.Errorf("reported %d requests, made %d", requests, len(reqs))
				}
				if most == 50 && tt.requests != 0 && requests != tt.requests {
					t.Errorf("%d requests, want %d: %+v", requests, tt.requests, reqs)
				}
				for _, r := range reqs {
					if r.Auth != "token "+adminToken || r.Sudo != "" {
						t.Errorf("%s: Authorization %q Sudo %q, want the admin token", r.Path, r.Auth, r.Sudo)
					}
				}
			})
		}
	}
}

// The kind of issue and the labels: only open pull requests for Pulls;
// every label, matched exactly, on the Forge's side (labels= is never sent).
func TestOpenIssuesKindsAndLabels(t *testing.T) {
	tr := newTracker(0)
	for n := 1; n <= 260; n++ {
		is := fakeIssue{pull: n%4 == 0, closed: n%7 == 0}
		if n%3 == 0 {
			is.labels = append(is.labels, "bug")
		}
		if n%5 == 0 {
			is.labels = append(is.labels, "good first issue")
		}
		if n == 2 || n == 4 {
			is.labels = append(is.labels, "Bug", "bug,good first issue")
		}
		tr.add(is)
	}
	f, g := trackerForge(t, tr)
	for _, c := range []struct {
		pulls  bool
		labels []string
		limit  int
	}{
		{false, nil, 10}, {true, nil, 10}, {true, nil, 100},
		{false, []string{"bug"}, 5}, {false, []string{"bug"}, 100},
		{false, []string{"bug", "good first issue"}, 3}, {false, []string{"good first issue", "bug"}, 50},
		{true, []string{"bug", "good first issue"}, 50},
		{false, []string{"Bug"}, 5}, {false, []string{"bug,good first issue"}, 5},
		{false, []string{"no such label"}, 5}, {false, []string{"bug", "no such label"}, 5},
	} {
		t.Run(fmt.Sprintf("pulls %v labels %q limit %d", c.pulls, c.labels, c.limit), func(t *testing.T) {
			g.reset()
			got, _, err := f.OpenIssues(context.Background(), "acme", "widgets", forge.IssueFilter{Pulls: c.pulls, Labels: c.labels}, c.limit)
			if err != nil {
				t.Fatal(err)
			}
			if want := oldest(tr, c.pulls, c.labels, c.limit); !slices.Equal(numbers(got), want) {
				t.Fatalf("OpenIssues = %v, want %v", numbers(got), want)
			}
			for _, is := range got {
				if is.IsPull != c.pulls || is.Closed {
					t.Errorf("%+v: want IsPull %v, open", is, c.pulls)
				}
			}
			for _, r := range g.requests() {
				if strings.Contains(r.RawQuery, "labels") {
					t.Errorf("query %q filters labels at Gitea", r.RawQuery)
				}
			}
		})
	}
}

// An issue created or closed between two requests shifts Gitea's pages;
// the scan notices by the count and starts over, and the answer is exact.
func TestOpenIssuesWhileTheListChanges(t *testing.T) {
	for _, c := range []struct {
		name   string
		before func(n int, tr *tracker)
		limit  int
	}{
		{"created after the first request", func(n int, tr *tracker) {
			if n == 2 {
				tr.add(fakeIssue{})
			}
		}, 60},
		// Without starting over, #21 would be missed: it moves to the
		// page already read (offsets 100…119 were #20…#1, are #21…#2).
		{"created between the last pages", func(n int, tr *tracker) {
			if n == 3 {
				tr.add(fakeIssue{})
			}
		}, 75},
		{"one already read closed", func(n int, tr *tracker) {
			if n == 3 {
				tr.issues[0].closed = true
			}
		}, 75},
		{"created and closed all the time, until it stops", func(n int, tr *tracker) {
			if n <= 3 {
				tr.add(fakeIssue{})
				tr.issues[n].closed = n%2 == 0
			}
		}, 75},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := newTracker(120)
			tr.before = c.before
			f, _ := trackerForge(t, tr)
			got, _, err := f.OpenIssues(context.Background(), "acme", "widgets", forge.IssueFilter{}, c.limit)
			if err != nil {
				t.Fatal(err)
			}
			tr.mu.Lock()
			want := oldest(tr, false, nil, c.limit)
			tr.mu.Unlock()
			if !slices.Equal(numbers(got), want) {
				t.Fatalf("OpenIssues = %v, want %v", numbers(got), want)
			}
		})
	}
	t.Run("never still", func(t *testing.T) {
		tr := newTracker(120)
		tr.before = func(n int, tr *tracker) { tr.add(fakeIssue{}) }
		f, _ := trackerForge(t, tr)
		_, requests, err := f.OpenIssues(context.Background(), "acme", "widgets", forge.IssueFilter{}, 75)
		if !errors.Is(err, forge.ErrUnavailable) || !strings.Contains(err.Error(), "kept changing") {
			t.Fatalf("err = %v, want ErrUnavailable: kept changing", err)
		}
		if requests != 2+maxRescans {
			t.Errorf("%d requests, want %d", requests, 2+maxRescans)
		}
	})
}

// The bound is of pages, not of time: the forge's deadline is set far
// beyond what 100 pages take even on a busy machine, so that only the
// page bound can end the reading.
func TestOpenIssuesBoundsItsReading(t *testing.T) {
	tr := newTracker(pageSize * (maxOpenPages + 10))
	g := newFake(t, map[string]http.HandlerFunc{issuesPath: tr.list})
	f := newTestForge(t, g.srv.URL, clocktest.New(), 10*time.Minute)
	_, requests, err := f.OpenIssues(context.Background(), "acme", "widgets", forge.IssueFilter{Labels: []string{"nowhere"}}, 1)
	if !errors.Is(err, forge.ErrUnavailable) || !strings.Contains(err.Error(), fmt.Sprintf("read %d pages", maxOpenPages)) {
		t.Fatalf("err = %v, want ErrUnavailable: read %d pages", err, maxOpenPages)
	}
	if n := len(g.requests()); requests != maxOpenPages || n != maxOpenPages {
		t.Errorf("reported %d requests, made %d, want %d", requests, n, maxOpenPages)
	}
}

func TestOpenIssuesErrors(t *testing.T) {
	tests := []struct {
		name    string
		answer  http.HandlerFunc
		wantErr error
	}{
		{"no such repository", status(404, `{"message":"not found"}`), forge.ErrNotFound},
		{"no count", jsonBody([]any{}), forge.ErrUnavailable},
		{"an issue without a number", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Total-Count", "1")
			jsonBody([]any{map[string]any{"state": "open"}})(w, r)
		}, forge.ErrUnavailable},
		{"more counted than served", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Total-Count", "70")
			jsonBody([]any{})(w, r)
		}, forge.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newFake(t, map[string]http.HandlerFunc{issuesPath: tt.answer})
			f := newTestForge(t, g.srv.URL, clocktest.New(), time.Second)
			_, requests, err := f.OpenIssues(context.Background(), "acme", "widgets", forge.IssueFilter{}, 5)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if requests != len(g.requests()) || requests == 0 {
				t.Errorf("reported %d requests, made %d", requests, len(g.requests()))
			}
		})
	}
	g := newFake(t, nil)
	f := newTestForge(t, g.srv.URL, clocktest.New(), time.Second)
	ctx := context.Background()
	for _, c := range [][2]string{{"acme", ""}, {"", "widgets"}, {"..", "widgets"}, {"acme", "w?x"}} {
		if _, _, err := f.OpenIssues(ctx, c[0], c[1], forge.IssueFilter{}, 5); !errors.Is(err, forge.ErrNotFound) {
			t.Errorf("OpenIssues(%q, %q) = %v, want ErrNotFound", c[0], c[1], err)
		}
		if _, err := f.Blocked(ctx, c[0], c[1], 1); !errors.Is(err, forge.ErrNotFound) {
			t.Errorf("Blocked(%q, %q) = %v, want ErrNotFound", c[0], c[1], err)
		}
	}
	if got, requests, err := f.OpenIssues(ctx, "acme", "widgets", forge.IssueFilter{}, 0); got != nil || requests != 0 || err != nil {
		t.Errorf("limit 0: %v %d %v", got, requests, err)
	}
	if _, err := f.Blocked(ctx, "acme", "widgets", 0); !errors.Is(err, forge.ErrNotFound) {
		t.Errorf("Blocked #0 = %v, want ErrNotFound", err)
	}
	if n := len(g.requests()); n != 0 {
		t.Errorf("%d requests for impossible questions", n)
	}
}

func TestWindow(t *testing.T) {
	for _, c := range []struct{ o, want, most, page, size int }{
		{0, 1, 50, 1, 50},
		{49, 50, 50, 1, 50},
		{50, 1, 50, 2, 50},
		{50, 5, 50, 2, 46},   // offsets 46…91: 46…50
		{119, 30, 50, 3, 45}, // offsets 90…134: 90…119
		{119, 50, 50, 3, 50}, // no page holds 70…119: the one of 100…119
		{99, 50, 50, 2, 50},
		{99, 80, 50, 2, 50},
		{10, 100, 20, 1, 20},
	} {
		if page, size := window(c.o, c.want, c.most); page != c.page || size != c.size {
			t.Errorf("window(%d, %d, %d) = page %d of %d, want page %d of %d", c.o, c.want, c.most, page, size, c.page, c.size)
		}
	}
	// Always the page that holds o; holding all wanted whenever a page can.
	for o := range 400 {
		for want := 1; want <= 60; want++ {
			page, size := window(o, want, 50)
			lo, hi := (page-1)*size, page*size-1
			if o < lo || o > hi {
				t.Fatalf("window(%d, %d) = page %d of %d: offsets %d…%d", o, want, page, size, lo, hi)
			}
			possible := false
			for s := want; s <= 50; s++ {
				possible = possible || o%s+1 >= want
			}
			if possible && o-lo+1 < want {
				t.Fatalf("window(%d, %d) = page %d of %d holds %d, a page could hold %d", o, want, page, size, o-lo+1, want)
			}
		}
	}
}

// deps answers GET /repos/acme/widgets/issues/7/dependencies with states
// (true: open), paged like Gitea, at most most a page.
func deps(states []bool, most int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		page, limit := pageParams(r, most)
		start := min((page-1)*limit, len(states))
		end := min(start+limit, len(states))
		var out []map[string]any
		for i, open := range states[start:end] {
			state := "closed"
			if open {
				state = "open"
			}
			out = append(out, map[string]any{"number": 100 + start + i, "state": state})
		}
		if out == nil {
			out = []map[string]any{}
		}
		w.Header().Set("X-Total-Count", strconv.Itoa(len(states)))
		jsonBody(out)(w, r)
	}
}

const depsPath = "GET /api/v1/repos/acme/widgets/issues/7/dependencies"

func TestBlocked(t *testing.T) {
	closed := func(n int) []bool { return make([]bool, n) }
	openAt := func(n, i int) []bool { s := closed(n); s[i] = true; return s }
	tests := []struct {
		name     string
		deps     http.HandlerFunc
		issue    http.HandlerFunc
		want     bool
		wantErr  error
		requests int
	}{
		{"no dependencies", deps(nil, 50), nil, false, nil, 1},
		{"one open", deps([]bool{false, true, false}, 50), nil, true, nil, 1},
		{"all closed", deps(closed(3), 50), nil, false, nil, 1},
		{"fifty closed: the count says that was all", deps(closed(50), 50), nil, false, nil, 1},
		{"an open one on the second page", deps(openAt(60, 55), 50), nil, true, nil, 2},
		{"sixty closed", deps(closed(60), 50), nil, false, nil, 2},
		{"Gitea serving 20 a page, the open one on the third", deps(openAt(45, 44), 20), nil, true, nil, 3},
		{"Gitea serving 20 a page, all closed", deps(closed(45), 20), nil, false, nil, 3},
		{"more than the pages read, all closed so far", deps(closed(pageSize*maxDependencyPages+1), 50), nil, true, nil, maxDependencyPages},
		{"dependencies switched off", status(404, `{"message":"not found"}`),
			jsonBody(map[string]any{"number": 7, "state": "open"}), false, nil, 2},
		{"no such issue", status(404, `{"message":"IsErrIssueNotExist"}`), status(404, `{"message":"not found"}`), false, forge.ErrNotFound, 2},
		{"the issue request fails", status(404, `{"message":"not found"}`), status(500, ``), false, forge.ErrUnavailable, 2},
		{"a dependency without a state", jsonBody([]any{map[string]any{"number": 3}}), nil, false, forge.ErrUnavailable, 1},
		{"Gitea failing", status(502, ``), nil, false, forge.ErrUnavailable, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			routes := map[string]http.HandlerFunc{depsPath: tt.deps}
			if tt.issue != nil {
				routes["GET /api/v1/repos/acme/widgets/issues/7"] = tt.issue
			}
			g := newFake(t, routes)
			f := newTestForge(t, g.srv.URL, clocktest.New(), time.Second)
			got, err := f.Blocked(context.Background(), "acme", "widgets", 7)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("Blocked = %v, want %v", got, tt.want)
			}
			reqs := g.requests()
			if len(reqs) != tt.requests {
				t.Errorf("%d requests, want %d: %+v", len(reqs), tt.requests, reqs)
			}
			for i, r := range reqs {
				if r.Auth != "token "+adminToken || r.Sudo != "" {
					t.Errorf("%s: Authorization %q Sudo %q, want the admin token", r.Path, r.Auth, r.Sudo)
				}
				q, _ := url.ParseQuery(r.RawQuery)
				if r.Path == "/api/v1/repos/acme/widgets/issues/7/dependencies" && (q.Get("page") != strconv.Itoa(i+1) || q.Get("limit") != "50") {
					t.Errorf("request %d: query %q", i+1, r.RawQuery)
				}
			}
		})
	}
}
