// Package plugin is the forge boundary: the small Forge interface through
// which the sidecar asks its forge who owns an SSH key, what a user may do in
// a repository and whether an issue exists, plus (in plugin/gitea) its Gitea
// implementation and the installer of Gitea's custom templates.
//
// It answers questions; it never decides who holds a lease (that is models/)
// and it never writes the ledger.
package forge

import (
	"context"
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

// IssueFilter selects the candidates of `next` (SPEC §8.4).
type IssueFilter struct {
	Pulls  bool     // pull requests instead of issues
	Labels []string // names; a candidate carries every one of them
}

// CommitStatus is a status the sidecar sets on a commit (Gitea's commit
// statuses; a required one gates merges on a protected branch).
type CommitStatus struct {
	State       string // "success" or "failure"
	Description string
	TargetURL   string
	Context     string
}

// Forge is what the sidecar needs to know from its forge. Implementations
// must bound every call with a deadline and map failures onto the sentinel
// errors above (wrapped with context).
type Forge interface {
	// UserByKey returns the active user owning the public key with this
	// "SHA256:…" fingerprint. ErrNotFound unless exactly one user key
	// matches and its owner may log in.
	UserByKey(ctx context.Context, fingerprint string) (User, error)
	// UserByToken returns the user an API token belongs to (for HTTP
	// clients that send "Authorization: token …"). ErrNotFound for an
	// invalid token.
	UserByToken(ctx context.Context, token string) (User, error)
	// Repo returns owner/name as seen by login ("" = anonymous viewer).
	// ErrNotFound if it does not exist or login may not read it.
	Repo(ctx context.Context, login, owner, name string) (Repo, error)
	// Issue returns issue number n of the repository owner/name as seen
	// by login. ErrNotFound if it does not exist or may not be seen.
	Issue(ctx context.Context, login, owner, name string, n int64) (Issue, error)
	// TokenRepo returns owner/name as user u sees it through the API token
	// token: u's permissions, cut to what the token's scopes allow. A
	// repository the token may not read (no read:repository scope, or a
	// public-only token on a private repo) is ErrNotFound; a token that may
	// read the repository but not its issues (no read:issue) sees neither
	// unit (CanReadIssues/CanReadPulls false). Write (CanWriteIssues,
	// CanWritePulls, Admin) is the user's only for a token with the
	// write:issue scope (or "all"), and false otherwise.
	TokenRepo(ctx context.Context, u User, token, owner, name string) (Repo, error)
	// UserByLogin returns the account that has this login now (or, if
	// none has, the account Gitea says was renamed from it). Existence is
	// enough: an account that may not log in is returned too.
	// ErrNotFound if there is no such account (an organization is none).
	UserByLogin(ctx context.Context, login string) (User, error)
	// RepoName returns the current "owner/name" of the repository with
	// this ID, as the sidecar's admin sees it. ErrNotFound if it is gone.
	RepoName(ctx context.Context, id int64) (string, error)
	// ClosedSince returns the issues and pull requests of owner/name that
	// are closed and were updated at or after since, as the admin sees
	// them (for the reconcile of missed webhook deliveries).
	ClosedSince(ctx context.Context, owner, name string, since time.Time) ([]Issue, error)
	// OpenIssues returns the oldest (lowest-numbered) open issues of
	// owner/name (f.Pulls: open pull requests) that carry every label of
	// f, oldest first, at most limit of them, as the sidecar's admin sees
	// them; requests is how many requests to the forge it made.
	OpenIssues(ctx context.Context, owner, name string, f IssueFilter, limit int) (issues []Issue, requests int, err error)
	// Blocked reports whether issue n of owner/name depends on an issue
	// or pull request that is still open (Gitea's "depends on"), as the
	// sidecar's admin sees it.
	Blocked(ctx context.Context, owner, name string, n int64) (bool, error)
	// PostStatus sets st on commit sha of owner/name, as the sidecar's
	// admin; the forge keeps the latest status of each context.
	PostStatus(ctx context.Context, owner, name, sha string, st CommitStatus) error
}
