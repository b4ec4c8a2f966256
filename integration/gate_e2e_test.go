package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// The gate against the real Gitea, its real hooks and real `git push`:
// under ONE account, its agents a1 and a2 take turns on a pull request,
// and Gitea itself refuses the push of the tenure that lapsed.

// gateWorld is a Gitea of its own (the gate puts its hook into every
// repository of the instance, which the shared one's tests must not
// meet), a repository in it, and a sidecar with the gate on.
type gateWorld struct {
	*agentWorld
	w    *World
	root string // Gitea's repository root
	hook string // the built hook program
	bin  string // the built collab-sidecar
	data string // the sidecar's data directory
}

func newGateWorld(t *testing.T, args ...string) *gateWorld {
	t.Helper()
	_, _, bin := shared(t)
	g := NewGitea(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel)
	w, err := Seed(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	hook, err := buildCommand(ctx, t.TempDir(), contract.GateProgram, false)
	if err != nil {
		t.Fatal(err)
	}
	gw := &gateWorld{w: w, root: filepath.Join(g.Dir, "repos"), hook: hook, bin: bin, data: filepath.Join(t.TempDir(), "data")}
	repo := identityRepo(t, ctx, g, w)
	args = append([]string{"--gate", "--gitea-repo-root", gw.root, "--gate-program", hook}, args...)
	s, err := StartInstalled(ctx, SidecarOptions{Binary: bin, Gitea: g, DataDir: gw.data, Args: args}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	stopAtEnd(t, s)
	gw.agentWorld = &agentWorld{t: t, ctx: ctx, g: g, s: s, repo: repo}
	return gw
}

// hookFiles are the files of a repository's hooks directory but the
// gate's own, with their bytes and modes.
func (gw *gateWorld) hookFiles(r Repo) map[string]string {
	gw.t.Helper()
	dir := filepath.Join(gw.root, strings.ToLower(r.Owner), strings.ToLower(r.Name)+".git", "hooks")
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == contract.GateScript {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		out[strings.TrimPrefix(p, dir)] = fmt.Sprintf("%v %x", info.Mode(), b)
		return nil
	})
	if err != nil {
		gw.t.Fatal(err)
	}
	return out
}

// ask puts a question to the sidecar's gate as the hook would, with the
// hook's secret, and returns the answer.
func (gw *gateWorld) ask(q contract.GateQuestion) contract.GateAnswer {
	gw.t.Helper()
	secret, err := os.ReadFile(filepath.Join(gw.root, contract.GateDir, contract.GateSecretFile))
	if err != nil {
		gw.t.Fatal(err)
	}
	body, _ := json.Marshal(q)
	req, _ := http.NewRequestWithContext(gw.ctx, http.MethodPost, gw.s.AdminURL+contract.GatePath, bytes.NewReader(body))
	req.Header.Set(contract.GateSecretHeader, strings.TrimSpace(string(secret)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		gw.t.Fatal(err)
	}
	defer resp.Body.Close()
	var a contract.GateAnswer
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&a) != nil {
		gw.t.Fatalf("the gate answered %s", resp.Status)
	}
	return a
}

// waitFenced polls until the gate refuses an untokened push to branch by
// u: the sidecar has heard, from Gitea's webhook, of the pull request.
func (gw *gateWorld) waitFenced(u *User, branch string) {
	gw.t.Helper()
	q := contract.GateQuestion{RepoID: gw.repo.ID, Owner: gw.repo.Owner, Repo: gw.repo.Name, PusherID: u.ID, Pusher: u.Login,
		Refs: []contract.GateRef{{Old: strings.Repeat("0", 40), New: strings.Repeat("1", 40), Name: "refs/heads/" + branch}}}
	for end := time.Now().Add(webhookDeadline); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if a := gw.ask(q); !a.Allow {
			return
		}
	}
	gw.t.Fatalf("the gate never fenced %s\n%s", branch, tail(gw.s.Logs(), 30))
}

