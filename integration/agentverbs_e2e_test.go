package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The agent verbs (docs/ssh.md) against the real Gitea and real OpenSSH: twenty agents call
// next at once on a repository with eight open issues, one of them
// blocked by an open dependency; --label narrows it; --wait gets the
// issue as soon as its holder lets go.

type agentWorld struct {
	t      *testing.T
	ctx    context.Context
	g      *Gitea
	s      *Sidecar
	repo   Repo
	agents []*User
}

// newAgentWorld starts a sidecar of its own (serve with args), installed
// into the shared Gitea, on a new repository with agents writers.
func newAgentWorld(t *testing.T, agents int, args ...string) *agentWorld {
	t.Helper()
	g, w, bin := shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	s, err := StartInstalled(ctx, SidecarOptions{Binary: bin, Gitea: g, DataDir: filepath.Join(t.TempDir(), "data"), Args: args}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	stopAtEnd(t, s)
	a := &agentWorld{t: t, ctx: ctx, g: g, s: s, repo: identityRepo(t, ctx, g, w)}
	for i := 0; i < agents; i++ {
		a.agents = append(a.agents, identityUser(t, ctx, g, w, fmt.Sprintf("agent%02d", i), a.repo))
	}
	return a
}

func (a *agentWorld) api(method, path string, in, out any) {
	a.t.Helper()
	if err := a.g.Admin().Do(a.ctx, method, path, in, out); err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
}

// issues opens n issues and returns their numbers, oldest first.
func (a *agentWorld) issues(n int) []int64 {
	var out []int64
	for i := 0; i < n; i++ {
		out = append(out, identityIssue(a.t, a.ctx, a.g, a.repo))
	}
	return out
}

// label puts a new label on the issues.
func (a *agentWorld) label(name string, issues ...int64) {
	var l struct{ ID int64 }
	a.api("POST", "/repos/"+a.repo.FullName()+"/labels", map[string]any{"name": name, "color": "#ee0701"}, &l)
	for _, n := range issues {
		a.api("POST", fmt.Sprintf("/repos/%s/issues/%d/labels", a.repo.FullName(), n), map[string]any{"labels": []int64{l.ID}}, nil)
	}
}

// nextAll runs next for every agent at once, with extra words, and
// returns the issue each got (0 for none).
func (a *agentWorld) nextAll(extra string) map[string]int64 {
	a.t.Helper()
	var mu sync.Mutex
	got := map[string]int64{}
	var wg sync.WaitGroup
	for _, u := range a.agents {
		wg.Go(func() {
			res := run(a.t, a.s, u, "collab-lease next "+a.repo.FullName()+" --ttl 30m"+extra)
			mu.Lock()
			defer mu.Unlock()
			switch res.Code {
			case 0:
				got[u.Login] = parseMaybe(res).Issue
			case 4:
				if res.Stdout != fmt.Sprintf(`{"status":"none","repo":%q}`+"\n", a.repo.FullName()) {
					a.t.Errorf("%s: exit 4 with %s", u.Login, show(res))
				}
				got[u.Login] = 0
			default:
				a.t.Errorf("%s: %s", u.Login, show(res))
			}
		})
	}
	wg.Wait()
	return got
}

func winners(got map[string]int64) []int64 {
	var out []int64
	for _, n := range got {
		if n != 0 {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func TestNextHandsOutDistinctIssuesAgainstGitea(t *testing.T) {
	a := newAgentWorld(t, 20)
	is := a.issues(8)
	a.label("agent-ready", is[2], is[4])
	// The last issue depends on the first, which is open.
	a.api("POST", fmt.Sprintf("/repos/%s/issues/%d/dependencies", a.repo.FullName(), is[7]),
		map[string]any{"owner": a.repo.Owner, "repo": a.repo.Name, "index": is[0]}, nil)

	got := a.nextAll("")
	want := is[:7]
	if w := winners(got); fmt.Sprint(w) != fmt.Sprint(want) {
		t.Fatalf("next gave %v (by agent %v), want each of %v once", w, got, want)
	}
	if len(got) != 20 {
		t.Fatalf("%d of 20 agents answered", len(got))
	}

	// Everyone lets go; only the labelled issues go to --label.
	for login, n := range got {
		if n != 0 {
			expect(t, run(t, a.s, a.user(login), lease("release", a.repo, n)), 0, "release")
		}
	}
	got = a.nextAll(" --label agent-ready")
	if w := winners(got); fmt.Sprint(w) != fmt.Sprint([]int64{is[2], is[4]}) {
		t.Fatalf("next --label gave %v, want %v", w, []int64{is[2], is[4]})
	}
	t.Logf("Gitea requests so far: %.0f", giteaRequests(t, a.s))
}

func (a *agentWorld) user(login string) *User {
	for _, u := range a.agents {
		if u.Login == login {
			return u
		}
	}
	a.t.Fatalf("no agent %s", login)
	return nil
}

func TestAcquireWaitGetsTheIssueOnReleaseAgainstGitea(t *testing.T) {
	a := newAgentWorld(t, 2)
	n := a.issues(1)[0]
	holder, waiter := a.agents[0], a.agents[1]
	expect(t, run(t, a.s, holder, lease("acquire", a.repo, n)), 0, "acquire")

	waitThenRelease(t, a.ctx, a.s, a.s, holder, waiter, a.repo, n, 100*time.Millisecond)
}

// An agent whose next finds nothing free waits in the sidecar, and gets
// the issue its holder releases within a second: woken by the release,
// not by its own look again 2 s later.
func TestNextWaitGetsTheIssueOnReleaseAgainstGitea(t *testing.T) {
	a := newAgentWorld(t, 2)
	n := a.issues(1)[0]
	holder, waiter := a.agents[0], a.agents[1]
	expect(t, run(t, a.s, holder, "collab-lease next "+a.repo.FullName()), 0, "next")

	done := make(chan time.Time, 1)
	var res SSHResult
	go func() {
		res = a.s.SSH(a.ctx, waiter.Key.Path, "collab-lease next "+a.repo.FullName()+" --wait 2m")
		done <- time.Now()
	}()
	waitMetric(t, a.s, "collab_lease_waiters", 1)
	released := run(t, a.s, holder, lease("release", a.repo, n))
	at := time.Now()
	expect(t, released, 0, "release")
	var got time.Time
	select {
	case got = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter did not get the issue within 30 s of the release")
	}
	p := parseMaybe(res)
	if h := p.Holder; res.Code != 0 || h == nil || *h != waiter.Login || p.Issue != n {
		t.Fatalf("the waiter: %s", show(res))
	}
	took := got.Sub(at)
	t.Logf("the waiter's ssh exited %s after the release's did", took.Round(time.Millisecond))
	if took >= time.Second {
		t.Fatalf("the waiter got #%d %s after the release, want within 1s", n, took)
	}
	waitMetric(t, a.s, "collab_lease_waiters", 0)
}

// waitThenRelease has waiter run acquire --wait of issue n of repo through
// waitOn (OpenSSH), and once it waits, holder release the issue through
// releaseOn (the same sidecar, or another replica); the waiter must get
// the issue within bound of the release's reply.
func waitThenRelease(t *testing.T, ctx context.Context, waitOn, releaseOn *Sidecar, holder, waiter *User, repo Repo, n int64, bound time.Duration) {
	t.Helper()
	done := make(chan time.Time, 1)
	var res SSHResult
	go func() {
		res = waitOn.SSH(ctx, waiter.Key.Path, lease("acquire", repo, n, "--wait", "2m", "--ttl", "10m"))
		done <- time.Now()
	}()
	waitMetric(t, waitOn, "collab_lease_waiters", 1)
	released := run(t, releaseOn, holder, lease("release", repo, n))
	at := time.Now()
	expect(t, released, 0, "release")
	var got time.Time
	select {
	case got = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter did not get the issue within 30 s of the release")
	}
	if h := parseMaybe(res).Holder; res.Code != 0 || h == nil || *h != waiter.Login {
		t.Fatalf("the waiter: %s", show(res))
	}
	took := got.Sub(at)
	t.Logf("the waiter's ssh exited %s after the release's did", took.Round(time.Millisecond))
	if took > bound {
		t.Fatalf("the waiter got the issue %s after the release, want within %s", took, bound)
	}
}

// waitMetric polls the sidecar's metrics until the unlabelled series name
// has value want.
func waitMetric(t *testing.T, s *Sidecar, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if v, ok := metric(t, s, name); ok && v == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never reached %v", name, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func metric(t *testing.T, s *Sidecar, name string) (float64, bool) {
	t.Helper()
	for _, line := range scrape(t, s) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// Ten agents of one bot account race for one issue against the real
// Gitea and OpenSSH: one wins, the nine others are told held, naming the
// winner's agent; another agent's takeover after the claim lapsed gets
// the next token and the old token's check answers stale; the account
// itself releases its agent's claim.
func TestAgentsOfOneAccountAgainstGitea(t *testing.T) {
	a := newAgentWorld(t, 1)
	bot := a.agents[0]
	n := a.issues(1)[0]
	type answer struct {
		agent string
		res   SSHResult
	}
	answers := make(chan answer, 10)
	var wg sync.WaitGroup
	for i := range 10 {
		agent := fmt.Sprintf("agent-%d", i)
		wg.Go(func() {
			answers <- answer{agent, run(t, a.s, bot, lease("acquire", a.repo, n, "--ttl", "10m", "--agent", agent))}
		})
	}
	wg.Wait()
	close(answers)
	var winner string
	var held []string
	for x := range answers {
		m := map[string]any{}
		if err := json.Unmarshal([]byte(x.res.Stdout), &m); err != nil {
			t.Fatalf("%s: %v in %s", x.agent, err, show(x.res))
		}
		switch x.res.Code {
		case 0:
			if winner != "" || m["agent"] != x.agent || m["holder"] != bot.Login || m["token"] != 1.0 {
				t.Fatalf("%s won too (winner %q): %s", x.agent, winner, show(x.res))
			}
			winner = x.agent
		case 4:
			held = append(held, fmt.Sprint(m["agent"]))
		default:
			t.Fatalf("%s: %s", x.agent, show(x.res))
		}
	}
	if winner == "" || len(held) != 9 {
		t.Fatalf("winner %q, %d held", winner, len(held))
	}
	for _, h := range held {
		if h != winner {
			t.Fatalf("a held answer named %s, not the winner %s", h, winner)
		}
	}
	// The winner's claim is about to lapse; another agent of the account
	// takes it over.
	expect(t, run(t, a.s, bot, lease("renew", a.repo, n, "--ttl", "1s", "--agent", winner)), 0, "the winner renews for a second")
	other := "agent-x"
	res, ok := pollUntil(10*time.Second, func() (SSHResult, bool) {
		r := run(t, a.s, bot, lease("acquire", a.repo, n, "--ttl", "30m", "--agent", other))
		return r, r.Code == 0
	})
	if !ok || !strings.Contains(res.Stdout, `"agent":"agent-x","token":2`) {
		t.Fatalf("the takeover by %s: %s", other, show(res))
	}
	expect(t, run(t, a.s, bot, lease("check", a.repo, n, "--token", "1", "--agent", winner)), 4, "the old token's check")
	expect(t, run(t, a.s, bot, lease("release", a.repo, n)), 0, "the account releases its agent's claim")
	r := run(t, a.s, bot, lease("history", a.repo, n))
	if !strings.Contains(r.Stdout, `"holder":"`+bot.Login+`","agent":"agent-x"`) || !strings.Contains(r.Stdout, `"ended_by":"released","ended_by_login":"`+bot.Login+`","ended_by_agent":null`) {
		t.Fatalf("history: %s", show(r))
	}
}

// The work-in-progress caps against the real Gitea and OpenSSH: twenty
// acquires at once by one holder, of twenty issues, with a cap of three,
// give exactly three claims; the others answer limit and claim nothing.
func TestClaimCapsAgainstGitea(t *testing.T) {
	g, w, bin := shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	s, err := StartInstalled(ctx, SidecarOptions{Binary: bin, Gitea: g, DataDir: filepath.Join(t.TempDir(), "data"), Args: []string{"--max-claims-per-holder", "3"}}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	stopAtEnd(t, s)
	repo := identityRepo(t, ctx, g, w)
	bot := identityUser(t, ctx, g, w, "capped", repo)
	var ns []int64
	for range 20 {
		ns = append(ns, identityIssue(t, ctx, g, repo))
	}
	codes := make(chan SSHResult, len(ns))
	var wg sync.WaitGroup
	for _, n := range ns {
		wg.Go(func() { codes <- run(t, s, bot, lease("acquire", repo, n, "--agent", "a1")) })
	}
	wg.Wait()
	close(codes)
	won, capped := 0, 0
	for r := range codes {
		switch {
		case r.Code == 0:
			won++
		case r.Code == 4 && strings.Contains(r.Stdout, `"status":"limit"`) && strings.Contains(r.Stdout, `"scope":"holder","limit":3,"live":3`):
			capped++
		default:
			t.Fatalf("an acquire: %s", show(r))
		}
	}
	if won != 3 || capped != 17 {
		t.Fatalf("%d acquired and %d capped, want 3 and 17", won, capped)
	}
	l := run(t, s, bot, "collab-lease list "+repo.FullName())
	if got := strings.Count(l.Stdout, `"holder":"`+bot.Login+`"`); got != 3 {
		t.Fatalf("%d claims listed, want 3: %s", got, show(l))
	}
}

// Priorities against the real Gitea: with --priority-labels priority/high,
// four agents' next at once take the four high-priority issues, though
// ten unlabelled ones are older; sixteen more take the ten others, and
// six are told none: no issue twice.
func TestNextByPriorityAgainstGitea(t *testing.T) {
	g, w, bin := shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	s, err := StartInstalled(ctx, SidecarOptions{Binary: bin, Gitea: g, DataDir: filepath.Join(t.TempDir(), "data"), Args: []string{"--priority-labels", "priority/high"}}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	stopAtEnd(t, s)
	a := &agentWorld{t: t, ctx: ctx, g: g, s: s, repo: identityRepo(t, ctx, g, w)}
	for i := range 20 {
		a.agents = append(a.agents, identityUser(t, ctx, g, w, fmt.Sprintf("prio%02d", i), a.repo))
	}
	plain := a.issues(10)
	high := a.issues(4)
	a.label("priority/high", high...)
	all := a.agents
	a.agents = all[:4]
	first := winners(a.nextAll(""))
	if !slices.Equal(first, high) {
		t.Fatalf("the first four nexts took %v, want the high-priority %v", first, high)
	}
	a.agents = all[4:]
	got := a.nextAll("")
	rest := winners(got)
	if !slices.Equal(rest, plain) {
		t.Fatalf("the other sixteen took %v, want the ten unlabelled %v", rest, plain)
	}
	if nones := len(got) - len(rest); nones != 6 {
		t.Fatalf("%d agents told none, want 6", nones)
	}
}

// The lock-delay against the real Gitea and OpenSSH: a lapsed claim
// with a 5 s lock-delay refuses another holder (cooling) until the delay
// is over, and lets the lapsed holder back at once.
func TestLockDelayAgainstGitea(t *testing.T) {
	g, w, bin := shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	s, err := StartInstalled(ctx, SidecarOptions{Binary: bin, Gitea: g, DataDir: filepath.Join(t.TempDir(), "data"), Args: []string{"--lock-delay", "5s"}}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	stopAtEnd(t, s)
	repo := identityRepo(t, ctx, g, w)
	alice, bob := identityUser(t, ctx, g, w, "cool-a", repo), identityUser(t, ctx, g, w, "cool-b", repo)
	n, m := identityIssue(t, ctx, g, repo), identityIssue(t, ctx, g, repo)
	expect(t, run(t, s, alice, lease("acquire", repo, n, "--ttl", "1s")), 0, "alice claims for a second")
	var cooling struct {
		Status string
		Until  time.Time
	}
	res, ok := pollUntil(10*time.Second, func() (SSHResult, bool) {
		r := run(t, s, bob, lease("acquire", repo, n))
		return r, r.Code == 4 && json.Unmarshal([]byte(r.Stdout), &cooling) == nil && cooling.Status == "cooling"
	})
	if !ok {
		t.Fatalf("bob's acquire after alice's claim lapsed: %s, want cooling", show(res))
	}
	expect(t, run(t, s, bob, "collab-lease next "+repo.FullName()), 0, "bob's next passes the cooling issue over for the other")
	res, ok = pollUntil(15*time.Second, func() (SSHResult, bool) {
		r := run(t, s, bob, lease("acquire", repo, n))
		return r, r.Code == 0
	})
	if !ok || time.Now().Before(cooling.Until) {
		t.Fatalf("bob's acquire once the delay was over (until %s): %s", cooling.Until, show(res))
	}
	// The lapsed holder may come back at once.
	expect(t, run(t, s, bob, lease("release", repo, m)), 0, "bob lets the other go")
	expect(t, run(t, s, alice, lease("acquire", repo, m, "--ttl", "1s")), 0, "alice claims the other for a second")
	res, ok = pollUntil(10*time.Second, func() (SSHResult, bool) {
		r := run(t, s, bob, lease("acquire", repo, m))
		return r, strings.Contains(r.Stdout, `"status":"cooling"`)
	})
	if !ok {
		t.Fatalf("bob's acquire of the other: %s, want cooling", show(res))
	}
	// (bob's next took it first, token 1; alice's claim was token 2.)
	r := run(t, s, alice, lease("acquire", repo, m))
	if r.Code != 0 || !strings.Contains(r.Stdout, `"token":3`) {
		t.Fatalf("alice back at once: %s, want a new tenure", show(r))
	}
}

// handoff against the real Gitea and OpenSSH: a claim goes to another
// writer's agent in one step, with the next token; a target Gitea knows
// but who may not write the repository is refused, as one who does not
// exist; the history names the handoff.
func TestHandoffAgainstGitea(t *testing.T) {
	a := newAgentWorld(t, 2)
	alice, bob := a.agents[0], a.agents[1]
	outsider := &User{Login: "outsider-" + randomHex(3), Password: randomHex(8) + "Aa1!"}
	if err := a.g.Admin().Do(a.ctx, "POST", "/admin/users", map[string]any{"username": outsider.Login, "email": outsider.Login + "@example.com",
		"password": outsider.Password, "must_change_password": false}, nil); err != nil {
		t.Fatal(err)
	}
	n := a.issues(1)[0]
	expect(t, run(t, a.s, alice, lease("acquire", a.repo, n, "--ttl", "30m")), 0, "alice claims")
	for _, to := range []string{outsider.Login, "no-such-" + randomHex(3)} {
		r := run(t, a.s, alice, lease("handoff", a.repo, n, "--to", to))
		if r.Code != 1 || r.Stderr != "error: "+to+" may not claim in "+a.repo.FullName()+"\n" {
			t.Fatalf("a handoff to %s: %s", to, show(r))
		}
	}
	r := run(t, a.s, alice, lease("handoff", a.repo, n, "--to", bob.Login+"/b1"))
	if r.Code != 0 || !strings.Contains(r.Stdout, `"holder":"`+bob.Login+`","agent":"b1","token":2`) || !strings.Contains(r.Stdout, `"from":{"holder":"`+alice.Login+`","agent":null,"token":1}`) {
		t.Fatalf("alice hands off to bob's b1: %s", show(r))
	}
	expect(t, run(t, a.s, alice, lease("check", a.repo, n, "--token", "1")), 4, "alice's old token is stale")
	expect(t, run(t, a.s, bob, lease("renew", a.repo, n, "--ttl", "1h", "--agent", "b1")), 0, "bob's b1 renews")
	h := run(t, a.s, bob, lease("history", a.repo, n))
	if !strings.Contains(h.Stdout, `"ended_by":"handed_off","ended_by_login":"`+alice.Login+`"`) {
		t.Fatalf("history: %s", show(h))
	}
}
