package integration

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// Merges through the sidecar against the real Gitea, its real hooks and
// the gate, under ONE account: its agents merge their pull requests with
// `collab-lease merge`, one at a time; a stale token, a conflict and a
// zombie's direct merge are refused.

// mergeReply is any reply of merge.
type mergeReply struct {
	Status string
	Repo   string
	Pull   int64
	SHA    string
	Token  int64
	Reason string
	Ahead  int
	Issue  int64
}

func parseMerge(t *testing.T, r SSHResult) mergeReply {
	t.Helper()
	var m mergeReply
	if err := json.Unmarshal([]byte(r.Stdout), &m); err != nil {
		t.Fatalf("merge's reply is not JSON: %s", show(r))
	}
	return m
}

// openPullOf opens a pull request by u from a new branch whose commit
// writes file with content.
func (a *agentWorld) openPullOf(u *User, branch, file, content, body string) int64 {
	a.t.Helper()
	as := a.g.As(u.Login)
	if err := as.Do(a.ctx, "POST", "/repos/"+a.repo.FullName()+"/contents/"+file, map[string]any{
		"content": base64.StdEncoding.EncodeToString([]byte(content)), "message": "Write " + file, "branch": "main", "new_branch": branch,
	}, nil); err != nil {
		a.t.Fatalf("commit on %s: %v", branch, err)
	}
	var pr struct{ Number int64 }
	if err := as.Do(a.ctx, "POST", "/repos/"+a.repo.FullName()+"/pulls", map[string]any{
		"head": branch, "base": "main", "title": "Work on " + branch, "body": body,
	}, &pr); err != nil {
		a.t.Fatalf("open a pull request from %s: %v", branch, err)
	}
	return pr.Number
}

// pullMerged returns whether Gitea says pull request n is merged, and its
// merge commit and that commit's parents.
func (gw *gateWorld) pullMerged(n int64) (bool, string, []string) {
	gw.t.Helper()
	var p struct {
		Merged   bool
		MergeSHA string `json:"merge_commit_sha"`
	}
	if err := gw.g.As("").Do(gw.ctx, "GET", fmt.Sprintf("/repos/%s/pulls/%d", gw.repo.FullName(), n), nil, &p); err != nil {
		gw.t.Fatal(err)
	}
	if !p.Merged {
		return false, "", nil
	}
	var c struct {
		Parents []struct{ SHA string }
	}
	if err := gw.g.As("").Do(gw.ctx, "GET", "/repos/"+gw.repo.FullName()+"/git/commits/"+p.MergeSHA, nil, &c); err != nil {
		gw.t.Fatal(err)
	}
	var parents []string
	for _, x := range c.Parents {
		parents = append(parents, x.SHA)
	}
	return true, p.MergeSHA, parents
}

