// Package forgetest is an in-memory forge (it serves lease.Forge and
// fence.Forge) for fast tests of the lease service and its transports:
// accounts with keys and tokens,
// repositories with per-user access (including access limited to one
// unit), issues and pull requests, and switches for an unreachable or hung
// forge. It counts calls and records whom each was asked as, so tests can
// check what reached the forge, and a hook lets a test hold, watch or fail
// calls as they arrive. Its branch protection rules, for the push fence,
// are in branchrules.go; the labels and comments a quarantine puts on
// issues, in labels.go. The real Gitea is exercised in plugin/gitea and
// integration/.
package forgetest

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/collab-lease/collab-lease/plugin/forge"
)

// Access is what a user may do in a repository.
type Access int

// Levels of access, as Gitea grants them.
const (
	None       Access = iota
	Read              // read the repository, its issues and pull requests
	Write             // write issues and pull requests
	IssuesOnly        // a team unit grant: read and write issues only
	PullsOnly         // read and write pull requests only
	Admin             // administer the repository (and write everything)
)

// Scopes are what an API token may do.
type Scopes struct {
	Repository bool // read:repository
	Issue      bool // read:issue
	WriteIssue bool // write:issue (implies read:issue)
	PublicOnly bool
}

// AllScopes may do everything its owner may, as Gitea's "all".
var AllScopes = Scopes{Repository: true, Issue: true, WriteIssue: true}

// ReadScopes may read everything its owner may, and write nothing.
var ReadScopes = Scopes{Repository: true, Issue: true}

type repo struct {
	forge.Repo
	access map[string]Access // login -> access
}

type token struct {
	userID int64
	scopes Scopes
}

// Forge is the fake. The zero value is not usable: call New.
type Forge struct {
	mu       sync.Mutex
	nextID   int64
	users    map[string]forge.User // login -> account
	disabled map[int64]bool        // accounts that may not log in
	keys     map[string]int64      // fingerprint -> user ID
	tokens   map[string]token
	repos    map[string]*repo                // lower-case "owner/name"
	issues   map[string]forge.Issue          // lower-case "owner/name#n"
	labels   map[string][]string             // lower-case "owner/name#n" -> its labels
	titles   map[string]string               // lower-case "owner/name#n" -> its title (titles.go)
	deps     map[string][]int64              // lower-case "owner/name#n" -> the numbers it depends on
	statuses map[string][]forge.CommitStatus // lower-case "owner/name@sha" -> posted, oldest first
	rules    map[string][]forge.BranchRule   // lower-case "owner/name" -> its branch protection rules
	teams    map[string][]string             // lower-case org + "/" + team -> its members
	// The quarantine's (labels.go): the labels made in each repository
	// (lower-case "owner/name"), and the comments of each issue.
	repoLabels map[string][]forge.Label
	comments   map[string][]string
	// ruleClock counts the rules made, for their creation times.
	ruleClock int64
	down      bool
	hang      bool
	hook      Hook
	closedCap int // SetClosedCap
	calls     map[string]int
	asked     map[string][]string // method -> the logins it was asked as
	clock     func() time.Time    // the update times of Close and Reopen
	updated   time.Time           // the latest of them
}

// Hook is called on entry of every call, with the caller's context and the
// method's name (e.g. "Repo"), before the outage switches apply. It may
// block (until a test lets the call go on, or the caller's deadline), tell
// a test the call has arrived, or look at the context. A non-nil error
// fails the call with it.
type Hook func(ctx context.Context, method string) error

// New returns an empty forge.
func New() *Forge {
	return &Forge{users: map[string]forge.User{}, disabled: map[int64]bool{}, keys: map[string]int64{}, tokens: map[string]token{},
		repos: map[string]*repo{}, issues: map[string]forge.Issue{}, labels: map[string][]string{}, deps: map[string][]int64{}, statuses: map[string][]forge.CommitStatus{},
		rules: map[string][]forge.BranchRule{}, teams: map[string][]string{}, repoLabels: map[string][]forge.Label{}, comments: map[string][]string{}, calls: map[string]int{}, asked: map[string][]string{}}
}

// AddUser creates an account and returns it.
func (f *Forge) AddUser(login string) forge.User {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	u := forge.User{ID: f.nextID, Login: login}
	f.users[login] = u
	return u
}

// User returns the account with this login (the zero User if none).
func (f *Forge) User(login string) forge.User {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.users[login]
}

// Rename gives the account with login from the login to.
func (f *Forge) Rename(from, to string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	u := f.users[from]
	delete(f.users, from)
	u.Login = to
	f.users[to] = u
	for _, r := range f.repos {
		if a, ok := r.access[from]; ok {
			delete(r.access, from)
			r.access[to] = a
		}
	}
}

