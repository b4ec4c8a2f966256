package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/singleflight"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/changes"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// next (docs/ssh.md, The agent verbs): claim the oldest open issue of a repository that
// carries the labels asked for, is not live-held and is not blocked by an
// open dependency. The candidates come from the forge's list of open
// issues, oldest first; the ledger takes the first of them that is free in
// one transaction (models' AcquireFirst), so that two callers never get
// the same issue and "none" means every candidate was held at one
// instant. Whether a candidate is blocked is asked of the forge only for
// the one the ledger would take, between transactions (the ledger never
// waits on the network): a blocked one is dropped and the ledger asked
// again.
//
// What the forge said is reused for a short while (DefaultNextCacheTTL)
// by every caller of the repository, and dropped at once when a forge
// event about the repository arrives, so that a fleet calling next costs
// the forge about one list per repository and interval, not one per call.
// A candidate closed meanwhile is skipped by the ledger once the close has
// been recorded (models' admit), as for acquire.

// Bounds of one next.
const (
	// DefaultNextListTTL: how long a list of open issues is reused. A
	// candidate closed meanwhile is skipped by the ledger once the close
	// is recorded; one opened meanwhile waits for the next list.
	DefaultNextListTTL = 10 * time.Second
	// DefaultNextCacheTTL: how long an answer about dependencies is
	// reused; a forge event about the repository drops them at once.
	DefaultNextCacheTTL = 2 * time.Second
	// The oldest open issues considered: first a short list, and only
	// if none of those is free, a long one (50 to a page of the forge's).
	nextShortList = 100
	nextLongList  = 1000
	// nextMaxAsks bounds the questions to the forge per call: one per
	// issue whose dependencies are asked about, and per round that asks
	// which issues were closed, the requests it made (at least one).
	nextMaxAsks = 32
	// nextAskers bounds the questions about single issues one call has
	// in flight at once.
	nextAskers = 8
)

// NextStats is what one next cost, for metrics.
type NextStats struct {
	Attempts int    // ledger transactions that tried to claim a candidate
	Requests int    // requests to the forge (list pages, dependencies, closed issues)
	Outcome  string // acquired, none, try_again or error
}

// Next claims, for v, the oldest open issue (f.Pulls: pull request) of
// owner/name that carries every label of f, is not live-held and is not
// blocked by an open dependency; with priority labels
// (WithPriorityLabels, unless f.Oldest), the oldest such of the highest
// priority there is. Nothing to claim is a *ConflictError
// with contract.None; ErrTryAgain when the bounds of one call were reached
// before a free candidate was found.
//
// It takes a short list of candidates, then if need be a long one
// (candidates); on each, it asks the ledger for the first free one
// (attempt), and when the ledger needs to know more of the first free
// ones, asks the forge (ask) and the ledger again.
func (s *Service) Next(ctx context.Context, v Viewer, owner, name string, f forge.IssueFilter, ttl time.Duration) (t contract.Tenure, err error) {
	c := &nextCall{v: v, ttl: ttl}
	defer func() {
		switch {
		case err == nil:
			c.st.Outcome = contract.StatusAcquired
		case errors.Is(err, ErrConflict):
			c.st.Outcome = contract.StatusNone
		case errors.Is(err, ErrTryAgain):
			c.st.Outcome = "try_again"
		default:
			c.st.Outcome = "error"
		}
		if s.observeNext != nil {
			s.observeNext(c.st)
		}
	}()
	if v.Anonymous() {
		return contract.Tenure{}, fmt.Errorf("next: %w: no account", ErrInvalid)
	}
	if c.r, err = s.repo(ctx, v, owner, name); err != nil {
		return contract.Tenure{}, err
	}
	if c.kind, err = mayNext(c.r, f); err != nil {
		return contract.Tenure{}, err
	}
	for _, size := range []int{nextShortList, nextLongList} {
		all, err := s.candidates(ctx, c, f, size)
		if err != nil {
			return contract.Tenure{}, err
		}
		for {
			t, done, err := s.attempt(ctx, c)
			if done {
				return t, err
			}
			if c.unverified == nil {
				break // every candidate is held or closed
			}
			if err := s.ask(ctx, c); err != nil {
				return contract.Tenure{}, err
			}
		}
		if all < size {
			break // that was every open issue
		}
		if size == nextLongList {
			return contract.Tenure{}, fmt.Errorf("next in %s: %w", c.r.FullName, ErrTryAgain)
		}
	}
	return contract.Tenure{}, &ConflictError{Reply: contract.None{Status: contract.StatusNone, Repo: c.r.FullName}}
}

