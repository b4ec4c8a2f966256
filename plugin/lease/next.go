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
func (s *Service) Next(ctx context.Context, v Viewer, owner, name string, f forge.IssueFilter, ttl time.Duration) (t contract.Tenure, err error) {
	var st NextStats
	defer func() {
		switch {
		case err == nil:
			st.Outcome = contract.StatusAcquired
		case errors.Is(err, ErrConflict):
			st.Outcome = contract.StatusNone
		case errors.Is(err, ErrTryAgain):
			st.Outcome = "try_again"
		default:
			st.Outcome = "error"
		}
		if s.observeNext != nil {
			s.observeNext(st)
		}
	}()
	if v.Anonymous() {
		return contract.Tenure{}, fmt.Errorf("next: %w: no account", ErrInvalid)
	}
	r, err := s.repo(ctx, v, owner, name)
	if err != nil {
		return contract.Tenure{}, err
	}
	kind, err := mayNext(r, f)
	if err != nil {
		return contract.Tenure{}, err
	}
	asks := 0
	for _, size := range []int{nextShortList, nextLongList} {
		list, asked, all, n, err := s.candidates(ctx, r, f, size)
		st.Requests += n
		if err != nil {
			return contract.Tenure{}, err
		}
		// depsKnown: the candidates whose dependencies the forge answered
		// for lately; checked: when the forge was asked the answer that
		// says a candidate let go since the list was asked for is still
		// open (nextCache.ended).
		depsKnown := map[int64]bool{}
		checked := map[int64]time.Time{}
		cands := make([]models.Candidate, 0, len(list))
		for _, is := range list {
			blocked, known := s.next.knownBlocked(s, r.ID, is.Number)
			if known && blocked {
				continue
			}
			depsKnown[is.Number] = known
			cands = append(cands, models.Candidate{Issue: is.Number,
				Observed: models.Observed{Kind: kind, Version: max(is.Updated.Unix(), 1)}})
		}
		for {
			// stale: the candidates let go since the list was asked for
			// (during this call too) that no answer since has said are
			// still open; they are handed out only once one has.
			stale := s.next.letGo(s, r.ID, cands, asked, checked)
			for i := range cands {
				_, isStale := stale[cands[i].Issue]
				cands[i].Verified = depsKnown[cands[i].Issue] && !isStale
			}
			st.Attempts++
			l, err := s.ledger.AcquireFirst(ctx, r.ID, cands, v.holder(), ttl)
			var unverified *models.UnverifiedError
			var limit *models.LimitError
			switch {
			case err == nil:
				v.Session.track(r.FullName, l)
				return tenure(contract.StatusAcquired, r, l), nil
			case errors.As(err, &limit):
				return contract.Tenure{}, limitConflict(r, nil, v, limit)
			case errors.As(err, &unverified):
			case errors.Is(err, models.ErrNoneFree):
			default:
				return contract.Tenure{}, err
			}
			if unverified == nil {
				break // every candidate is held or closed
			}
			if asks >= nextMaxAsks {
				return contract.Tenure{}, fmt.Errorf("next in %s: %w", r.FullName, ErrTryAgain)
			}
			// Ask about the first free candidates together: callers that
			// lose the race for the first find the next ones checked.
			ask := unverified.Issues[:min(len(unverified.Issues), nextMaxAsks-asks)]
			drop := map[int64]bool{}
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
				open, at, n, err := s.next.stillOpen(ctx, s, r, v.Login, recheck, asked, after)
				st.Requests += n
				asks += max(n, 1)
				if err != nil {
					return contract.Tenure{}, err
				}
				for n, isOpen := range open {
					if isOpen {
						checked[n] = at
					} else {
						drop[n] = true
					}
				}
			}
			var deps []int64
			for _, n := range ask {
				if !drop[n] && !depsKnown[n] {
					deps = append(deps, n)
				}
			}
			asks += len(deps)
			blocked, n, err := s.next.askAll(ctx, s, r, deps)
			st.Requests += n
			if err != nil {
				return contract.Tenure{}, err
			}
			for n, b := range blocked {
				depsKnown[n] = true
				drop[n] = drop[n] || b
			}
			cands = slices.DeleteFunc(cands, func(c models.Candidate) bool { return drop[c.Issue] })
		}
		if all < size {
			break // that was every open issue
		}
		if size == nextLongList {
			return contract.Tenure{}, fmt.Errorf("next in %s: %w", r.FullName, ErrTryAgain)
		}
	}
	return contract.Tenure{}, &ConflictError{Reply: contract.None{Status: contract.StatusNone, Repo: r.FullName}}
}

