package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/collab-lease/collab-lease/integration"
	"github.com/collab-lease/collab-lease/plugin/contract"
)

// An agent: one process (this program, re-run with agentCommand) whose
// loop drains the backlog the way its mode says, writing an Event per line
// on stdout. It is a process so that the fault run can SIGKILL it.

// agentCommand, as the first argument, makes this program an agent that
// reads its agentConfig as JSON on stdin.
const agentCommand = "agent"

// The ways an agent claims work.
const (
	modeLease     = "lease"     // git collab next / renew / check
	modeAssignees = "assignees" // Gitea's assignees alone
	modeSession   = "session"   // git collab run --next: a session per claim (round three)
	modeChain     = "chain"     // round three's work, claimed with git collab next / renew / check / unclaim
)

type agentConfig struct {
	Index int
	Login string
	Mode  string
	Seed  int64
	Repo  string // owner/name
	API   string // Gitea's base URL, through the counting proxy
	Token string // the agent's own Gitea token

	// Lease mode: the checkout `git collab` runs in, and the claims' TTL.
	Dir string
	Env []string
	TTL time.Duration
	// DieAt, when positive: at its DieAt-th work item the agent begins
	// working and hangs there, for the coordinator to SIGKILL it.
	DieAt int

	// Assignees mode: pick at random among the Spread oldest candidates,
	// and give up once the open issues have not changed for Stall while
	// none was free for it.
	Spread int
	Stall  time.Duration

	// Round three: the work is a process of its own (Self workCommand)
	// that pushes, opens a pull request and merges; in session mode it
	// runs under `git collab run --next --wait 30s --grace Grace --agent <name>`.
	Work  bool
	Self  string
	Grace time.Duration
	// Lock is the issue of the merge-lock repository LockRepo that the
	// work holds while it merges (0: none).
	Lock     int64
	LockRepo string
	// Bare: the work's own defenses are off (workConfig.Bare).
	Bare bool
	// The work's waits, sized from Gitea's speed (workConfig's), and
	// the bound of one git collab process or API request (0: callTimeout).
	MergeDeadline, LockHold, CallTimeout time.Duration
	// MergeVerb: the work merges with git collab merge (workConfig's).
	MergeVerb bool
}

// Bounds of an agent's waiting.
const (
	// maxAttempts bounds the tries of one call that keeps failing
	// temporarily; with the backoff from 100 ms doubling to 2 s, about 17 s
	// of waiting (a sidecar restart takes about a second).
	maxAttempts = 12
	pollMin     = 1 * time.Second // waiting for held or blocked issues to come free
	pollMax     = 2 * time.Second
	callTimeout = 60 * time.Second // one git collab process or API request
	// An assignees agent that let go of an issue waits this long before
	// it looks again.
	backoffMin = 100 * time.Millisecond
	backoffMax = 400 * time.Millisecond
)

// exitSSH is ssh's (and so git collab's) status when it could not reach
// the sidecar at all: a restart in progress, in the fault run.
const exitSSH = 255

type agent struct {
	cfg   agentConfig
	out   *json.Encoder
	rng   *rand.Rand
	api   *integration.API
	calls map[string]*CallStat // git collab processes and API requests, by kind
}

// agentMain runs one agent and returns its exit status.
func agentMain(stdin io.Reader, stdout io.Writer) int {
	var cfg agentConfig
	if err := json.NewDecoder(stdin).Decode(&cfg); err != nil {
		fmt.Fprintln(os.Stderr, "fleet agent: read config:", err)
		return 2
	}
	a := &agent{
		cfg: cfg,
		out: json.NewEncoder(stdout),
		// Its own stream of the seed: jitter and picks differ by agent.
		rng:   rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(1<<32+cfg.Index))),
		api:   &integration.API{URL: cfg.API, Token: cfg.Token, HTTP: &http.Client{Timeout: cmp.Or(cfg.CallTimeout, callTimeout)}},
		calls: map[string]*CallStat{},
	}
	ctx := context.Background()
	var err error
	switch cfg.Mode {
	case modeLease:
		err = a.runLease(ctx)
	case modeAssignees:
		err = a.runAssignees(ctx)
	case modeSession:
		err = a.runSessions(ctx)
	case modeChain:
		err = a.runChain(ctx)
	default:
		err = fmt.Errorf("unknown mode %q", cfg.Mode)
	}
	if err != nil {
		a.emit(Event{Kind: evError, Detail: err.Error()})
		return 1
	}
	a.emit(Event{Kind: evDone, Calls: a.calls})
	return 0
}