// nextCall is one call of Next: who asks, where, and what it has cost and
// learnt so far.
type nextCall struct {
	v    Viewer
	r    forge.Repo
	kind models.Kind
	ttl  time.Duration
	st   NextStats
	asks int // questions to the forge so far (nextMaxAsks)

	// Of the list of candidates at hand (candidates): when the forge was
	// asked for it, and what is left of it.
	listed time.Time
	cands  []models.Candidate
	// depsKnown: the candidates whose dependencies the forge answered
	// for lately; checked: when the forge was asked the answer that
	// says a candidate let go since the list was asked for is still
	// open (nextCache.ended).
	depsKnown map[int64]bool
	checked   map[int64]time.Time

	// What the last attempt left to ask (ask): the first free candidates
	// the ledger needs to know more of (nil: none is free), and the
	// candidates let go since the list was asked for (during this call
	// too) that no answer since has said are still open; they are handed
	// out only once one has.
	unverified *models.UnverifiedError
	stale      map[int64]time.Time
}

// candidates takes, for c, a list of the oldest size candidates
// (candidateList), but those known to be blocked, and says how many match
// in all (up to size).
func (s *Service) candidates(ctx context.Context, c *nextCall, f forge.IssueFilter, size int) (all int, err error) {
	list, asked, all, n, err := s.candidateList(ctx, c.r, f, size)
	c.st.Requests += n
	if err != nil {
		return 0, err
	}
	c.listed = asked
	c.depsKnown = map[int64]bool{}
	c.checked = map[int64]time.Time{}
	c.cands = make([]models.Candidate, 0, len(list))
	for _, is := range list {
		blocked, known := s.next.knownBlocked(c.r.ID, is.Number)
		if known && blocked {
			continue
		}
		c.depsKnown[is.Number] = known
		c.cands = append(c.cands, models.Candidate{Issue: is.Number,
			Observed: models.Observed{Kind: c.kind, Version: max(is.Updated.Unix(), 1)}})
	}
	return all, nil
}

// attempt asks the ledger to claim the first free of c's candidates that
// it may hand out. done: Next's answer is t and err (acquired, refused,
// or failed). Otherwise c.unverified says what is left to ask (ask).
func (s *Service) attempt(ctx context.Context, c *nextCall) (t contract.Tenure, done bool, err error) {
	c.stale = s.next.letGo(c.r.ID, c.cands, c.listed, c.checked)
	for i := range c.cands {
		_, isStale := c.stale[c.cands[i].Issue]
		c.cands[i].Verified = c.depsKnown[c.cands[i].Issue] && !isStale
	}
	c.st.Attempts++
	l, err := s.ledger.AcquireFirst(ctx, c.r.ID, c.cands, c.v.holder(), c.ttl)
	var unverified *models.UnverifiedError
	var limit *models.LimitError
	switch {
	case err == nil:
		c.v.Session.track(c.r.FullName, l)
		return tenure(contract.StatusAcquired, c.r, l), true, nil
	case errors.As(err, &limit):
		return contract.Tenure{}, true, limitConflict(c.r, nil, c.v, limit)
	case errors.As(err, &unverified):
	case errors.Is(err, models.ErrNoneFree):
	default:
		return contract.Tenure{}, true, err
	}
	c.unverified = unverified
	return contract.Tenure{}, false, nil
}

