package gitea

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/collab-lease/collab-lease/integration"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// What next asks of the real Gitea 1.26 (a subtest of
// TestForgeAgainstGitea): the facts next.go relies on, and OpenIssues,
// Blocked and Repo.Admin against them. Everything lives in repositories
// of its own.
func testNext(t *testing.T, g *integration.Gitea, f *Forge, w *integration.World) {
	q := seedQueue(t, g, w.Org)
	t.Run("Gitea's issue list", func(t *testing.T) { testIssueListFacts(t, g, q) })
	t.Run("open issues", func(t *testing.T) { testOpenIssues(t, f, q) })
	t.Run("dependencies", func(t *testing.T) { testBlocked(t, g, f, q) })
	t.Run("repository admins", func(t *testing.T) { testRepoAdmin(t, g, f, w) })
}

// queue is acme/queue as seeded: what each number is, and the labels.
type queue struct {
	repo   integration.Repo
	issues map[int64]queued // every number, issues and pull requests
	last   int64            // the highest number
	pull   int64            // the one open pull request
	labels map[string]int64 // label IDs: "agent", "bug", "dup1", "dup2", "org-agent", "org-only"
}

// labelName is the name of each seeded label.
var labelName = map[string]string{
	"agent": "agent", "bug": "bug", "dup1": "dup", "dup2": "dup", "org-agent": "agent", "org-only": "org-only",
}

type queued struct {
	pull, closed bool
	labels       []string // names
}

// oldestOpen is what OpenIssues must answer, worked out from the seed.
func (q *queue) oldestOpen(pulls bool, labels []string, limit int) []int64 {
	out := []int64{}
	for n := int64(1); n <= q.last && len(out) < limit; n++ {
		is := q.issues[n]
		ok := !is.closed && is.pull == pulls
		for _, l := range labels {
			ok = ok && slices.Contains(is.labels, l)
		}
		if ok {
			out = append(out, n)
		}
	}
	return out
}

// seedQueue creates acme/queue: 70 issues, #1 … #70, some closed and
// some labelled, then one pull request (#71) labelled "agent", then one
// more issue (#72). The labels include what Gitea's labels= filter gets
// wrong: an organization label with a repository label's name ("agent"
// on #5 and #40) and two repository labels named "dup" (#7, #8).
func seedQueue(t *testing.T, g *integration.Gitea, org string) *queue {
	ctx := context.Background()
	admin := g.Admin()
	q := &queue{repo: integration.Repo{Owner: org, Name: "queue"}, issues: map[int64]queued{}, labels: map[string]int64{}}
	var repo struct{ ID int64 }
	must(t, admin.Do(ctx, "POST", "/orgs/"+org+"/repos", map[string]any{"name": q.repo.Name, "auto_init": true, "default_branch": "main"}, &repo))
	q.repo.ID = repo.ID
	label := func(path, key, name string) {
		var l struct{ ID int64 }
		must(t, admin.Do(ctx, "POST", path, map[string]any{"name": name, "color": "#00aabb"}, &l))
		q.labels[key] = l.ID
	}
	repoLabels := "/repos/" + q.repo.FullName() + "/labels"
	label(repoLabels, "agent", "agent")
	label(repoLabels, "bug", "bug")
	label(repoLabels, "dup1", "dup")
	label(repoLabels, "dup2", "dup")
	label("/orgs/"+org+"/labels", "org-agent", "agent")
	label("/orgs/"+org+"/labels", "org-only", "org-only")

	create := func(title string, closed bool, keys ...string) int64 {
		t.Helper()
		ids := []int64{}
		names := []string{}
		for _, k := range keys {
			ids = append(ids, q.labels[k])
			names = append(names, labelName[k])
		}
		var is struct{ Number int64 }
		must(t, admin.Do(ctx, "POST", "/repos/"+q.repo.FullName()+"/issues", map[string]any{"title": title, "closed": closed, "labels": ids}, &is))
		q.issues[is.Number] = queued{closed: closed, labels: names}
		q.last = max(q.last, is.Number)
		return is.Number
	}
	for n := 1; n <= 70; n++ {
		var keys []string
		switch {
		case n == 5 || n == 40:
			keys = []string{"org-agent", "bug"}
		case n == 7:
			keys = []string{"dup1"}
		case n == 8:
			keys = []string{"dup2"}
		case n == 10:
			keys = []string{"org-only"}
		case n%3 == 0 && n%4 == 0:
			keys = []string{"agent", "bug"}
		case n%3 == 0:
			keys = []string{"agent"}
		case n%4 == 0:
			keys = []string{"bug"}
		}
		if got := create(fmt.Sprint("issue ", n), n == 1 || n == 2 || n == 6 || n == 24 || n == 61, keys...); got != int64(n) {
			t.Fatalf("created issue #%d, want #%d", got, n)
		}
	}
	must(t, admin.Do(ctx, "POST", "/repos/"+q.repo.FullName()+"/contents/feature.txt", map[string]any{
		"content": base64.StdEncoding.EncodeToString([]byte("a feature\n")),
		"message": "Add a feature", "branch": "main", "new_branch": "feature",
	}, nil))
	var pr struct{ Number int64 }
	must(t, admin.Do(ctx, "POST", "/repos/"+q.repo.FullName()+"/pulls", map[string]any{
		"head": "feature", "base": "main", "title": "A feature", "labels": []int64{q.labels["agent"]},
	}, &pr))
	q.pull = pr.Number
	q.issues[pr.Number] = queued{pull: true, labels: []string{"agent"}}
	q.last = max(q.last, pr.Number)
	create("after the pull request", false)
	return q
}

