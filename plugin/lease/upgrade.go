package lease

import (
	"context"
	"errors"
	"fmt"

	"github.com/collab-lease/collab-lease/plugin/forge"
)

// HolderResolver is what ResolveHolders needs of the ledger
// (models.Store).
type HolderResolver interface {
	UnresolvedHolders(ctx context.Context) ([]string, error)
	ResolveHolder(ctx context.Context, login string, id int64) (int64, error)
}

// Logins is what ResolveHolders asks the forge (plugin/gitea's Forge).
type Logins interface {
	UserByLogin(ctx context.Context, login string) (forge.User, error)
}

// ResolveHolders finishes the upgrade of a ledger whose leases named their
// holders by login (schema 1): each such login is resolved once, through
// the forge, to the account that has it now, and a login that names no
// account any more to nobody (its leases then match nobody and lapse as
// they would have). It returns how many leases it resolved; on a forge
// error it stops and returns it, and calling it again goes on where it
// stopped. Each resolution is published on the service's bus, as every
// ledger write is (committed.go): it changes who holds leases.
func (s *Service) ResolveHolders(ctx context.Context, l HolderResolver) (int64, error) {
	return resolveHolders(ctx, s.forge, resolving{HolderResolver: l, bus: s.bus})
}

func resolveHolders(ctx context.Context, f Logins, l HolderResolver) (int64, error) {
	logins, err := l.UnresolvedHolders(ctx)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, login := range logins {
		var id int64
		u, err := f.UserByLogin(ctx, login)
		switch {
		case errors.Is(err, forge.ErrNotFound):
		case err != nil:
			return total, fmt.Errorf("resolve holder %s: %w", login, err)
		default:
			id = u.ID
		}
		n, err := l.ResolveHolder(ctx, login, id)
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}
