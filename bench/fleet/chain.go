package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// Round three's work under one account, claimed without sessions: the way
// an agent claims with round two's verbs, each a git, a git-collab and an
// ssh with a handshake of its own. `git collab next --ttl T --agent
// <name>` claims, `git collab renew` every T/2 keeps the claim while the
// work runs (a refused renewal stops the work as git collab run stops its
// command: SIGTERM to its process group),
// the work's `git collab check`s go over ssh, and `git collab unclaim`
// lets go when the work is done (the merge's close has usually ended the
// claim already). With nothing to claim it looks again every 1–2 s. The
// agents' CPU for claiming here is what the sessions' is measured against.

// chainTTL is the claims' TTL: renewed every 10 s.
const chainTTL = 20 * time.Second

// runChain loops next → work, renewing → unclaim until nothing is left:
// twice in a row nothing to claim while nobody holds anything.
func (a *agent) runChain(ctx context.Context) error {
	ttl := strconv.Itoa(int(a.cfg.TTL/time.Second)) + "s"
	name := agentLogin(a.cfg.Index)
	idle := false
	for {
		r, err := a.collab(ctx, "next", "--ttl", ttl, "--agent", name, "--json")
		if err != nil {
			return err
		}
		switch r.Code {
		case contract.ExitOK:
		case contract.ExitConflict:
			var l contract.List
			if err := a.collabJSON(ctx, &l, "claims", "--json"); err != nil {
				return err
			}
			if len(l.Leases) == 0 && idle {
				return nil
			}
			idle = len(l.Leases) == 0
			a.pause(pollMin, pollMax)
			continue
		default:
			return fmt.Errorf("git collab next: exit %d: %s", r.Code, strings.TrimSpace(r.Stderr))
		}
		idle = false
		var t contract.Tenure
		if err := json.Unmarshal([]byte(r.Stdout), &t); err != nil {
			return fmt.Errorf("git collab next: %w: %q", err, r.Stdout)
		}
		if err := a.workChained(ctx, t, name, ttl); err != nil {
			return err
		}
	}
}

// workChained runs the work on t's issue, renewing the claim every half
// TTL, and unclaims it once the work has ended.
func (a *agent) workChained(ctx context.Context, t contract.Tenure, name, ttl string) error {
	n := strconv.FormatInt(t.Issue, 10)
	env := []string{"COLLAB_REPO=" + a.cfg.Repo, "COLLAB_ISSUE=" + n, "COLLAB_TOKEN=" + strconv.FormatInt(t.Token, 10),
		"COLLAB_HOLDER=" + t.Holder, "COLLAB_AGENT=" + name}
	var (
		mu      sync.Mutex
		proc    *os.Process
		lost    bool
		renewed = make(chan error, 1)
		done    = make(chan struct{})
	)
	// The claim is lost: the work must not land. It is stopped as git
	// collab run stops its command, SIGTERM to its process group: a git
	// collab merge under way, in a group of its own, gives its reply
	// first (a renewal refused because that merge ended the claim comes
	// while the reply is on its way), and the sidecar refuses a merge
	// under a lost claim itself.
	stop := func() { signalGroup(syscall.SIGTERM, proc.Pid) }
	go func() {
		renewed <- a.renewWhile(ctx, done, n, ttl, func() {
			mu.Lock()
			defer mu.Unlock()
			if lost = true; proc != nil {
				stop()
			}
		})
	}()
	_, res, err := a.runWorkWith(ctx, "fleet work", 0, env, func(p *os.Process) {
		mu.Lock()
		defer mu.Unlock()
		if proc = p; lost {
			stop()
		}
	}, a.cfg.Self, workCommand)
	close(done)
	if rerr := <-renewed; err == nil {
		err = rerr
	}
	if err != nil {
		return err
	}
	_ = res // how the work ended: its own events say
	r, err := a.collab(ctx, "unclaim", n, "--agent", name, "--json")
	if err != nil {
		return err
	}
	if r.Code != contract.ExitOK && r.Code != contract.ExitConflict {
		return fmt.Errorf("git collab unclaim %s: exit %d: %s", n, r.Code, strings.TrimSpace(r.Stderr))
	}
	return nil
}

// renewWhile renews issue n every half TTL until done is closed; a refused
// renewal (the claim lapsed, ended or was taken over) calls lost and ends.
func (a *agent) renewWhile(ctx context.Context, done <-chan struct{}, n, ttl string, lost func()) error {
	for {
		select {
		case <-done:
			return nil
		case <-time.After(a.cfg.TTL / 2):
		}
		r, err := a.collab(ctx, "renew", n, "--ttl", ttl, "--agent", agentLogin(a.cfg.Index), "--json")
		if err != nil {
			return err
		}
		switch r.Code {
		case contract.ExitOK:
		case contract.ExitConflict:
			lost()
			return nil
		default:
			return fmt.Errorf("git collab renew %s: exit %d: %s", n, r.Code, strings.TrimSpace(r.Stderr))
		}
	}
}
