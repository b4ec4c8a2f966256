package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// Fenced merges: the sidecar sets the commit status StatusContext on the
// head commit of every open pull request it knows of, saying whether the
// pull request's author holds the live tenure of every issue it would
// close (and of the pull request itself, if that is leased). A branch
// protection rule that requires the context then lets only the current
// tenure merge.
//
// One worker (RunFences) posts every status, one at a time, outside any
// ledger transaction. Whatever can flip an answer marks the issue or pull
// request dirty (touch): acquire, renew, release, force-release, next,
// the forge's events (close, reopen, a new push, an edited description);
// expiry, which the ledger notices only lazily, is a timer at the soonest
// expiry among the leases a status depends on. The worker recomputes a
// dirty pull request from the ledger after the change, and posts only
// what differs from its last post. Because a change made while a post is
// on its way marks the pull request dirty again, and the worker computes
// the next post after it, the status left standing is always computed
// from the ledger after the last change: a post computed for an old
// tenure cannot outlive a newer one.

// StatusContext is the context of the commit status fenced merges require.
const StatusContext = "collab-lease/claim"

// Backoff of a failed post: doubling from fenceRetryMin up to fenceRetryMax.
const (
	fenceRetryMin = time.Second
	fenceRetryMax = 5 * time.Minute
)

type pullKey struct{ repoID, number int64 }

// fence collects what changed, for the worker.
type fence struct {
	mu      sync.Mutex
	running bool
	issues  map[models.Key]struct{}
	pulls   map[pullKey]struct{}
	wake    chan struct{}
	// What open pull requests link to (kept by setLinks), so that a change
	// of an issue no open pull request links to costs a map lookup.
	links  map[pullKey][]int64
	linked map[models.Key]int // issue -> how many open pull requests link it
}

func newFence() *fence {
	return &fence{issues: map[models.Key]struct{}{}, pulls: map[pullKey]struct{}{}, wake: make(chan struct{}, 1),
		links: map[pullKey][]int64{}, linked: map[models.Key]int{}}
}

// setLinks records what pull request p links to while it is open (nil:
// closed, or gone).
func (f *fence) setLinks(p pullKey, links []int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range f.links[p] {
		k := models.Key{RepoID: p.repoID, Issue: n}
		if f.linked[k]--; f.linked[k] <= 0 {
			delete(f.linked, k)
		}
	}
	delete(f.links, p)
	if links == nil {
		return
	}
	f.links[p] = slices.Clone(links)
	for _, n := range links {
		f.linked[models.Key{RepoID: p.repoID, Issue: n}]++
	}
}

// touch marks issues whose leases changed, if an open pull request links
// them: the worker recomputes those pull requests. Nothing is kept while
// no worker runs.
func (f *fence) touch(ks ...models.Key) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.running {
		return
	}
	marked := false
	for _, k := range ks {
		if f.linked[k] > 0 {
			f.issues[k] = struct{}{}
			marked = true
		}
	}
	if marked {
		f.signal()
	}
}

func (f *fence) touchPull(k pullKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.running {
		return
	}
	f.pulls[k] = struct{}{}
	f.signal()
}

func (f *fence) signal() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// take returns and forgets what was marked.
func (f *fence) take() (map[models.Key]struct{}, map[pullKey]struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	is, ps := f.issues, f.pulls
	f.issues, f.pulls = map[models.Key]struct{}{}, map[pullKey]struct{}{}
	return is, ps
}

// FenceOptions configure RunFences.
type FenceOptions struct {
	// GiteaURL is Gitea's base URL as people reach it, for the statuses'
	// links to the issue that decides them.
	GiteaURL string
	// Observe, if set, is told the outcome of every post: "posted" or
	// "failed".
	Observe func(outcome string)
	// Log, if set, is told about failed posts.
	Log func(msg string, args ...any)
}

// fenceState is what the worker knows of one pull request.
type fenceState struct {
	posted  string    // head SHA + the status last posted on it ("" none)
	expiry  time.Time // the soonest expiry its status depends on (zero: none)
	failed  int       // consecutive failed posts
	retryAt time.Time // when to try again after a failed post
}

// RunFences posts the fenced-merge statuses until ctx ends (see above),
// and then returns nil. At start it re-posts the status of every open
// linked pull request, so a restart leaves none stale.
func (s *Service) RunFences(ctx context.Context, o FenceOptions) error {
	s.fence.mu.Lock()
	s.fence.running = true
	s.fence.mu.Unlock()
	defer func() {
		s.fence.mu.Lock()
		s.fence.running = false
		s.fence.mu.Unlock()
	}()
	state := map[pullKey]*fenceState{}
	names := &repoNames{byID: map[int64]repoName{}}
	for wait := fenceRetryMin; ; wait = min(2*wait, fenceRetryMax) {
		open, err := s.ledger.OpenPulls(ctx)
		if err == nil {
			for _, p := range open {
				s.fence.setLinks(pullKey{p.RepoID, p.Number}, p.Links)
				s.fence.touchPull(pullKey{p.RepoID, p.Number})
			}
			break
		}
		if o.Log != nil {
			o.Log("listing open pull requests for their fenced-merge statuses failed; retrying", "err", err)
		}
		c, stop := s.after(wait)
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
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.fence.wake:
		case <-timer:
			now := s.now()
			for k, st := range state {
				if (!st.expiry.IsZero() && !st.expiry.After(now)) || (!st.retryAt.IsZero() && !st.retryAt.After(now)) {
					s.fence.touchPull(k)
				}
			}
		}
		s.fenceRound(ctx, o, state, names)
		// Sleep until the soonest expiry or retry that matters.
		stop()
		timer, stop = nil, func() bool { return false }
		var next time.Time
		for _, st := range state {
			for _, t := range []time.Time{st.expiry, st.retryAt} {
				if !t.IsZero() && (next.IsZero() || t.Before(next)) {
					next = t
				}
			}
		}
		if !next.IsZero() {
			timer, stop = s.after(next.Sub(s.now()))
		}
	}
}

