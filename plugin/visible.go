package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
)

// maxVisibleChecks bounds the forge calls Visible makes at once.
const maxVisibleChecks = 8

// Visible returns which of numbers (issues or pull requests of repo) login
// may see. A viewer who may read both issues and pull requests sees them
// all, at no cost; one whose access is limited to one unit (a team granting
// only Issues, say) is asked about each number, as that user, so a lease on
// a pull request they cannot see is not shown to them. Numbers the forge
// does not know are not visible.
func Visible(ctx context.Context, f Forge, login string, repo Repo, numbers []int64) (map[int64]bool, error) {
	seen := make(map[int64]bool, len(numbers))
	if repo.CanReadIssues && repo.CanReadPulls {
		for _, n := range numbers {
			seen[n] = true
		}
		return seen, nil
	}
	owner, name, ok := strings.Cut(repo.FullName, "/")
	if !ok {
		return nil, fmt.Errorf("visible in %q: not owner/name", repo.FullName)
	}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		fail error
		slot = make(chan struct{}, maxVisibleChecks)
	)
	for _, n := range numbers {
		wg.Go(func() {
			slot <- struct{}{}
			defer func() { <-slot }()
			is, err := f.Issue(ctx, login, owner, name, n)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, ErrNotFound):
			case err != nil:
				fail = err
			default:
				seen[n] = (is.IsPull && repo.CanReadPulls) || (!is.IsPull && repo.CanReadIssues)
			}
		})
	}
	wg.Wait()
	if fail != nil {
		return nil, fmt.Errorf("visible in %s: %w", repo.FullName, fail)
	}
	return seen, nil
}
