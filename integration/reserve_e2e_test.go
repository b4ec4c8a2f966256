package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// Path reservations against the real Gitea, its real hooks and real
// `git push`, under ONE account: its agents reserve paths with their
// claims, meet each other's reservations, and Gitea itself refuses a
// push that changes another agent's reserved paths, until the claim
// they live with ends.

// reservationsReply is any reply of the reservation verbs: a listing,
// or a conflict's With.
type reservationsReply struct {
	Status       string                 `json:"status"`
	Reservations []contract.Reservation `json:"reservations"`
	With         []contract.Reservation `json:"with"`
}

func parseReservations(t *testing.T, r SSHResult) reservationsReply {
	t.Helper()
	var v reservationsReply
	if err := json.Unmarshal([]byte(r.Stdout), &v); err != nil || strings.Count(r.Stdout, "\n") != 1 {
		t.Fatalf("stdout is not one JSON line of the reservation verbs: %s (%v)", show(r), err)
	}
	return v
}

// reservationCmd is a command line of a reservation verb on r.
func reservationCmd(verb string, r Repo, words ...string) string {
	return strings.Join(append([]string{"collab-lease", verb, r.FullName()}, words...), " ")
}

// change commits, on the clone's current branch, a change of each of
// paths (new content, directories made as needed).
func (c *clone) change(paths ...string) {
	c.tb.Helper()
	c.n++
	for _, p := range paths {
		full := filepath.Join(c.dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			c.tb.Fatal(err)
		}
		if err := os.WriteFile(full, fmt.Appendf(nil, "%s %d\n", c.u.Login, c.n), 0o644); err != nil {
			c.tb.Fatal(err)
		}
		c.must("add", p)
	}
	c.must("commit", "--quiet", "-m", "Change "+strings.Join(paths, ", "))
}

// startBranch puts the clone on a new branch from Gitea's main.
func (c *clone) startBranch(branch string) {
	c.tb.Helper()
	c.must("fetch", "--quiet", "origin")
	c.must("checkout", "--quiet", "-B", branch, "origin/main")
}

// pushedIn pushes the clone's HEAD to branch with opts and fails unless
// Gitea takes it.
func (c *clone) pushedIn(branch string, opts ...string) {
	c.tb.Helper()
	if out, err := c.pushHead(branch, opts...); err != nil {
		c.tb.Fatalf("%s's push of HEAD to %s with %v was refused: %v\n%s", c.u.Login, branch, opts, err, out)
	}
}

// refusedFor pushes the clone's HEAD to branch with opts and fails
// unless Gitea refuses it with the gate's line want, whole (git pads it
// with blanks); HEAD stays.
func (c *clone) refusedFor(branch, want string, opts ...string) {
	c.tb.Helper()
	out, err := c.pushHead(branch, opts...)
	said := slices.ContainsFunc(strings.Split(out, "\n"), func(l string) bool { return strings.TrimRight(l, " \r") == "remote: "+want })
	if err == nil || !said || !strings.Contains(out, "pre-receive hook declined") {
		c.tb.Fatalf("%s's push to %s with %v: %v, want the gate's refusal %q\n%s", c.u.Login, branch, opts, err, want, out)
	}
}

// gateUntil is an expiry as a refusal line says it: HH:MM UTC.
func gateUntil(t *testing.T, at *contract.Time) string {
	t.Helper()
	if at == nil {
		t.Fatal("no expiry")
	}
	return time.Time(*at).UTC().Format("15:04") + " UTC"
}