// pushWith pushes a new commit to branch with push options and returns
// git's output and error.
func (c *clone) pushWith(branch string, opts ...string) (string, error) {
	c.tb.Helper()
	c.commit()
	return c.pushHead(branch, opts...)
}

// pushHead pushes the clone's HEAD to branch with push options and
// returns git's output and error.
func (c *clone) pushHead(branch string, opts ...string) (string, error) {
	args := []string{"push", "--porcelain"}
	for _, o := range opts {
		args = append(args, "-o", o)
	}
	return c.run(c.dir, append(args, "origin", "HEAD:refs/heads/"+branch)...)
}

// gatePasses pushes a new commit with opts and fails unless Gitea takes it.
func (c *clone) gatePasses(branch string, opts ...string) string {
	c.tb.Helper()
	out, err := c.pushWith(branch, opts...)
	if err != nil {
		c.tb.Fatalf("%s's push to %s with %v was refused: %v\n%s", c.u.Login, branch, opts, err, out)
	}
	return out
}

// gateRefuses pushes a new commit with opts, fails unless Gitea refuses it
// with the gate's line saying want, and takes the commit back.
func (c *clone) gateRefuses(branch, want string, opts ...string) {
	c.tb.Helper()
	out, err := c.pushWith(branch, opts...)
	if err == nil || !strings.Contains(out, "remote: "+want) || !strings.Contains(out, "pre-receive hook declined") {
		c.tb.Fatalf("%s's push to %s with %v: %v, want the gate's refusal %q\n%s", c.u.Login, branch, opts, err, want, out)
	}
	c.must("reset", "--quiet", "--hard", "HEAD~1")
}

