package gitea

import (
	"context"
	"errors"

	"github.com/collab-lease/collab-lease/plugin"
)

// OpenIssues implements plugin.Forge. (Placeholder until the listing lands.)
func (f *Forge) OpenIssues(ctx context.Context, owner, name string, flt plugin.IssueFilter, limit int) ([]plugin.Issue, int, error) {
	return nil, 0, errors.New("not implemented")
}

// Blocked implements plugin.Forge. (Placeholder until the listing lands.)
func (f *Forge) Blocked(ctx context.Context, owner, name string, n int64) (bool, error) {
	return false, errors.New("not implemented")
}
