// Package gitea is the sidecar's only way to Gitea: everything it says to
// Gitea over HTTP. Its Forge answers the lease service's questions
// (lease.Forge) and the fence worker's (fence.Forge) from the REST API of
// a Gitea (or Gitea-compatible) server, using a site administrator's
// token: which user an SSH key fingerprint or an API token belongs to,
// what a user may do in a repository (perm.go) and what an API token
// leaves them of that (token.go), whether an issue is open, which issues
// closed lately, a repository's current name, and the oldest open issues
// and their open dependencies for `next` (next.go). It also reads the
// system webhook's deliveries (delivery.go), registers and removes the
// sidecar's OAuth2 application and system webhook for install
// (oauthapp.go, webhook.go), completes a browser's sign-in at Gitea's
// OAuth2 provider (signin.go), posts the fenced-merge commit statuses
// (status.go), reads and writes the push fence's branch protection rules
// (branchrules.go, matched as Gitea matches them: glob.go), runs
// doctor's checks of Gitea (checks.go), and reads and merges a pull
// request as the user who merges it (merge.go), beside which it tests
// whether that merge conflicts as Gitea does, with git in Gitea's
// repository directory, writing nothing there (mergetree.go).
//
// It bounds every call with a deadline and maps every failure onto
// forge.ErrNotFound, forge.ErrUnavailable, forge.ErrRateLimited or
// forge.ErrConfig in one place (classify, client.go), so "does not exist"
// and "may not see" are one answer and an outage is never "not found";
// a merge's own answers there too, onto the forge's merge errors
// (mergeAnswer, merge.go).
//
// It caches three kinds of answers, each for a short time (cache.go,
// cachedOrAsk): who an SSH key belongs to and who an API token belongs to
// (KeyCacheTTL, 60 s by default), and what a viewer may do in a
// repository, through the admin token or through an API token
// (PermCacheTTL, 30 s). Of failures it keeps only the "not found" answers
// of repositories and API tokens, for MissTTL (5 s), so that a flood of
// requests for what does not exist asks Gitea once per few seconds. An
// outage, a spent request budget, a configuration error, or a key that
// was not found is never kept: the next question asks Gitea again. A kept
// answer reveals nothing: it is keyed by all the answer depends on (the
// key's fingerprint, a hash of the API token but never the token, the
// viewer's login, the repository), so it answers only the question Gitea
// answered, for the same viewer, and a kept "not found" is the very
// answer Gitea gave. Nor does a wrong answer stick: every entry expires,
// so a change in Gitea shows within the lifetime of what was kept about
// it: a repository created, leave to read it granted or a token made
// valid right after a "not found" within MissTTL (a key added, at once),
// anything else within KeyCacheTTL or PermCacheTTL.
// Issues, issue lists and dependencies, repository names, logins and the
// check of the admin token are never cached.
//
// It must not decide who may take or hold a lease (plugin/lease and
// models/ do; it only reports what Gitea says), touch the ledger, or
// change anything in Gitea but the sidecar's own OAuth2 application and
// system webhook, the commit statuses it posts, the branch protection
// rules the push fence asks for (which of them are the sidecar's is the
// fence worker's to know) and the merges it is asked for, as their users
// (whether one may merge is Gitea's to say, and the caller's to ask);
// nothing outside it speaks HTTP to Gitea (plugin/gates holds that).
package gitea

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	sdk "code.gitea.io/sdk/gitea"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// Defaults for the zero values of Options.
const (
	DefaultTimeout      = 5 * time.Second
	DefaultKeyCacheTTL  = 60 * time.Second
	DefaultPermCacheTTL = 30 * time.Second
	DefaultMaxConns     = 8
	// DefaultKeyConns is the key lookups' own share of connections to
	// Gitea, beside MaxConns: a flood of requests that make the sidecar
	// ask Gitea other things cannot keep agents from logging in.
	DefaultKeyConns = 2
	// DefaultMissTTL is how long a "not found" of a repository or an API
	// token is remembered, so a flood of requests for repositories that
	// do not exist, or with junk tokens, asks Gitea once per few seconds.
	// A key's "not found" is not remembered: a key added in Gitea works
	// at once.
	DefaultMissTTL = 5 * time.Second
	// DefaultMergeTimeout bounds the merge of a pull request (MergePull):
	// Gitea answers it after cloning the repository, merging, and pushing
	// through its hooks.
	DefaultMergeTimeout = 60 * time.Second
)

