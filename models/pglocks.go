package models

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// The advisory locks a write takes on PostgreSQL, and the statement that
// takes them and reads the server's clock (pgbatch.go, postgres.go).

// lockTimedOut: the first member's wait for its locks reached its deadline.
func lockTimedOut(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "55P03"
}

// locksTaken: a member that only tries its locks found one of them taken
// (lockSQL).
func locksTaken(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "22012"
}

// conflict: some lock of b is one of a's, and not shared by both.
func conflict(a, b []advisory) bool {
	for _, x := range a {
		for _, y := range b {
			if x.class == y.class && x.key == y.key && !(x.shared && y.shared) {
				return true
			}
		}
	}
	return false
}

// advisory is one advisory lock of a scope.
type advisory struct {
	shared     bool
	class, key int32
}

// locks are sc's advisory locks, in the one order every write takes them:
// repositories (shared unless the repository is the scope), then issues,
// each class in the order of its keys, then the account. Two writes that
// wait for their locks thus never wait for each other crosswise, whatever
// folds alike.
func (sc scope) locks() []advisory {
	var ls []advisory
	switch {
	case sc.repo != 0 && sc.issue != 0:
		ls = []advisory{{true, lockRepo, lockKey(sc.repo, 0)}, {false, lockIssue, lockKey(sc.repo, sc.issue)}}
	case sc.repo != 0:
		ls = []advisory{{false, lockRepo, lockKey(sc.repo, 0)}}
	case len(sc.keys) > 0:
		var repos, issues []int32
		for _, k := range sc.keys {
			repos = append(repos, lockKey(k.RepoID, 0))
			issues = append(issues, lockKey(k.RepoID, k.Issue))
		}
		slices.Sort(repos)
		slices.Sort(issues)
		for _, key := range slices.Compact(repos) {
			ls = append(ls, advisory{true, lockRepo, key})
		}
		for _, key := range slices.Compact(issues) {
			ls = append(ls, advisory{false, lockIssue, key})
		}
	}
	if sc.account != 0 {
		// Alone, or after the issue's (or repository's) for a claim under
		// a cap, as every such claim takes it.
		ls = append(ls, advisory{false, lockAccount, lockKey(sc.account, 0)})
	}
	return ls
}

// lockSQL is the statement that takes locks ls and then reads the
// server's clock (Unix microseconds): the locks are taken in a subquery
// whose row the clock's reading waits for, so the time is that of the
// decision. wait: wait for each in turn, until deadline (lock_timeout;
// none if zero). Otherwise try each: if one is taken, the statement
// fails (division by zero, 22012: locksTaken), which is how a member
// whose locks are not all free stops the rest of its round trip without
// a round trip of its own (the server then skips what follows, and the
// member's savepoint undoes the locks it did take).
func lockSQL(ls []advisory, wait bool, deadline time.Time) (string, []any) {
	var parts []string
	var args []any
	if wait && !deadline.IsZero() {
		ms := max(1, time.Until(deadline).Milliseconds())
		parts, args = append(parts, "set_config('lock_timeout', $1, true)"), append(args, strconv.FormatInt(ms, 10))
	}
	for _, l := range ls {
		fn := "pg_advisory_xact_lock"
		if !wait {
			fn = "pg_try_advisory_xact_lock"
		}
		if l.shared {
			fn += "_shared"
		}
		parts = append(parts, fmt.Sprintf("%s($%d, $%d)", fn, len(args)+1, len(args)+2))
		args = append(args, l.class, l.key)
	}
	clock, sub := pgClockSQL, strings.Join(parts, ", ")
	if !wait {
		// got is not a constant: the server cannot fold 1 / 0 ahead.
		clock, sub = "CASE WHEN got THEN "+pgClockSQL+" ELSE 1 / got::int END", "("+strings.Join(parts, " AND ")+") AS got"
	}
	if sub == "" {
		sub = "1"
	}
	return "SELECT " + clock + " FROM (SELECT " + sub + " OFFSET 0) AS locked", args
}
