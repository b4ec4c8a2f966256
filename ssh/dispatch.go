package ssh

import (
	"context"
	"encoding/json"
	"errors"
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
	default:
		err = &contract.UsageError{Detail: fmt.Sprintf("unknown verb %q", cmd.Verb)}
	}
	if err != nil {
		return exitCode(err), v.Login
	}
	return jsonReply(contract.ExitOK, outcome, out), v.Login
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

// An exitRow is one row of exitCodes: the errors it answers (those that
// are its sentinel, or of its type) and how.
type exitRow struct {
	is   error            // errors.Is(err, is), or
	as   func(error) bool // errors.As(err, &T) of the row's type
	code int
	// line is the error line; "" is the error's own: see exitCode.
	line    string
	outcome string
	// logged: the error, with its detail, goes to the log as an error
	// (Reply.Err); the client is told only line.
	logged bool
}

// exitCodes is the one translation of errors into the verb's exit codes
// and replies, in order: the first row that matches the error answers it;
// an error no row matches is an internal error (internalRow). The HTTP
// table (replies in routes/) answers the same errors, and says "try
// again" (429 or 503 with Retry-After) exactly where this one says exit
// 75; a test holds the two to it.
var exitCodes = []exitRow{
	// An answer, not a failure: the contract's JSON on stdout (exitCode).
	{as: isA[*lease.ConflictError], code: contract.ExitConflict},
	{is: contract.ErrUsage, code: contract.ExitError, outcome: "usage"},
	{is: lease.ErrRevoked, code: contract.ExitError, line: contract.LineRevoked, outcome: "revoked"},
	{is: lease.ErrRepoNotFound, code: contract.ExitError, line: contract.LineRepoNotFound, outcome: "repo_not_found"},
	{is: lease.ErrIssueNotFound, code: contract.ExitError, line: contract.LineIssueNotFound, outcome: "issue_not_found"},
	{is: lease.ErrIssueClosed, code: contract.ExitError, line: contract.LineIssueClosed, outcome: "issue_closed"},
	{as: isA[*lease.WriteRequiredError], code: contract.ExitError, outcome: "forbidden"},
	{as: isA[*lease.TargetMayNotClaimError], code: contract.ExitError, outcome: "target_may_not_claim"},
	{as: isA[*lease.TargetHoldsError], code: contract.ExitError, outcome: "target_holds"},
	// Try again: nothing was done.
	{is: forge.ErrUnavailable, code: contract.ExitTempFail, line: contract.LineForgeUnavailable, outcome: "forge_unavailable"},
	{is: errForgeUnavailable, code: contract.ExitTempFail, line: contract.LineForgeUnavailable, outcome: "forge_unavailable"},
	{is: errTooManyConnections, code: contract.ExitTempFail, line: contract.LineTooManyConnections, outcome: "too_many_connections"},
	{is: forge.ErrRateLimited, code: contract.ExitTempFail, line: contract.LineTooManyRequests, outcome: "rate_limited"},
	// ErrBusy covers ErrLedgerUnreachable, which is also an ErrBusy.
	{is: lease.ErrBusy, code: contract.ExitTempFail, line: contract.LineBusy, outcome: "busy"},
	{is: lease.ErrTryAgain, code: contract.ExitTempFail, line: contract.LineNextTryAgain, outcome: "try_again"},
	{is: lease.ErrTooManyWaiters, code: contract.ExitTempFail, line: contract.LineTooManyWaiters, outcome: "too_many_waiters"},
	{is: lease.ErrTooManySessions, code: contract.ExitTempFail, line: contract.LineTooManySessions, outcome: "too_many_sessions"},
	// A command of a session the ledger no longer keeps: another
	// connection resumed it, or it is over. Retry: in a new session.
	{is: lease.ErrSessionMoved, code: contract.ExitTempFail, line: contract.LineSessionMoved, outcome: "session_moved"},
	{is: lease.ErrSessionGone, code: contract.ExitTempFail, line: contract.LineSessionGone, outcome: "session_gone"},
	// A deadline passed (the command's own, or a bound on the ledger or
	// on the forge): a bounded wait ends in a loud, retryable error, as
	// over HTTP (503).
	{is: context.DeadlineExceeded, code: contract.ExitTempFail, line: contract.LineBusy, outcome: "busy"},
	// The command was canceled: its connection ended, so the reply is
	// seldom read; it is told what a deadline tells, as over HTTP (503),
	// and it is not an internal error (no error in the log for a client
	// that hung up during acquire --wait).
	{is: context.Canceled, code: contract.ExitTempFail, line: contract.LineCanceled, outcome: "canceled"},
	// The sidecar's own forge credentials are wrong. Deliberately "try
	// again", as over HTTP (503): the command was fine, nothing was done,
	// and it succeeds unchanged once an operator fixes the token, whereas
	// exit 1 tells the agent to fix its call. The line says whom to ask;
	// the log has the detail, as an error.
	{is: forge.ErrConfig, code: contract.ExitTempFail, line: contract.LineMisconfigured, outcome: "config", logged: true},
	// The ledger's ErrInvalid: a request no parser should have let through.
	{is: lease.ErrInvalid, code: contract.ExitError, outcome: "invalid"},
	// The lease service turns the forge's not-found into ErrRevoked,
	// ErrRepoNotFound or ErrIssueNotFound on every verb, so one here is a
	// bug: an internal error, deliberately (its own outcome, to tell it
	// from an unknown error). Not retried, as over HTTP (404).
	{is: forge.ErrNotFound, code: contract.ExitError, line: lineInternal, outcome: "forge_not_found", logged: true},
}

