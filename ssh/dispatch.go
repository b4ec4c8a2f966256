package ssh

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/lease"
)

// Leases is what the verb needs of the lease service (plugin.Service): it
// decides who may do what; the verb only parses, calls and translates.
type Leases interface {
	Recheck(ctx context.Context, fingerprint string, was forge.User) (lease.Viewer, error)
	AcquireWait(ctx context.Context, v lease.Viewer, owner, name string, n int64, ttl, wait time.Duration) (contract.Tenure, error)
	Renew(ctx context.Context, v lease.Viewer, owner, name string, n int64, ttl time.Duration) (contract.Tenure, error)
	Release(ctx context.Context, v lease.Viewer, owner, name string, n int64) (contract.Released, error)
	ForceRelease(ctx context.Context, v lease.Viewer, owner, name string, n int64) (contract.Released, error)
	List(ctx context.Context, v lease.Viewer, owner, name string) (contract.List, error)
	Next(ctx context.Context, v lease.Viewer, owner, name string, f forge.IssueFilter, ttl time.Duration) (contract.Tenure, error)
	Check(ctx context.Context, v lease.Viewer, owner, name string, n, token int64) (contract.Tenure, error)
	History(ctx context.Context, v lease.Viewer, owner, name string, n int64, limit int) (contract.History, error)
}

var _ Leases = (*lease.Service)(nil)

// run answers one parsed command of connection c: first who is asking now
// (the key is re-resolved on every command, so a key revoked since the
// handshake stops working on open connections too), then the one call to
// the lease service. It returns the reply and the login it ran as.
func run(ctx context.Context, leases Leases, c ConnInfo, cmd contract.Command) (Reply, string) {
	v, err := leases.Recheck(ctx, c.Fingerprint, forge.User{ID: c.UserID, Login: c.Login})
	if err != nil {
		return exitCode(err), c.Login
	}
	var (
		out     any
		outcome string // what a success is called in logs and metrics
	)
	switch cmd.Verb {
	case contract.VerbAcquire:
		out, err = leases.AcquireWait(ctx, v, cmd.Owner, cmd.Name, cmd.Issue, cmd.TTL, cmd.Wait)
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
		out, err = leases.Next(ctx, v, cmd.Owner, cmd.Name, forge.IssueFilter{Labels: cmd.Labels, Pulls: cmd.Pulls}, cmd.TTL)
		outcome = contract.StatusAcquired
	case contract.VerbCheck:
		out, err = leases.Check(ctx, v, cmd.Owner, cmd.Name, cmd.Issue, cmd.Token)
		outcome = contract.StatusCurrent
	case contract.VerbHistory:
		out, err = leases.History(ctx, v, cmd.Owner, cmd.Name, cmd.Issue, cmd.Limit)
		outcome = "history"
	default:
		err = &contract.UsageError{Detail: fmt.Sprintf("unknown verb %q", cmd.Verb)}
	}
	if err != nil {
		return exitCode(err), v.Login
	}
	return jsonReply(contract.ExitOK, outcome, out), v.Login
}

func jsonReply(code int, outcome string, v any) Reply {
	b, err := json.Marshal(v)
	if err != nil {
		return exitCode(err)
	}
	return Reply{Stdout: append(b, '\n'), Code: code, Outcome: outcome}
}

// exitCodes is the one translation of the lease service's errors into the
// verb's exit codes and error lines, in order: the first entry whose
// sentinel the error is decides.
var exitCodes = []struct {
	err     error
	code    int
	line    string // "" means the error's own message, after "error: "
	outcome string
}{
	{contract.ErrUsage, contract.ExitError, "", "usage"},
	{lease.ErrRevoked, contract.ExitError, contract.LineRevoked, "revoked"},
	{lease.ErrRepoNotFound, contract.ExitError, contract.LineRepoNotFound, "repo_not_found"},
	{lease.ErrIssueNotFound, contract.ExitError, contract.LineIssueNotFound, "issue_not_found"},
	{lease.ErrIssueClosed, contract.ExitError, contract.LineIssueClosed, "issue_closed"},
	{errForbidden, contract.ExitError, "", "forbidden"},
	{forge.ErrUnavailable, contract.ExitTempFail, contract.LineForgeUnavailable, "forge_unavailable"},
	{errForgeUnavailable, contract.ExitTempFail, contract.LineForgeUnavailable, "forge_unavailable"},
	{errTooManyConnections, contract.ExitTempFail, contract.LineTooManyConnections, "too_many_connections"},
	{forge.ErrRateLimited, contract.ExitTempFail, contract.LineTooManyRequests, "rate_limited"},
	{lease.ErrBusy, contract.ExitTempFail, contract.LineBusy, "busy"},
	{lease.ErrTryAgain, contract.ExitTempFail, contract.LineNextTryAgain, "try_again"},
	{lease.ErrTooManyWaiters, contract.ExitTempFail, contract.LineTooManyWaiters, "too_many_waiters"},
	{context.DeadlineExceeded, contract.ExitTempFail, contract.LineBusy, "busy"},
	{forge.ErrConfig, contract.ExitTempFail, contract.ErrorLine("the sidecar is misconfigured; ask the forge admin to run collab-sidecar doctor"), "config"},
	{lease.ErrInvalid, contract.ExitError, "", "invalid"},
}

// errForbidden matches a *plugin.WriteRequiredError (see exitCode).
var errForbidden = errors.New("forbidden")

// exitCode answers err: a conflict is the contract's JSON with exit 4,
// anything else one error line from the exitCodes table; an error the
// table does not know is an internal error, whose detail stays in the log.
func exitCode(err error) Reply {
	var conflict *lease.ConflictError
	if errors.As(err, &conflict) {
		return jsonReply(contract.ExitConflict, conflict.Status(), conflict.Reply)
	}
	var usage *contract.UsageError
	var write *lease.WriteRequiredError
	for _, e := range exitCodes {
		match := errors.Is(err, e.err)
		if e.err == errForbidden {
			match = errors.As(err, &write)
		}
		if !match {
			continue
		}
		line := e.line
		switch {
		case line != "":
		case errors.As(err, &usage):
			line = contract.ErrorLine(usage.Error())
		case write != nil:
			line = contract.ErrorLine(write.Error())
		default: // the ledger's ErrInvalid: a request no parser should have let through
			line = contract.ErrorLine("usage: " + err.Error())
		}
		return Reply{Stderr: line + "\n", Code: e.code, Outcome: e.outcome}
	}
	return Reply{Stderr: contract.ErrorLine("internal error") + "\n", Code: contract.ExitError, Outcome: "internal", Err: err}
}