// listed is one raw answer of Gitea's: the numbers and states in order,
// and X-Total-Count.
type listed struct {
	numbers []int64
	states  []string
	total   string
}

func rawList(t *testing.T, g *integration.Gitea, path string) listed {
	t.Helper()
	req, err := http.NewRequest("GET", g.URL+"/api/v1"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "token "+g.AdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: HTTP %d %s %v", path, resp.StatusCode, b, err)
	}
	var items []struct {
		Number int64
		State  string
	}
	if err := json.Unmarshal(b, &items); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	out := listed{total: resp.Header.Get("X-Total-Count"), numbers: []int64{}}
	for _, it := range items {
		out.numbers = append(out.numbers, it.Number)
		out.states = append(out.states, it.State)
	}
	return out
}

func reversed(s []int64) []int64 {
	s = slices.Clone(s)
	slices.Reverse(s)
	return s
}

// testIssueListFacts checks what next.go says of Gitea's issue list.
func testIssueListFacts(t *testing.T, g *integration.Gitea, q *queue) {
	base := "/repos/" + q.repo.FullName() + "/issues?state=open"
	open := q.oldestOpen(false, nil, 1000)

	// Newest first, 50 a page at most, the count in X-Total-Count.
	p1 := rawList(t, g, base+"&type=issues&page=1&limit=100")
	if len(p1.numbers) != 50 || p1.total != strconv.Itoa(len(open)) {
		t.Errorf("page 1 of 100: %d issues, X-Total-Count %s; want 50 and %d", len(p1.numbers), p1.total, len(open))
	}
	p2 := rawList(t, g, base+"&type=issues&page=2&limit=50")
	if all := append(p1.numbers, p2.numbers...); !slices.Equal(all, reversed(open)) {
		t.Errorf("pages 1 and 2 = %v, want the open issues newest first %v", all, reversed(open))
	}
	// Page p of size s starts at offset (p−1)·s.
	if p := rawList(t, g, base+"&type=issues&page=3&limit=7"); !slices.Equal(p.numbers, reversed(open)[14:21]) {
		t.Errorf("page 3 of 7 = %v, want offsets 14…20 %v", p.numbers, reversed(open)[14:21])
	}

	// type=pulls: exactly the open pull requests; type=issues none of them.
	if p := rawList(t, g, base+"&type=pulls"); !slices.Equal(p.numbers, []int64{q.pull}) || p.total != "1" {
		t.Errorf("type=pulls = %v (X-Total-Count %s), want [%d]", p.numbers, p.total, q.pull)
	}
	if slices.Contains(p1.numbers, q.pull) || slices.Contains(p2.numbers, q.pull) {
		t.Errorf("type=issues lists the pull request #%d", q.pull)
	}

	// labels=: several names are ANDed, but only repository labels count.
	labelled := func(labels string) []int64 {
		return reversed(rawList(t, g, base+"&type=issues&limit=50&labels="+labels).numbers)
	}
	if got, want := labelled("agent,bug"), q.withRepoLabels("agent", "bug"); !slices.Equal(got, want) {
		t.Errorf("labels=agent,bug = %v, want (AND, repository labels only) %v", got, want)
	}
	if got := labelled("agent"); slices.Contains(got, 5) || slices.Contains(got, 40) {
		t.Errorf("labels=agent = %v lists the issues with the organization's label agent: the Forge could use the filter", got)
	}
	if got := labelled("dup"); len(got) != 0 {
		t.Errorf("labels=dup = %v: two repository labels named dup are no longer ANDed", got)
	}
	if got := labelled("no-such-label"); len(got) != 50 {
		t.Errorf("labels=no-such-label = %d issues, want the filter dropped (50, a page)", len(got))
	}
}