// Options configure a Forge.
type Options struct {
	// URL is Gitea's base URL, e.g. "https://git.example.com" or
	// "http://127.0.0.1:3000/gitea" (a sub-path is kept).
	URL string
	// Token is an API token of a Gitea site administrator with the scopes
	// read:user, read:repository and read:issue; registering the OAuth2
	// application needs write:user, the system webhook write:admin
	// (read:admin to check it), merging a pull request write:repository.
	Token string
	// Timeout bounds every Forge method call, including all the Gitea
	// requests it makes, but MergePull. Zero means DefaultTimeout.
	Timeout time.Duration
	// MergeTimeout bounds MergePull. Zero means DefaultMergeTimeout.
	MergeTimeout time.Duration
	// KeyCacheTTL is how long a resolved SSH key, and the user of an API
	// token, stays cached. Zero means DefaultKeyCacheTTL; negative
	// disables both caches.
	KeyCacheTTL time.Duration
	// PermCacheTTL is how long a (user, repository) permission answer, or
	// a (token, user, repository) one, stays cached. Zero means
	// DefaultPermCacheTTL; negative disables the cache.
	PermCacheTTL time.Duration
	// MaxConns bounds the requests in flight to Gitea at once; more wait
	// for a connection (within their deadline). Gitea answers no faster
	// with more at once, only later: a Gitea on SQLite writes the admin
	// token's last-use time on every request, and 64 concurrent requests
	// there took up to 3 s (p99) where 8 took 55 ms, at the same 385
	// requests/s. Zero means DefaultMaxConns; ignored with HTTPClient.
	MaxConns int
	// KeyConns bounds the key lookups' own connections to Gitea. Zero
	// means DefaultKeyConns; ignored with HTTPClient.
	KeyConns int
	// MissTTL is how long a "not found" answer for a repository (through
	// the admin token or an API token) or an API token stays cached
	// (never an outage, nor any other failure). Zero means DefaultMissTTL;
	// negative disables it.
	MissTTL time.Duration
	// HTTPClient sends the requests. Nil means a client of its own that
	// refuses redirects to another host (they would drop the token).
	HTTPClient *http.Client
	// Clock tells the time for cache expiry. Nil means time.Now.
	Clock func() time.Time
	// WrapTransport, if set, wraps the transport of the Forge's own client
	// (e.g. to count requests for metrics); ignored with HTTPClient.
	WrapTransport func(http.RoundTripper) http.RoundTripper
}

// Forge answers the sidecar's questions from Gitea. It is safe for
// concurrent use. New does no network I/O, so the sidecar starts while
// Gitea is down; every method then fails with forge.ErrUnavailable until
// Gitea is back.
type Forge struct {
	base         *url.URL // Gitea's base URL, without trailing slash
	token        string
	timeout      time.Duration
	mergeTimeout time.Duration
	http         *http.Client
	// keysHTTP sends the key lookups, on connections of their own.
	keysHTTP *http.Client
	// keys caches who an SSH key belongs to, keyed by its fingerprint,
	// for KeyCacheTTL; successes only.
	keys *cache[forge.User]
	// perms caches a repository as a viewer sees it, keyed by the
	// viewer's login and the repository (Repo) or by tokenKey, login and
	// repository (TokenRepo), for PermCacheTTL; successes only.
	perms *cache[forge.Repo]
	// tokens caches who an API token belongs to, keyed by tokenKey, for
	// KeyCacheTTL; successes only.
	tokens *cache[forge.User]
	// misses keeps the "not found" answers of Repo and TokenRepo (kind
	// "repo") and of UserByToken (kind "token"), each under its kind and
	// the key it has in perms or tokens, for MissTTL; no other failure
	// (isMiss).
	misses *cache[error]
	// titles keeps issues' titles (and "" for a number Gitea does not
	// know), keyed by lower-case "owner/name#n", for TitleTTL (titles.go).
	titles *cache[string]
}