func (a *agent) emit(e Event) {
	e.Agent = a.cfg.Index
	if err := a.out.Encode(e); err != nil {
		fmt.Fprintln(os.Stderr, "fleet agent: write event:", err)
		os.Exit(1)
	}
}

// pause sleeps between lo and hi, at random.
func (a *agent) pause(lo, hi time.Duration) {
	time.Sleep(lo + time.Duration(a.rng.Int64N(int64(hi-lo)+1)))
}

// runLease is the collab-lease loop: next → work (renewing past half the
// TTL) → check → close in Gitea, whose webhook ends the claim; until next
// says none and nobody holds anything that could come back.
func (a *agent) runLease(ctx context.Context) error {
	ttl := strconv.Itoa(int(a.cfg.TTL/time.Second)) + "s"
	items := 0
	for {
		r, err := a.collab(ctx, "next", "--ttl", ttl, "--json")
		if err != nil {
			return err
		}
		switch r.Code {
		case contract.ExitOK:
		case contract.ExitConflict:
			// Nothing free now. Held issues may still come back (a
			// claim that expires, a close whose webhook is on its way):
			// done only when nobody holds anything.
			var l contract.List
			if err := a.collabJSON(ctx, &l, "claims", "--json"); err != nil {
				return err
			}
			if len(l.Leases) == 0 {
				return nil
			}
			a.pause(pollMin, pollMax)
			continue
		default:
			return fmt.Errorf("git collab next: exit %d: %s", r.Code, strings.TrimSpace(r.Stderr))
		}
		var t contract.Tenure
		if err := json.Unmarshal([]byte(r.Stdout), &t); err != nil {
			return fmt.Errorf("git collab next: %w: %q", err, r.Stdout)
		}
		n := t.Issue
		a.emit(Event{Kind: evClaimed, Issue: n, Token: t.Token})
		if items++; items == a.cfg.DieAt {
			a.emit(Event{Kind: evDoomed, Issue: n, Token: t.Token})
			time.Sleep(time.Hour) // until the coordinator's SIGKILL
		}
		a.emit(Event{Kind: evWork, Issue: n, Token: t.Token})
		kept, took, err := a.workRenewing(ctx, n, ttl)
		if err != nil {
			return err
		}
		if !kept {
			a.emit(Event{Kind: evLost, Issue: n, Token: t.Token})
			continue
		}
		a.emit(Event{Kind: evWorked, Issue: n, Token: t.Token, Took: took})
		r, err = a.collab(ctx, "check", strconv.FormatInt(n, 10), "--token", strconv.FormatInt(t.Token, 10), "--json")
		if err != nil {
			return err
		}
		switch r.Code {
		case contract.ExitOK:
		case contract.ExitConflict:
			a.emit(Event{Kind: evStale, Issue: n, Token: t.Token})
			continue
		default:
			return fmt.Errorf("git collab check %d: exit %d: %s", n, r.Code, strings.TrimSpace(r.Stderr))
		}
		if err := a.close(ctx, n); err != nil {
			return err
		}
		a.emit(Event{Kind: evClosed, Issue: n, Token: t.Token})
	}
}

// workRenewing works on issue n for its work time, renewing the claim
// each time half the TTL has passed since the last renewal. kept is false
// if a renewal was refused (the claim lapsed or was taken over): it
// stopped working then.
func (a *agent) workRenewing(ctx context.Context, n int64, ttl string) (kept bool, took time.Duration, err error) {
	total := workTime(a.cfg.Seed, n)
	start := time.Now()
	renewed := start
	for {
		left := total - time.Since(start)
		untilRenew := a.cfg.TTL/2 - time.Since(renewed)
		if left <= untilRenew {
			time.Sleep(max(left, 0))
			return true, time.Since(start), nil
		}
		time.Sleep(max(untilRenew, 0))
		r, err := a.collab(ctx, "renew", strconv.FormatInt(n, 10), "--ttl", ttl, "--json")
		if err != nil {
			return false, 0, err
		}
		switch r.Code {
		case contract.ExitOK:
			renewed = time.Now()
		case contract.ExitConflict:
			return false, 0, nil
		default:
			return false, 0, fmt.Errorf("git collab renew %d: exit %d: %s", n, r.Code, strings.TrimSpace(r.Stderr))
		}
	}
}