func TestMergeThroughTheSidecarUnderOneAccountAgainstGitea(t *testing.T) {
	gw := newGateWorld(t)
	bot := identityUser(t, gw.ctx, gw.g, gw.w, "bot", gw.repo)
	carol := identityUser(t, gw.ctx, gw.g, gw.w, "carol", gw.repo)
	as := func(agent, verb string, n int64, extra ...string) SSHResult {
		return run(t, gw.s, bot, lease(verb, gw.repo, n, append(extra, "--agent", agent)...))
	}
	issues := gw.issues(5)

	// Two agents' pull requests, each closing its agent's issue, merged
	// at once: one after the other, both land, and both claims have
	// ended when the replies come.
	pulls := map[string]int64{}
	for i, agent := range []string{"a1", "a2"} {
		expect(t, as(agent, "acquire", issues[i], "--ttl", "30m"), 0, agent+" claims its issue")
		pulls[agent] = gw.openPullOf(bot, "work-"+agent, agent+".txt", agent+"\n", fmt.Sprintf("Fixes #%d", issues[i]))
	}
	var wg sync.WaitGroup
	replies := map[string]SSHResult{}
	var mu sync.Mutex
	for _, agent := range []string{"a1", "a2"} {
		wg.Go(func() {
			r := as(agent, "merge", pulls[agent])
			mu.Lock()
			replies[agent] = r
			mu.Unlock()
		})
	}
	wg.Wait()
	var shas []string
	parents := map[string][]string{}
	for i, agent := range []string{"a1", "a2"} {
		r := replies[agent]
		m := parseMerge(t, r)
		if r.Code != 0 || m.Status != contract.StatusMerged || m.Pull != pulls[agent] || m.Token != 1 || len(m.SHA) != 40 {
			t.Fatalf("%s's merge: %s", agent, show(r))
		}
		// The claim ended before the reply, not when the webhook came.
		if c := as(agent, "check", issues[i], "--token", "1"); c.Code != contract.ExitConflict || !strings.Contains(c.Stdout, `"status":"stale"`) {
			t.Fatalf("%s's claim right after its merge: %s, want ended", agent, show(c))
		}
		merged, sha, ps := gw.pullMerged(pulls[agent])
		if !merged || sha != m.SHA {
			t.Fatalf("Gitea says pull request %d merged=%v at %s, the reply %s", pulls[agent], merged, sha, m.SHA)
		}
		shas = append(shas, sha)
		parents[sha] = ps
	}
	// One after the other: one merge commit is the other's first parent.
	if !(len(parents[shas[0]]) > 0 && parents[shas[0]][0] == shas[1]) && !(len(parents[shas[1]]) > 0 && parents[shas[1]][0] == shas[0]) {
		t.Fatalf("the two merges are not one after the other: %v", parents)
	}

	// A merge under a stale token is stale, and nothing is merged.
	expect(t, as("a3", "acquire", issues[2], "--ttl", "30m"), 0, "a3 claims its issue")
	p3 := gw.openPullOf(bot, "work-a3", "a3.txt", "a3\n", fmt.Sprintf("Fixes #%d", issues[2]))
	r := as("a3", "merge", p3, "--token", "7")
	if m := parseMerge(t, r); r.Code != contract.ExitConflict || m.Status != contract.StatusStale || m.Issue != issues[2] {
		t.Fatalf("a merge with a stale token: %s, want stale", show(r))
	}
	// Nor does anyone but the holder merge it.
	r = as("a1", "merge", p3)
	if m := parseMerge(t, r); r.Code != contract.ExitConflict || m.Status != contract.StatusNotHolder {
		t.Fatalf("a1's merge of a3's pull request: %s, want not_holder", show(r))
	}
	if merged, _, _ := gw.pullMerged(p3); merged {
		t.Fatal("the pull request was merged all the same")
	}

	// A zombie of the same account merging through Gitea's own API: the
	// gate refuses it with its line, Gitea answers 409, nothing merged.
	gw.waitFenced(carol, "work-a3")
	err := gw.g.As(bot.Login).Do(gw.ctx, "POST", fmt.Sprintf("/repos/%s/pulls/%d/merge", gw.repo.FullName(), p3), map[string]any{"Do": "merge"}, nil)
	var apiErr *APIError
	want := fmt.Sprintf("collab-lease: merging %s!%d needs the current claim: merge with git collab merge", gw.repo.FullName(), p3)
	if !errors.As(err, &apiErr) || apiErr.Status != 409 || !strings.Contains(apiErr.Body, want) {
		t.Fatalf("a direct merge of a claimed pull request: %v, want 409 saying %q", err, want)
	}
	if merged, _, _ := gw.pullMerged(p3); merged {
		t.Fatal("the zombie's direct merge went in")
	}
	// a3 merges it itself.
	if r := as("a3", "merge", p3, "--token", "1", "--style", "squash", "--delete-branch"); r.Code != 0 {
		t.Fatalf("a3's merge: %s", show(r))
	}

	// A conflict is refused with its reason, at once, and frees the base
	// branch: the next merge goes through right after.
	expect(t, as("a4", "acquire", issues[3], "--ttl", "30m"), 0, "a4 claims its issue")
	expect(t, as("a5", "acquire", issues[4], "--ttl", "30m"), 0, "a5 claims its issue")
	p4 := gw.openPullOf(bot, "work-a4", "shared.txt", "a4's\n", fmt.Sprintf("Fixes #%d", issues[3]))
	p5 := gw.openPullOf(bot, "work-a5", "shared.txt", "a5's\n", fmt.Sprintf("Fixes #%d", issues[4]))
	if r := as("a4", "merge", p4); r.Code != 0 {
		t.Fatalf("a4's merge: %s", show(r))
	}
	r = as("a5", "merge", p5, "--wait", "5s")
	if m := parseMerge(t, r); r.Code != contract.ExitConflict || m.Status != contract.StatusRefused || !strings.Contains(m.Reason, "conflict") {
		t.Fatalf("a5's merge of a conflicting pull request: %s, want refused for a conflict", show(r))
	}
	if merged, _, _ := gw.pullMerged(p5); merged {
		t.Fatal("the conflicting pull request was merged")
	}
	// a5 is still the holder, and main is free: a merge of another pull
	// request of its issue goes in at once.
	p6 := gw.openPullOf(bot, "work-a5b", "a5b.txt", "a5b\n", fmt.Sprintf("Fixes #%d", issues[4]))
	if r := as("a5", "merge", p6, "--wait", "5s"); r.Code != 0 {
		t.Fatalf("a merge right after a refused one: %s", show(r))
	}
}