// ask asks the forge about the first free candidates the ledger needs to
// know more of (c.unverified): whether the stale ones are still open, and
// whether the others are blocked; it drops those closed or blocked from
// c's candidates. Past nextMaxAsks questions in the call, it is
// ErrTryAgain.
func (s *Service) ask(ctx context.Context, c *nextCall) error {
	if c.asks >= nextMaxAsks {
		return fmt.Errorf("next in %s: %w", c.r.FullName, ErrTryAgain)
	}
	// Ask about the first free candidates together: callers that
	// lose the race for the first find the next ones checked.
	ask := c.unverified.Issues[:min(len(c.unverified.Issues), nextMaxAsks-c.asks)]
	drop := map[int64]bool{}
	stale := c.stale
	if slices.ContainsFunc(ask, func(n int64) bool { _, ok := stale[n]; return ok }) {
		// One question checks every candidate let go, not only
		// these (which come first, should each need a question).
		recheck := make([]int64, 0, len(stale))
		var after time.Time
		for _, n := range ask {
			if _, ok := stale[n]; ok {
				recheck = append(recheck, n)
			}
		}
		for n, e := range stale {
			if !slices.Contains(ask, n) {
				recheck = append(recheck, n)
			}
			if e.After(after) {
				after = e
			}
		}
		open, at, n, err := s.next.stillOpen(ctx, c.r, c.v.Login, recheck, c.listed, after)
		c.st.Requests += n
		c.asks += max(n, 1)
		if err != nil {
			return err
		}
		for n, isOpen := range open {
			if isOpen {
				c.checked[n] = at
			} else {
				drop[n] = true
			}
		}
	}
	var deps []int64
	for _, n := range ask {
		if !drop[n] && !c.depsKnown[n] {
			deps = append(deps, n)
		}
	}
	c.asks += len(deps)
	blocked, n, err := s.next.askAll(ctx, c.r, deps)
	c.st.Requests += n
	if err != nil {
		return err
	}
	for n, b := range blocked {
		c.depsKnown[n] = true
		drop[n] = drop[n] || b
	}
	c.cands = slices.DeleteFunc(c.cands, func(cand models.Candidate) bool { return drop[cand.Issue] })
	return nil
}

// candidateList is the oldest limit open issues of r that match f, in the
// order next takes them: with priority labels (and not f.Oldest), the
// oldest of those carrying the first label, then of the second, and so
// on, then the rest, each issue once; all is how many match f in all (up
// to limit), asked when the oldest of the lists was asked for, and
// requests what the lists cost.
func (s *Service) candidateList(ctx context.Context, r forge.Repo, f forge.IssueFilter, limit int) (list []forge.Issue, asked time.Time, all, requests int, err error) {
	plain, asked, requests, err := s.next.list(ctx, r, forge.IssueFilter{Pulls: f.Pulls, Labels: f.Labels}, limit)
	if err != nil || len(s.priorities) == 0 || f.Oldest {
		return plain, asked, len(plain), requests, err
	}
	seen := map[int64]bool{}
	for _, p := range s.priorities {
		if slices.Contains(f.Labels, p) {
			continue // every candidate carries it: the plain order serves
		}
		pf := forge.IssueFilter{Pulls: f.Pulls, Labels: append(slices.Clone(f.Labels), p)}
		ps, at, n, err := s.next.list(ctx, r, pf, limit)
		requests += n
		if err != nil {
			return nil, asked, 0, requests, err
		}
		if at.Before(asked) {
			asked = at
		}
		for _, is := range ps {
			if !seen[is.Number] {
				seen[is.Number] = true
				list = append(list, is)
			}
		}
	}
	for _, is := range plain {
		if !seen[is.Number] {
			list = append(list, is)
		}
	}
	return list, asked, len(plain), requests, nil
}

// nextCache keeps what the forge said for next, per repository: lists of
// open issues for listTTL, answers about dependencies for ttl or until a
// forge event about the repository (forget). It asks forge, and reads
// the time on now.
type nextCache struct {
	now     func() time.Time
	forge   nextForge
	listTTL time.Duration
	ttl     time.Duration
	flight  singleflight.Group
	mu      sync.Mutex
	gen     map[int64]uint64 // per repository: bumped by forget
	lists   map[string]listEntry
	deps    map[models.Key]blockedEntry
	closed  map[int64]closedEntry // per repository ID (stillOpen)
	// ended: when a claim on the issue last ended other than by expiry
	// (released, force-released, lost with its session, or any change on
	// another replica: those come without a cause), heard on the bus. A
	// holder that lets go has often just finished: merged the pull
	// request that closed the issue, whose webhook is still on its way,
	// while a list read before still shows the issue open. So for
	// a while (endedLately), while a list read before may still be in
	// use, such an issue is handed out only once the forge's list of
	// issues closed since, asked for after the end, has said it is still
	// open (stillOpen).
	// Past nextCacheMax/2 such ends within the window (a churn no fleet
	// makes), it is forgotten and the lists trusted as before.
	ended map[models.Key]time.Time
}

// nextForge is what next asks the forge (of Forge).
type nextForge interface {
	Issue(ctx context.Context, login, owner, name string, n int64) (forge.Issue, error)
	ClosedSince(ctx context.Context, owner, name string, since time.Time) (closed []forge.Issue, requests int, complete bool, err error)
	OpenIssues(ctx context.Context, owner, name string, f forge.IssueFilter, limit int) (issues []forge.Issue, requests int, err error)
	Blocked(ctx context.Context, owner, name string, n int64) (bool, error)
}

