package models

import (
	"context"
	"database/sql/driver"
	"fmt"
	"time"
)

// Chores: tasks that replicas on one database take turns at rather than
// do at once (Exclusive).
const (
	// ChoreReconcile is the sweep for closes no webhook delivered.
	ChoreReconcile int32 = 1
)

// ChoreOfBranch is the chore of keeping the push fence's rule on one
// branch (plugin/fence): one replica at a time reads the ledger's record
// and the forge's rules and changes them, so that no replica acts on what
// another is changing. Two branches folding alike only take turns; the
// high bit keeps them apart from the numbered chores above.
func ChoreOfBranch(repoID int64, branch string) int32 {
	h := uint32(2166136261) // FNV-1a
	for _, b := range []byte(branch) {
		h = (h ^ uint32(b)) * 16777619
	}
	return int32(uint32(lockKey(repoID, int64(h))) | 1<<30)
}

// ChoreOfQuarantine is the chore of telling the forge of issue k's
// quarantine (plugin/lease, quarantine.go): one replica at a time labels
// and comments, after reading the ledger's record of what the forge was
// told. Bit 29 set and bit 30 clear keep it apart from the numbered
// chores and from ChoreOfBranch.
func ChoreOfQuarantine(k Key) int32 {
	return int32(uint32(lockKey(k.RepoID, k.Issue))&^(3<<29) | 1<<29)
}

// Exclusive runs fn unless another replica on this database runs the
// same chore now, and reports whether it ran. On PostgreSQL it holds a
// session advisory lock on a connection of its own while fn runs: the
// lock goes with the connection, so a replica that dies mid-chore (or
// loses its database) lets the others take it at once. On SQLite, one
// process, fn runs unless another goroutine runs the chore now. fn may take long and call the network: the
// connection holds no transaction and no lock a ledger operation takes,
// only the chore's.
func (s *Store) Exclusive(ctx context.Context, chore int32, fn func(context.Context) error) (bool, error) {
	if !s.pg {
		// One process, but maybe several workers in it: one at a time.
		if _, busy := s.chores.LoadOrStore(chore, struct{}{}); busy {
			return false, nil
		}
		defer s.chores.Delete(chore)
		return true, fn(ctx)
	}
	sqlDB, err := s.db.DB()
	if err != nil {
		return false, err
	}
	lctx, cancel := context.WithTimeout(ctx, max(s.busyTimeout, time.Second))
	conn, err := sqlDB.Conn(lctx)
	if err != nil {
		cancel()
		return false, fmt.Errorf("chore %d: %w", chore, mapDBError(err))
	}
	defer conn.Close()
	var got bool
	err = conn.QueryRowContext(lctx, "SELECT pg_try_advisory_lock($1, $2)", lockChore, chore).Scan(&got)
	cancel()
	if err != nil {
		return false, fmt.Errorf("chore %d: %w", chore, mapDBError(err))
	}
	if !got {
		return false, nil
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var freed bool
		if err := conn.QueryRowContext(uctx, "SELECT pg_advisory_unlock($1, $2)", lockChore, chore).Scan(&freed); err != nil || !freed {
			// The session's lock would outlive the chore in the pool:
			// close the connection instead of returning it.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()
	return true, fn(ctx)
}
