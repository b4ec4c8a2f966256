package ssh

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/lease"
)

// Leases is what the verb needs of the lease service (lease.Service): it
// decides who may do what; the verb only parses, calls and translates.
type Leases interface {
	Recheck(ctx context.Context, fingerprint string, was forge.User) (lease.Viewer, error)
	AcquireWaitTold(ctx context.Context, v lease.Viewer, owner, name string, n int64, ttl, wait time.Duration, told func(ahead int)) (contract.Tenure, error)
	Renew(ctx context.Context, v lease.Viewer, owner, name string, n int64, ttl time.Duration) (contract.Tenure, error)
	Release(ctx context.Context, v lease.Viewer, owner, name string, n int64) (contract.Released, error)
	ForceRelease(ctx context.Context, v lease.Viewer, owner, name string, n int64) (contract.Released, error)
	List(ctx context.Context, v lease.Viewer, owner, name string) (contract.List, error)
	NextWait(ctx context.Context, v lease.Viewer, owner, name string, f forge.IssueFilter, ttl, wait time.Duration, told func(ahead int)) (contract.Tenure, error)
	Check(ctx context.Context, v lease.Viewer, owner, name string, n, token int64) (contract.Tenure, error)
	History(ctx context.Context, v lease.Viewer, owner, name string, n int64, limit int) (contract.History, error)
	Handoff(ctx context.Context, v lease.Viewer, owner, name string, n int64, toLogin, toAgent string) (contract.HandedOff, error)
	OpenSession(ctx context.Context, v lease.Viewer, grace time.Duration, resume string) (*lease.Session, contract.SessionOpened, error)
	Merge(ctx context.Context, v lease.Viewer, owner, name string, m lease.MergeRequest, told func(ahead int)) (contract.Merged, error)
	Reserve(ctx context.Context, v lease.Viewer, owner, name string, r lease.ReserveRequest) (contract.Reservations, error)
	Unreserve(ctx context.Context, v lease.Viewer, owner, name string, globs []string, issue int64, force bool) (contract.Reservations, error)
	Reservations(ctx context.Context, v lease.Viewer, owner, name, path string) (contract.Reservations, error)
}

// forgeUser is the account connection c authenticated as.
func forgeUser(c ConnInfo) forge.User { return forge.User{ID: c.UserID, Login: c.Login} }

var _ Leases = (*lease.Service)(nil)

