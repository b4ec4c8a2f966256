package integration

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/gitea/branchglob"
)

// Fenced pushes against the real Gitea, with real `git push` over HTTP:
// while a pull request, or an issue it closes, is claimed, Gitea takes
// pushes to its head branch only from the holder's account.

// What Gitea's pre-receive hook answers a push, and a force push, the
// branch's protection does not allow.
const (
	refusedPush      = "Not allowed to push to protected branch"
	refusedForcePush = "Not allowed to force-push to protected branch"
)

// clone is a user's clone of a repository over Gitea's HTTP, through
// which a test pushes as that user.
type clone struct {
	tb  testing.TB
	ctx context.Context
	dir string
	u   *User
	n   int // commits made, for distinct contents
}

// cloneAs clones r as u (HTTP, u's password) into a new directory.
func cloneAs(tb testing.TB, ctx context.Context, g *Gitea, r Repo, u *User) *clone {
	tb.Helper()
	base, err := url.Parse(g.URL)
	if err != nil {
		tb.Fatal(err)
	}
	base.User = url.UserPassword(u.Login, u.Password)
	c := &clone{tb: tb, ctx: ctx, dir: filepath.Join(tb.TempDir(), u.Login), u: u}
	if out, err := c.run("", "clone", "--quiet", base.JoinPath(r.FullName()+".git").String(), c.dir); err != nil {
		tb.Fatalf("clone %s as %s: %v\n%s", r.FullName(), u.Login, err, out)
	}
	return c
}

