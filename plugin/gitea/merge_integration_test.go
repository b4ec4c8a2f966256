package gitea

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/integration"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// PullForMerge, MergePull and ConflictTest against a real Gitea 1.26 that
// runs a git of 2.40 or later, so that it tests pull requests with
// merge-tree, as ConflictTest does (and as a Gitea should that the
// sidecar merges through). Maria owns the private repository, Wes writes
// it, Rita reads it, Sam does not see it.
func TestMergeAgainstGitea(t *testing.T) {
	g, git := giteaWithRecentGit(t)
	ctx := context.Background()
	admin := g.Admin()
	for _, login := range []string{"maria", "wes", "rita", "sam"} {
		must(t, admin.Do(ctx, "POST", "/admin/users", map[string]any{
			"username": login, "email": login + "@example.com", "password": "Passw0rd!" + login, "must_change_password": false,
		}, nil))
	}
	var repo struct{ ID int64 }
	must(t, admin.Do(ctx, "POST", "/admin/users/maria/repos", map[string]any{
		"name": "merges", "auto_init": true, "default_branch": "main", "private": true,
	}, &repo))
	must(t, admin.Do(ctx, "PUT", "/repos/maria/merges/collaborators/wes", map[string]any{"permission": "write"}, nil))
	must(t, admin.Do(ctx, "PUT", "/repos/maria/merges/collaborators/rita", map[string]any{"permission": "read"}, nil))
	repoDir := filepath.Join(g.Dir, "repos", "maria", "merges.git")

	// The sidecar's token: what it needs to answer and to merge.
	token := func(name string, scopes ...string) string {
		var tok struct {
			SHA1 string `json:"sha1"`
		}
		basic := &integration.API{URL: g.URL, User: g.AdminLogin, Password: g.AdminPassword}
		must(t, basic.Do(ctx, "POST", "/users/"+g.AdminLogin+"/tokens", map[string]any{"name": name, "scopes": scopes}, &tok))
		return tok.SHA1
	}
	f, err := New(Options{URL: g.URL, Token: token("merges", "read:user", "read:repository", "read:issue", "write:repository")})
	must(t, err)
	h := &mergeWorld{t: t, g: g, f: f}

	t.Run("merged with the head it was asked for", func(t *testing.T) {
		h.t = t
		n := h.openPull("add-a", "a.txt", "a\n")
		st := h.waitFor(n, "mergeable", func(st forge.PullState) bool { return st.Mergeable })
		want := forge.PullState{Number: n, Mergeable: true, HeadSHA: h.branch("add-a"), BaseSHA: h.branch("main"),
			Base: "main", Head: "add-a", HeadRepoID: repo.ID, Title: st.Title, Author: st.Author, Updated: st.Updated}
		if st != want || st.Title == "" || st.Author.Login == "" || st.Updated.IsZero() {
			t.Errorf("PullForMerge = %+v, want %+v", st, want)
		}
		if err := f.MergePull(ctx, "wes", "maria", "merges", n, forge.MergeOptions{Style: "merge", HeadSHA: st.HeadSHA, DeleteBranch: true}); err != nil {
			t.Fatalf("MergePull: %v", err)
		}
		after, err := f.PullForMerge(ctx, "wes", "maria", "merges", n)
		if err != nil || !after.Merged || !after.Closed || after.MergeSHA == "" || after.MergeSHA != h.branch("main") || after.MergedAt.IsZero() {
			t.Errorf("after the merge: %+v, %v; want merged, closed, and main at the merge commit %s", after, err, h.branch("main"))
		}
		var raw struct {
			MergedBy struct{ Login string } `json:"merged_by"`
		}
		must(t, admin.Do(ctx, "GET", fmt.Sprintf("/repos/maria/merges/pulls/%d", n), nil, &raw))
		if raw.MergedBy.Login != "wes" {
			t.Errorf("merged by %q, want wes (Sudo)", raw.MergedBy.Login)
		}
		var apiErr *integration.APIError
		if err := admin.Do(ctx, "GET", "/repos/maria/merges/branches/add-a", nil, nil); !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound {
			t.Errorf("the head branch after a merge that deletes it: %v, want 404", err)
		}
	})

	t.Run("a head that moved is refused", func(t *testing.T) {
		h.t = t
		n := h.openPull("add-b", "b.txt", "b\n")
		st := h.waitFor(n, "mergeable", func(st forge.PullState) bool { return st.Mergeable })
		err := f.MergePull(ctx, "wes", "maria", "merges", n, forge.MergeOptions{HeadSHA: st.BaseSHA})
		var r *forge.MergeRefusedError
		if !errors.As(err, &r) || !r.HeadMoved || r.Hook || r.Conflict || r.Failed {
			t.Fatalf("MergePull with a stale head: %v, want a refusal, HeadMoved", err)
		}
		if st, err := f.PullForMerge(ctx, "wes", "maria", "merges", n); err != nil || st.Merged || st.Closed {
			t.Errorf("after the refusal: %+v, %v; want it open", st, err)
		}
		// Gitea tests the pull request again after a merge that failed.
		h.mergeWhenTested(n, forge.MergeOptions{Style: "squash", HeadSHA: st.HeadSHA}, "with the right head, squashed")
		if err := f.MergePull(ctx, "wes", "maria", "merges", n, forge.MergeOptions{}); !errors.As(err, &r) || !strings.Contains(r.Reason, "already merged") {
			t.Errorf("merged twice: %v, want a refusal: already merged", err)
		}
	})

	t.Run("a conflict: not yet, and the conflict test says why", func(t *testing.T) {
		h.t = t
		left := h.openPull("left", "README.md", "# merges\n\nleft\n")
		right := h.openPull("right", "README.md", "# merges\n\nright\n")
		l := h.waitFor(left, "mergeable", func(st forge.PullState) bool { return st.Mergeable })
		h.waitFor(right, "mergeable", func(st forge.PullState) bool { return st.Mergeable })
		other := h.openPull("add-e", "e.txt", "e\n")
		h.waitFor(other, "mergeable", func(st forge.PullState) bool { return st.Mergeable })
		must(t, f.MergePull(ctx, "wes", "maria", "merges", left, forge.MergeOptions{HeadSHA: l.HeadSHA}))
		h.watch(other, left)
		// Gitea tests right again against the new main (or marks it for
		// testing): until then it would try the merge and find the
		// conflict itself.
		r := h.waitFor(right, "not mergeable", func(st forge.PullState) bool { return !st.Mergeable })
		err := f.MergePull(ctx, "wes", "maria", "merges", right, forge.MergeOptions{HeadSHA: r.HeadSHA})
		if !errors.Is(err, forge.ErrMergeNotYet) {
			t.Fatalf("MergePull of a conflicting pull request: %v, want ErrMergeNotYet", err)
		}
		r, err = f.PullForMerge(ctx, "wes", "maria", "merges", right)
		must(t, err)
		if r.BaseSHA != h.branch("main") {
			t.Errorf("base %s, want main's %s", r.BaseSHA, h.branch("main"))
		}
		conflict, files, err := ConflictTest(ctx, git, repoDir, r.BaseSHA, r.HeadSHA)
		if err != nil || !conflict || !slices.Equal(files, []string{"README.md"}) {
			t.Errorf("ConflictTest in Gitea's repository = %v, %q, %v; want a conflict in README.md", conflict, files, err)
		}
		o, err := f.PullForMerge(ctx, "wes", "maria", "merges", other)
		must(t, err)
		if conflict, files, err := ConflictTest(ctx, git, repoDir, o.BaseSHA, o.HeadSHA); err != nil || conflict || files != nil {
			t.Errorf("ConflictTest of a clean pull request = %v, %q, %v; want none", conflict, files, err)
		}
	})

	t.Run("who may not merge is refused", func(t *testing.T) {
		h.t = t
		n := h.openPull("add-c", "c.txt", "c\n")
		h.waitFor(n, "mergeable", func(st forge.PullState) bool { return st.Mergeable })
		var r *forge.MergeRefusedError
		if err := f.MergePull(ctx, "rita", "maria", "merges", n, forge.MergeOptions{}); !errors.As(err, &r) || !strings.Contains(r.Reason, "not allowed to merge") {
			t.Errorf("a reader's merge: %v, want a refusal: not allowed to merge", err)
		}
		if st, err := f.PullForMerge(ctx, "rita", "maria", "merges", n); err != nil || st.Number != n {
			t.Errorf("a reader's PullForMerge: %+v, %v", st, err)
		}
		for _, login := range []string{"sam", "nobody-by-this-name"} {
			if err := f.MergePull(ctx, login, "maria", "merges", n, forge.MergeOptions{}); !errors.As(err, &r) || !strings.Contains(r.Reason, "not there") {
				t.Errorf("%s's merge: %v, want a refusal: not there", login, err)
			}
			if _, err := f.PullForMerge(ctx, login, "maria", "merges", n); !errors.Is(err, forge.ErrNotFound) {
				t.Errorf("%s's PullForMerge: %v, want ErrNotFound", login, err)
			}
		}
		if err := f.MergePull(ctx, "wes", "maria", "merges", n, forge.MergeOptions{Style: "manually-merged"}); !errors.As(err, &r) || !strings.Contains(r.Reason, "merge style") {
			t.Errorf("manually-merged: %v, want a refusal of the style", err)
		}
		readOnly, err := New(Options{URL: g.URL, Token: token("read-only", "read:user", "read:repository", "read:issue")})
		must(t, err)
		if err := readOnly.MergePull(ctx, "wes", "maria", "merges", n, forge.MergeOptions{}); !errors.Is(err, forge.ErrConfig) {
			t.Errorf("through a token without write:repository: %v, want ErrConfig", err)
		}
		if st, err := f.PullForMerge(ctx, "wes", "maria", "merges", n); err != nil || st.Merged || st.Closed {
			t.Errorf("after the refusals: %+v, %v; want it open", st, err)
		}
		must(t, admin.Do(ctx, "PATCH", fmt.Sprintf("/repos/maria/merges/pulls/%d", n), map[string]any{"state": "closed"}, nil))
		if err := f.MergePull(ctx, "wes", "maria", "merges", n, forge.MergeOptions{}); !errors.As(err, &r) || !strings.Contains(r.Reason, "closed") {
			t.Errorf("a closed pull request's merge: %v, want a refusal: closed", err)
		}
		if st, err := f.PullForMerge(ctx, "wes", "maria", "merges", n); err != nil || !st.Closed || st.Merged {
			t.Errorf("closed: %+v, %v", st, err)
		}
	})

	t.Run("a pre-receive hook refuses", func(t *testing.T) {
		h.t = t
		n := h.openPull("add-d", "d.txt", "d\n")
		st := h.waitFor(n, "mergeable", func(st forge.PullState) bool { return st.Mergeable })
		hook := filepath.Join(repoDir, "hooks", "pre-receive.d", "collab-lease-test")
		script := "#!/bin/sh\nwhile read old new ref; do\n  if [ \"$ref\" = refs/heads/main ]; then\n" +
			"    echo 'main is frozen for the test' >&2\n    echo 'ask again later' >&2\n    exit 1\n  fi\ndone\n"
		must(t, os.WriteFile(hook, []byte(script), 0o755))
		err := f.MergePull(ctx, "wes", "maria", "merges", n, forge.MergeOptions{HeadSHA: st.HeadSHA})
		var r *forge.MergeRefusedError
		if !errors.As(err, &r) || !r.Hook || r.Reason != "main is frozen for the test ask again later" {
			t.Errorf("MergePull against the hook: %v (%+v), want a refusal, Hook, with its words", err, r)
		}
		must(t, os.Remove(hook))
		h.mergeWhenTested(n, forge.MergeOptions{HeadSHA: st.HeadSHA}, "once the hook is gone")
	})
}

