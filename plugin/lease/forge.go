package lease

import (
	"context"
	"time"

	"github.com/collab-lease/collab-lease/plugin/forge"
)

// Forge is what the lease service needs to know from its forge
// (plugin/gitea's Forge, or plugin/forgetest's fake). Implementations must
// bound every call with a deadline and map failures onto plugin/forge's
// sentinel errors (wrapped with context).
type Forge interface {
	// UserByKey returns the active user owning the public key with this
	// "SHA256:…" fingerprint. ErrNotFound unless exactly one user key
	// matches and its owner may log in.
	UserByKey(ctx context.Context, fingerprint string) (forge.User, error)
	// UserByToken returns the user an API token belongs to (for HTTP
	// clients that send "Authorization: token …"). ErrNotFound for an
	// invalid token.
	UserByToken(ctx context.Context, token string) (forge.User, error)
	// Repo returns owner/name as seen by login ("" = anonymous viewer).
	// ErrNotFound if it does not exist or login may not read it.
	Repo(ctx context.Context, login, owner, name string) (forge.Repo, error)
	// Issue returns issue number n of the repository owner/name as seen
	// by login. ErrNotFound if it does not exist or may not be seen.
	Issue(ctx context.Context, login, owner, name string, n int64) (forge.Issue, error)
	// TokenRepo returns owner/name as user u sees it through the API token
	// token: u's permissions, cut to what the token's scopes allow. A
	// repository the token may not read (no read:repository scope, or a
	// public-only token on a private repo) is ErrNotFound; a token that may
	// read the repository but not its issues (no read:issue) sees neither
	// unit (CanReadIssues/CanReadPulls false). Write (CanWriteIssues,
	// CanWritePulls, Admin) is the user's only for a token with the
	// write:issue scope (or "all"), and false otherwise.
	TokenRepo(ctx context.Context, u forge.User, token, owner, name string) (forge.Repo, error)
	// UserByLogin returns the account that has this login now (or, if
	// none has, the account Gitea says was renamed from it). Existence is
	// enough: an account that may not log in is returned too.
	// ErrNotFound if there is no such account (an organization is none).
	UserByLogin(ctx context.Context, login string) (forge.User, error)
	// RepoName returns the current "owner/name" of the repository with
	// this ID, as the sidecar's admin sees it. ErrNotFound if it is gone.
	RepoName(ctx context.Context, id int64) (string, error)
	// ClosedSince returns the issues and pull requests of owner/name that
	// are closed and were updated at or after since, as the admin sees
	// them (for the reconcile of missed webhook deliveries, and for next
	// to know an issue let go lately is still open); requests is how many
	// requests to the forge it made, and complete false when there were
	// more than it reads in one call.
	ClosedSince(ctx context.Context, owner, name string, since time.Time) (closed []forge.Issue, requests int, complete bool, err error)
	// OpenIssues returns the oldest (lowest-numbered) open issues of
	// owner/name (f.Pulls: open pull requests) that carry every label of
	// f, oldest first, at most limit of them, as the sidecar's admin sees
	// them; requests is how many requests to the forge it made.
	OpenIssues(ctx context.Context, owner, name string, f forge.IssueFilter, limit int) (issues []forge.Issue, requests int, err error)
	// Blocked reports whether issue n of owner/name depends on an issue
	// or pull request that is still open (Gitea's "depends on"), as the
	// sidecar's admin sees it.
	Blocked(ctx context.Context, owner, name string, n int64) (bool, error)
	// The quarantine's side at the forge (quarantine.go), all as the
	// sidecar's admin. LabelIssue puts label l on issue n of
	// owner/name, making it in the repository first if it has no label
	// of that name; UnlabelIssue takes the label named label off it
	// (not on it: no error); IssueLabels are the names of its labels.
	LabelIssue(ctx context.Context, owner, name string, n int64, l forge.Label) error
	UnlabelIssue(ctx context.Context, owner, name string, n int64, label string) error
	IssueLabels(ctx context.Context, owner, name string, n int64) ([]string, error)
	// CommentOnce posts body on issue n of owner/name, unless one of its
	// comments holds mark already (a retry after a post whose answer was
	// lost posts nothing twice).
	CommentOnce(ctx context.Context, owner, name string, n int64, mark, body string) error
	// IssueTitles returns the titles of these numbers of repository id,
	// owner/name, as the sidecar's admin sees them, for the board (which
	// shows one only beside a claim its viewer may see). A number the
	// forge does not know, or past what one call asks, has none; with an
	// error, the titles found before it.
	IssueTitles(ctx context.Context, id int64, owner, name string, numbers []int64) (map[int64]string, error)
}