// New returns a Forge for the Gitea at opts.URL.
func New(opts Options) (*Forge, error) {
	base, err := url.Parse(strings.TrimRight(opts.URL, "/"))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("%w: the Gitea URL %q is not an http(s) URL", forge.ErrConfig, opts.URL)
	}
	if strings.TrimSpace(opts.Token) == "" {
		return nil, fmt.Errorf("%w: the Gitea token is empty: %s", forge.ErrConfig, tokenFix)
	}
	f := &Forge{
		base:         base,
		token:        strings.TrimSpace(opts.Token),
		timeout:      orDefault(opts.Timeout, DefaultTimeout),
		mergeTimeout: orDefault(opts.MergeTimeout, DefaultMergeTimeout),
		http:         opts.HTTPClient,
	}
	if f.http == nil {
		maxConns := opts.MaxConns
		if maxConns <= 0 {
			maxConns = DefaultMaxConns
		}
		keyConns := opts.KeyConns
		if keyConns <= 0 {
			keyConns = DefaultKeyConns
		}
		f.http, f.keysHTTP = newHTTPClient(base.Host, maxConns), newHTTPClient(base.Host, keyConns)
		if opts.WrapTransport != nil {
			f.http.Transport = opts.WrapTransport(f.http.Transport)
			f.keysHTTP.Transport = opts.WrapTransport(f.keysHTTP.Transport)
		}
	} else {
		c := *f.http // the caller's client stays as it was
		f.http, f.keysHTTP = &c, &c
	}
	// Every request is charged to its caller's budget, if it has one.
	for _, c := range []*http.Client{f.http, f.keysHTTP} {
		next := c.Transport
		if next == nil {
			next = http.DefaultTransport
		}
		if _, ok := next.(budgeted); !ok {
			c.Transport = budgeted{next}
		}
	}
	clock := opts.Clock
	if clock == nil {
		clock = time.Now
	}
	f.keys = newCache[forge.User](clock, orDefault(opts.KeyCacheTTL, DefaultKeyCacheTTL))
	f.perms = newCache[forge.Repo](clock, orDefault(opts.PermCacheTTL, DefaultPermCacheTTL))
	f.tokens = newCache[forge.User](clock, orDefault(opts.KeyCacheTTL, DefaultKeyCacheTTL))
	f.misses = newCache[error](clock, orDefault(opts.MissTTL, DefaultMissTTL))
	f.titles = newCache[string](clock, TitleTTL)
	return f, nil
}

// budgeted charges every request to the budget its context carries (see
// forge.Budget): past it, the request is not sent.
type budgeted struct{ next http.RoundTripper }

func (b budgeted) RoundTrip(req *http.Request) (*http.Response, error) {
	if bud := forge.BudgetFrom(req.Context()); bud != nil && !bud.Allow() {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, forge.ErrRateLimited
	}
	return b.next.RoundTrip(req)
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// newHTTPClient returns a client that opens at most maxConns connections
// to Gitea and keeps them all for reuse, and refuses to follow a redirect
// to another host: Go would drop the Authorization header there and the
// answer would silently be an anonymous one.
func newHTTPClient(host string, maxConns int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxConnsPerHost = maxConns
	tr.MaxIdleConnsPerHost = maxConns
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return errors.New("too many redirects")
			}
			if req.URL.Host != host {
				return fmt.Errorf("refusing redirect to another host %q", req.URL.Host)
			}
			// A 301, 302 or 303 turns a write into a GET (Gitea sends one
			// for a renamed repository): following it would take the
			// answer of a read for the write's, so the redirect itself is
			// the answer, a failure to try again.
			if req.Method != via[0].Method {
				return http.ErrUseLastResponse
			}
			return nil
		},
	}
}

// within bounds one Forge method call by the configured timeout.
func (f *Forge) within(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, f.timeout)
}