func TestReservationsKeepAgentsOffEachOthersPathsAgainstGitea(t *testing.T) {
	gw := newGateWorld(t)
	bot := identityUser(t, gw.ctx, gw.g, gw.w, "bot", gw.repo)
	repo := gw.repo.FullName()
	claim := func(agent, verb string, n int64, extra ...string) SSHResult {
		return run(t, gw.s, bot, lease(verb, gw.repo, n, append(extra, "--agent", agent)...))
	}
	reserve := func(agent, verb string, words ...string) SSHResult {
		return run(t, gw.s, bot, reservationCmd(verb, gw.repo, append(words, "--agent", agent)...))
	}
	issues := gw.issues(3)
	opt := func(n, token int64) string { return fmt.Sprintf("collab-lease=%d:%d", n, token) }

	// a1 claims #1 with no end and reserves src/auth/** with it; a2
	// claims #2, and its reserve of a path under a1's is a conflict
	// naming a1, its claim and its glob, reserving nothing.
	t1 := parse(t, claim("a1", "acquire", issues[0])).Token
	r := reserve("a1", "reserve", "src/auth/**", "--issue", fmt.Sprint(issues[0]))
	if v := parseReservations(t, r); r.Code != 0 || v.Status != contract.StatusReserved || len(v.Reservations) != 1 || v.Reservations[0].Glob != "src/auth/**" ||
		*v.Reservations[0].Issue != issues[0] || v.Reservations[0].ExpiresAt != nil {
		t.Fatalf("a1's reserve: %s", show(r))
	}
	t2 := parse(t, claim("a2", "acquire", issues[1], "--ttl", "30m")).Token
	r = reserve("a2", "reserve", "src/auth/login.go", "docs/x.md", "--issue", fmt.Sprint(issues[1]))
	v := parseReservations(t, r)
	if r.Code != contract.ExitConflict || v.Status != contract.StatusConflict || len(v.With) != 1 {
		t.Fatalf("a2's reserve over a1's: %s, want a conflict (exit 4)", show(r))
	}
	if w := v.With[0]; w.Holder != bot.Login || w.Agent == nil || *w.Agent != "a1" || w.Issue == nil || *w.Issue != issues[0] || w.Glob != "src/auth/**" {
		t.Fatalf("a2's conflict names %+v, want a1's src/auth/** of #%d", w, issues[0])
	}
	r = reserve("a2", "reservations", "--path", "docs/x.md")
	if v := parseReservations(t, r); r.Code != 0 || v.Status != contract.StatusReservations || len(v.Reservations) != 0 {
		t.Fatalf("docs/x.md after a2's refused reserve: %s, want nothing reserved", show(r))
	}
	r = reserve("a2", "reservations", "--path", "src/auth/login.go")
	if v := parseReservations(t, r); r.Code != 0 || len(v.Reservations) != 1 || v.Reservations[0].Glob != "src/auth/**" {
		t.Fatalf("the reservations of src/auth/login.go: %s, want a1's", show(r))
	}

	// Gitea refuses a2's push changing src/auth/login.go, to a branch of
	// its own, with its token; a2's push changing docs/x.md goes in;
	// a1's own push under src/auth/ goes in.
	a1, a2 := cloneAs(t, gw.ctx, gw.g, gw.repo, bot), cloneAs(t, gw.ctx, gw.g, gw.repo, bot)
	a2.n = 1000 // one account, two agents: their contents must differ
	a2.startBranch("docs-a2")
	a2.change("docs/x.md")
	a2.pushedIn("docs-a2", opt(issues[1], t2))
	a2.startBranch("work-a2")
	a2.change("src/auth/login.go")
	byA1 := fmt.Sprintf("collab-lease: src/auth/login.go is reserved by %s · a1 for %s#%d (no expiry)", bot.Login, repo, issues[0])
	a2.refusedFor("work-a2", byA1, opt(issues[1], t2))
	a2.refusedFor("work-a2", byA1) // with no token it is the account, not a1, either
	a1.startBranch("work-a1")
	a1.change("src/auth/session.go", "src/auth/login.go")
	a1.pushedIn("work-a1", opt(issues[0], t1))

	// a1's claim ends: a2's push of the same commit goes in.
	expect(t, claim("a1", "release", issues[0]), 0, "a1 releases #1")
	a2.pushedIn("work-a2", opt(issues[1], t2))

	// A claim with an end: the line says until when; when the claim
	// lapses, the reservation is gone with it.
	acq := parse(t, claim("a1", "acquire", issues[2], "--ttl", "30m"))
	var acqExpiry contract.Time
	if acq.ExpiresAt == nil || acqExpiry.UnmarshalJSON([]byte(`"`+*acq.ExpiresAt+`"`)) != nil {
		t.Fatalf("a1's claim of #%d: %+v, want an expiry", issues[2], acq)
	}
	expect(t, reserve("a1", "reserve", "src/core/", "--issue", fmt.Sprint(issues[2])), 0, "a1 reserves src/core/ with #3")
	a2.startBranch("core-a2")
	a2.change("src/core/x.go")
	a2.refusedFor("core-a2", fmt.Sprintf("collab-lease: src/core/x.go is reserved by %s · a1 for %s#%d until %s", bot.Login, repo, issues[2], gateUntil(t, &acqExpiry)),
		opt(issues[1], t2))
	expect(t, claim("a1", "renew", issues[2], "--ttl", "1s"), 0, "a1 renews #3 for a second")
	var out string
	var err error
	for end := time.Now().Add(webhookDeadline); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if out, err = a2.pushHead("core-a2", opt(issues[1], t2)); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("a2's push after a1's claim of #%d lapsed was still refused: %v\n%s", issues[2], err, out)
	}

	// Shared reservations coexist, and meet exclusive ones either way;
	// they keep no push out.
	expect(t, reserve("a1", "reserve", "go.mod", "--shared", "--ttl", "10m"), 0, "a1 reserves go.mod shared")
	expect(t, reserve("a2", "reserve", "go.*", "--shared", "--ttl", "10m"), 0, "a2 reserves go.* shared beside it")
	r = reserve("a3", "reserve", "go.mod", "--ttl", "10m")
	if v := parseReservations(t, r); r.Code != contract.ExitConflict || len(v.With) != 2 || *v.With[0].Agent != "a1" || *v.With[1].Agent != "a2" || !v.With[0].Shared {
		t.Fatalf("a3's exclusive reserve over the shared ones: %s, want a conflict with both", show(r))
	}
	r = reserve("a3", "reserve", "Makefile", "--ttl", "10m")
	mk := parseReservations(t, r)
	if r.Code != 0 || len(mk.Reservations) != 1 {
		t.Fatalf("a3's reserve of Makefile: %s", show(r))
	}
	r = reserve("a1", "reserve", "Makefile", "--shared", "--ttl", "10m")
	if v := parseReservations(t, r); r.Code != contract.ExitConflict || len(v.With) != 1 || *v.With[0].Agent != "a3" || v.With[0].Issue != nil {
		t.Fatalf("a1's shared reserve over a3's exclusive one: %s, want a conflict with a3's", show(r))
	}
	a2.startBranch("mod-a2")
	a2.change("go.mod", "go.sum")
	a2.pushedIn("mod-a2", opt(issues[1], t2))
	a2.change("Makefile")
	a2.refusedFor("mod-a2", fmt.Sprintf("collab-lease: Makefile is reserved by %s · a3 until %s", bot.Login, gateUntil(t, mk.Reservations[0].ExpiresAt)), opt(issues[1], t2))
	// a3 lets go of it: the push goes in.
	r = reserve("a3", "unreserve", "Makefile")
	if v := parseReservations(t, r); r.Code != 0 || v.Status != contract.StatusUnreserved || len(v.Reservations) != 1 {
		t.Fatalf("a3's unreserve: %s", show(r))
	}
	a2.pushedIn("mod-a2", opt(issues[1], t2))
}