// collab runs `git collab args…` in the agent's checkout, retrying a
// temporary failure (exit 75, or 255: the sidecar unreachable) with
// backoff; any other status is the answer.
func (a *agent) collab(ctx context.Context, args ...string) (integration.SSHResult, error) {
	delay := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, cmp.Or(a.cfg.CallTimeout, callTimeout))
		cmd := exec.CommandContext(cctx, "git", append([]string{"collab"}, args...)...)
		cmd.Dir, cmd.Env = a.cfg.Dir, a.cfg.Env
		start := time.Now()
		r, err := integration.RunCommand(cmd)
		a.timed("git collab "+args[0], start)
		cancel()
		if err != nil {
			return r, fmt.Errorf("git collab %s: %w", args[0], err)
		}
		if (r.Code != contract.ExitTempFail && r.Code != exitSSH) || attempt == maxAttempts {
			return r, nil
		}
		a.emit(Event{Kind: evRetry, Detail: fmt.Sprintf("git collab %s: exit %d: %s", args[0], r.Code, lastLine(r.Stderr))})
		time.Sleep(delay)
		delay = min(2*delay, 2*time.Second)
	}
}

// collabJSON runs a git collab command that must succeed and decodes its
// JSON reply into out.
func (a *agent) collabJSON(ctx context.Context, out any, args ...string) error {
	r, err := a.collab(ctx, args...)
	if err != nil {
		return err
	}
	if r.Code != contract.ExitOK {
		return fmt.Errorf("git collab %s: exit %d: %s", args[0], r.Code, strings.TrimSpace(r.Stderr))
	}
	if err := json.Unmarshal([]byte(r.Stdout), out); err != nil {
		return fmt.Errorf("git collab %s: %w: %q", args[0], err, r.Stdout)
	}
	return nil
}

// timed counts a call of kind that began at start.
func (a *agent) timed(kind string, start time.Time) {
	c := a.calls[kind]
	if c == nil {
		c = &CallStat{}
		a.calls[kind] = c
	}
	c.add(time.Since(start))
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// call sends one request to Gitea's API as the agent (its own token,
// through the proxy), retrying a failure to connect or a 5xx answer with
// backoff; any other answer is final.
func (a *agent) call(ctx context.Context, method, path string, in, out any) (http.Header, error) {
	delay := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		start := time.Now()
		h, err := a.api.DoHeader(ctx, method, path, in, out)
		p, _, _ := strings.Cut(path, "?")
		a.timed(method+" "+route("/api/v1"+p), start)
		var apiErr *integration.APIError
		temporary := err != nil && (!errors.As(err, &apiErr) || apiErr.Status >= 500)
		if !temporary || attempt == maxAttempts {
			return h, err
		}
		cause := err.Error()
		if apiErr != nil {
			cause = fmt.Sprintf("HTTP %d", apiErr.Status)
		} else if u := errors.Unwrap(err); u != nil {
			cause = u.Error()
		}
		a.emit(Event{Kind: evRetry, Detail: fmt.Sprintf("%s %s: %s", method, route("/api/v1"+p), cause)})
		time.Sleep(delay)
		delay = min(2*delay, 2*time.Second)
	}
}

func (a *agent) issuePath(n int64) string { return fmt.Sprintf("/repos/%s/issues/%d", a.cfg.Repo, n) }

// close closes issue n in Gitea as the agent.
func (a *agent) close(ctx context.Context, n int64) error {
	_, err := a.call(ctx, "PATCH", a.issuePath(n), map[string]any{"state": "closed"}, nil)
	return err
}

// giteaIssue is what the assignees loop reads of an issue.
type giteaIssue struct {
	Number    int64  `json:"number"`
	State     string `json:"state"`
	Assignees []struct {
		Login string `json:"login"`
	} `json:"assignees"`
}

func (is giteaIssue) assignees() []string {
	var out []string
	for _, u := range is.Assignees {
		out = append(out, u.Login)
	}
	return out
}

// pageSize is Gitea's largest page of issues (MAX_RESPONSE_ITEMS).
const pageSize = 50

