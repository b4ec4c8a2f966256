// Package forge is the vocabulary the sidecar and its forge adapters
// share: the forge's accounts, repositories (as one viewer sees them),
// issues and commit statuses, what the forge says happened (Event), its
// sentinel errors, what merging a pull request reads, asks and may be
// answered (merge.go), and the rate budgets that bound what one client
// address may make the sidecar ask of the forge. The adapters are
// plugin/gitea (Gitea over HTTP) and plugin/forgetest (in memory, for
// tests); each consumer declares the interface it needs of them
// (lease.Forge, fence.Forge).
//
// It holds types and no behaviour but the budgets' (and the list of merge
// styles): it never talks to a
// forge, never decides who holds a lease, and never touches the ledger.
package forge

import (
	"errors"
	"time"
)

// Sentinel errors of the forge boundary. Transports translate them once:
// ErrNotFound is the same reply for "does not exist" and "you may not see
// it"; ErrUnavailable is retryable (SSH exit 75, HTTP 503).
var (
	// ErrNotFound: the key, repository or issue does not exist, or the
	// asking user may not see it. The two cases are deliberately one.
	ErrNotFound = errors.New("not found")
	// ErrUnavailable: the forge could not be reached, answered 5xx, or did
	// not answer before the deadline. Retry later.
	ErrUnavailable = errors.New("forge unavailable")
	// ErrConfig: the sidecar's own credentials are wrong (bad or
	// under-privileged admin token). The wrapped message names the fix.
	ErrConfig = errors.New("forge configuration error")
	// ErrRateLimited: the request would have asked the forge beyond the
	// share of the address it came from (see Budget); nothing was asked
	// and nothing done. Retry later (HTTP 429).
	ErrRateLimited = errors.New("too many requests to the forge from this address")
	// ErrExists: the forge refused to make something because one of the
	// same name is there already (a branch protection rule made
	// meanwhile).
	ErrExists = errors.New("already exists at the forge")
)

// User is a forge account that may log in.
type User struct {
	ID    int64
	Login string
}

// Repo is a repository as seen by one user (or an anonymous viewer).
type Repo struct {
	ID       int64  // stable across renames and transfers; the ledger key
	FullName string // current "owner/name"
	Private  bool
	// What the viewer may do. CanRead is always true for a Repo that was
	// returned at all (otherwise the answer is ErrNotFound).
	CanRead        bool
	CanWriteIssues bool
	CanWritePulls  bool
	// Whether the viewer may see the repository's issues and its pull
	// requests. A member of a team limited to one unit may read the
	// repository yet see only one kind (see Visible).
	CanReadIssues bool
	CanReadPulls  bool
	// Admin: the viewer administers the repository (Gitea's "admin"
	// permission: site admins, owners, owner and admin teams, admin
	// collaborators). Only admins may force-release another's lease.
	Admin bool
}

// Issue is an issue or pull request of a repository.
type Issue struct {
	Number int64
	Closed bool
	IsPull bool
	Merged bool // a pull request closed by merging
	// Updated is the issue's last update at the forge; it orders what the
	// sidecar hears of the issue (an older answer never overrides a newer).
	Updated time.Time
}

// IssueFilter selects the candidates of `next` (docs/ssh.md, The agent verbs).
type IssueFilter struct {
	Pulls  bool     // pull requests instead of issues
	Labels []string // names; a candidate carries every one of them
	// Oldest: next takes the oldest candidate, ignoring the sidecar's
	// priority labels (next --oldest). The forge's lists ignore it.
	Oldest bool
}

// Label is a label of a repository's issues, as the sidecar makes one.
type Label struct {
	Name        string
	Color       string // "#rrggbb"
	Description string
}

// CommitStatus is a status the sidecar sets on a commit (Gitea's commit
// statuses; a required one gates merges on a protected branch).
type CommitStatus struct {
	State       string // "success" or "failure"
	Description string
	TargetURL   string
	Context     string
}
