package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/changes"
	"github.com/collab-lease/collab-lease/plugin/contract"
)

// acquire --wait: the callers of this sidecar waiting for a held issue
// to free up queue per issue, first come, first served. Only the queue's
// head tries to acquire; it tries again whenever the change bus says the
// lease may have ended: released or force-released, ended by a forge
// event, through this replica or another, and at the instant it expires
// (the bus's expiry queue: expiry is lazy, so nothing else would say so).
// A waiter whose caller goes away (its context ends) leaves the queue at
// once and hands the head on.

// Default bounds of the waiters.
const (
	DefaultWaitersPerIssue = 64
	DefaultWaiters         = 4096
)

type waiter struct {
	wake  chan struct{} // buffered 1: "try now"
	moved chan struct{} // buffered 1: "your place in the queue changed"
}

// waits are queues of waiters, one per key K, first come, first served.
// match says whether a change of the ledger's key c may free what k's
// waiters wait for.
type waits[K comparable] struct {
	mu     sync.Mutex
	queues map[K][]*waiter
	total  int
	perKey int
	max    int
	match  func(k K, c changes.Change) bool
	// exact, if set, names the one queue a change of c concerns, when
	// there is one: a lookup instead of a look at every queue.
	exact func(c models.Key) (K, bool)
}

func newWaits(perIssue, total int) *waits[models.Key] {
	return &waits[models.Key]{queues: map[models.Key][]*waiter{}, perKey: perIssue, max: total, match: sameIssue,
		exact: func(c models.Key) (models.Key, bool) { return c, c.Issue != 0 }}
}

// sameIssue: a change of c may free issue k (a key of Issue 0 stands for
// every issue of its repository, the zero key for every issue).
func sameIssue(k models.Key, c changes.Change) bool {
	if c.Key.Issue != 0 {
		return k == c.Key
	}
	return c.Key.RepoID == 0 || k.RepoID == c.Key.RepoID
}

// join queues a waiter on k; the first of a queue is woken at once.
func (ws *waits[K]) join(k K) (*waiter, error) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	q := ws.queues[k]
	if len(q) >= ws.perKey || ws.total >= ws.max {
		return nil, ErrTooManyWaiters
	}
	w := &waiter{wake: make(chan struct{}, 1), moved: make(chan struct{}, 1)}
	ws.queues[k] = append(q, w)
	ws.total++
	if len(q) == 0 {
		w.wake <- struct{}{}
	}
	return w, nil
}

// leave takes w off k's queue; if it was the head, the next is woken.
func (ws *waits[K]) leave(k K, w *waiter) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	q := ws.queues[k]
	for i, x := range q {
		if x != w {
			continue
		}
		q = append(q[:i:i], q[i+1:]...)
		ws.total--
		if len(q) == 0 {
			delete(ws.queues, k)
			return
		}
		ws.queues[k] = q
		if i == 0 {
			notify(q[0])
		}
		for _, behind := range q[i:] {
			select {
			case behind.moved <- struct{}{}:
			default: // already told
			}
		}
		return
	}
}

// wakeHead wakes the head of k's queue, if it has one: what it waits
// for may have ended.
func (ws *waits[K]) wakeHead(k K) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if q := ws.queues[k]; len(q) > 0 {
		notify(q[0])
	}
}

// ahead returns how many wait before w in k's queue.
func (ws *waits[K]) ahead(k K, w *waiter) int {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return slices.Index(ws.queues[k], w)
}

// head reports whether w is first in k's queue.
func (ws *waits[K]) head(k K, w *waiter) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	q := ws.queues[k]
	return len(q) > 0 && q[0] == w
}

// heard is the waiters' subscription to the change bus: the head of each
// queue whose wait the change may end is woken. Not only an ended lease
// wakes it: a renewal moves the expiry the head waits for, and only a
// new look (its acquire, answered held with the new expiry) puts that
// instant on the bus's queue.
func (ws *waits[K]) heard(set changes.Set) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if len(ws.queues) == 0 {
		return
	}
	for _, c := range set.Changes {
		if c.Reservations {
			continue // path reservations: no lease is freed
		}
		if ws.exact != nil {
			if k, ok := ws.exact(c.Key); ok {
				if q := ws.queues[k]; len(q) > 0 {
					notify(q[0])
				}
				continue
			}
		}
		for k, q := range ws.queues {
			if len(q) > 0 && ws.match(k, c) {
				notify(q[0])
			}
		}
	}
}

func notify(w *waiter) {
	select {
	case w.wake <- struct{}{}:
	default: // already told
	}
}

// waitable says whether a refusal is one to wait out: the issue is held,
// or cools down. A claim past a cap is the caller's own doing: no wait
// for the issue would change it.
func waitable(c *ConflictError) bool {
	switch c.Reply.(type) {
	case contract.Conflict, contract.Cooling:
		return true
	}
	return false
}