// A sidecar killed while it holds a base branch's turn does not block
// the branch beyond the ticket's bound: here, the claim it merges under,
// which lapses 20 seconds after it began. (This sidecar has no conflict
// test, so it waits on Gitea's test of a conflicting pull request,
// holding the turn, when it is killed.)
func TestAKilledSidecarsMergeTicketEndsWithItsClaimAgainstGitea(t *testing.T) {
	if _, err := exec.LookPath("sqlite3"); err != nil {
		t.Fatal("the sqlite3 command-line shell is required (apt-get install sqlite3)")
	}
	g, w, bin := shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	s, err := StartInstalled(ctx, SidecarOptions{Binary: bin, Gitea: g, DataDir: filepath.Join(t.TempDir(), "data")}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	stopAtEnd(t, s)
	a := &agentWorld{t: t, ctx: ctx, g: g, s: s, repo: identityRepo(t, ctx, g, w)}
	bot := identityUser(t, ctx, g, w, "bot", a.repo)
	issues := a.issues(2)
	as := func(s *Sidecar, agent, verb string, n int64, extra ...string) SSHResult {
		return run(t, s, bot, lease(verb, a.repo, n, append(extra, "--agent", agent)...))
	}
	expect(t, as(s, "a1", "acquire", issues[0], "--ttl", "20s"), 0, "a1 claims its issue for 20 seconds")
	lapses := time.Now().Add(20 * time.Second)
	expect(t, as(s, "a2", "acquire", issues[1], "--ttl", "30m"), 0, "a2 claims its issue")
	p1 := a.openPullOf(bot, "work-a1", "shared.txt", "a1's\n", fmt.Sprintf("Fixes #%d", issues[0]))
	p2 := a.openPullOf(bot, "work-a2", "a2.txt", "a2\n", fmt.Sprintf("Fixes #%d", issues[1]))
	// main writes shared.txt too: Gitea finds p1 conflicting, and this
	// sidecar, without a conflict test, waits holding main's turn.
	if err := g.As(bot.Login).Do(ctx, "POST", "/repos/"+a.repo.FullName()+"/contents/shared.txt", map[string]any{
		"content": base64.StdEncoding.EncodeToString([]byte("main's\n")), "message": "Write shared.txt", "branch": "main",
	}, nil); err != nil {
		t.Fatal(err)
	}
	go as(s, "a1", "merge", p1) // cut off by the kill
	tickets := func() string {
		out, err := exec.CommandContext(ctx, "sqlite3", s.DB, "SELECT pull FROM merge_tickets").Output()
		if err != nil {
			t.Fatalf("sqlite3: %v", err)
		}
		return strings.TrimSpace(string(out))
	}
	for end := time.Now().Add(webhookDeadline); tickets() != fmt.Sprint(p1); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("a1's merge never took main's turn\n%s", tail(s.Logs(), 30))
		}
	}
	s.Kill()
	s2, err := s.Restart(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stopAtEnd(t, s2)
	// The dead sidecar's ticket still holds main: a merge that waits a
	// second is busy (while a1's claim lives).
	if r := as(s2, "a2", "merge", p2, "--wait", "1s"); time.Now().Before(lapses) {
		if m := parseMerge(t, r); r.Code != contract.ExitConflict || m.Status != contract.StatusBusy || m.Ahead != 1 {
			t.Fatalf("a merge while the dead sidecar's ticket holds main: %s, want busy", show(r))
		}
	}
	// Once a1's claim has lapsed, main is free: a2's merge goes in.
	r := as(s2, "a2", "merge", p2, "--wait", "60s")
	if m := parseMerge(t, r); r.Code != 0 || m.Status != contract.StatusMerged {
		t.Fatalf("a2's merge after the dead sidecar's ticket: %s", show(r))
	}
	if time.Now().After(lapses.Add(webhookDeadline)) {
		t.Fatalf("a2's merge went in %s after a1's claim lapsed: the dead ticket held main longer than its bound", time.Since(lapses).Round(time.Second))
	}
	if merged, _, _ := (&gateWorld{agentWorld: a}).pullMerged(p1); merged {
		t.Fatal("the conflicting pull request was merged")
	}
}