// run runs git in the clone (in dir, if not ""), as its user, and returns
// what it printed.
func (c *clone) run(dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(c.ctx, "git", append([]string{"-c", "user.name=" + c.u.Login, "-c", "user.email=" + c.u.Login + "@example.com"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1", "HOME="+filepath.Dir(c.dir))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (c *clone) must(args ...string) string {
	c.tb.Helper()
	out, err := c.run(c.dir, args...)
	if err != nil {
		c.tb.Fatalf("git %s as %s: %v\n%s", strings.Join(args, " "), c.u.Login, err, out)
	}
	return out
}

// sync puts the clone on branch as Gitea has it now.
func (c *clone) sync(branch string) {
	c.tb.Helper()
	c.must("fetch", "--quiet", "origin")
	c.must("checkout", "--quiet", "-B", branch, "origin/"+branch)
}

// commit adds a commit on the current branch.
func (c *clone) commit() {
	c.tb.Helper()
	c.n++
	name := fmt.Sprintf("%s-%d.txt", c.u.Login, c.n)
	if err := os.WriteFile(filepath.Join(c.dir, name), []byte(name+"\n"), 0o644); err != nil {
		c.tb.Fatal(err)
	}
	c.must("add", name)
	c.must("commit", "--quiet", "-m", "Work by "+c.u.Login)
}

// push pushes the current commit to branch (forced if force) and returns
// git's output and error.
func (c *clone) push(branch string, force bool) (string, error) {
	args := []string{"push", "--porcelain", "origin", "HEAD:refs/heads/" + branch}
	if force {
		args = append(args, "--force")
	}
	return c.run(c.dir, args...)
}

// mustPush pushes a new commit and fails unless Gitea takes it.
func (c *clone) mustPush(branch string) {
	c.tb.Helper()
	c.commit()
	if out, err := c.push(branch, false); err != nil {
		c.tb.Fatalf("%s's push to %s was refused: %v\n%s", c.u.Login, branch, err, out)
	}
}

// mustBeRefused pushes a new commit (forced if force) and fails unless
// Gitea refuses it for the branch's protection.
func (c *clone) mustBeRefused(branch string, force bool) {
	c.tb.Helper()
	c.commit()
	out, err := c.push(branch, force)
	want := refusedPush
	if force {
		want = refusedForcePush
	}
	if err == nil || !strings.Contains(out, want) {
		c.tb.Fatalf("%s's push to %s (force %v): %v, want Gitea's %q\n%s", c.u.Login, branch, force, err, want, out)
	}
}

// fenceRuleName is the name of the sidecar's rule for branch.
func fenceRuleName(tb testing.TB, branch string) string {
	tb.Helper()
	name, ok := branchglob.RuleName(branch)
	if !ok {
		tb.Fatalf("no rule name for branch %q", branch)
	}
	return name
}

// pushAllowlist is who the sidecar's rule for branch lets push (nil,
// false: no such rule).
func pushAllowlist(tb testing.TB, ctx context.Context, g *Gitea, r Repo, branch string) ([]string, bool) {
	tb.Helper()
	var rule struct {
		EnablePush bool     `json:"enable_push"`
		Listed     bool     `json:"enable_push_whitelist"`
		Users      []string `json:"push_whitelist_usernames"`
	}
	err := g.Admin().Do(ctx, "GET", "/repos/"+r.FullName()+"/branch_protections/"+url.PathEscape(fenceRuleName(tb, branch)), nil, &rule)
	var api *APIError
	if errors.As(err, &api) && api.Status == 404 {
		return nil, false
	}
	if err != nil {
		tb.Fatal(err)
	}
	if !rule.EnablePush || !rule.Listed {
		tb.Fatalf("the rule of %s lets push %+v, want an allowlist", branch, rule)
	}
	slices.Sort(rule.Users)
	return rule.Users, true
}

// waitAllowlist polls until the rule of branch lets exactly want push
// (nil: until there is no rule).
func waitAllowlist(tb testing.TB, ctx context.Context, g *Gitea, s *Sidecar, r Repo, branch string, want ...string) {
	tb.Helper()
	slices.Sort(want)
	var got []string
	var ok bool
	for end := time.Now().Add(webhookDeadline); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		got, ok = pushAllowlist(tb, ctx, g, r, branch)
		if want == nil && !ok || want != nil && ok && slices.Equal(got, want) {
			return
		}
	}
	tb.Fatalf("the rule of %s lets %v push (there: %v), want %v\n%s", branch, got, ok, want, tail(s.Logs(), 30))
}

// pullInto opens a pull request by u from a new branch, made from base
// with one commit, into base, and returns its number.
func (a *agentWorld) pullInto(u *User, branch, base string) int64 {
	a.t.Helper()
	as := a.g.As(u.Login)
	if err := as.Do(a.ctx, "POST", "/repos/"+a.repo.FullName()+"/contents/"+branch+".txt", map[string]any{
		"content": "c2lkZQo=", "message": "Side work", "branch": base, "new_branch": branch,
	}, nil); err != nil {
		a.t.Fatalf("commit on %s: %v", branch, err)
	}
	var pr struct{ Number int64 }
	if err := as.Do(a.ctx, "POST", "/repos/"+a.repo.FullName()+"/pulls", map[string]any{
		"head": branch, "base": base, "title": "Side work into " + base,
	}, &pr); err != nil {
		a.t.Fatalf("open a pull request from %s into %s: %v", branch, base, err)
	}
	return pr.Number
}

// lapse makes u's claim of n end by expiry: renewed for one second, then
// taken over by next, whose acquire is polled until it wins.
func (a *agentWorld) lapse(u, next *User, n int64) {
	a.t.Helper()
	expect(a.t, run(a.t, a.s, u, lease("renew", a.repo, n, "--ttl", "1s")), 0, u.Login+" renews for a second")
	res, ok := pollUntil(webhookDeadline, func() (SSHResult, bool) {
		r := run(a.t, a.s, next, lease("acquire", a.repo, n, "--ttl", "30m"))
		return r, r.Code == 0
	})
	if !ok {
		a.t.Fatalf("%s never took over: %s", next.Login, show(res))
	}
}

// The whole story of a pull request's own claim: A claims #7 and pushes;
// A's claim lapses and B takes #7 over and pushes; A's late pushes, plain
// and forced, are refused by Gitea; B's go in; B releases, the rule is
// gone, and any writer pushes again.
func TestFencedPushAgainstGitea(t *testing.T) {
	a := newAgentWorld(t, 3, "--fence-pushes")
	alice, bob, carol := a.agents[0], a.agents[1], a.agents[2]
	const branch = "fence-pr"
	pr, _ := a.openPull(alice, branch, "Work without closing keywords")
	ca, cb, cc := cloneAs(t, a.ctx, a.g, a.repo, alice), cloneAs(t, a.ctx, a.g, a.repo, bob), cloneAs(t, a.ctx, a.g, a.repo, carol)

	expect(t, run(t, a.s, alice, lease("acquire", a.repo, pr, "--ttl", "30m")), 0, "alice claims the pull request")
	waitAllowlist(t, a.ctx, a.g, a.s, a.repo, branch, alice.Login)
	ca.sync(branch)
	ca.mustPush(branch)
	cb.sync(branch)
	cb.mustBeRefused(branch, false) // a writer without the claim

	a.lapse(alice, bob, pr)
	waitAllowlist(t, a.ctx, a.g, a.s, a.repo, branch, bob.Login)
	cb.sync(branch)
	cb.mustPush(branch)
	// alice, frozen through all this, wakes up: on top of bob's work…
	ca.sync(branch)
	ca.mustBeRefused(branch, false)
	// …or over it.
	ca.must("reset", "--quiet", "--hard", "HEAD~2")
	ca.mustBeRefused(branch, true)
	cb.mustPush(branch)
	res := run(t, a.s, alice, lease("check", a.repo, pr, "--token", "1"))
	if res.Code != 4 || !strings.Contains(res.Stdout, `"status":"stale"`) {
		t.Fatalf("alice's check of her old token: %s", show(res))
	}

	expect(t, run(t, a.s, bob, lease("release", a.repo, pr)), 0, "bob releases")
	waitAllowlist(t, a.ctx, a.g, a.s, a.repo, branch)
	cc.sync(branch)
	cc.mustPush(branch)
	ca.sync(branch)
	ca.mustPush(branch)
	metrics := strings.Join(scrape(t, a.s), "\n")
	// The lapse may remove alice's rule before bob's claim makes his, or
	// bob's claim may come first and update it: either way, rules were
	// made and removed, and no change failed.
	made := metricValue(t, metrics, `collab_lease_fence_push_rules_total{outcome="made"}`)
	removed := metricValue(t, metrics, `collab_lease_fence_push_rules_total{outcome="removed"}`)
	failed := metricValue(t, metrics, `collab_lease_fence_push_rules_total{outcome="failed"}`)
	if made < 1 || removed < 1 || failed > 0 {
		t.Errorf("rules made %v, removed %v, failed %v: want made and removed, none failed", made, removed, failed)
	}
}

// The same through an issue claim (Fixes #N): the holder of the issue may
// push to the branch of the pull request that closes it; under an
// admin's glob rule (required approvals, a status check), the sidecar's
// rule carries the admin's settings and applies before it.
func TestFencedPushThroughAnIssueAgainstGitea(t *testing.T) {
	a := newAgentWorld(t, 2, "--fence-pushes")
	alice, bob := a.agents[0], a.agents[1]
	a.api("POST", "/repos/"+a.repo.FullName()+"/branch_protections", map[string]any{
		"rule_name": "fix-*", "enable_push": true, "required_approvals": 1,
		"enable_status_check": true, "status_check_contexts": []string{"ci/build"},
	}, nil)
	const branch = "fix-issue"
	n := a.issues(1)[0]
	a.fencePull(alice, branch, n)
	ca, cb := cloneAs(t, a.ctx, a.g, a.repo, alice), cloneAs(t, a.ctx, a.g, a.repo, bob)

	expect(t, run(t, a.s, alice, lease("acquire", a.repo, n, "--ttl", "30m")), 0, "alice claims the issue")
	waitAllowlist(t, a.ctx, a.g, a.s, a.repo, branch, alice.Login)
	var rules []struct {
		Name      string   `json:"rule_name"`
		Priority  int64    `json:"priority"`
		Approvals int64    `json:"required_approvals"`
		Checks    bool     `json:"enable_status_check"`
		Contexts  []string `json:"status_check_contexts"`
	}
	a.api("GET", "/repos/"+a.repo.FullName()+"/branch_protections", nil, &rules)
	prio := map[string]int64{}
	ours := fenceRuleName(t, branch)
	for _, r := range rules {
		prio[r.Name] = r.Priority
		if r.Name == ours && (r.Approvals != 1 || !r.Checks || !slices.Equal(r.Contexts, []string{"ci/build"})) {
			t.Fatalf("the sidecar's rule %+v does not carry the admin's approvals and status check", r)
		}
	}
	if p, ok := prio[ours]; !ok || p >= prio["fix-*"] {
		t.Fatalf("priorities %v: the sidecar's rule must apply first", prio)
	}
	// Gitea applies the carried settings: a merge into the fenced branch
	// still needs the admin's status check and approval.
	into := a.pullInto(alice, "side-"+branch, branch)
	err := a.merge(alice, into)
	var api *APIError
	if !errors.As(err, &api) || !strings.Contains(api.Body, "Not all required status checks successful") && !strings.Contains(api.Body, "approvals") {
		t.Fatalf("a merge into the fenced branch without the admin's check and approval: %v, want Gitea's refusal", err)
	}
	ca.sync(branch)
	ca.mustPush(branch)
	cb.sync(branch)
	cb.mustBeRefused(branch, false)

	a.lapse(alice, bob, n)
	waitAllowlist(t, a.ctx, a.g, a.s, a.repo, branch, bob.Login)
	ca.sync(branch)
	ca.mustBeRefused(branch, false)
	cb.sync(branch)
	cb.mustPush(branch)

	expect(t, run(t, a.s, bob, lease("release", a.repo, n)), 0, "bob releases")
	waitAllowlist(t, a.ctx, a.g, a.s, a.repo, branch)
	ca.sync(branch)
	ca.mustPush(branch)
	var left []struct {
		Name string `json:"rule_name"`
	}
	a.api("GET", "/repos/"+a.repo.FullName()+"/branch_protections", nil, &left)
	if len(left) != 1 || left[0].Name != "fix-*" {
		t.Fatalf("rules left: %+v, want the admin's alone", left)
	}
}

// A rule left behind by a sidecar that died is removed at its next start,
// once the claim it fenced for has ended; an admin's rule named for a
// claimed branch is left alone, and doctor names that branch.
func TestFencedPushRuleOfADeadSidecarIsRemovedAgainstGitea(t *testing.T) {
	a := newAgentWorld(t, 2, "--fence-pushes")
	alice, bob := a.agents[0], a.agents[1]
	const branch = "fence-crash"
	pr, _ := a.openPull(alice, branch, "Work")
	expect(t, run(t, a.s, alice, lease("acquire", a.repo, pr, "--ttl", "30m")), 0, "alice claims")
	waitAllowlist(t, a.ctx, a.g, a.s, a.repo, branch, alice.Login)

	// The sidecar dies; alice's claim ends while it is down (another
	// replica's release, as far as this sidecar can tell).
	a.s.Kill()
	store, err := models.Open(a.s.DB)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Release(a.ctx, models.Key{RepoID: a.repo.ID, Issue: pr}, models.Holder{ID: alice.ID, Login: alice.Login}); err != nil {
		t.Fatal(err)
	}
	_ = store.Close()
	if _, ok := pushAllowlist(t, a.ctx, a.g, a.repo, branch); !ok {
		t.Fatal("the rule went while the sidecar was dead")
	}
	s, err := a.s.Restart(a.ctx)
	if err != nil {
		t.Fatal(err)
	}
	stopAtEnd(t, s)
	a.s = s
	waitAllowlist(t, a.ctx, a.g, a.s, a.repo, branch)

	// An admin's rule of the name the sidecar would give its own, for
	// another claimed pull request's branch, stands as the admin made it,
	// and doctor names its branch.
	other, _ := a.openPull(bob, "admins-own", "Other work")
	a.api("POST", "/repos/"+a.repo.FullName()+"/branch_protections", map[string]any{"rule_name": fenceRuleName(t, "admins-own"), "enable_push": true}, nil)
	expect(t, run(t, a.s, bob, lease("acquire", a.repo, other, "--ttl", "30m")), 0, "bob claims")
	for end := time.Now().Add(webhookDeadline); !strings.Contains(a.s.Logs(), "branch=admins-own"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the sidecar never came to the admin's branch:\n%s", tail(a.s.Logs(), 30))
		}
	}
	var admins struct {
		Listed bool `json:"enable_push_whitelist"`
	}
	a.api("GET", "/repos/"+a.repo.FullName()+"/branch_protections/"+url.PathEscape(fenceRuleName(t, "admins-own")), nil, &admins)
	if admins.Listed {
		t.Fatal("the admin's rule got an allowlist")
	}
	_, _, bin := shared(t)
	out, _ := doctorRun(t, bin, a.g.AdminToken, "--gitea-url", a.g.URL, "--data-dir", a.s.DataDir, "--fence-pushes")
	for _, want := range []string{"ok   pushes     on; the token may manage branch protection", "0 branch(es) fenced now",
		"left alone, because an admin's rule has the name the sidecar gives its own: " + a.repo.FullName() + " (admins-own)"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor's report lacks %q:\n%s", want, out)
		}
	}
}

