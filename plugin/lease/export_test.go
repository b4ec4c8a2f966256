package lease

import (
	"context"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/contract"
)

// What the tests of package lease_test reach inside the service: the
// sidecar itself neither sets nor reads any of it.

// WithWaiters bounds the waiters of acquire --wait, per issue and in all
// (defaults DefaultWaitersPerIssue and DefaultWaiters), and those of next
// --wait, in all.
func WithWaiters(perIssue, total int) Option {
	return func(s *Service) { s.waits, s.nextWaits = newWaits(perIssue, total), newNextWaits(total) }
}

// AcquireWait is AcquireWaitTold telling nobody.
func (s *Service) AcquireWait(ctx context.Context, v Viewer, owner, name string, n int64, ttl, wait time.Duration) (contract.Tenure, error) {
	return s.AcquireWaitTold(ctx, v, owner, name, n, ttl, wait, nil)
}

// Waiting returns how many callers wait for issue n of the repository
// with this ID.
func (s *Service) Waiting(repoID, n int64) int {
	s.waits.mu.Lock()
	defer s.waits.mu.Unlock()
	return len(s.waits.queues[models.Key{RepoID: repoID, Issue: n}])
}

// NextWaiting returns how many callers wait in next --wait on the
// repository with this ID, whatever their filter.
func (s *Service) NextWaiting(repoID int64) int {
	s.nextWaits.mu.Lock()
	defer s.nextWaits.mu.Unlock()
	n := 0
	for k, q := range s.nextWaits.queues {
		if k.repoID == repoID {
			n += len(q)
		}
	}
	return n
}