// run answers one parsed command of connection c: first who is asking now
// (the key is re-resolved on every command, so a key revoked since the
// handshake stops working on open connections too), then the one call to
// the lease service, in session in if it is not nil (as its agent). It
// returns the reply and the login it ran as.
func run(ctx context.Context, leases Leases, c ConnInfo, cmd contract.Command, stderr io.Writer, in *lease.Session) (Reply, string) {
	v, err := leases.Recheck(ctx, c.Fingerprint, forgeUser(c))
	if err != nil {
		return exitCode(err), c.Login
	}
	v.Agent = cmd.Agent
	if in != nil {
		if sv := in.Viewer(); sv.ID == v.ID {
			v.Agent, v.Session = sv.Agent, in
		} else {
			return exitCode(lease.ErrRevoked), v.Login // the key is another account's now
		}
	}
	var (
		out     any
		outcome string // what a success is called in logs and metrics
	)
	switch cmd.Verb {
	case contract.VerbAcquire:
		out, err = leases.AcquireWaitTold(ctx, v, cmd.Owner, cmd.Name, cmd.Issue, cmd.TTL, cmd.Wait, tellWaiting(stderr))
		outcome = contract.StatusAcquired
	case contract.VerbRenew:
		out, err = leases.Renew(ctx, v, cmd.Owner, cmd.Name, cmd.Issue, cmd.TTL)
		outcome = contract.StatusRenewed
	case contract.VerbRelease:
		release := leases.Release
		outcome = contract.StatusReleased
		if cmd.Force {
			release, outcome = leases.ForceRelease, "force_released"
		}
		out, err = release(ctx, v, cmd.Owner, cmd.Name, cmd.Issue)
	case contract.VerbList:
		out, err = leases.List(ctx, v, cmd.Owner, cmd.Name)
		outcome = "listed"
	case contract.VerbNext:
		out, err = leases.NextWait(ctx, v, cmd.Owner, cmd.Name, forge.IssueFilter{Labels: cmd.Labels, Pulls: cmd.Pulls, Oldest: cmd.Oldest},
			cmd.TTL, cmd.Wait, tellWaiting(stderr))
		outcome = contract.StatusAcquired
	case contract.VerbCheck:
		out, err = leases.Check(ctx, v, cmd.Owner, cmd.Name, cmd.Issue, cmd.Token)
		outcome = contract.StatusCurrent
	case contract.VerbHistory:
		out, err = leases.History(ctx, v, cmd.Owner, cmd.Name, cmd.Issue, cmd.Limit)
		outcome = "history"
	case contract.VerbHandoff:
		out, err = leases.Handoff(ctx, v, cmd.Owner, cmd.Name, cmd.Issue, cmd.ToLogin, cmd.ToAgent)
		outcome = contract.StatusHandedOff
	case contract.VerbMerge:
		out, err = leases.Merge(ctx, v, cmd.Owner, cmd.Name, lease.MergeRequest{Pull: cmd.Issue, Token: cmd.Token, Style: cmd.Style,
			DeleteBranch: cmd.DeleteBranch, Wait: cmd.Wait}, tellWaiting(stderr))
		outcome = contract.StatusMerged
	case contract.VerbReserve:
		// In a session (v.Session), a reservation without --issue lives
		// with the session; outside one, the service asks for --issue or
		// --ttl.
		out, err = leases.Reserve(ctx, v, cmd.Owner, cmd.Name, lease.ReserveRequest{Globs: cmd.Globs, Shared: cmd.Shared, Issue: cmd.Issue, TTL: cmd.TTL})
		outcome = contract.StatusReserved
	case contract.VerbUnreserve:
		out, err = leases.Unreserve(ctx, v, cmd.Owner, cmd.Name, cmd.Globs, cmd.Issue, cmd.Force)
		outcome = contract.StatusUnreserved
		if cmd.Force {
			outcome = "force_unreserved"
		}
	case contract.VerbReservations:
		out, err = leases.Reservations(ctx, v, cmd.Owner, cmd.Name, cmd.Path)
		outcome = "listed"
	default:
		err = &contract.UsageError{Detail: fmt.Sprintf("unknown verb %q", cmd.Verb)}
	}
	if err != nil {
		return exitCode(err), v.Login
	}
	return jsonReply(contract.ExitOK, outcome, out), v.Login
}

// runFor is how long cmd may run, given the server's own bound def for
// a command: on top of it, the wait it asks for (acquire --wait, next
// --wait, merge's turn at the base branch), and for a merge the time the
// sidecar gives itself to merge once its turn has come.
func runFor(cmd contract.Command, def time.Duration) time.Duration {
	d := def + cmd.Wait
	if cmd.Verb == contract.VerbMerge {
		d += contract.MergeTicketMax
	}
	return d
}

// tellWaiting writes a waiter's place to stderr: "waiting: 2 ahead of you".
func tellWaiting(stderr io.Writer) func(ahead int) {
	return func(ahead int) { fmt.Fprintf(stderr, "waiting: %d ahead of you\n", ahead) }
}

func jsonReply(code int, outcome string, v any) Reply {
	b, err := json.Marshal(v)
	if err != nil {
		return exitCode(err)
	}
	return Reply{Stdout: append(b, '\n'), Code: code, Outcome: outcome}
}

// exitCode answers err as lease.Classify classifies it: a conflict is
// the contract's JSON on stdout with exit 4, anything else its one error
// line on stderr, exit 75 if its class says "try again" (as HTTP's 429
// or 503 with Retry-After), else exit 1. A logged error's detail goes to
// the log (Reply.Err), never to the client.
func exitCode(err error) Reply {
	info := lease.Classify(err)
	if info.Class == lease.Conflict {
		return jsonReply(contract.ExitConflict, info.Outcome, info.Reply)
	}
	r := Reply{Stderr: info.Line + "\n", Code: exitOf(info.Class), Outcome: info.Outcome}
	if info.Logged {
		r.Err = err
	}
	return r
}

// exitOf is the exit code of class: the SSH table of the classes.
func exitOf(class lease.Class) int {
	switch {
	case class == lease.Conflict:
		return contract.ExitConflict
	case class.Retry():
		return contract.ExitTempFail
	}
	return contract.ExitError
}