// Waiters returns how many callers wait, on all issues: acquire --wait's
// and next --wait's.
func (s *Service) Waiters() int {
	s.waits.mu.Lock()
	n := s.waits.total
	s.waits.mu.Unlock()
	s.nextWaits.mu.Lock()
	defer s.nextWaits.mu.Unlock()
	return n + s.nextWaits.total
}

// AcquireWaitTold is Acquire that, when another holds the issue, waits
// up to wait for it to free up: it returns the acquired tenure, or the
// last held conflict once the wait is over. A wait of 0 is Acquire. The
// caller's context ending (a client that went away) ends the wait at
// once with the context's error.
//
// While it waits it tells told where the caller stands: how many callers
// of this sidecar wait for the issue before it (0: it is next, behind
// the holder), once when it starts waiting and again whenever that
// changes. told runs on the caller's goroutine; nil tells nothing.
func (s *Service) AcquireWaitTold(ctx context.Context, v Viewer, owner, name string, n int64, ttl, wait time.Duration, told func(ahead int)) (contract.Tenure, error) {
	t, err := s.Acquire(ctx, v, owner, name, n, ttl)
	var held *ConflictError
	if wait <= 0 || !errors.As(err, &held) || !waitable(held) {
		return t, err
	}
	r, err := s.repo(ctx, v, owner, name)
	if err != nil {
		return contract.Tenure{}, err
	}
	k := models.Key{RepoID: r.ID, Issue: n}
	return waitTurns(ctx, s.after, s.waits, k, fmt.Sprintf("%s#%d", r.FullName, n), wait, 0, told, waitTurn[contract.Tenure]{
		try: func() (contract.Tenure, error) { return s.Acquire(ctx, v, owner, name, n, ttl) },
		again: func(err error) bool {
			if !errors.As(err, &held) || !waitable(held) {
				return false
			}
			// Still held (by the same tenure, or by one that began
			// meanwhile): wait for its release, or for its expiry
			// instant. One the service's clock has passed is the
			// ledger's clock lagging (on PostgreSQL, the database
			// server's): look again a second later, not at once and
			// again.
			var at time.Time
			switch c := held.Reply.(type) {
			case contract.Conflict:
				if c.ExpiresAt != nil {
					at = time.Time(*c.ExpiresAt)
				}
			case contract.Cooling: // its lock-delay ends then
				at = time.Time(c.Until)
			}
			if !at.IsZero() {
				if now := s.now(); !at.After(now) {
					at = now.Add(time.Second)
				}
				s.bus.ExpireAt(k, at)
			}
			return true
		},
		over: func() error { return held },
	})
}

// waitTurn is what a waiter does at its turns (waitTurns).
type waitTurn[T any] struct {
	// try is the caller's call, made at each turn.
	try func() (T, error)
	// again says whether try's error is one to wait out (it may note
	// what it needs for the next turn, and for over).
	again func(err error) bool
	// over is the answer once the wait is over.
	over func() error
}

// waitTurns is the loop of a caller that waits, in ws's queue k (named
// where in a refusal), up to wait, for what try gets: it queues, tells
// told where it stands (once at first, then whenever that changes), and
// whenever it is the queue's head and is woken (by the bus, or every
// recheck when that is not 0) it tries again, until try answers anything
// but what turn.again waits out, the wait is over (turn.over), or ctx
// ends (its error). acquire --wait and next --wait are each one.
func waitTurns[K comparable, T any](ctx context.Context, after func(time.Duration) (<-chan time.Time, func() bool),
	ws *waits[K], k K, where string, wait, recheck time.Duration, told func(ahead int), turn waitTurn[T]) (T, error) {
	var none T
	w, err := ws.join(k)
	if err != nil {
		return none, fmt.Errorf("%s: %w", where, err)
	}
	defer ws.leave(k, w)
	deadline, stopDeadline := after(wait)
	defer stopDeadline()
	place := -1
	tell := func() {
		if ahead := ws.ahead(k, w); told != nil && ahead != place {
			place = ahead
			told(ahead)
		}
	}
	tell()
	for {
		var again <-chan time.Time
		stopAgain := func() bool { return false }
		if recheck > 0 {
			again, stopAgain = after(recheck)
		}
		select {
		case <-w.moved:
			stopAgain()
			tell()
			continue
		case <-w.wake:
		case <-again:
		case <-deadline:
			stopAgain()
			return none, turn.over()
		case <-ctx.Done():
			stopAgain()
			return none, ctx.Err()
		}
		stopAgain()
		if !ws.head(k, w) {
			continue
		}
		t, err := turn.try()
		switch {
		case err != nil && ctx.Err() != nil:
			return none, ctx.Err() // the caller went away meanwhile
		case !turn.again(err):
			return t, err
		}
	}
}