// Disable makes the account with this login one that may not log in: its
// keys and tokens no longer identify anyone, but the account still exists
// (UserByLogin finds it).
func (f *Forge) Disable(login string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := f.users[login].ID
	f.disabled[id] = true
	for fp, owner := range f.keys {
		if owner == id {
			delete(f.keys, fp)
		}
	}
}

// AddKey gives the account login the key with this fingerprint.
func (f *Forge) AddKey(login, fingerprint string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys[fingerprint] = f.users[login].ID
}

// DeleteKey removes a key.
func (f *Forge) DeleteKey(fingerprint string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.keys, fingerprint)
}

// AddToken gives the account login an API token with these scopes.
func (f *Forge) AddToken(login, t string, s Scopes) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tokens[t] = token{userID: f.users[login].ID, scopes: s}
}

// AddRepo creates a repository; fullName is "owner/name".
func (f *Forge) AddRepo(fullName string, id int64, private bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.repos[strings.ToLower(fullName)] = &repo{Repo: forge.Repo{ID: id, FullName: fullName, Private: private},
		access: map[string]Access{}}
}

// Alias makes another name lead to the repository fullName (as after a
// rename or transfer).
func (f *Forge) Alias(alias, fullName string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.repos[strings.ToLower(alias)] = f.repos[strings.ToLower(fullName)]
}

// Grant sets what login may do in the repository fullName.
func (f *Forge) Grant(fullName, login string, a Access) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.repos[strings.ToLower(fullName)].access[login] = a
}

// AddIssue creates issue (or pull request) n of the repository fullName.
func (f *Forge) AddIssue(fullName string, n int64, pull, closed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.issues[fmt.Sprintf("%s#%d", strings.ToLower(fullName), n)] = forge.Issue{Number: n, IsPull: pull, Closed: closed}
}

// SetDown makes every call fail with forge.ErrUnavailable (or not).
func (f *Forge) SetDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

// SetHang makes every call wait for its caller's deadline (or not).
func (f *Forge) SetHang(hang bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hang = hang
}

// SetHook makes h be called on entry of every call; nil removes it.
func (f *Forge) SetHook(h Hook) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hook = h
}

// Calls returns how many calls of the method named (e.g. "Repo") reached
// the forge; "" counts them all.
func (f *Forge) Calls(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if method == "" {
		n := 0
		for _, c := range f.calls {
			n += c
		}
		return n
	}
	return f.calls[method]
}

// Asked returns the logins the method named (Repo, Issue or TokenRepo)
// was asked as, in order; "" is the anonymous viewer.
func (f *Forge) Asked(method string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.asked[method]...)
}

// enterAs is enter for a method that answers as the viewer login.
func (f *Forge) enterAs(ctx context.Context, method, login string) error {
	f.mu.Lock()
	f.asked[method] = append(f.asked[method], login)
	f.mu.Unlock()
	return f.enter(ctx, method)
}

// enter counts a call, runs the hook and applies the outage switches.
func (f *Forge) enter(ctx context.Context, method string) error {
	f.mu.Lock()
	f.calls[method]++
	hook := f.hook
	f.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, method); err != nil {
			return fmt.Errorf("forgetest %s: %w", method, err)
		}
	}
	f.mu.Lock()
	down, hang := f.down, f.hang
	f.mu.Unlock()
	switch {
	case hang:
		<-ctx.Done()
		return fmt.Errorf("forgetest %s: %w: %w", method, forge.ErrUnavailable, ctx.Err())
	case down:
		return fmt.Errorf("forgetest %s: %w", method, forge.ErrUnavailable)
	}
	return nil
}

// active returns the account with this ID if it may log in.
func (f *Forge) active(id int64) (forge.User, bool) {
	if f.disabled[id] {
		return forge.User{}, false
	}
	for _, u := range f.users {
		if u.ID == id {
			return u, true
		}
	}
	return forge.User{}, false
}