type listEntry struct {
	asked  time.Time // when its request was sent
	at     time.Time // when it arrived
	issues []forge.Issue
}

type blockedEntry struct {
	at      time.Time
	gen     uint64
	blocked bool
}

// nextCacheMax bounds each cache; past it, entries no longer fresh go.
const nextCacheMax = 10000

func newNextCache(listTTL, ttl time.Duration) *nextCache {
	return &nextCache{listTTL: listTTL, ttl: ttl, gen: map[int64]uint64{}, lists: map[string]listEntry{}, deps: map[models.Key]blockedEntry{},
		closed: map[int64]closedEntry{}, ended: map[models.Key]time.Time{}}
}

// heard is the cache's subscription to the change bus: it notes when
// claims ended other than by expiry (ended).
func (c *nextCache) heard(set changes.Set) {
	if set.Origin == changes.Expired {
		return
	}
	var now time.Time
	for _, ch := range set.Changes {
		if !ch.Ended || ch.Key.Issue == 0 {
			continue
		}
		if now.IsZero() {
			now = c.now()
			c.mu.Lock()
			defer c.mu.Unlock()
			if len(c.ended) >= nextCacheMax {
				for k, at := range c.ended {
					if !c.endedLately(at) {
						delete(c.ended, k)
					}
				}
				if len(c.ended) >= nextCacheMax/2 {
					clear(c.ended) // churn beyond the bound: back to trusting the lists
				}
			}
		}
		c.ended[ch.Key] = now
	}
}

// letGo returns those of these candidates of the repository with this ID
// whose claim ended after listed, lately (endedLately), and after the
// forge was asked the answer that said they are still open (checked),
// with when.
func (c *nextCache) letGo(repoID int64, cands []models.Candidate, listed time.Time, checked map[int64]time.Time) map[int64]time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.ended) == 0 {
		return nil
	}
	var out map[int64]time.Time
	for _, cand := range cands {
		e, ok := c.ended[models.Key{RepoID: repoID, Issue: cand.Issue}]
		if !ok || !e.After(listed) || !c.endedLately(e) {
			continue
		}
		if at, ok := checked[cand.Issue]; ok && !at.Before(e) {
			continue
		}
		if out == nil {
			out = map[int64]time.Time{}
		}
		out[cand.Issue] = e
	}
	return out
}

// endedLately: an end at e is recent enough that a list in use may
// predate it. A list is used listTTL from its arrival, and may have been
// asked for before the end: twice that, for a list that took as long
// to come.
func (c *nextCache) endedLately(e time.Time) bool { return c.now().Sub(e) < 2*c.listTTL }

// forget drops the answers about dependencies of the repository with this
// ID that an event may have made wrong: a close (or deletion) can only
// unblock issues, so it drops the "blocked" answers; anything else (a
// reopen can block again) drops them all. Its lists stay: what changed in
// them the ledger knows better (a recorded close is skipped).
func (c *nextCache) forget(repoID int64, onlyBlocked bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !onlyBlocked {
		c.gen[repoID]++
		return
	}
	for k, e := range c.deps {
		if k.RepoID == repoID && e.blocked {
			delete(c.deps, k)
		}
	}
}

func (c *nextCache) fresh(repoID int64, at time.Time, gen uint64) bool {
	return gen == c.gen[repoID] && c.now().Sub(at) < c.ttl
}

func (c *nextCache) freshList(at time.Time) bool { return c.now().Sub(at) < c.listTTL }

