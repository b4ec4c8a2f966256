package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// maxVisibleChecks bounds the forge calls visibleNumbers makes at once.
const maxVisibleChecks = 8

// visibleLeases keeps the leases of r the viewer may see. The ledger
// records each number's kind at acquire, so only leases written before it
// did (KindUnknown) are asked of the forge, and only for a viewer limited
// to one unit.
func (s *Service) visibleLeases(ctx context.Context, v Viewer, r forge.Repo, leases []models.Lease) ([]models.Lease, error) {
	if readsAll(r) {
		return leases, nil
	}
	var unknown []int64
	for _, l := range leases {
		if l.Kind == models.KindUnknown {
			unknown = append(unknown, l.Issue)
		}
	}
	seen, err := s.visibleNumbers(ctx, v, r, unknown)
	if err != nil {
		return nil, err
	}
	out := leases[:0]
	for _, l := range leases {
		if mayRead(r, l.Kind) || (l.Kind == models.KindUnknown && seen[l.Issue]) {
			out = append(out, l)
		}
	}
	return out, nil
}

// visibleNumbers asks the forge, as the viewer, about each number of r
// whose kind is not known, and returns those of a unit the viewer may
// read. Numbers the forge does not know are not visible.
func (s *Service) visibleNumbers(ctx context.Context, v Viewer, r forge.Repo, numbers []int64) (map[int64]bool, error) {
	seen := make(map[int64]bool, len(numbers))
	if len(numbers) == 0 {
		return seen, nil
	}
	owner, name, ok := strings.Cut(r.FullName, "/")
	if !ok {
		return nil, fmt.Errorf("visible in %q: not owner/name", r.FullName)
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
			is, err := s.forge.Issue(ctx, v.Login, owner, name, n)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, forge.ErrNotFound):
			case err != nil:
				fail = err
			default:
				seen[n] = mayRead(r, kindOf(is))
			}
		})
	}
	wg.Wait()
	if fail != nil {
		return nil, fmt.Errorf("visible in %s: %w", r.FullName, fail)
	}
	return seen, nil
}