// effectiveRule is the name of the protection rule Gitea applies to
// branch ("": none), as Gitea's own branch API says.
func effectiveRule(tb testing.TB, ctx context.Context, g *Gitea, r Repo, branch string) string {
	tb.Helper()
	var b struct {
		Rule string `json:"effective_branch_protection_name"`
	}
	if err := g.Admin().Do(ctx, "GET", "/repos/"+r.FullName()+"/branches/"+url.PathEscape(branch), nil, &b); err != nil {
		tb.Fatal(err)
	}
	return b.Rule
}

// A claimed branch fences that branch and no other, whatever the case of
// their names: Gitea takes a plain rule name without regard to case, so
// a rule named MAIN would apply to main too. bob claims pull requests
// from MAIN and from Dev; main stays under the admin's rule (no pushes,
// an approval, a status check), and dev, unprotected, stays open to
// every writer.
func TestFencedPushReachesNoBranchOfAnotherCaseAgainstGitea(t *testing.T) {
	a := newAgentWorld(t, 2, "--fence-pushes")
	alice, bob := a.agents[0], a.agents[1]
	a.api("POST", "/repos/"+a.repo.FullName()+"/branch_protections", map[string]any{
		"rule_name": "ma*", "enable_push": false, "required_approvals": 1,
		"enable_status_check": true, "status_check_contexts": []string{"ci/build"},
	}, nil)
	a.api("POST", "/repos/"+a.repo.FullName()+"/branches", map[string]any{"new_branch_name": "dev", "old_branch_name": "main"}, nil)
	upper, _ := a.openPull(bob, "MAIN", "Work")
	camel, _ := a.openPull(bob, "Dev", "Other work")
	ca, cb := cloneAs(t, a.ctx, a.g, a.repo, alice), cloneAs(t, a.ctx, a.g, a.repo, bob)
	cb.sync("main")
	cb.mustBeRefused("main", false)

	expect(t, run(t, a.s, bob, lease("acquire", a.repo, upper, "--ttl", "30m")), 0, "bob claims the pull request from MAIN")
	expect(t, run(t, a.s, bob, lease("acquire", a.repo, camel, "--ttl", "30m")), 0, "bob claims the pull request from Dev")
	waitAllowlist(t, a.ctx, a.g, a.s, a.repo, "MAIN", bob.Login)
	waitAllowlist(t, a.ctx, a.g, a.s, a.repo, "Dev", bob.Login)
	for branch, want := range map[string]string{
		"MAIN": fenceRuleName(t, "MAIN"), "Dev": fenceRuleName(t, "Dev"), "main": "ma*", "dev": "",
	} {
		if got := effectiveRule(t, a.ctx, a.g, a.repo, branch); got != want {
			t.Errorf("Gitea applies rule %q to %s, want %q", got, branch, want)
		}
	}
	cb.sync("main")
	cb.mustBeRefused("main", false)
	ca.sync("dev")
	ca.mustPush("dev")
	cb.sync("MAIN")
	cb.mustPush("MAIN")
	ca.sync("MAIN")
	ca.mustBeRefused("MAIN", false)
}