// list returns the oldest limit open issues of r that match f, when
// their request was sent, and how many requests to the forge it made for
// them (0 when cached, or when another caller's request was shared).
func (c *nextCache) list(ctx context.Context, r forge.Repo, f forge.IssueFilter, limit int) ([]forge.Issue, time.Time, int, error) {
	key := strconv.FormatInt(r.ID, 10) + "/" + strconv.FormatBool(f.Pulls) + "/" + strconv.Itoa(limit) + "/" + strings.Join(f.Labels, ",")
	cached := func() (listEntry, bool) {
		c.mu.Lock()
		defer c.mu.Unlock()
		e, ok := c.lists[key]
		return e, ok && c.freshList(e.at)
	}
	e, requests, err := shared(ctx, &c.flight, key, time.Time{}, cached, func(e listEntry) time.Time { return e.asked },
		func() (listEntry, int, error) {
			asked := c.now()
			owner, name, _ := strings.Cut(r.FullName, "/")
			issues, n, err := c.forge.OpenIssues(context.WithoutCancel(ctx), owner, name, f, limit)
			if errors.Is(err, forge.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, forge.ErrRateLimited) {
				// Every next waiting for this list shares its failure (a
				// dozen agents at once in a busy fleet): one failed request
				// (a reset connection, a 5xx of an overloaded forge) is
				// asked once more before they are all told to try again.
				var m int
				issues, m, err = c.forge.OpenIssues(context.WithoutCancel(ctx), owner, name, f, limit)
				n += m
			}
			if err != nil {
				return listEntry{}, n, err
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			if len(c.lists) >= nextCacheMax {
				for k, e := range c.lists {
					if !c.freshList(e.at) {
						delete(c.lists, k)
					}
				}
			}
			// Its age counts from when it arrived: a list that took longer
			// to read than the interval would otherwise never be reused.
			e := listEntry{asked: asked, at: c.now(), issues: issues}
			c.lists[key] = e
			return e, n, nil
		})
	return e.issues, e.asked, requests, err
}

// closedSlack is how much earlier than a list was asked for next asks
// which issues were closed since: the forge stamps a close with its own
// clock, in whole seconds.
const closedSlack = 10 * time.Second

// closedEntry is the forge's latest answer, for one repository, about
// the issues closed since a time.
type closedEntry struct {
	asked    time.Time // when its request was sent
	since    time.Time // what it covers
	closed   map[int64]bool
	complete bool // false: more were closed than the answer holds
}

// stillOpen says which of these issues of r, each on a list of open
// issues asked for at listed and each let go no later than after, are
// still open: those not on the forge's list of issues closed since
// listed, as the forge answered it after after (at: when that answer was
// asked for), and, where that list was cut short, those the forge says
// are open when asked about each (as login): the first
// nextMaxAsks of them, the rest left out of open, unknown. The answer serves every
// caller asking about the repository while it is the latest: it reaches
// back as far as any list in use may (endedLately), whatever the list of
// the caller that asked for it.
func (c *nextCache) stillOpen(ctx context.Context, r forge.Repo, login string, issues []int64, listed, after time.Time) (open map[int64]bool, at time.Time, requests int, err error) {
	need := listed.Add(-closedSlack)
	cached := func() (closedEntry, bool) {
		c.mu.Lock()
		defer c.mu.Unlock()
		e, ok := c.closed[r.ID]
		return e, ok && !e.since.After(need) && !e.asked.Before(after)
	}
	owner, name, _ := strings.Cut(r.FullName, "/")
	e, requests, err := shared(ctx, &c.flight, "closed/"+strconv.FormatInt(r.ID, 10), after, cached, func(e closedEntry) time.Time {
		if e.since.After(need) {
			return time.Time{} // covers too little: asked for again
		}
		return e.asked
	}, func() (closedEntry, int, error) {
		asked := c.now()
		since := asked.Add(-2*c.listTTL - closedSlack)
		if need.Before(since) {
			since = need
		}
		list, n, complete, err := c.forge.ClosedSince(context.WithoutCancel(ctx), owner, name, since)
		if err != nil {
			return closedEntry{}, n, err
		}
		e := closedEntry{asked: asked, since: since, closed: make(map[int64]bool, len(list)), complete: complete}
		for _, is := range list {
			e.closed[is.Number] = true
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if old, ok := c.closed[r.ID]; !ok || !e.asked.Before(old.asked) {
			if len(c.closed) >= nextCacheMax {
				clear(c.closed)
			}
			c.closed[r.ID] = e
		}
		return e, n, nil
	})
	if err != nil {
		return nil, time.Time{}, requests, err
	}
	open = make(map[int64]bool, len(issues))
	var unsure []int64
	for _, n := range issues {
		open[n] = !e.closed[n]
		if open[n] && !e.complete {
			unsure = append(unsure, n)
		}
	}
	if len(unsure) == 0 {
		return open, e.asked, requests, nil
	}
	// More were closed than one list holds: ask about each, a few at a
	// time (an issue gone, or no longer visible, is not handed out).
	for _, n := range unsure[min(len(unsure), nextMaxAsks):] {
		delete(open, n)
	}
	unsure = unsure[:min(len(unsure), nextMaxAsks)]
	var mu sync.Mutex
	var g errgroup.Group
	g.SetLimit(nextAskers)
	for _, n := range unsure {
		g.Go(func() error {
			is, err := c.forge.Issue(ctx, login, owner, name, n)
			if err != nil && !errors.Is(err, forge.ErrNotFound) {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			open[n] = err == nil && !is.Closed
			return nil
		})
	}
	requests += len(unsure)
	if err := g.Wait(); err != nil {
		return nil, time.Time{}, requests, err
	}
	return open, e.asked, requests, nil
}

// shared returns what fetch answers (and the requests it made for this
// caller), once for all callers of key at a time: a cached answer if
// there is one asked for no earlier than after, or else the answer of a
// request sent no earlier than after, this caller's or one it joins. A
// joined request sent before after is waited for, then a new one sent.
func shared[T any](ctx context.Context, g *singleflight.Group, key string, after time.Time,
	cached func() (T, bool), asked func(T) time.Time, fetch func() (T, int, error)) (T, int, error) {
	requests := 0
	var zero T
	for {
		if e, ok := cached(); ok {
			return e, requests, nil
		}
		mine := 0
		ch := g.DoChan(key, func() (any, error) {
			if e, ok := cached(); ok { // stored by a flight that ended meanwhile
				return e, nil
			}
			e, n, err := fetch()
			mine = n
			return e, err
		})
		select {
		case res := <-ch:
			requests += mine
			if res.Err != nil {
				return zero, requests, res.Err
			}
			if e := res.Val.(T); !asked(e).IsZero() && !asked(e).Before(after) {
				return e, requests, nil
			}
			// Shared a request sent before after: ask again.
		case <-ctx.Done():
			return zero, requests, ctx.Err() // mine is the flight's until it ends
		}
	}
}

// knownBlocked returns what is cached about whether issue n of the
// repository is blocked, and whether anything fresh is.
func (c *nextCache) knownBlocked(repoID, n int64) (blocked, known bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := models.Key{RepoID: repoID, Issue: n}
	e, ok := c.deps[k]
	if !ok || !c.fresh(repoID, e.at, e.gen) {
		return false, false
	}
	return e.blocked, true
}

// askAll asks the forge about these issues of r at once, and returns
// which are blocked (every one asked is a key) and how many requests it
// made (an answer another caller was already waiting for costs none).
func (c *nextCache) askAll(ctx context.Context, r forge.Repo, issues []int64) (map[int64]bool, int, error) {
	type answer struct {
		n        int64
		blocked  bool
		requests int
		err      error
	}
	out := make(chan answer, len(issues))
	for _, n := range issues {
		go func() {
			b, requests, err := c.ask(ctx, r, n)
			out <- answer{n, b, requests, err}
		}()
	}
	blocked := make(map[int64]bool, len(issues))
	requests := 0
	var first error
	for range issues {
		a := <-out
		requests += a.requests
		if a.err != nil {
			first = cmp.Or(first, a.err)
			continue
		}
		blocked[a.n] = a.blocked
	}
	return blocked, requests, first
}

// ask asks the forge whether issue n of r has an open dependency (one
// question at a time per issue: concurrent callers share it), caches the
// answer, and says how many requests this call made.
func (c *nextCache) ask(ctx context.Context, r forge.Repo, n int64) (bool, int, error) {
	k := models.Key{RepoID: r.ID, Issue: n}
	requests := 0
	ch := c.flight.DoChan("deps/"+strconv.FormatInt(r.ID, 10)+"/"+strconv.FormatInt(n, 10), func() (any, error) {
		if b, known := c.knownBlocked(r.ID, n); known {
			return b, nil
		}
		c.mu.Lock()
		gen := c.gen[r.ID]
		c.mu.Unlock()
		at := c.now()
		owner, name, _ := strings.Cut(r.FullName, "/")
		requests++
		b, err := c.forge.Blocked(context.WithoutCancel(ctx), owner, name, n)
		if err != nil {
			return false, err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(c.deps) >= nextCacheMax {
			for k, e := range c.deps {
				if !c.fresh(k.RepoID, e.at, e.gen) {
					delete(c.deps, k)
				}
			}
		}
		c.deps[k] = blockedEntry{at: at, gen: gen, blocked: b}
		return b, nil
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return false, requests, res.Err
		}
		return res.Val.(bool), requests, nil
	case <-ctx.Done():
		return false, 0, ctx.Err()
	}
}
