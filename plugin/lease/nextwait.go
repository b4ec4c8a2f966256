package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/collab-lease/collab-lease/plugin/changes"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// next --wait: a caller that finds nothing free waits for something to be,
// instead of asking again and again. The callers of this sidecar waiting
// on one repository with one filter queue first come, first served, as
// acquire --wait's do; only the queue's head looks again, so a release
// costs one look, not one per waiter. It looks whenever the change bus
// says a claim of the repository ended (released, lost with its session,
// ended by a forge event, through this replica or another), and at least
// every NextRecheck, for what the bus does not carry here: a claim that
// lapsed (nobody asked the bus for its expiry instant), an issue opened or
// labelled, a dependency closed, a lock-delay ending. When the head gets
// an issue it leaves the queue, and the next one looks at once (one change
// can free several issues). Waiters are queued by repository and filter,
// not by who waits: an issue that only the head may not take (cooling
// after its own claim lapsed is the lapsed holder's alone) waits for the
// head's look again.

// NextRecheck is how often the head of a next --wait queue looks again
// when the bus has said nothing.
const NextRecheck = 2 * time.Second

// nextKey is a queue of next waiters: a repository and a filter.
type nextKey struct {
	repoID int64
	filter string // canonical: sorted labels, then the flags
}

func keyOfNext(repoID int64, f forge.IssueFilter) nextKey {
	labels := slices.Sorted(slices.Values(f.Labels))
	return nextKey{repoID: repoID, filter: fmt.Sprintf("%q pulls=%t oldest=%t", strings.Join(labels, "\x00"), f.Pulls, f.Oldest)}
}

// newNextWaits: queues of any length, total waiters at most total.
func newNextWaits(total int) *waits[nextKey] {
	return &waits[nextKey]{queues: map[nextKey][]*waiter{}, perKey: total, max: total,
		match: func(k nextKey, c changes.Change) bool {
			// A claim that began or was renewed frees nothing.
			return (c.Ended || c.Key.Issue == 0) && (c.Key.RepoID == 0 || k.repoID == c.Key.RepoID)
		}}
}

// NextWait is Next that, when nothing is free, waits up to wait for
// something to be: it returns the acquired tenure, or none once the wait
// is over. A wait of 0 is Next. told, if not nil, is told how many
// callers of this sidecar wait before this one, once when it starts
// waiting and again whenever that changes (on the caller's goroutine).
// The caller's context ending ends the wait at once with its error.
func (s *Service) NextWait(ctx context.Context, v Viewer, owner, name string, f forge.IssueFilter, ttl, wait time.Duration, told func(ahead int)) (contract.Tenure, error) {
	t, err := s.Next(ctx, v, owner, name, f, ttl)
	none, ok := isNone(err)
	if wait <= 0 || !ok {
		return t, err
	}
	r, err := s.repo(ctx, v, owner, name)
	if err != nil {
		return contract.Tenure{}, err
	}
	return waitTurns(ctx, s.after, s.nextWaits, keyOfNext(r.ID, f), "next in "+r.FullName, wait, NextRecheck, told, waitTurn[contract.Tenure]{
		try: func() (contract.Tenure, error) { return s.Next(ctx, v, owner, name, f, ttl) },
		again: func(err error) bool {
			again, ok := isNone(err)
			if ok {
				none = again
			}
			return ok
		},
		over: func() error { return none },
	})
}

// isNone says whether err is next's answer that nothing is free.
func isNone(err error) (*ConflictError, bool) {
	var c *ConflictError
	if !errors.As(err, &c) {
		return nil, false
	}
	_, ok := c.Reply.(contract.None)
	return c, ok
}