// candidates are the oldest limit open issues of r that match f, in the
// order next takes them: with priority labels (and not f.Oldest), the
// oldest of those carrying the first label, then of the second, and so
// on, then the rest, each issue once; all is how many match f in all (up
// to limit), asked when the oldest of the lists was asked for, and
// requests what the lists cost.
func (s *Service) candidates(ctx context.Context, r forge.Repo, f forge.IssueFilter, limit int) (list []forge.Issue, asked time.Time, all, requests int, err error) {
	plain, asked, requests, err := s.next.list(ctx, s, r, forge.IssueFilter{Pulls: f.Pulls, Labels: f.Labels}, limit)
	if err != nil || len(s.priorities) == 0 || f.Oldest {
		return plain, asked, len(plain), requests, err
	}
	seen := map[int64]bool{}
	for _, p := range s.priorities {
		if slices.Contains(f.Labels, p) {
			continue // every candidate carries it: the plain order serves
		}
		pf := forge.IssueFilter{Pulls: f.Pulls, Labels: append(slices.Clone(f.Labels), p)}
		ps, at, n, err := s.next.list(ctx, s, r, pf, limit)
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
// forge event about the repository (forget).
type nextCache struct {
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
func (c *nextCache) heard(s *Service) func(changes.Set) {
	return func(set changes.Set) {
		if set.Origin == changes.Expired {
			return
		}
		var now time.Time
		for _, ch := range set.Changes {
			if !ch.Ended || ch.Key.Issue == 0 {
				continue
			}
			if now.IsZero() {
				now = s.now()
				c.mu.Lock()
				defer c.mu.Unlock()
				if len(c.ended) >= nextCacheMax {
					for k, at := range c.ended {
						if !c.endedLately(s, at) {
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
}

// letGo returns those of these candidates of the repository with this ID
// whose claim ended after listed, lately (endedLately), and after the
// forge was asked the answer that said they are still open (checked),
// with when.
func (c *nextCache) letGo(s *Service, repoID int64, cands []models.Candidate, listed time.Time, checked map[int64]time.Time) map[int64]time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.ended) == 0 {
		return nil
	}
	var out map[int64]time.Time
	for _, cand := range cands {
		e, ok := c.ended[models.Key{RepoID: repoID, Issue: cand.Issue}]
		if !ok || !e.After(listed) || !c.endedLately(s, e) {
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
func (c *nextCache) endedLately(s *Service, e time.Time) bool { return s.now().Sub(e) < 2*c.listTTL }

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

func (c *nextCache) fresh(s *Service, repoID int64, at time.Time, gen uint64) bool {
	return gen == c.gen[repoID] && s.now().Sub(at) < c.ttl
}

func (c *nextCache) freshList(s *Service, at time.Time) bool { return s.now().Sub(at) < c.listTTL }

// list returns the oldest limit open issues of r that match f, when
// their request was sent, and how many requests to the forge it made for
// them (0 when cached, or when another caller's request was shared).
func (c *nextCache) list(ctx context.Context, s *Service, r forge.Repo, f forge.IssueFilter, limit int) ([]forge.Issue, time.Time, int, error) {
	key := strconv.FormatInt(r.ID, 10) + "/" + strconv.FormatBool(f.Pulls) + "/" + strconv.Itoa(limit) + "/" + strings.Join(f.Labels, ",")
	cached := func() (listEntry, bool) {
		c.mu.Lock()
		defer c.mu.Unlock()
		e, ok := c.lists[key]
		return e, ok && c.freshList(s, e.at)
	}
	e, requests, err := shared(ctx, &c.flight, key, time.Time{}, cached, func(e listEntry) time.Time { return e.asked },
		func() (listEntry, int, error) {
			asked := s.now()
			owner, name, _ := strings.Cut(r.FullName, "/")
			issues, n, err := s.forge.OpenIssues(context.WithoutCancel(ctx), owner, name, f, limit)
			if errors.Is(err, forge.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, forge.ErrRateLimited) {
				// Every next waiting for this list shares its failure (a
				// dozen agents at once in a busy fleet): one failed request
				// (a reset connection, a 5xx of an overloaded forge) is
				// asked once more before they are all told to try again.
				var m int
				issues, m, err = s.forge.OpenIssues(context.WithoutCancel(ctx), owner, name, f, limit)
				n += m
			}
			if err != nil {
				return listEntry{}, n, err
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			if len(c.lists) >= nextCacheMax {
				for k, e := range c.lists {
					if !c.freshList(s, e.at) {
						delete(c.lists, k)
					}
				}
			}
			// Its age counts from when it arrived: a list that took longer
			// to read than the interval would otherwise never be reused.
			e := listEntry{asked: asked, at: s.now(), issues: issues}
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
func (c *nextCache) stillOpen(ctx context.Context, s *Service, r forge.Repo, login string, issues []int64, listed, after time.Time) (open map[int64]bool, at time.Time, requests int, err error) {
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
		asked := s.now()
		since := asked.Add(-2*c.listTTL - closedSlack)
		if need.Before(since) {
			since = need
		}
		list, n, complete, err := s.forge.ClosedSince(context.WithoutCancel(ctx), owner, name, since)
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
			is, err := s.forge.Issue(ctx, login, owner, name, n)
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
func (c *nextCache) knownBlocked(s *Service, repoID, n int64) (blocked, known bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := models.Key{RepoID: repoID, Issue: n}
	e, ok := c.deps[k]
	if !ok || !c.fresh(s, repoID, e.at, e.gen) {
		return false, false
	}
	return e.blocked, true
}

// askAll asks the forge about these issues of r at once, and returns
// which are blocked (every one asked is a key) and how many requests it
// made (an answer another caller was already waiting for costs none).
func (c *nextCache) askAll(ctx context.Context, s *Service, r forge.Repo, issues []int64) (map[int64]bool, int, error) {
	type answer struct {
		n        int64
		blocked  bool
		requests int
		err      error
	}
	out := make(chan answer, len(issues))
	for _, n := range issues {
		go func() {
			b, requests, err := c.ask(ctx, s, r, n)
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
func (c *nextCache) ask(ctx context.Context, s *Service, r forge.Repo, n int64) (bool, int, error) {
	k := models.Key{RepoID: r.ID, Issue: n}
	requests := 0
	ch := c.flight.DoChan("deps/"+strconv.FormatInt(r.ID, 10)+"/"+strconv.FormatInt(n, 10), func() (any, error) {
		if b, known := c.knownBlocked(s, r.ID, n); known {
			return b, nil
		}
		c.mu.Lock()
		gen := c.gen[r.ID]
		c.mu.Unlock()
		at := s.now()
		owner, name, _ := strings.Cut(r.FullName, "/")
		requests++
		b, err := s.forge.Blocked(context.WithoutCancel(ctx), owner, name, n)
		if err != nil {
			return false, err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(c.deps) >= nextCacheMax {
			for k, e := range c.deps {
				if !c.fresh(s, k.RepoID, e.at, e.gen) {
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