func TestGateRefusesAStaleTenureOfOneAccountAgainstGitea(t *testing.T) {
	gw := newGateWorld(t, "--renew-on-push")
	bot := identityUser(t, gw.ctx, gw.g, gw.w, "bot", gw.repo)
	carol := identityUser(t, gw.ctx, gw.g, gw.w, "carol", gw.repo)
	const branch = "work-a"
	pr, _ := gw.openPull(bot, branch, "Work without closing keywords")
	as := func(agent string, verb string, extra ...string) SSHResult {
		return run(t, gw.s, bot, lease(verb, gw.repo, pr, append(extra, "--agent", agent)...))
	}
	expect(t, as("a1", "acquire", "--ttl", "30m"), 0, "a1 claims the pull request")
	gw.waitFenced(carol, branch)
	opt := func(token int) string { return fmt.Sprintf("collab-lease=%d:%d", pr, token) }

	a1, a2 := cloneAs(t, gw.ctx, gw.g, gw.repo, bot), cloneAs(t, gw.ctx, gw.g, gw.repo, bot)
	a2.n = 1000 // one account, two agents: their commits' files must differ
	a1.sync(branch)
	a1.gatePasses(branch, opt(1))

	// a1 freezes; its claim lapses and a2 takes the pull request over.
	expect(t, as("a1", "renew", "--ttl", "1s"), 0, "a1 renews for a second")
	if res, ok := pollUntil(webhookDeadline, func() (SSHResult, bool) {
		r := as("a2", "acquire", "--ttl", "30m")
		return r, r.Code == 0
	}); !ok || !strings.Contains(res.Stdout, `"token":2`) {
		t.Fatalf("a2 never took over with token 2: %s", show(res))
	}
	a2.sync(branch)
	a2.gatePasses(branch, opt(2))

	// a1 wakes up and pushes with its old token, then with none: Gitea refuses both.
	claimed := fmt.Sprintf("collab-lease: %s is claimed: %s#%d by %s · a2 (token 2); ", branch, gw.repo.FullName(), pr, bot.Login)
	a1.sync(branch)
	a1.gateRefuses(branch, claimed+"this push carries token 1, which is stale", opt(1))
	a1.gateRefuses(branch, claimed+fmt.Sprintf("this push carries no token: push with -o %s (git collab run does it for you)", opt(2)))
	// Tokens are not secrets: another writer's push with a2's token is refused.
	c := cloneAs(t, gw.ctx, gw.g, gw.repo, carol)
	c.sync(branch)
	c.gateRefuses(branch, claimed+fmt.Sprintf("this push is by %s, not %s (it carries token 2)", carol.Login, bot.Login), opt(2))
	// A branch nobody claims is the gate's no business.
	c.sync("main")
	c.gatePasses("carol-free")

	// git collab run's work pushes with plain git push; the claim's token
	// travels in the work's git environment. Dropping it is refused.
	const runBranch = "work-run"
	runPR, _ := gw.openPull(bot, runBranch, "Work under git collab run")
	remote, err := url.Parse(gw.g.URL)
	if err != nil {
		t.Fatal(err)
	}
	remote.User = url.UserPassword(bot.Login, bot.Password)
	// The sidecar hears of the pull request from Gitea's webhook: wait
	// for it under a claim of its own, then let go.
	expect(t, run(t, gw.s, bot, lease("acquire", gw.repo, runPR, "--agent", "a3")), 0, "a3 claims the pull request")
	gw.waitFenced(carol, runBranch)
	expect(t, run(t, gw.s, bot, lease("release", gw.repo, runPR, "--agent", "a3")), 0, "a3 releases it")
	co := newCheckout(t, gw.s, bot, remote.JoinPath(gw.repo.FullName()+".git").String(), viaEnv)
	co.git("fetch", "--quiet", "origin", runBranch)
	co.git("checkout", "--quiet", "-b", runBranch, "FETCH_HEAD")
	work := func(pushArgs string) string {
		return "echo $COLLAB_TOKEN >> run.txt && git add run.txt && git -c user.name=bot -c user.email=bot@example.com commit --quiet -m 'Work under run' && git " +
			pushArgs + " push --quiet origin HEAD:refs/heads/" + runBranch
	}
	r := co.collab("run", fmt.Sprint(runPR), "--ttl", "30m", "--agent", "a3", "--", "sh", "-c", work(""))
	if r.Code != 0 {
		t.Fatalf("git collab run's work pushing without saying a token: %s", show(r))
	}
	r = co.collab("run", fmt.Sprint(runPR), "--ttl", "30m", "--agent", "a3", "--", "sh", "-c", work("-c push.pushOption="))
	if r.Code == 0 || !strings.Contains(r.Stderr, fmt.Sprintf("%s is claimed: %s#%d by %s · a3 (token 3); this push carries no token", runBranch, gw.repo.FullName(), runPR, bot.Login)) {
		t.Fatalf("git collab run's work pushing with its option dropped: %s, want the gate's refusal", show(r))
	}

	// --renew-on-push: a2's pushes with its token move its expiry on.
	expiry := func() string {
		r := as("a2", "check", "--token", "2")
		var reply struct {
			ExpiresAt string `json:"expires_at"`
		}
		if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &reply) != nil || reply.ExpiresAt == "" {
			t.Fatalf("a2's check: %s", show(r))
		}
		return reply.ExpiresAt
	}
	was := expiry()
	moved := false
	for end := time.Now().Add(webhookDeadline); time.Now().Before(end) && !moved; {
		a2.gatePasses(branch, opt(2))
		moved = expiry() > was
	}
	if !moved {
		t.Fatalf("a2's pushes with its token never moved its expiry from %s", was)
	}

	metrics := strings.Join(scrape(t, gw.s), "\n")
	if n := metricValue(t, metrics, `collab_lease_gate_pushes_total{outcome="refused"}`); n < 3 {
		t.Errorf("refused pushes counted: %v, want at least 3", n)
	}
	for _, reason := range []string{"stale", "no_token", "other_account"} {
		if n := metricValue(t, metrics, `collab_lease_gate_refused_refs_total{reason="`+reason+`"}`); n < 1 {
			t.Errorf("refusals for %s counted: %v, want at least 1", reason, n)
		}
	}
	if n := metricValue(t, metrics, `collab_lease_gate_renewals_total`); n < 1 {
		t.Errorf("renewals counted: %v, want at least 1", n)
	}
}