// UserByKey returns the active user owning the SSH public key with this
// "SHA256:…" fingerprint. The answer comes from one admin request:
// GET /user/keys?fingerprint= searches every user's keys (and deploy keys)
// and, for a site administrator, names each user key's owner with the
// owner's is_active and prohibit_login flags (Gitea's
// routers/api/v1/user/key.go renders the owner as seen by the owner
// themself), so no second request about the owner is needed. A success
// is kept for KeyCacheTTL; a "not found" is not kept.
func (f *Forge) UserByKey(ctx context.Context, fingerprint string) (forge.User, error) {
	if !strings.HasPrefix(fingerprint, "SHA256:") || len(fingerprint) > 100 {
		return forge.User{}, fmt.Errorf("key %q: %w", fingerprint, forge.ErrNotFound)
	}
	return cachedOrAsk(f.keys, fingerprint, nil, "", func() (forge.User, error) {
		ctx, cancel := f.within(ctx)
		defer cancel()
		keys, err := f.keysByFingerprint(ctx, fingerprint)
		if err != nil {
			return forge.User{}, fmt.Errorf("key %s: %w", fingerprint, err)
		}
		u, err := keyOwner(keys, fingerprint)
		if err != nil {
			return forge.User{}, fmt.Errorf("key %s: %w", fingerprint, err)
		}
		return u, nil
	})
}

// UserByToken returns the active user an API token belongs to. A success
// is kept for KeyCacheTTL, a "not found" (an invalid token, or a user who
// may not log in) for MissTTL, keyed by a hash of the token (tokenKey).
func (f *Forge) UserByToken(ctx context.Context, token string) (forge.User, error) {
	token = strings.TrimSpace(token)
	if !validToken(token) {
		return forge.User{}, fmt.Errorf("token: %w", forge.ErrNotFound)
	}
	return cachedOrAsk(f.tokens, tokenKey(token), f.misses, "token", func() (forge.User, error) {
		ctx, cancel := f.within(ctx)
		defer cancel()
		u, err := f.tokenUser(ctx, token)
		if err == nil {
			err = mayLogIn(u)
		}
		if err != nil {
			return forge.User{}, fmt.Errorf("token: %w", err)
		}
		return forge.User{ID: u.ID, Login: u.UserName}, nil
	})
}

// UserByLogin returns the account that has this login now or, if none
// has, the account Gitea says was renamed from it (Gitea's user redirect):
// a renamed holder keeps their claims. Existence is enough: an account
// that may not log in is still returned (its keys and sign-ins are refused
// elsewhere, and it gets its claims back if reactivated). An organization
// is not an account: forge.ErrNotFound. It is not cached; it is for
// upgrading a ledger whose holders are logins, once.
func (f *Forge) UserByLogin(ctx context.Context, login string) (forge.User, error) {
	if !validName(login) {
		return forge.User{}, fmt.Errorf("user %q: %w", login, forge.ErrNotFound)
	}
	ctx, cancel := f.within(ctx)
	defer cancel()
	u, err := f.userByLogin(ctx, login)
	if err != nil {
		return forge.User{}, fmt.Errorf("user %s: %w", login, err)
	}
	return forge.User{ID: u.ID, Login: u.UserName}, nil
}

// Repo returns owner/name as seen by login ("" = anonymous). See perm.go
// for how the write permissions are worked out. A success is kept for
// PermCacheTTL, a "not found" for MissTTL, keyed by the login and the
// repository (names in any case are one).
func (f *Forge) Repo(ctx context.Context, login, owner, name string) (forge.Repo, error) {
	what := owner + "/" + name
	if !validName(owner) || !validName(name) || (login != "" && !validName(login)) {
		return forge.Repo{}, fmt.Errorf("repository %s: %w", what, forge.ErrNotFound)
	}
	key := strings.ToLower(login + "\x00" + owner + "/" + name)
	return cachedOrAsk(f.perms, key, f.misses, "repo", func() (forge.Repo, error) {
		ctx, cancel := f.within(ctx)
		defer cancel()
		r, err := f.repoAs(ctx, login, owner, name)
		if err != nil {
			if login == "" {
				return forge.Repo{}, fmt.Errorf("repository %s as anonymous: %w", what, err)
			}
			return forge.Repo{}, fmt.Errorf("repository %s as %s: %w", what, login, err)
		}
		return r, nil
	})
}

// Issue returns issue (or pull request) n of owner/name as seen by login.
// It is never cached: whether an issue is open must be fresh.
func (f *Forge) Issue(ctx context.Context, login, owner, name string, n int64) (forge.Issue, error) {
	what := fmt.Sprintf("issue %s/%s#%d", owner, name, n)
	if n <= 0 || !validName(owner) || !validName(name) || (login != "" && !validName(login)) {
		return forge.Issue{}, fmt.Errorf("%s: %w", what, forge.ErrNotFound)
	}
	ctx, cancel := f.within(ctx)
	defer cancel()
	is, err := f.issue(ctx, f.asViewer(login), owner, name, n)
	if err != nil {
		return forge.Issue{}, fmt.Errorf("%s: %w", what, err)
	}
	return issueOf(is), nil
}