// withRepoLabels is what Gitea's labels= answers (open issues with all
// these repository labels, at most a page), oldest first.
func (q *queue) withRepoLabels(names ...string) []int64 {
	out := []int64{}
	for n := int64(1); n <= q.last; n++ {
		is := q.issues[n]
		ok := !is.closed && !is.pull && n != 5 && n != 40 // those have the organization's agent
		for _, l := range names {
			ok = ok && slices.Contains(is.labels, l)
		}
		if ok {
			out = append(out, n)
		}
	}
	return out
}

func testOpenIssues(t *testing.T, f *Forge, q *queue) {
	ctx := context.Background()
	if open := len(q.oldestOpen(false, nil, 1000)); open <= 50 {
		t.Fatalf("only %d open issues: the listing fits one page", open)
	}
	for _, c := range []struct {
		pulls       bool
		labels      []string
		limit       int
		maxRequests int
	}{
		{false, nil, 1, 2}, {false, nil, 5, 2}, {false, nil, 15, 2}, {false, nil, 50, 3}, {false, nil, 64, 2}, {false, nil, 500, 2},
		{true, nil, 5, 1}, {true, []string{"agent"}, 5, 1}, {true, []string{"bug"}, 5, 1},
		{false, []string{"agent"}, 3, 2}, {false, []string{"agent"}, 100, 2},
		{false, []string{"agent", "bug"}, 100, 2}, {false, []string{"bug", "agent"}, 2, 2},
		{false, []string{"dup"}, 10, 2}, {false, []string{"org-only"}, 10, 2},
		{false, []string{"Agent"}, 10, 2}, {false, []string{"no-such-label"}, 10, 2},
	} {
		t.Run(fmt.Sprintf("pulls %v labels %q limit %d", c.pulls, c.labels, c.limit), func(t *testing.T) {
			got, requests, err := f.OpenIssues(ctx, q.repo.Owner, q.repo.Name, forge.IssueFilter{Pulls: c.pulls, Labels: c.labels}, c.limit)
			if err != nil {
				t.Fatal(err)
			}
			if want := q.oldestOpen(c.pulls, c.labels, c.limit); !slices.Equal(numbers(got), want) {
				t.Fatalf("OpenIssues = %v, want %v", numbers(got), want)
			}
			for _, is := range got {
				if is.IsPull != c.pulls || is.Closed || is.Updated.IsZero() {
					t.Errorf("%+v: want IsPull %v, open, with its update time", is, c.pulls)
				}
			}
			if requests < 1 || requests > c.maxRequests {
				t.Errorf("%d requests, want 1…%d", requests, c.maxRequests)
			}
		})
	}
	// The issues with the organization's label "agent" are among those
	// with "agent": what Gitea's own filter would have left out.
	got, _, err := f.OpenIssues(ctx, q.repo.Owner, q.repo.Name, forge.IssueFilter{Labels: []string{"agent"}}, 100)
	if err != nil || !slices.Contains(numbers(got), 5) || !slices.Contains(numbers(got), 40) {
		t.Errorf("label agent: %v %v, want #5 and #40 among them", numbers(got), err)
	}
	if _, _, err := f.OpenIssues(ctx, q.repo.Owner, "no-such-repo", forge.IssueFilter{}, 5); !errors.Is(err, forge.ErrNotFound) {
		t.Errorf("no such repository: %v, want ErrNotFound", err)
	}
}