// giteaWithRecentGit starts a Gitea as integration.NewGitea does, but
// running the git integration.BuildGit builds (2.40 or later), and returns
// that git too. It skips with -short.
func giteaWithRecentGit(t *testing.T) (*integration.Gitea, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a real Gitea: not run with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	git, err := integration.BuildGit(ctx)
	if err != nil {
		t.Fatalf("build git: %v", err)
	}
	g, err := integration.StartGitea(ctx, integration.Options{Dir: t.TempDir(), Git: git})
	if err != nil {
		t.Fatalf("start Gitea: %v", err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Errorf("stop Gitea: %v", err)
		}
		if t.Failed() {
			t.Logf("Gitea log:\n%s", g.LogTail(60))
		}
	})
	return g, git
}

// mergeWorld opens pull requests on maria/merges and waits for Gitea.
type mergeWorld struct {
	t *testing.T
	g *integration.Gitea
	f *Forge
}

// branch is the commit a branch of maria/merges is at.
func (h *mergeWorld) branch(name string) string {
	h.t.Helper()
	var b struct{ Commit struct{ ID string } }
	must(h.t, h.g.Admin().Do(context.Background(), "GET", "/repos/maria/merges/branches/"+url.PathEscape(name), nil, &b))
	return b.Commit.ID
}