// A person's claim (no agent) lets its account push without a token, as
// round three's push fence does; anyone else is refused.
func TestGateAdmitsAPersonsClaimWithoutATokenAgainstGitea(t *testing.T) {
	gw := newGateWorld(t)
	alice := identityUser(t, gw.ctx, gw.g, gw.w, "alice", gw.repo)
	bot := identityUser(t, gw.ctx, gw.g, gw.w, "bot", gw.repo)
	n := gw.issues(1)[0]
	const branch = "fix-b"
	gw.fencePull(alice, branch, n)
	expect(t, run(t, gw.s, alice, lease("acquire", gw.repo, n, "--ttl", "30m")), 0, "alice claims the issue")
	gw.waitFenced(bot, branch)
	ca, cb := cloneAs(t, gw.ctx, gw.g, gw.repo, alice), cloneAs(t, gw.ctx, gw.g, gw.repo, bot)
	ca.sync(branch)
	ca.gatePasses(branch)
	cb.sync(branch)
	cb.gateRefuses(branch, fmt.Sprintf("collab-lease: %s is claimed: %s#%d by %s (token 1); this push is by %s, not %s (it carries no token)",
		branch, gw.repo.FullName(), n, alice.Login, bot.Login, alice.Login))
}

// The hook goes into a repository created while the sidecar runs; with
// the sidecar gone, gate-unreachable decides; gate remove leaves Gitea's
// own hooks byte for byte as they were.
func TestGateKeepsItsHookAndGoesAgainstGitea(t *testing.T) {
	gw := newGateWorld(t)
	bot := identityUser(t, gw.ctx, gw.g, gw.w, "bot", gw.repo)
	// Gitea's own hook files as Gitea wrote them (the gate adds one file).
	giteas := gw.hookFiles(gw.repo)
	if len(giteas) < 4 {
		t.Fatalf("Gitea's hook files: %v", giteas)
	}

	created := time.Now()
	fresh := identityRepo(t, gw.ctx, gw.g, gw.w)
	script := filepath.Join(gw.root, strings.ToLower(fresh.Owner), strings.ToLower(fresh.Name)+".git", "hooks", "pre-receive.d", contract.GateScript)
	for end := time.Now().Add(webhookDeadline); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(script); err == nil {
			t.Logf("the new repository had the gate's hook %s after it was created", time.Since(created).Round(time.Millisecond))
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the new repository never got the gate's hook\n%s", tail(gw.s.Logs(), 30))
		}
	}

	cb := cloneAs(t, gw.ctx, gw.g, gw.repo, bot)
	cb.sync("main")
	if err := gw.s.Stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	if out := cb.gatePasses("unchecked"); !strings.Contains(out, "remote: "+contract.GateUnansweredAllowed) {
		t.Fatalf("a push with the sidecar stopped, gate-unreachable allow: want the warning line\n%s", out)
	}
	s, err := StartSidecar(gw.ctx, SidecarOptions{Binary: gw.bin, Gitea: gw.g, DataDir: gw.data,
		Args: []string{"--gate", "--gitea-repo-root", gw.root, "--gate-program", gw.hook, "--gate-unreachable", "refuse"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	cb.gateRefuses("unchecked", contract.GateUnansweredRefused)

	out, err := exec.CommandContext(gw.ctx, gw.bin, "gate", "remove", "--gitea-repo-root", gw.root).CombinedOutput()
	if err != nil {
		t.Fatalf("gate remove: %v\n%s", err, out)
	}
	after := gw.hookFiles(gw.repo)
	if fmt.Sprint(after) != fmt.Sprint(giteas) {
		t.Fatalf("Gitea's hook files changed:\nbefore %v\nafter  %v", giteas, after)
	}
	for _, gone := range []string{script, filepath.Join(gw.root, contract.GateDir)} {
		if _, err := os.Stat(gone); err == nil {
			t.Fatalf("%s is still there after gate remove", gone)
		}
	}
	cb.gatePasses("unchecked") // no hook: nothing asks anyone
}