// testBlocked: dependencies within and across repositories, pages of
// them, and a repository with dependencies switched off.
func testBlocked(t *testing.T, g *integration.Gitea, f *Forge, q *queue) {
	ctx := context.Background()
	admin := g.Admin()
	repoPath := func(r integration.Repo) string { return "/repos/" + r.FullName() }
	newIssue := func(r integration.Repo, closed bool) int64 {
		t.Helper()
		var is struct{ Number int64 }
		must(t, admin.Do(ctx, "POST", repoPath(r)+"/issues", map[string]any{"title": "a dependency", "closed": closed}, &is))
		return is.Number
	}
	dependOn := func(r integration.Repo, n int64, on integration.Repo, m int64) {
		t.Helper()
		must(t, admin.Do(ctx, "POST", fmt.Sprintf("%s/issues/%d/dependencies", repoPath(r), n), map[string]any{"owner": on.Owner, "repo": on.Name, "index": m}, nil))
	}
	setState := func(r integration.Repo, n int64, state string) {
		t.Helper()
		must(t, admin.Do(ctx, "PATCH", fmt.Sprintf("%s/issues/%d", repoPath(r), n), map[string]any{"state": state}, nil))
	}
	blocked := func(r integration.Repo, n int64, want bool) {
		t.Helper()
		if got, err := f.Blocked(ctx, r.Owner, r.Name, n); err != nil || got != want {
			t.Fatalf("Blocked(%s#%d) = %v %v, want %v", r.FullName(), n, got, err, want)
		}
	}

	// Within the repository: #3 depends on #4 (an issue) and on the pull
	// request; each must be closed before #3 is free.
	blocked(q.repo, 3, false)
	dependOn(q.repo, 3, q.repo, 4)
	dependOn(q.repo, 3, q.repo, q.pull)
	blocked(q.repo, 3, true)
	setState(q.repo, 4, "closed")
	blocked(q.repo, 3, true)
	setState(q.repo, q.pull, "closed")
	blocked(q.repo, 3, false)
	setState(q.repo, 4, "open")
	blocked(q.repo, 3, true)

	// Across repositories, and past the first page: Gitea lists the
	// dependencies of the issue's own repository first, so 50 closed ones
	// here push the open one of another repository to page 2.
	other := integration.Repo{Owner: q.repo.Owner, Name: "queue-blockers"}
	must(t, admin.Do(ctx, "POST", "/orgs/"+other.Owner+"/repos", map[string]any{"name": other.Name}, nil))
	away := newIssue(other, false)
	target := newIssue(q.repo, false)
	var (
		mu     sync.Mutex
		closed []int64
		wg     sync.WaitGroup
		errs   = make(chan error, 50)
		slots  = make(chan struct{}, 4) // a few at a time: one SQLite
	)
	for range 50 {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			var is struct{ Number int64 }
			if err := admin.Do(ctx, "POST", repoPath(q.repo)+"/issues", map[string]any{"title": "a closed dependency", "closed": true}, &is); err != nil {
				errs <- err
				return
			}
			if err := admin.Do(ctx, "POST", fmt.Sprintf("%s/issues/%d/dependencies", repoPath(q.repo), target),
				map[string]any{"owner": q.repo.Owner, "repo": q.repo.Name, "index": is.Number}, nil); err != nil {
				errs <- err
				return
			}
			mu.Lock()
			closed = append(closed, is.Number)
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	dependOn(q.repo, target, other, away)
	deps := fmt.Sprintf("%s/issues/%d/dependencies", repoPath(q.repo), target)
	p1 := rawList(t, g, deps+"?page=1&limit=50")
	p2 := rawList(t, g, deps+"?page=2&limit=50")
	if len(p1.numbers) != 50 || slices.Contains(p1.states, "open") || p1.total != "51" {
		t.Fatalf("dependencies page 1 of 50: %v %v (X-Total-Count %s), want the 50 closed ones of 51", p1.numbers, p1.states, p1.total)
	}
	if !slices.Equal(p2.numbers, []int64{away}) || !slices.Equal(p2.states, []string{"open"}) {
		t.Fatalf("dependencies page 2: %v %v, want [%d] open", p2.numbers, p2.states, away)
	}
	if p := rawList(t, g, deps); len(p.numbers) != 30 {
		t.Errorf("dependencies without page or limit: %d, want Gitea's default page of 30", len(p.numbers))
	}
	blocked(q.repo, target, true)
	setState(other, away, "closed")
	blocked(q.repo, target, false)
	setState(q.repo, closed[7], "open")
	blocked(q.repo, target, true)

	// Dependencies switched off: Gitea answers 404 for them, and nothing
	// blocks. An issue that does not exist is not found either way.
	off := integration.Repo{Owner: q.repo.Owner, Name: "queue-nodeps"}
	must(t, admin.Do(ctx, "POST", "/orgs/"+off.Owner+"/repos", map[string]any{"name": off.Name, "auto_init": true}, nil))
	a, b := newIssue(off, false), newIssue(off, false)
	dependOn(off, a, off, b)
	blocked(off, a, true)
	must(t, admin.Do(ctx, "PATCH", repoPath(off), map[string]any{"has_issues": true, "internal_tracker": map[string]any{
		"enable_time_tracker": true, "allow_only_contributors_to_track_time": true, "enable_issue_dependencies": false,
	}}, nil))
	var apiErr *integration.APIError
	if err := admin.Do(ctx, "GET", fmt.Sprintf("%s/issues/%d/dependencies", repoPath(off), a), nil, nil); !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound {
		t.Fatalf("dependencies switched off: %v, want 404", err)
	}
	blocked(off, a, false)
	for _, r := range []integration.Repo{off, q.repo} {
		if _, err := f.Blocked(ctx, r.Owner, r.Name, 9999); !errors.Is(err, forge.ErrNotFound) {
			t.Errorf("Blocked(%s#9999) = %v, want ErrNotFound", r.FullName(), err)
		}
	}
	if _, err := f.Blocked(ctx, off.Owner, "no-such-repo", 1); !errors.Is(err, forge.ErrNotFound) {
		t.Errorf("Blocked in no repository: %v, want ErrNotFound", err)
	}

	// Without the Issues unit, Gitea answers 404 for its issues (not for
	// its pull requests).
	must(t, admin.Do(ctx, "PATCH", repoPath(off), map[string]any{"has_issues": false}, nil))
	if _, _, err := f.OpenIssues(ctx, off.Owner, off.Name, forge.IssueFilter{}, 5); !errors.Is(err, forge.ErrNotFound) {
		t.Errorf("issues of a repository without issues: %v, want ErrNotFound", err)
	}
	if got, _, err := f.OpenIssues(ctx, off.Owner, off.Name, forge.IssueFilter{Pulls: true}, 5); err != nil || len(got) != 0 {
		t.Errorf("pull requests of a repository without issues: %v %v, want none", got, err)
	}
}

// testRepoAdmin: Repo.Admin is Gitea's permissions.admin, and a token
// never carries it.
func testRepoAdmin(t *testing.T, g *integration.Gitea, f *Forge, w *integration.World) {
	ctx := context.Background()
	for _, c := range []struct {
		login string
		repo  integration.Repo
		want  bool
		why   string
	}{
		{w.Admin.Login, w.Widgets, true, "site administrator"},
		{w.Olivia.Login, w.Widgets, true, "Owners team"},
		{w.Heidi.Login, w.Secret, true, "admin collaborator"},
		{w.Alice.Login, w.Notes, true, "owner"},
		{w.Alice.Login, w.Widgets, false, "write collaborator"},
		{w.Bob.Login, w.Widgets, false, "write collaborator"},
		{w.Dave.Login, w.Widgets, false, "team with write on issues"},
		{w.Carol.Login, w.Notes, false, "read collaborator"},
		{"", w.Widgets, false, "anonymous"},
	} {
		r, err := f.Repo(ctx, c.login, c.repo.Owner, c.repo.Name)
		if err != nil || r.Admin != c.want {
			t.Errorf("%s (%s) on %s: Admin %v %v, want %v", or(c.login, "anonymous"), c.why, c.repo.FullName(), r.Admin, err, c.want)
		}
	}
	tok := newToken(t, g, w.Alice, "next-admin", "read:user", "read:repository", "read:issue")
	if r, err := f.TokenRepo(ctx, forge.User{ID: w.Alice.ID, Login: w.Alice.Login}, tok, w.Notes.Owner, w.Notes.Name); err != nil || r.Admin || !r.CanReadIssues {
		t.Errorf("Alice's token on her Notes: %+v %v, want no Admin", r, err)
	}
}
