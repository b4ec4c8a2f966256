package lease

import (
	"errors"
	"fmt"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/contract"
)

// The refusals of the lease service, every one of them here: its
// sentinels and its error types. Classify (errclass.go) decides once how
// the transports answer each; ssh/ renders its class as an exit code and
// error line, routes/ as an HTTP status.
var (
	// ErrRepoNotFound: the repository does not exist or the viewer may not
	// read it. The two are one answer, so nobody can probe for private
	// repositories.
	ErrRepoNotFound = errors.New("repository not found")
	// ErrIssueNotFound: the issue does not exist, or it is of a unit (issues
	// or pull requests) the viewer may not read.
	ErrIssueNotFound = errors.New("issue not found")
	// ErrIssueClosed: acquire of a closed issue or pull request.
	ErrIssueClosed = errors.New("issue is closed")
	// ErrRevoked: the SSH key of an open connection no longer belongs to an
	// active account that may log in (deleted, or the account deactivated
	// or prohibited from logging in since the connection was opened).
	ErrRevoked = errors.New("this key no longer belongs to an active Gitea account")
	// ErrConflict: the ledger said no (held by another, or not the
	// holder); the error is a *ConflictError carrying the reply.
	ErrConflict = errors.New("lease conflict")
	// ErrInvalid: the request itself is malformed (the ledger's ErrInvalid).
	ErrInvalid = models.ErrInvalid
	// ErrBusy: the ledger stayed busy past its timeout; nothing was done.
	ErrBusy = models.ErrBusy
	// ErrLedgerUnreachable: the ledger's database server (PostgreSQL) did
	// not answer; nothing was done. It is also an ErrBusy: try again.
	ErrLedgerUnreachable = models.ErrUnreachable
)

// ErrTryAgain: next examined as many candidates as it may in one call
// without finding one free, and more remain; a retry goes further (what it
// learnt is cached). Nothing was claimed.
var ErrTryAgain = errors.New("no free issue among the candidates examined, try again")

// WriteRequiredError: the viewer may read the repository, so naming it
// reveals nothing, but may not write the unit the verb changes (or, with
// Admin, may not administer the repository, as force-release needs).
type WriteRequiredError struct {
	Repo  string // "owner/name"
	Unit  string // "issues" or "pulls"
	Admin bool   // admin access is what is missing
}

func (e *WriteRequiredError) Error() string {
	if e.Admin {
		return fmt.Sprintf("admin access to %s is required", e.Repo)
	}
	return fmt.Sprintf("write access to %s %s is required", e.Repo, e.Unit)
}

// ConflictError is an answer that is not a success but not an error
// either (exit 4, HTTP 409): Reply is the JSON the caller gets, one of
// contract.Conflict (held, not_holder: the live holder is named only on a
// number the caller may read), contract.None (next found nothing),
// contract.Stale (check: not the live tenure's token), contract.Cooling
// (acquire of an issue in its lock-delay), contract.Quarantined (acquire
// of a quarantined issue) and contract.Limit (a claim past a
// work-in-progress cap).
type ConflictError struct {
	Reply any
}

// Status is the reply's "status".
func (e *ConflictError) Status() string {
	switch r := e.Reply.(type) {
	case contract.Conflict:
		return r.Status
	case contract.None:
		return r.Status
	case contract.Stale:
		return r.Status
	case contract.Cooling:
		return r.Status
	case contract.Quarantined:
		return r.Status
	case contract.Limit:
		return r.Status
	case contract.SessionGone:
		return r.Status
	case contract.MergeRefused:
		return r.Status
	case contract.MergeBusy:
		return r.Status
	}
	return "conflict"
}

func (e *ConflictError) Error() string {
	switch r := e.Reply.(type) {
	case contract.SessionGone:
		return fmt.Sprintf("%s: %s", r.Status, r.Session)
	case contract.Conflict:
		if r.Holder != nil {
			return fmt.Sprintf("%s: %s#%d held by %s", r.Status, r.Repo, r.Issue, *r.Holder)
		}
		return fmt.Sprintf("%s: %s#%d", r.Status, r.Repo, r.Issue)
	case contract.None:
		return fmt.Sprintf("%s: %s", r.Status, r.Repo)
	case contract.MergeRefused:
		return fmt.Sprintf("%s: %s!%d: %s", r.Status, r.Repo, r.Pull, r.Reason)
	case contract.MergeBusy:
		return fmt.Sprintf("%s: %s!%d: %d ahead", r.Status, r.Repo, r.Pull, r.Ahead)
	case contract.Stale:
		return fmt.Sprintf("%s: %s#%d", r.Status, r.Repo, r.Issue)
	case contract.Cooling:
		return fmt.Sprintf("%s: %s#%d until %s", r.Status, r.Repo, r.Issue, time.Time(r.Until).UTC().Format(time.RFC3339))
	case contract.Quarantined:
		return fmt.Sprintf("%s: %s#%d since %s", r.Status, r.Repo, r.Issue, time.Time(r.Since).UTC().Format(time.RFC3339))
	case contract.Limit:
		return fmt.Sprintf("%s: %s holds %d claims, its cap of %d", r.Status, r.Scope, r.Live, r.Limit)
	}
	return "conflict"
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// TargetMayNotClaimError: the target of a handoff is no account, or may
// not claim the issue (its unit) in the repository, as an acquirer must.
type TargetMayNotClaimError struct {
	Login string // as the caller named it
	Repo  string // "owner/name"
}

func (e *TargetMayNotClaimError) Error() string {
	return fmt.Sprintf("%s may not claim in %s", e.Login, e.Repo)
}

// TargetHoldsError: the target of a handoff already holds the claim.
type TargetHoldsError struct {
	Holder string // login[/agent], as --to names it
	Repo   string // "owner/name"
	Issue  int64
}

func (e *TargetHoldsError) Error() string {
	return fmt.Sprintf("%s already holds %s#%d", e.Holder, e.Repo, e.Issue)
}

// Session errors, as the transports answer them.
var (
	// ErrSessionMoved: another connection resumed the session (exit 75).
	ErrSessionMoved = models.ErrSessionMoved
	// ErrSessionGone: the session is over: its grace ran out, or it
	// ended (exit 75 in a session; a --resume of it is SessionGone).
	ErrSessionGone = models.ErrSessionGone
	// ErrTooManySessions: the account has as many sessions as it may
	// (exit 75).
	ErrTooManySessions = models.ErrTooManySessions
	// ErrSessionLost: the connection stopped answering the keepalives
	// for a whole grace.
	ErrSessionLost = errors.New("session lost: its connection stopped answering")
	// ErrSessionIdle: the session held no claim for IdleSession.
	ErrSessionIdle = errors.New("session idle")
)

// ErrTooManyWaiters: the waiters of the issue, or of the sidecar, are at
// their bound; nothing was done. Retry later.
var ErrTooManyWaiters = errors.New("too many waiters, try again")

// ErrReconciling: another replica runs the reconcile now.
var ErrReconciling = errors.New("another replica is reconciling")
