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
	// nextMaxAsks bounds the dependency questions to the forge per call.
	nextMaxAsks = 32
)

// NextStats is what one next cost, for metrics.
type NextStats struct {
	Attempts int    // ledger transactions that tried to claim a candidate
	Requests int    // requests to the forge (list pages and dependencies)
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
	for _, limit := range []int{nextShortList, nextLongList} {
		list, all, n, err := s.candidates(ctx, r, f, limit)
		st.Requests += n
		if err != nil {
			return contract.Tenure{}, err
		}
		cands := make([]models.Candidate, 0, len(list))
		for _, is := range list {
			blocked, known := s.next.knownBlocked(s, r.ID, is.Number)
			if known && blocked {
				continue
			}
			cands = append(cands, models.Candidate{Issue: is.Number, Verified: known,
				Observed: models.Observed{Kind: kind, Version: max(is.Updated.Unix(), 1)}})
		}
		for {
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
			blocked, n, err := s.next.askAll(ctx, s, r, v.Login, ask)
			asks += len(ask)
			st.Requests += n
			if err != nil {
				return contract.Tenure{}, err
			}
			cands = slices.DeleteFunc(cands, func(c models.Candidate) bool { return blocked[c.Issue] })
			for i := range cands {
				if _, asked := blocked[cands[i].Issue]; asked {
					cands[i].Verified = true
				}
			}
		}
		if all < limit {
			break // that was every open issue
		}
		if limit == nextLongList {
			return contract.Tenure{}, fmt.Errorf("next in %s: %w", r.FullName, ErrTryAgain)
		}
	}
	return contract.Tenure{}, &ConflictError{Reply: contract.None{Status: contract.StatusNone, Repo: r.FullName}}
}

// candidates are the oldest limit open issues of r that match f, in the
// order next takes them: with priority labels (and not f.Oldest), the
// oldest of those carrying the first label, then of the second, and so
// on, then the rest, each issue once; all is how many match f in all (up
// to limit), and requests what the lists cost.
func (s *Service) candidates(ctx context.Context, r forge.Repo, f forge.IssueFilter, limit int) (list []forge.Issue, all, requests int, err error) {
	plain, requests, err := s.next.list(ctx, s, r, forge.IssueFilter{Pulls: f.Pulls, Labels: f.Labels}, limit)
	if err != nil || len(s.priorities) == 0 || f.Oldest {
		return plain, len(plain), requests, err
	}
	seen := map[int64]bool{}
	for _, p := range s.priorities {
		if slices.Contains(f.Labels, p) {
			continue // every candidate carries it: the plain order serves
		}
		pf := forge.IssueFilter{Pulls: f.Pulls, Labels: append(slices.Clone(f.Labels), p)}
		ps, n, err := s.next.list(ctx, s, r, pf, limit)
		requests += n
		if err != nil {
			return nil, 0, requests, err
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
	return list, len(plain), requests, nil
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
	// ended: when a claim on the issue last ended other than by expiry
	// (released, force-released, lost with its session, or any change on
	// another replica: those come without a cause), heard on the bus. A
	// holder that lets go has often just finished: merged the pull
	// request that closed the issue, whose webhook is still on its way,
	// while a list read before still shows the issue open. So for
	// endedWindow, while a list read before may still be in use, such an
	// issue is handed out only once the forge has said it is still open.
	// Past nextCacheMax/2 such ends within the window (a churn no fleet
	// makes), it is forgotten and the lists trusted as before.
	ended map[models.Key]time.Time
}

type listEntry struct {
	at     time.Time
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
		ended: map[models.Key]time.Time{}}
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

// endedAfter says whether a claim on k ended after at, recently enough
// that a list of open issues may predate it (under c.mu).
func (c *nextCache) endedAfter(s *Service, k models.Key, at time.Time) bool {
	e, ok := c.ended[k]
	return ok && e.After(at) && c.endedLately(s, e)
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

// list returns the oldest limit open issues of r that match f, and how
// many requests to the forge it made for them (0 when cached, or when
// another caller's request was shared).
func (c *nextCache) list(ctx context.Context, s *Service, r forge.Repo, f forge.IssueFilter, limit int) ([]forge.Issue, int, error) {
	key := strconv.FormatInt(r.ID, 10) + "/" + strconv.FormatBool(f.Pulls) + "/" + strconv.Itoa(limit) + "/" + strings.Join(f.Labels, ",")
	cached := func() ([]forge.Issue, bool) {
		c.mu.Lock()
		defer c.mu.Unlock()
		e, ok := c.lists[key]
		return e.issues, ok && c.freshList(s, e.at)
	}
	if issues, ok := cached(); ok {
		return issues, 0, nil
	}
	requests := 0
	ch := c.flight.DoChan(key, func() (any, error) {
		if issues, ok := cached(); ok { // stored by a flight that ended meanwhile
			return issues, nil
		}
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
		requests = n
		if err != nil {
			return nil, err
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
		c.lists[key] = listEntry{at: s.now(), issues: issues}
		return issues, nil
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return nil, requests, res.Err
		}
		return res.Val.([]forge.Issue), requests, nil
	case <-ctx.Done():
		return nil, 0, ctx.Err() // requests is the flight's until it ends
	}
}

// knownBlocked returns what is cached about whether issue n of the
// repository is blocked, and whether anything fresh is.
func (c *nextCache) knownBlocked(s *Service, repoID, n int64) (blocked, known bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := models.Key{RepoID: repoID, Issue: n}
	e, ok := c.deps[k]
	if !ok || !c.fresh(s, repoID, e.at, e.gen) || c.endedAfter(s, k, e.at) {
		return false, false
	}
	return e.blocked, true
}

// askAll asks the forge about these issues of r at once, and returns
// which are blocked (every one asked is a key) and how many requests it
// made (an answer another caller was already waiting for costs none).
func (c *nextCache) askAll(ctx context.Context, s *Service, r forge.Repo, login string, issues []int64) (map[int64]bool, int, error) {
	type answer struct {
		n        int64
		blocked  bool
		requests int
		err      error
	}
	out := make(chan answer, len(issues))
	for _, n := range issues {
		go func() {
			b, requests, err := c.ask(ctx, s, r, login, n)
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
// question at a time per issue: concurrent callers share it), and, if a
// claim on it ended lately (ended), whether it is still open as login
// sees it (closed or gone counts as blocked); caches the answer, and says
// how many requests this call made.
func (c *nextCache) ask(ctx context.Context, s *Service, r forge.Repo, login string, n int64) (bool, int, error) {
	k := models.Key{RepoID: r.ID, Issue: n}
	requests := 0
	ch := c.flight.DoChan("deps/"+strconv.FormatInt(r.ID, 10)+"/"+strconv.FormatInt(n, 10), func() (any, error) {
		if b, known := c.knownBlocked(s, r.ID, n); known {
			return b, nil
		}
		c.mu.Lock()
		gen := c.gen[r.ID]
		endedAt, ended := c.ended[k]
		verify := ended && c.endedLately(s, endedAt)
		c.mu.Unlock()
		at := s.now()
		owner, name, _ := strings.Cut(r.FullName, "/")
		requests++
		b, err := s.forge.Blocked(context.WithoutCancel(ctx), owner, name, n)
		if err != nil {
			return false, err
		}
		if !b && verify {
			requests++
			is, err := s.forge.Issue(context.WithoutCancel(ctx), login, owner, name, n)
			switch {
			case errors.Is(err, forge.ErrNotFound):
				b = true // gone, or no longer to be seen: not to hand out
			case err != nil:
				return false, err
			default:
				b = is.Closed
			}
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
