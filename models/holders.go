package models

import (
	"context"
	"fmt"

	"gorm.io/gorm"
)

// Upgrading from schema 1, whose leases named their holder by login only.
// A login can be renamed and then registered again by another account, so
// a login is not an identity: schema 2 keys holders by account ID. The
// ledger cannot ask the forge itself, so the caller (the sidecar, at start)
// resolves each login once and records the answer with ResolveHolder.
// Until then such a lease is held by nobody: it stays live (its badge
// shows) and expires as it would have, but nobody can renew or release it.

// UnresolvedHolders lists the logins holding live or expired leases that
// were written before the ledger kept account IDs and are not resolved
// yet, in login order.
func (s *Store) UnresolvedHolders(ctx context.Context) ([]string, error) {
	var logins []string
	err := s.db.WithContext(ctx).Model(&leaseRow{}).
		Where("holder IS NOT NULL AND holder_id IS NULL").
		Distinct("holder").Order("holder").Pluck("holder", &logins).Error
	if err != nil {
		return nil, fmt.Errorf("unresolved holders: %w", mapDBError(err))
	}
	return logins, nil
}

// ResolveHolder records which account the login of schema-1 leases names:
// id > 0 is the account that had this login when the ledger was upgraded,
// 0 says no account has it any more (the leases then match nobody). Leases
// that already carry an account ID are not touched. It returns how many
// leases it resolved.
func (s *Store) ResolveHolder(ctx context.Context, login string, id int64) (int64, error) {
	if login == "" || id < 0 {
		return 0, fmt.Errorf("resolve holder %q: %w: empty login or negative ID", login, ErrInvalid)
	}
	var n int64
	// No scope: one conditional UPDATE, which PostgreSQL evaluates on
	// the latest row even when another write changed it meanwhile; a
	// decision that read the row unresolved is one that came first.
	err := s.write(ctx, scope{}, func(tx *gorm.DB, _ int64) error {
		res := tx.Model(&leaseRow{}).Where("holder = ? AND holder_id IS NULL", login).Update("holder_id", id)
		n = res.RowsAffected
		return res.Error
	})
	if err != nil {
		return 0, fmt.Errorf("resolve holder %q: %w", login, err)
	}
	return n, nil
}
