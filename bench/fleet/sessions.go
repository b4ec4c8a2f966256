package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// Round three's agent loop with collab-lease: `git collab run --next`
// claims the next issue over a session, runs the work under it and
// releases it; the session keeps the claim alive however long the work
// takes, and when the claim is lost it stops the work.

// nextWait is how long an agent's `git collab run --next` waits for an
// issue to come free: the sidecar wakes it when a claim ends, so an idle
// agent costs one waiting session, not a call every second or two.
const nextWait = 30 * time.Second

// idleWaits is how many waits in a row may find nothing free before an
// agent stops while Gitea still lists open issues: what holds them is not
// letting go (a frozen agent's claim lapses within one wait).
const idleWaits = 4

// runSessions loops `git collab run --next --wait W --grace G --agent
// <name> -- <work>` until nothing is left: nothing came free and Gitea
// lists no open issue, or nothing came free idleWaits times in a row.
// While an issue is open, what holds it may let it go (a frozen agent's
// session lapses), so an agent waits again. Who holds them it does not
// ask: that would be a git collab claims, a process chain and a handshake.
func (a *agent) runSessions(ctx context.Context) error {
	grace := a.cfg.Grace.String()
	idle := 0
	delay := 100 * time.Millisecond
	for {
		claimed, r, err := a.runWork(ctx, "git collab run", 0, "git", "collab", "run", "--next", "--wait", nextWait.String(),
			"--grace", grace, "--agent", agentLogin(a.cfg.Index), "--", a.cfg.Self, workCommand)
		if err != nil {
			return err
		}
		if claimed {
			// Whatever the exit (0, or 4 when the merge's close ended the
			// claim or it was lost), the work's events say what it did.
			idle, delay = 0, 100*time.Millisecond
			continue
		}
		switch r.Code {
		case contract.ExitConflict:
			var open []giteaIssue
			if _, err := a.call(ctx, "GET", fmt.Sprintf("/repos/%s/issues?state=open&type=issues&limit=1", a.cfg.Repo), nil, &open); err != nil {
				return err
			}
			if idle++; len(open) == 0 || idle == idleWaits {
				return nil
			}
		case contract.ExitTempFail, exitSSH:
			a.emit(Event{Kind: evRetry, Detail: fmt.Sprintf("git collab run: exit %d: %s", r.Code, lastLine(r.Stderr))})
			time.Sleep(delay)
			delay = min(2*delay, 2*time.Second)
		default:
			return fmt.Errorf("git collab run: exit %d: %s", r.Code, strings.TrimSpace(r.Stderr))
		}
	}
}

// workResult is how a process that ran the work ended.
type workResult struct {
	Code   int
	Stderr string
}

// runWork runs argv in the checkout with the work's configuration in its
// environment (issue: the work's issue, 0 for the one `git collab run`
// claims), passes on the events the work writes, and returns whether the
// work began (it claimed something) and how the process ended. kind
// names the call in the agent's call counts.
func (a *agent) runWork(ctx context.Context, kind string, issue int64, argv ...string) (bool, workResult, error) {
	return a.runWorkWith(ctx, kind, issue, nil, nil, argv...)
}

// runWorkWith is runWork with env added to the process's environment and
// started called with its process once it has started.
func (a *agent) runWorkWith(ctx context.Context, kind string, issue int64, env []string, started func(*os.Process), argv ...string) (bool, workResult, error) {
	claims := a.cfg.Mode == modeSession || a.cfg.Mode == modeChain
	lockWith := lockAssignee
	if claims {
		lockWith = lockClaim
	}
	cfg, err := json.Marshal(workConfig{Agent: a.cfg.Index, Seed: a.cfg.Seed, Repo: a.cfg.Repo, API: a.cfg.API,
		Token: a.cfg.Token, Issue: issue, Check: claims, Bare: a.cfg.Bare,
		Lock: a.cfg.Lock, LockRepo: a.cfg.LockRepo, LockWith: lockWith, Login: a.cfg.Login,
		MergeDeadline: a.cfg.MergeDeadline, LockHold: a.cfg.LockHold, CallTimeout: a.cfg.CallTimeout, MergeVerb: a.cfg.MergeVerb})
	if err != nil {
		return false, workResult{}, err
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = a.cfg.Dir, append(append(append([]string(nil), a.cfg.Env...), env...), workEnv+"="+string(cfg))
	if a.cfg.Mode == modeChain {
		commandProcess(cmd) // stopped as git collab run stops its command (chain.go)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return false, workResult{}, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return false, workResult{}, fmt.Errorf("%s: %w", kind, err)
	}
	if started != nil {
		started(cmd.Process)
	}
	claimed := false
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			a.emit(Event{Kind: evError, Detail: fmt.Sprintf("%s: unreadable line %q: %v", kind, sc.Text(), err)})
			continue
		}
		claimed = claimed || e.Kind == evClaimed
		a.emit(e)
	}
	err = cmd.Wait()
	a.timed(kind, start)
	r := workResult{Code: cmd.ProcessState.ExitCode(), Stderr: stderr.String()}
	if _, exited := err.(*exec.ExitError); err != nil && !exited {
		return claimed, r, fmt.Errorf("%s: %w", kind, err)
	}
	return claimed, r, nil
}