// runAssignees is the best loop stock Gitea allows: list the open issues
// oldest first, take one that nobody is assigned (or only this agent: a
// leftover of its own), skip it if an open issue blocks it, PATCH itself
// in as the assignee, read the issue again and let go if someone else is
// assigned too; otherwise work and close it. Done when no open issue is
// left, or none has been free for it while nothing changed for Stall.
func (a *agent) runAssignees(ctx context.Context) error {
	lastOpen, changed := -1, time.Now()
	for {
		open, n, err := a.pick(ctx)
		if err != nil {
			return err
		}
		if open == 0 {
			return nil
		}
		if open != lastOpen {
			lastOpen, changed = open, time.Now()
		}
		if n == 0 {
			if time.Since(changed) > a.cfg.Stall {
				return nil // what is left is assigned to others, or blocked by it
			}
			a.pause(pollMin, pollMax)
			continue
		}
		if _, err := a.call(ctx, "PATCH", a.issuePath(n), map[string]any{"assignees": []string{a.cfg.Login}}, nil); err != nil {
			return err
		}
		var is giteaIssue
		if _, err := a.call(ctx, "GET", a.issuePath(n), nil, &is); err != nil {
			return err
		}
		if is.State != "open" {
			continue // closed by someone meanwhile
		}
		if who := is.assignees(); !slices.Equal(who, []string{a.cfg.Login}) {
			a.emit(Event{Kind: evBackoff, Issue: n, Detail: strings.Join(who, ",")})
			if others := slices.DeleteFunc(who, func(l string) bool { return l == a.cfg.Login }); len(others) < len(is.Assignees) {
				if _, err := a.call(ctx, "PATCH", a.issuePath(n), map[string]any{"assignees": others}, nil); err != nil {
					return err
				}
			}
			a.pause(backoffMin, backoffMax)
			continue
		}
		if a.cfg.Work {
			// The work says what it did, to the closing merge.
			if _, _, err := a.runWork(ctx, "fleet "+workCommand, n, a.cfg.Self, workCommand); err != nil {
				return err
			}
			continue
		}
		a.emit(Event{Kind: evClaimed, Issue: n})
		a.emit(Event{Kind: evWork, Issue: n})
		start := time.Now()
		time.Sleep(workTime(a.cfg.Seed, n))
		a.emit(Event{Kind: evWorked, Issue: n, Took: time.Since(start)})
		if err := a.close(ctx, n); err != nil {
			return err
		}
		a.emit(Event{Kind: evClosed, Issue: n})
	}
}

// pick lists the open issues oldest first (Gitea lists newest first:
// read the count, then pages from the last) and picks, page by page, an
// issue assigned to nobody (or only to this agent: a leftover of its own)
// that no open issue blocks. It returns how many issues are open and the
// pick, 0 if none qualifies.
func (a *agent) pick(ctx context.Context) (int, int64, error) {
	list := func(page int) ([]giteaIssue, http.Header, error) {
		var issues []giteaIssue
		h, err := a.call(ctx, "GET", fmt.Sprintf("/repos/%s/issues?state=open&type=issues&limit=%d&page=%d", a.cfg.Repo, pageSize, page), nil, &issues)
		return issues, h, err
	}
	first, h, err := list(1)
	if err != nil {
		return 0, 0, err
	}
	open, err := strconv.Atoi(h.Get("X-Total-Count"))
	if err != nil {
		return 0, 0, fmt.Errorf("list issues: X-Total-Count %q: %w", h.Get("X-Total-Count"), err)
	}
	for page := (open + pageSize - 1) / pageSize; page >= 1; page-- {
		issues := first
		if page != 1 {
			if issues, _, err = list(page); err != nil {
				return 0, 0, err
			}
		}
		var free []int64
		for _, is := range issues {
			if who := is.assignees(); len(who) == 0 || slices.Equal(who, []string{a.cfg.Login}) {
				free = append(free, is.Number)
			}
		}
		slices.Sort(free)
		n, err := a.pickUnblocked(ctx, free)
		if n != 0 || err != nil {
			return open, n, err
		}
	}
	return open, 0, nil
}

// pickUnblocked picks at random among the Spread oldest candidates (so
// the fleet does not all take the same oldest issue) one that no open
// issue blocks; 0 if there is none.
func (a *agent) pickUnblocked(ctx context.Context, candidates []int64) (int64, error) {
	pool := slices.Clone(candidates[:min(len(candidates), a.cfg.Spread)])
	for len(pool) > 0 {
		i := a.rng.IntN(len(pool))
		n := pool[i]
		var deps []giteaIssue
		if _, err := a.call(ctx, "GET", a.issuePath(n)+"/dependencies", nil, &deps); err != nil {
			return 0, err
		}
		if !slices.ContainsFunc(deps, func(d giteaIssue) bool { return d.State == "open" }) {
			return n, nil
		}
		pool = slices.Delete(pool, i, i+1)
	}
	return 0, nil
}
