package lease

import (
	"context"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// MergeRequest is what a merge asks (collab-lease merge).
type MergeRequest struct {
	Pull int64
	// Token is the tenure the caller merges under; 0: its current one.
	Token        int64
	Style        string // one of contract.MergeStyles; "" the forge's "merge"
	DeleteBranch bool
	// Wait bounds the wait for the turn to merge into the base branch.
	Wait time.Duration
}

// Merge merges pull request m.Pull of owner/name as its holder: the
// caller must hold the pull request's claim, or the claim of an issue it
// closes (else not_holder), under m.Token (else stale). Merges into one
// base branch take turns across replicas, first come first served, up
// to m.Wait (else busy); told hears the caller's place while it waits,
// as AcquireWaitTold's does. The forge's refusal is a *ConflictError of
// contract.MergeRefused; once merged, the claims the merge ends are ended
// before Merge returns.
func (s *Service) Merge(ctx context.Context, v Viewer, owner, name string, m MergeRequest, told func(ahead int)) (contract.Merged, error) {
	return contract.Merged{}, ErrInvalid // built next
}