// UserByKey implements lease.Forge.
func (f *Forge) UserByKey(ctx context.Context, fingerprint string) (forge.User, error) {
	if err := f.enter(ctx, "UserByKey"); err != nil {
		return forge.User{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if u, ok := f.active(f.keys[fingerprint]); ok {
		return u, nil
	}
	return forge.User{}, fmt.Errorf("key %s: %w", fingerprint, forge.ErrNotFound)
}

// UserByToken implements lease.Forge.
func (f *Forge) UserByToken(ctx context.Context, t string) (forge.User, error) {
	if err := f.enter(ctx, "UserByToken"); err != nil {
		return forge.User{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if tok, ok := f.tokens[t]; ok {
		if u, ok := f.active(tok.userID); ok {
			return u, nil
		}
	}
	return forge.User{}, fmt.Errorf("token: %w", forge.ErrNotFound)
}

// UserByLogin implements lease.Forge.
func (f *Forge) UserByLogin(ctx context.Context, login string) (forge.User, error) {
	if err := f.enter(ctx, "UserByLogin"); err != nil {
		return forge.User{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if u, ok := f.users[login]; ok {
		return u, nil
	}
	return forge.User{}, fmt.Errorf("user %s: %w", login, forge.ErrNotFound)
}

// Repo implements lease.Forge.
func (f *Forge) Repo(ctx context.Context, login, owner, name string) (forge.Repo, error) {
	if err := f.enterAs(ctx, "Repo", login); err != nil {
		return forge.Repo{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.view(login, owner, name)
}

func (f *Forge) view(login, owner, name string) (forge.Repo, error) {
	r, ok := f.repos[strings.ToLower(owner+"/"+name)]
	if !ok {
		return forge.Repo{}, fmt.Errorf("repository %s/%s: %w", owner, name, forge.ErrNotFound)
	}
	out := r.Repo
	a := r.access[login]
	if login == "" {
		a = None
	}
	switch a {
	case None:
		if r.Private {
			return forge.Repo{}, fmt.Errorf("repository %s/%s: %w", owner, name, forge.ErrNotFound)
		}
		out.CanRead, out.CanReadIssues, out.CanReadPulls = true, true, true
	case Read:
		out.CanRead, out.CanReadIssues, out.CanReadPulls = true, true, true
	case Write, Admin:
		out.CanRead, out.CanReadIssues, out.CanReadPulls = true, true, true
		out.CanWriteIssues, out.CanWritePulls = true, true
		out.Admin = a == Admin
	case IssuesOnly:
		out.CanRead, out.CanReadIssues, out.CanWriteIssues = true, true, true
		out.CanReadPulls = !r.Private
	case PullsOnly:
		out.CanRead, out.CanReadPulls, out.CanWritePulls = true, true, true
		out.CanReadIssues = !r.Private
	}
	return out, nil
}

// Issue implements lease.Forge.
func (f *Forge) Issue(ctx context.Context, login, owner, name string, n int64) (forge.Issue, error) {
	if err := f.enterAs(ctx, "Issue", login); err != nil {
		return forge.Issue{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	r, err := f.view(login, owner, name)
	if err != nil {
		return forge.Issue{}, err
	}
	is, ok := f.issues[fmt.Sprintf("%s#%d", strings.ToLower(r.FullName), n)]
	if !ok || (is.IsPull && !r.CanReadPulls) || (!is.IsPull && !r.CanReadIssues) {
		return forge.Issue{}, fmt.Errorf("issue %s#%d: %w", r.FullName, n, forge.ErrNotFound)
	}
	return is, nil
}

// TokenRepo implements lease.Forge.
func (f *Forge) TokenRepo(ctx context.Context, u forge.User, t, owner, name string) (forge.Repo, error) {
	if err := f.enterAs(ctx, "TokenRepo", u.Login); err != nil {
		return forge.Repo{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	tok, ok := f.tokens[t]
	if !ok || tok.userID != u.ID || f.disabled[u.ID] {
		return forge.Repo{}, fmt.Errorf("token: %w", forge.ErrNotFound)
	}
	r, err := f.view(u.Login, owner, name)
	switch {
	case err != nil:
		return forge.Repo{}, err
	case !tok.scopes.Repository || (tok.scopes.PublicOnly && r.Private):
		return forge.Repo{}, fmt.Errorf("repository %s/%s through the token: %w", owner, name, forge.ErrNotFound)
	case !tok.scopes.Issue && !tok.scopes.WriteIssue:
		r.CanReadIssues, r.CanReadPulls = false, false
	}
	if !tok.scopes.WriteIssue {
		r.CanWriteIssues, r.CanWritePulls, r.Admin = false, false, false
	}
	return r, nil
}

// Close closes issue (or pull request) n of fullName at the forge, merged
// or not, and moves its update time on.
func (f *Forge) Close(fullName string, n int64, merged bool) {
	f.setState(fullName, n, func(is *forge.Issue) { is.Closed, is.Merged = true, merged })
}

// Reopen reopens issue n of fullName and moves its update time on.
func (f *Forge) Reopen(fullName string, n int64) {
	f.setState(fullName, n, func(is *forge.Issue) { is.Closed, is.Merged = false, false })
}

func (f *Forge) setState(fullName string, n int64, change func(*forge.Issue)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := fmt.Sprintf("%s#%d", strings.ToLower(fullName), n)
	is := f.issues[key]
	change(&is)
	now := time.Now
	if f.clock != nil {
		now = f.clock
	}
	// Update times only grow, by whole seconds, as Gitea's do.
	next := now().Truncate(time.Second)
	if !next.After(f.updated) {
		next = f.updated.Add(time.Second)
	}
	f.updated = next
	is.Updated = f.updated
	f.issues[key] = is
}

// SetClock sets the clock of the forge's update times (default time.Now).
func (f *Forge) SetClock(now func() time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.clock = now
}

// DeleteRepo removes the repository fullName.
func (f *Forge) DeleteRepo(fullName string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.repos, strings.ToLower(fullName))
}

// RepoName implements lease.Forge.
func (f *Forge) RepoName(ctx context.Context, id int64) (string, error) {
	if err := f.enter(ctx, "RepoName"); err != nil {
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.repos {
		if r.ID == id {
			return r.FullName, nil
		}
	}
	return "", fmt.Errorf("repository %d: %w", id, forge.ErrNotFound)
}

// ClosedSince implements lease.Forge: newest first, in pages of 50, at
// most SetClosedCap of them (unbounded by default).
func (f *Forge) ClosedSince(ctx context.Context, owner, name string, since time.Time) ([]forge.Issue, int, bool, error) {
	if err := f.enter(ctx, "ClosedSince"); err != nil {
		return nil, 1, false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	prefix := strings.ToLower(owner+"/"+name) + "#"
	var out []forge.Issue
	for key, is := range f.issues {
		if strings.HasPrefix(key, prefix) && is.Closed && !is.Updated.Before(since) {
			out = append(out, is)
		}
	}
	slices.SortFunc(out, func(a, b forge.Issue) int { return cmp.Compare(b.Number, a.Number) })
	if f.closedCap > 0 && len(out) > f.closedCap {
		return out[:f.closedCap], (f.closedCap + 49) / 50, false, nil
	}
	return out, len(out)/50 + 1, true, nil
}

// SetClosedCap makes ClosedSince return at most n issues, and say it
// was cut short when there were more (0: no cap).
func (f *Forge) SetClosedCap(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closedCap = n
}

// Label puts labels on issue (or pull request) n of fullName.
func (f *Forge) Label(fullName string, n int64, labels ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := fmt.Sprintf("%s#%d", strings.ToLower(fullName), n)
	f.labels[key] = append(f.labels[key], labels...)
}

// Depend makes issue n of fullName depend on issue on of the same
// repository (Gitea's "depends on": on blocks n while it is open).
func (f *Forge) Depend(fullName string, n, on int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := fmt.Sprintf("%s#%d", strings.ToLower(fullName), n)
	f.deps[key] = append(f.deps[key], on)
}

// OpenIssues implements lease.Forge: one request per 50 issues listed,
// as Gitea's pages.
func (f *Forge) OpenIssues(ctx context.Context, owner, name string, flt forge.IssueFilter, limit int) ([]forge.Issue, int, error) {
	if err := f.enter(ctx, "OpenIssues"); err != nil {
		return nil, 1, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.repos[strings.ToLower(owner+"/"+name)]
	if !ok {
		return nil, 1, fmt.Errorf("repository %s/%s: %w", owner, name, forge.ErrNotFound)
	}
	prefix := strings.ToLower(r.FullName) + "#"
	var out []forge.Issue
	for key, is := range f.issues {
		if !strings.HasPrefix(key, prefix) || is.Closed || is.IsPull != flt.Pulls || !hasAll(f.labels[key], flt.Labels) {
			continue
		}
		out = append(out, is)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Number < out[j].Number })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, 1 + len(out)/50, nil
}

func hasAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// Blocked implements lease.Forge.
func (f *Forge) Blocked(ctx context.Context, owner, name string, n int64) (bool, error) {
	if err := f.enter(ctx, "Blocked"); err != nil {
		return false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	repo := strings.ToLower(owner + "/" + name)
	for _, on := range f.deps[fmt.Sprintf("%s#%d", repo, n)] {
		if is, ok := f.issues[fmt.Sprintf("%s#%d", repo, on)]; ok && !is.Closed {
			return true, nil
		}
	}
	return false, nil
}

// PostStatus implements fence.Forge: the statuses are kept in order, for
// Statuses.
func (f *Forge) PostStatus(ctx context.Context, owner, name, sha string, st forge.CommitStatus) error {
	if err := f.enter(ctx, "PostStatus"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	key := strings.ToLower(owner+"/"+name) + "@" + sha
	f.statuses[key] = append(f.statuses[key], st)
	return nil
}

// Statuses returns the statuses posted on commit sha of fullName, oldest
// first; the last one is what the forge shows.
func (f *Forge) Statuses(fullName, sha string) []forge.CommitStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]forge.CommitStatus(nil), f.statuses[strings.ToLower(fullName)+"@"+sha]...)
}