// fenceRound recomputes and posts every pull request marked so far.
func (s *Service) fenceRound(ctx context.Context, o FenceOptions, state map[pullKey]*fenceState, names *repoNames) {
	issues, pulls := s.fence.take()
	for k := range issues {
		linked, err := s.ledger.PullsLinkedTo(ctx, k.RepoID, k.Issue)
		if err != nil {
			s.fence.touch(k) // the next round tries again
			continue
		}
		for _, p := range linked {
			pulls[pullKey{p.RepoID, p.Number}] = struct{}{}
		}
	}
	keys := make([]pullKey, 0, len(pulls))
	for k := range pulls {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].repoID < keys[j].repoID || keys[i].repoID == keys[j].repoID && keys[i].number < keys[j].number
	})
	for _, k := range keys {
		if ctx.Err() != nil {
			return
		}
		st := state[k]
		if st == nil {
			st = &fenceState{}
			state[k] = st
		}
		p, err := s.ledger.PullOf(ctx, k.repoID, k.number)
		if err != nil {
			s.fenceFailed(o, k, st, err)
			continue
		}
		if p == nil || !p.Open {
			delete(state, k)
			continue
		}
		full, err := names.get(ctx, s, k.repoID)
		if errors.Is(err, forge.ErrNotFound) {
			delete(state, k)
			continue
		}
		if err != nil {
			s.fenceFailed(o, k, st, err)
			continue
		}
		status, expiry, err := s.fenceStatus(ctx, *p, full, o.GiteaURL)
		if err != nil {
			s.fenceFailed(o, k, st, err)
			continue
		}
		st.expiry = expiry
		sig := p.Head + "\x00" + status.State + "\x00" + status.Description + "\x00" + status.TargetURL
		if sig == st.posted {
			continue
		}
		owner, name, _ := strings.Cut(full, "/")
		if err := s.forge.PostStatus(ctx, owner, name, p.Head, status); err != nil {
			s.fenceFailed(o, k, st, err)
			continue
		}
		st.posted, st.failed, st.retryAt = sig, 0, time.Time{}
		if o.Observe != nil {
			o.Observe("posted")
		}
	}
}

func (s *Service) fenceFailed(o FenceOptions, k pullKey, st *fenceState, err error) {
	st.failed++
	wait := fenceRetryMin << min(st.failed-1, 10)
	st.retryAt = s.now().Add(min(wait, fenceRetryMax))
	if o.Observe != nil {
		o.Observe("failed")
	}
	if o.Log != nil {
		o.Log("posting a fenced-merge status failed; retrying", "repo_id", k.repoID, "pull", k.number, "attempt", st.failed, "err", err)
	}
}

// fenceStatus is the status pull request p of repository full should
// carry now, and the soonest expiry among the leases it depends on.
func (s *Service) fenceStatus(ctx context.Context, p models.Pull, full, giteaURL string) (forge.CommitStatus, time.Time, error) {
	leases, err := s.ledger.Leases(ctx, p.RepoID, p.Links)
	if err != nil {
		return forge.CommitStatus{}, time.Time{}, err
	}
	by := map[int64]models.Lease{}
	var expiry time.Time
	for _, l := range leases {
		by[l.Issue] = l
		if l.ExpiresAt != nil && (expiry.IsZero() || l.ExpiresAt.Before(expiry)) {
			expiry = *l.ExpiresAt
		}
	}
	link := func(n int64) string {
		if giteaURL == "" {
			return ""
		}
		return fmt.Sprintf("%s/%s/issues/%d", strings.TrimSuffix(giteaURL, "/"), full, n)
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
			return st, expiry, nil
		case l.Holder.ID != p.Author.ID || l.Holder.ID == 0:
			st.State, st.TargetURL = "failure", link(n)
			st.Description = fmt.Sprintf("issue #%d is claimed by %s", n, l.Holder.Login)
			if l.ExpiresAt != nil {
				st.Description += " until " + l.ExpiresAt.UTC().Format("15:04 UTC")
			}
			return st, expiry, nil
		default:
			mine = append(mine, fmt.Sprintf("#%d token %d", n, l.Token))
		}
	}
	if len(mine) == 0 {
		st.Description = "no claimed work linked"
		return st, expiry, nil
	}
	st.Description = fmt.Sprintf("claimed by %s (%s)", p.Author.Login, strings.Join(mine, ", "))
	return st, expiry, nil
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

func (n *repoNames) get(ctx context.Context, s *Service, id int64) (string, error) {
	if e, ok := n.byID[id]; ok && s.now().Sub(e.at) < repoNameTTL {
		return e.full, nil
	}
	full, err := s.forge.RepoName(ctx, id)
	if err != nil {
		delete(n.byID, id)
		return "", err
	}
	n.byID[id] = repoName{full: full, at: s.now()}
	return full, nil
}