// openPull commits content as path on a new branch from main, through the
// contents API, and opens a pull request of it into main.
func (h *mergeWorld) openPull(branch, path, content string) int64 {
	h.t.Helper()
	ctx := context.Background()
	admin := h.g.Admin()
	body := map[string]any{
		"content": base64.StdEncoding.EncodeToString([]byte(content)),
		"message": "Change " + path, "branch": "main", "new_branch": branch,
	}
	var existing struct{ SHA string }
	method := "POST"
	if err := admin.Do(ctx, "GET", "/repos/maria/merges/contents/"+path+"?ref=main", nil, &existing); err == nil {
		method, body["sha"] = "PUT", existing.SHA
	}
	must(h.t, admin.Do(ctx, method, "/repos/maria/merges/contents/"+path, body, nil))
	var pr struct{ Number int64 }
	must(h.t, admin.Do(ctx, "POST", "/repos/maria/merges/pulls", map[string]any{"head": branch, "base": "main", "title": "Change " + path}, &pr))
	return pr.Number
}

// mergeWhenTested merges pull request n as wes, trying again while Gitea
// answers "try again later" (it tests a pull request again after a merge
// of it failed), for at most queueLost; past that, it skips the rest of
// the test, which Gitea's queue failed.
func (h *mergeWorld) mergeWhenTested(n int64, o forge.MergeOptions, what string) {
	h.t.Helper()
	start := time.Now()
	for tries := 1; ; tries++ {
		err := h.f.MergePull(context.Background(), "wes", "maria", "merges", n, o)
		switch {
		case err == nil:
			h.t.Logf("pull request %d merged %s after %d tries in %v", n, what, tries, time.Since(start).Round(time.Millisecond))
			return
		case !errors.Is(err, forge.ErrMergeNotYet):
			h.t.Fatalf("MergePull of %d %s: %v", n, what, err)
		case time.Since(start) > queueLost:
			h.t.Skipf("Gitea did not test pull request %d again within %v (its channel queue lost the test): %v", n, queueLost, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// queueLost is how long Gitea may take to test a pull request again
// before the test takes that test for lost. Gitea 1.26's channel queue,
// which the test Gitea runs (integration/gitea.go), can lose a test of a
// pull request it tested before: it records an item as queued after
// handing it to a worker, so one taken at once stays recorded, and every
// later test of that pull request is dropped as already queued. A pull
// request's first test is never lost that way.
const queueLost = 20 * time.Second

// watch logs, for a while, what PullForMerge says of pull request n after
// the merge of pull request by moved its base: when Gitea marked it for
// testing, and when it had tested it again.
func (h *mergeWorld) watch(n, by int64) {
	h.t.Helper()
	start := time.Now()
	var untested time.Duration
	for time.Since(start) < 5*time.Second {
		st, err := h.f.PullForMerge(context.Background(), "wes", "maria", "merges", n)
		if err != nil {
			h.t.Fatalf("PullForMerge of %d: %v", n, err)
		}
		switch {
		case !st.Mergeable && untested == 0:
			untested = time.Since(start)
		case st.Mergeable && untested != 0:
			h.t.Logf("after the merge of %d, pull request %d was being tested from %v to %v", by, n,
				untested.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	if untested == 0 {
		h.t.Logf("after the merge of %d, pull request %d was never seen untested within 5 s", by, n)
	} else {
		h.t.Logf("after the merge of %d, pull request %d was untested from %v and not tested again within 5 s (a test lost by the queue?)",
			by, n, untested.Round(time.Millisecond))
	}
}

// waitFor polls PullForMerge as wes until ok, for at most a minute, and
// logs how long Gitea took.
func (h *mergeWorld) waitFor(n int64, what string, ok func(forge.PullState) bool) forge.PullState {
	h.t.Helper()
	start := time.Now()
	deadline := start.Add(time.Minute)
	for {
		st, err := h.f.PullForMerge(context.Background(), "wes", "maria", "merges", n)
		if err != nil {
			h.t.Fatalf("PullForMerge of %d: %v", n, err)
		}
		if ok(st) {
			h.t.Logf("pull request %d was %s after %v", n, what, time.Since(start).Round(time.Millisecond))
			return st
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("pull request %d is not %s after %v: %+v", n, what, time.Since(start), st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