func issueOf(is *sdk.Issue) forge.Issue {
	out := forge.Issue{Number: is.Index, Closed: is.State == sdk.StateClosed, IsPull: is.PullRequest != nil, Updated: is.Updated}
	if is.PullRequest != nil {
		out.Merged = is.PullRequest.HasMerged
	}
	return out
}

// RepoName returns the current "owner/name" of repository id, as the
// admin sees it (GET /repositories/{id}).
func (f *Forge) RepoName(ctx context.Context, id int64) (string, error) {
	what := fmt.Sprintf("repository %d", id)
	if id <= 0 {
		return "", fmt.Errorf("%s: %w", what, forge.ErrNotFound)
	}
	ctx, cancel := f.within(ctx)
	defer cancel()
	who := f.asAdmin()
	r, resp, err := f.sdk(ctx, who).GetRepoByID(id)
	if err := sdkErr("GET /api/v1/repositories/"+fmt.Sprint(id), who, resp, err); err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	if r.FullName == "" || r.ID != id {
		return "", fmt.Errorf("%s: %w: malformed response", what, forge.ErrUnavailable)
	}
	return r.FullName, nil
}

// maxClosedPages bounds the pages (of 50) one ClosedSince reads: a sweep
// that finds more closed issues than that repairs the rest next time.
const maxClosedPages = 10

// ClosedSince lists the issues and pull requests of owner/name closed and
// updated at or after since, as the admin sees them, newest first (Gitea
// sorts them by creation), at most maxClosedPages pages; complete is false
// when there were more.
func (f *Forge) ClosedSince(ctx context.Context, owner, name string, since time.Time) (closed []forge.Issue, requests int, complete bool, err error) {
	what := fmt.Sprintf("closed issues of %s/%s", owner, name)
	if !validName(owner) || !validName(name) {
		return nil, 0, false, fmt.Errorf("%s: %w", what, forge.ErrNotFound)
	}
	ctx, cancel := f.within(ctx)
	defer cancel()
	who := f.asAdmin()
	for page := 1; page <= maxClosedPages; page++ {
		requests++
		list, resp, err := f.sdk(ctx, who).ListRepoIssues(owner, name, sdk.ListIssueOption{
			ListOptions: sdk.ListOptions{Page: page, PageSize: 50},
			State:       sdk.StateClosed, Type: sdk.IssueTypeAll, Since: since,
		})
		if err := sdkErr(fmt.Sprintf("GET /api/v1/repos/%s/%s/issues", owner, name), who, resp, err); err != nil {
			return nil, requests, false, fmt.Errorf("%s: %w", what, err)
		}
		for _, is := range list {
			if is != nil && is.State == sdk.StateClosed {
				closed = append(closed, issueOf(is))
			}
		}
		if len(list) < 50 {
			return closed, requests, true, nil
		}
	}
	return closed, requests, false, nil
}

// Check verifies the configured token: Gitea answers, the token is valid and
// belongs to a site administrator. It returns that administrator.
func (f *Forge) Check(ctx context.Context) (forge.User, error) {
	ctx, cancel := f.within(ctx)
	defer cancel()
	u, err := f.adminUser(ctx)
	if err != nil {
		return forge.User{}, fmt.Errorf("check the Gitea token: %w", err)
	}
	if !u.IsAdmin {
		return forge.User{}, fmt.Errorf("check the Gitea token: it belongs to %s, who is not a site administrator: %w: %s",
			u.UserName, forge.ErrConfig, tokenFix)
	}
	return forge.User{ID: u.ID, Login: u.UserName}, nil
}

// validName reports whether s can be a Gitea user, organization or
// repository name. Anything else cannot exist, so it is not found without
// asking Gitea (and never reaches a URL path or a Sudo header).
func validName(s string) bool {
	if s == "" || len(s) > 255 || s == "." || s == ".." {
		return false
	}
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}
