package plugin

import (
	"errors"
	"fmt"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/contract"
)

// Sentinel errors of the lease service. Each transport translates them
// once: ssh/ to an exit code and error line, routes/ to an HTTP status.
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
)

// WriteRequiredError: the viewer may read the repository, so naming it
// reveals nothing, but may not write the unit the verb changes.
type WriteRequiredError struct {
	Repo string // "owner/name"
	Unit string // "issues" or "pulls"
}

func (e *WriteRequiredError) Error() string {
	return fmt.Sprintf("write access to %s %s is required", e.Repo, e.Unit)
}

// ConflictError is a refusal of the ledger, as the caller may see it: the
// live holder is named only on a number the caller may read.
type ConflictError struct {
	Reply contract.Conflict
}

func (e *ConflictError) Error() string {
	if e.Reply.Holder == nil {
		return fmt.Sprintf("%s: %s#%d", e.Reply.Status, e.Reply.Repo, e.Reply.Issue)
	}
	return fmt.Sprintf("%s: %s#%d held by %s", e.Reply.Status, e.Reply.Repo, e.Reply.Issue, *e.Reply.Holder)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }
