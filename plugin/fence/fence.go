// Package fence keeps fenced merges and fenced pushes. For merges, the
// sidecar sets the commit status StatusContext on the head commit of
// every open pull request it knows of, saying whether the pull request's
// author holds the live tenure of every issue it would close (and of the
// pull request itself, if that is leased). A branch protection rule that
// requires the context then lets only the current tenure merge. For
// pushes (Options.FencePushes), it keeps a branch protection rule of its
// own on the head branch of every open pull request whose head is in the
// same repository while the pull request, or an issue it closes, is
// claimed, so that the forge takes pushes to that branch only from the
// holders' accounts (push.go).
//
// One worker (Worker.Run) posts every status, one at a time, outside any
// ledger transaction. It hears on the change bus (plugin/changes)
// whatever can flip an answer: a committed write of a lease or of a pull
// request's record here, a lease change another replica announced, and
// the expiry instants it asked the bus for (the expiry of every lease a
// status depends on). A pull request recorded through another replica is
// that replica's worker's to post (an announcement does not say it is a
// pull request's record). It recomputes a touched pull request from the ledger after
// the change, and posts only what differs from its last post. Because a
// change made while a post is on its way marks the pull request dirty
// again, and the worker computes the next post after it, the status left
// standing is always computed from the ledger after the last change: a
// post computed for an old tenure cannot outlive a newer one. The same
// round recomputes the push fence of the touched pull requests' branches
// after their statuses, from the same reads.
//
// It never decides who holds a lease: it reads what the ledger decided
// and tells the forge. The one thing it writes to the ledger is its own
// record of the branch rules it made (models.FenceRule), never a lease.
package fence

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/changes"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// StatusContext is the context of the commit status fenced merges require.
const StatusContext = "collab-lease/claim"

// Backoff of a failed post: doubling from retryMin up to retryMax.
const (
	retryMin = time.Second
	retryMax = 5 * time.Minute
)

// Ledger is what the worker reads of the lease store (models.Store).
type Ledger interface {
	PullsLinkedTo(ctx context.Context, repoID, n int64) ([]models.Pull, error)
	PullOf(ctx context.Context, repoID, number int64) (*models.Pull, error)
	OpenPulls(ctx context.Context) ([]models.Pull, error)
	Leases(ctx context.Context, repoID int64, issues []int64) ([]models.Lease, error)
	// The push fence's reads, and its record of the rules it made.
	PullsOnBranch(ctx context.Context, repoID int64, branch string) ([]models.Pull, error)
	FenceRules(ctx context.Context) ([]models.FenceRule, error)
	FenceRuleOf(ctx context.Context, repoID int64, branch string) (*models.FenceRule, error)
	IntendFenceRule(ctx context.Context, repoID int64, branch string) error
	SaveFenceRule(ctx context.Context, r models.FenceRule) error
	DropFenceRule(ctx context.Context, repoID int64, branch string) error
	// Exclusive runs fn unless another replica runs the same chore now
	// (models.ChoreOfBranch: one branch's push fence).
	Exclusive(ctx context.Context, chore int32, fn func(context.Context) error) (bool, error)
}

// Forge is what the worker asks of the forge.
type Forge interface {
	// RepoName is the current "owner/name" of the repository with this
	// ID; forge.ErrNotFound if it is gone.
	RepoName(ctx context.Context, id int64) (string, error)
	// PostStatus sets st on commit sha of owner/name.
	PostStatus(ctx context.Context, owner, name, sha string, st forge.CommitStatus) error
	// BranchRules is how the repository's branch protection rules bear
	// on branch.
	BranchRules(ctx context.Context, owner, name, branch string) (forge.BranchRules, error)
	// CreateBranchRule makes rule r; EditBranchRule sets every setting
	// of the rule named r.Name; both return the rule as the forge has it.
	CreateBranchRule(ctx context.Context, owner, name string, r forge.BranchRule) (forge.BranchRule, error)
	EditBranchRule(ctx context.Context, owner, name string, r forge.BranchRule) (forge.BranchRule, error)
	// DeleteBranchRule removes the rule named rule (none there: no error).
	DeleteBranchRule(ctx context.Context, owner, name, rule string) error
	// TeamMember says whether login is in team of organization org.
	TeamMember(ctx context.Context, org, team, login string) (bool, error)
}

// Options configure a Worker.
type Options struct {
	// GiteaURL is Gitea's base URL as people reach it, for the statuses'
	// links to the issue that decides them.
	GiteaURL string
	// Observe, if set, is told the outcome of every post: "posted" or
	// "failed".
	Observe func(outcome string)
	// FencePushes turns the push fence on. Off, the worker still removes
	// the rules it made before (after a restart, as it reconciles them).
	FencePushes bool
	// ObservePush, if set, is told what became of every branch rule the
	// push fence changed: "made", "updated", "removed" or "failed".
	ObservePush func(outcome string)
	// Recheck, if not 0, is how often the push fence looks at the forge's
	// rules of every branch it fences again, so that a change of an
	// admin's rule it carries (or its own rule removed by hand) reaches
	// it without waiting for a change of the claim.
	Recheck time.Duration
	// Log, if set, is told about failed posts.
	Log func(msg string, args ...any)
	// Now and After are the worker's clock (default the system's).
	Now   func() time.Time
	After changes.After
}

type pullKey struct{ repoID, number int64 }

// Worker posts the fenced-merge statuses. Make one with New.
type Worker struct {
	ledger Ledger
	forge  Forge
	bus    *changes.Bus
	o      Options

	mu      sync.Mutex
	running bool
	issues  map[models.Key]struct{}
	pulls   map[pullKey]struct{}
	branch  map[branchKey]struct{}
	wake    chan struct{}
	// What open pull requests link to (kept by setLinks from the ledger's
	// records), so that a change of an issue no open pull request links
	// to costs a map lookup.
	links  map[pullKey][]int64
	linked map[models.Key]int // issue -> how many open pull requests link it
}

// New returns the worker over ledger and forge, hearing of changes on bus.
func New(ledger Ledger, f Forge, bus *changes.Bus, o Options) *Worker {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.After == nil {
		o.After = changes.RealAfter
	}
	return &Worker{ledger: ledger, forge: f, bus: bus, o: o,
		issues: map[models.Key]struct{}{}, pulls: map[pullKey]struct{}{}, branch: map[branchKey]struct{}{}, wake: make(chan struct{}, 1),
		links: map[pullKey][]int64{}, linked: map[models.Key]int{}}
}

// heard is the worker's subscription to the bus.
func (w *Worker) heard(set changes.Set) {
	for _, c := range set.Changes {
		switch {
		case c.Reservations: // path reservations: no claim changed
		case c.Pull:
			w.touchPull(pullKey{c.Key.RepoID, c.Key.Issue})
		case c.Key.Issue != 0:
			w.touch(c.Key)
		default:
			w.touchRepo(c.Key.RepoID)
		}
	}
}

// setLinks records what pull request p links to while it is open (nil:
// closed, or gone).
func (w *Worker) setLinks(p pullKey, links []int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, n := range w.links[p] {
		k := models.Key{RepoID: p.repoID, Issue: n}
		if w.linked[k]--; w.linked[k] <= 0 {
			delete(w.linked, k)
		}
	}
	delete(w.links, p)
	if links == nil {
		return
	}
	w.links[p] = slices.Clone(links)
	for _, n := range links {
		w.linked[models.Key{RepoID: p.repoID, Issue: n}]++
	}
}

// touch marks issues whose leases changed, if an open pull request links
// them: the worker recomputes those pull requests. Nothing is kept while
// the worker does not run.
func (w *Worker) touch(ks ...models.Key) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.running {
		return
	}
	marked := false
	for _, k := range ks {
		if w.linked[k] > 0 {
			w.issues[k] = struct{}{}
			marked = true
		}
	}
	if marked {
		w.signal()
	}
}

// touchRepo marks every linked issue of repoID (0: of all).
func (w *Worker) touchRepo(repoID int64) {
	w.mu.Lock()
	var ks []models.Key
	for k := range w.linked {
		if repoID == 0 || k.RepoID == repoID {
			ks = append(ks, k)
		}
	}
	w.mu.Unlock()
	w.touch(ks...)
}

func (w *Worker) touchPull(k pullKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.running {
		return
	}
	w.pulls[k] = struct{}{}
	w.signal()
}

func (w *Worker) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *Worker) touchBranch(k branchKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.running {
		return
	}
	w.branch[k] = struct{}{}
	w.signal()
}

// take returns and forgets what was marked.
func (w *Worker) take() (map[models.Key]struct{}, map[pullKey]struct{}, map[branchKey]struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	is, ps, bs := w.issues, w.pulls, w.branch
	w.issues, w.pulls, w.branch = map[models.Key]struct{}{}, map[pullKey]struct{}{}, map[branchKey]struct{}{}
	return is, ps, bs
}

// state is what the worker knows of one pull request.
type state struct {
	posted  string    // head SHA + the status last posted on it ("" none)
	failed  int       // consecutive failed posts
	retryAt time.Time // when to try again after a failed post
}

// Run posts the fenced-merge statuses and keeps the push fence's rules
// until ctx ends (see the package doc), and then returns nil. At start it
// re-posts the status of every open linked pull request and recomputes
// the rule of every branch the ledger says it made a rule on, so a
// restart leaves none stale.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	w.running = true
	w.mu.Unlock()
	cancel := w.bus.Subscribe(w.heard)
	defer func() {
		cancel()
		w.mu.Lock()
		w.running = false
		w.mu.Unlock()
	}()
	states := map[pullKey]*state{}
	branches := map[branchKey]*state{}
	names := &repoNames{byID: map[int64]repoName{}}
	for wait := retryMin; ; wait = min(2*wait, retryMax) {
		open, err := w.ledger.OpenPulls(ctx)
		var made []models.FenceRule
		if err == nil {
			made, err = w.ledger.FenceRules(ctx)
		}
		if err == nil {
			for _, p := range open {
				w.setLinks(pullKey{p.RepoID, p.Number}, p.Links)
				w.touchPull(pullKey{p.RepoID, p.Number})
			}
			for _, r := range made {
				w.touchBranch(branchKey{r.RepoID, r.Branch})
			}
			break
		}
		if w.o.Log != nil {
			w.o.Log("listing open pull requests and fenced branches failed; retrying", "err", err)
		}
		c, stop := w.o.After(wait)
		select {
		case <-ctx.Done():
			stop()
			return nil
		case <-c:
		}
	}
	var timer <-chan time.Time
	stop := func() bool { return false }
	defer func() { stop() }()
	var recheckAt time.Time
	if w.o.Recheck > 0 {
		recheckAt = w.o.Now().Add(w.o.Recheck)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.wake:
		case <-timer:
			now := w.o.Now()
			if !recheckAt.IsZero() && !recheckAt.After(now) {
				recheckAt = now.Add(w.o.Recheck)
				for k, st := range branches {
					if st.posted != "" {
						st.posted = "" // look at the forge's rules again
						w.touchBranch(k)
					}
				}
			}
			for k, st := range states {
				if !st.retryAt.IsZero() && !st.retryAt.After(now) {
					w.touchPull(k)
				}
			}
			for k, st := range branches {
				if !st.retryAt.IsZero() && !st.retryAt.After(now) {
					w.touchBranch(k)
				}
			}
		}
		w.round(ctx, states, branches, names)
		// Sleep until the soonest retry (expiries come from the bus).
		stop()
		timer, stop = nil, func() bool { return false }
		var next time.Time
		for _, st := range states {
			if t := st.retryAt; !t.IsZero() && (next.IsZero() || t.Before(next)) {
				next = t
			}
		}
		for _, st := range branches {
			if t := st.retryAt; !t.IsZero() && (next.IsZero() || t.Before(next)) {
				next = t
			}
		}
		if t := recheckAt; !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
		if !next.IsZero() {
			timer, stop = w.o.After(next.Sub(w.o.Now()))
		}
	}
}

// round recomputes and posts every pull request marked so far, and then
// the push fence of their branches and of the branches marked.
func (w *Worker) round(ctx context.Context, states map[pullKey]*state, branches map[branchKey]*state, names *repoNames) {
	issues, pulls, fenced := w.take()
	defer func() { w.fenceBranches(ctx, fenced, branches, names) }()
	for k := range issues {
		linked, err := w.ledger.PullsLinkedTo(ctx, k.RepoID, k.Issue)
		if err != nil {
			w.touch(k) // the next round tries again
			continue
		}
		for _, p := range linked {
			pulls[pullKey{p.RepoID, p.Number}] = struct{}{}
		}
	}
	for _, k := range inOrder(pulls, func(a, b pullKey) int {
		return cmp.Or(cmp.Compare(a.repoID, b.repoID), cmp.Compare(a.number, b.number))
	}) {
		if ctx.Err() != nil {
			return
		}
		st := stateOf(states, k)
		p, err := w.ledger.PullOf(ctx, k.repoID, k.number)
		if err != nil {
			w.failed(k, st, err)
			continue
		}
		// What the pull request links to is taken from the ledger before
		// its leases are read: a lease change published after this is
		// matched by touch, and one before it is in the read.
		if p != nil && p.Branch != "" && (w.o.FencePushes || !p.Open) {
			fenced[branchKey{k.repoID, p.Branch}] = struct{}{}
		}
		if p == nil || !p.Open {
			w.setLinks(k, nil)
			delete(states, k)
			continue
		}
		w.setLinks(k, p.Links)
		full, err := names.get(ctx, w, k.repoID)
		if errors.Is(err, forge.ErrNotFound) {
			delete(states, k)
			continue
		}
		if err != nil {
			w.failed(k, st, err)
			continue
		}
		status, err := w.status(ctx, *p, full)
		if err != nil {
			w.failed(k, st, err)
			continue
		}
		sig := p.Head + "\x00" + status.State + "\x00" + status.Description + "\x00" + status.TargetURL
		if sig == st.posted {
			continue
		}
		owner, name, _ := strings.Cut(full, "/")
		if err := w.forge.PostStatus(ctx, owner, name, p.Head, status); err != nil {
			w.failed(k, st, err)
			continue
		}
		st.posted, st.failed, st.retryAt = sig, 0, time.Time{}
		if w.o.Observe != nil {
			w.o.Observe("posted")
		}
	}
}