// internalRow answers an error no row of exitCodes matches.
var internalRow = exitRow{code: contract.ExitError, line: lineInternal, outcome: "internal", logged: true}

const lineInternal = contract.ErrorPrefix + "internal error"

// exitCode answers err with the first row of exitCodes that matches it: a
// conflict is the contract's JSON on stdout, anything else one error line
// on stderr; an error the table does not know is an internal error, whose
// detail stays in the log.
func exitCode(err error) Reply {
	e := lookup(exitCodes, err)
	if e.code == contract.ExitConflict {
		conflict, _ := errors.AsType[*lease.ConflictError](err)
		return jsonReply(e.code, conflict.Status(), conflict.Reply)
	}
	line := e.line
	if line == "" {
		line = ownLine(err)
	}
	r := Reply{Stderr: line + "\n", Code: e.code, Outcome: e.outcome}
	if e.logged {
		r.Err = err
	}
	return r
}

// ownLine is the error line of an error whose row has none: its message.
func ownLine(err error) string {
	if usage, ok := errors.AsType[*contract.UsageError](err); ok {
		return contract.ErrorLine(usage.Error())
	}
	if write, ok := errors.AsType[*lease.WriteRequiredError](err); ok {
		return contract.ErrorLine(write.Error())
	}
	if target, ok := errors.AsType[*lease.TargetMayNotClaimError](err); ok {
		return contract.ErrorLine(target.Error())
	}
	if holds, ok := errors.AsType[*lease.TargetHoldsError](err); ok {
		return contract.ErrorLine(holds.Error())
	}
	// the ledger's ErrInvalid, or an ErrUsage that is no *UsageError
	return contract.ErrorLine("usage: " + err.Error())
}

// lookup is the row of rows that answers err (internalRow if none).
func lookup(rows []exitRow, err error) *exitRow {
	for i := range rows {
		e := &rows[i]
		if e.as != nil && e.as(err) || e.as == nil && errors.Is(err, e.is) {
			return e
		}
	}
	return &internalRow
}

// isA says whether err's tree holds a T (errors.AsType).
func isA[T error](err error) bool {
	_, ok := errors.AsType[T](err)
	return ok
}