func (w *Worker) failed(k pullKey, st *state, err error) {
	st.backOff(w.o.Now())
	if w.o.Observe != nil {
		w.o.Observe("failed")
	}
	if w.o.Log != nil {
		w.o.Log("posting a fenced-merge status failed; retrying", "repo_id", k.repoID, "pull", k.number, "attempt", st.failed, "err", err)
	}
}

// inOrder returns the keys of m sorted by order, so that a round goes
// through them in an order that does not change from run to run.
func inOrder[K comparable](m map[K]struct{}, order func(a, b K) int) []K {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, order)
	return keys
}

// stateOf returns what the worker knows of k, new if nothing yet.
func stateOf[K comparable](states map[K]*state, k K) *state {
	st := states[k]
	if st == nil {
		st = &state{}
		states[k] = st
	}
	return st
}

// backOff counts a failure and sets when to try again: retryMin,
// doubling with each failure in a row, up to retryMax.
func (st *state) backOff(now time.Time) {
	st.failed++
	wait := retryMin << min(st.failed-1, 10)
	st.retryAt = now.Add(min(wait, retryMax))
}

// status is the status pull request p of repository full should carry
// now. The expiry of every lease it depends on goes on the bus's expiry
// queue, so that the status is recomputed at that instant.
func (w *Worker) status(ctx context.Context, p models.Pull, full string) (forge.CommitStatus, error) {
	leases, err := w.ledger.Leases(ctx, p.RepoID, p.Links)
	if err != nil {
		return forge.CommitStatus{}, err
	}
	by := map[int64]models.Lease{}
	for _, l := range leases {
		by[l.Issue] = l
		if l.ExpiresAt != nil {
			w.bus.ExpireAt(l.Key, *l.ExpiresAt)
		}
	}
	link := func(n int64) string {
		if w.o.GiteaURL == "" {
			return ""
		}
		return fmt.Sprintf("%s/%s/issues/%d", strings.TrimSuffix(w.o.GiteaURL, "/"), full, n)
	}
	st := forge.CommitStatus{Context: StatusContext, State: "success", TargetURL: link(p.Number)}
	var mine []string
	for _, n := range p.Links {
		l, held := by[n]
		switch {
		case !held && n == p.Number:
			// The pull request itself counts only if it is leased.
		case !held:
			st.State, st.Description, st.TargetURL = "failure", fmt.Sprintf("claim #%d before merging", n), link(n)
			return st, nil
		case l.Holder.ID != p.Author.ID || l.Holder.ID == 0:
			st.State, st.TargetURL = "failure", link(n)
			st.Description = fmt.Sprintf("issue #%d is claimed by %s", n, l.Holder.Login)
			if l.ExpiresAt != nil {
				st.Description += " until " + l.ExpiresAt.UTC().Format("15:04 UTC")
			}
			return st, nil
		default:
			mine = append(mine, fmt.Sprintf("#%d token %d", n, l.Token))
		}
	}
	if len(mine) == 0 {
		st.Description = "no claimed work linked"
		return st, nil
	}
	st.Description = fmt.Sprintf("claimed by %s (%s)", p.Author.Login, strings.Join(mine, ", "))
	return st, nil
}

// repoNames remembers repositories' current names for a while, so that a
// status recomputed after every change does not ask the forge each time.
type repoNames struct{ byID map[int64]repoName }

type repoName struct {
	full string
	at   time.Time
}

// repoNameTTL: how long a name is reused (a rename shows in the links of
// statuses posted after it within this long).
const repoNameTTL = time.Minute

func (n *repoNames) get(ctx context.Context, w *Worker, id int64) (string, error) {
	if e, ok := n.byID[id]; ok && w.o.Now().Sub(e.at) < repoNameTTL {
		return e.full, nil
	}
	full, err := w.forge.RepoName(ctx, id)
	if err != nil {
		delete(n.byID, id)
		return "", err
	}
	n.byID[id] = repoName{full: full, at: w.o.Now()}
	return full, nil
}
