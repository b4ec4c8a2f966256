package models

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"
)

// Group commit on PostgreSQL. A write costs its round trips to the server
// and the WAL flush of its COMMIT; a transaction per write pays both for
// every write and keeps a connection busy for each. So, as on SQLite
// (write.go), the writes that arrive together on one Store queue up, and
// a leader decides them in one transaction, each under its own locks, at
// its own turn and with its own reading of the server's clock, and
// commits once. Several leaders (pgLeaders) run at once, each with a
// batch and a connection of its own, so that one batch's round trips
// overlap another's.
//
// Locks. A member's locks (its scope, as postgres.go takes them) are
// transaction-level, held by the batch until its COMMIT. A batch that
// waited for a lock while holding others could deadlock with another
// batch (of this replica or another one) doing the same. So only the
// first member a batch decides may wait, and it holds nothing yet: it
// takes its locks in the one order of postgres.go, bounded by its own
// deadline (lock_timeout). Every later member only tries its locks; one
// that does not get them all is undone (its savepoint) and goes back to
// the head of the queue, where it is the first member of a next batch.
// A transaction therefore waits only while holding locks taken in that
// order before the one it waits for, which cannot form a cycle. Members
// of one batch never wait for each other: locks of one transaction do not
// conflict, and a later member reads what the earlier ones wrote, as the
// batch's order says.
//
// Why this keeps every promise of a lone transaction:
//   - Durability: no member is answered before the COMMIT that contains
//     it returns (synchronous_commit = on).
//   - Atomicity per operation: each member runs inside a savepoint, taken
//     before its locks; a refusal or a failure of its own rolls back to it
//     (which also lets go of the locks it took) and touches no other
//     member. A member the server rolled back (deadlock) is queued again,
//     undecided. A failure of the batch itself (a connection that broke
//     before COMMIT was sent) decided nothing, and the batch runs again.
//   - Linearizability: each member decides under its locks after every
//     transaction that held them committed; within the batch, in order.
//     Its clock is read at its turn, after its locks.
//
// A write that decides about nothing (no scope) and the SERIALIZABLE
// comparison run alone, as writePostgres did before (postgres.go).
//
// Round trips. The statements a member needs besides its own (BEGIN, its
// savepoint, the undoing of the previous member, resetting the lock
// timeout) go in one pipeline with the statement that takes its locks and
// reads the clock, and with the reads of its issue's rows, which its
// decision then gets from its connection (memberConn) instead of asking
// again. A lone acquire, renew or release thus costs three round trips:
// that one, its writes (its row and its event in one statement, rows.go),
// and COMMIT.

// pgMaxBatch bounds how many writes one PostgreSQL transaction decides:
// each member is a subtransaction, and one with more than 64 of them that
// wrote makes every other transaction's snapshot look beyond the shared
// cache of subtransaction IDs.
const pgMaxBatch = 64

// pgLeaders is how many batches one Store runs at once, each on a
// connection of its own (of pgMaxConns).
const pgLeaders = 4

// Statements a batch sends around its members' own, without arguments, so
// that each is prepared once per connection.
const (
	pgBegin    = "BEGIN ISOLATION LEVEL READ COMMITTED"
	pgSave     = "SAVEPOINT m" // one name: ROLLBACK TO goes to the latest
	pgUndo     = "ROLLBACK TO SAVEPOINT m"
	pgNoWait   = "SET LOCAL lock_timeout TO DEFAULT"
	pgCommit   = "COMMIT"
	pgRollback = "ROLLBACK"
)

// writeBatched is write on PostgreSQL: fn queued, and decided in a batch by
// whichever writer leads (see above).
func (s *Store) writeBatched(ctx context.Context, sc scope, fn func(tx *gorm.DB, now int64) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.busyTimeout)
	defer cancel()
	r := &writeReq{ctx: ctx, fn: fn, sc: sc, done: make(chan struct{}), back: make(chan struct{}, 1)}
	s.mu.Lock()
	s.queue = append(s.queue, r)
	s.mu.Unlock()
	slot, expired := s.writeSlot, ctx.Done()
	for {
		select {
		case slot <- struct{}{}:
			s.leadPG(r)
			// r is decided, or in another leader's batch, which answers
			// it or sends it back (r.back).
			slot = nil
		case <-r.done:
			return r.err
		case <-r.back:
			slot = s.writeSlot
		case <-expired:
			if s.withdraw(r) {
				return fmt.Errorf("%w: %v", ErrBusy, ctx.Err())
			}
			expired = nil // a leader has it: it answers within its batch's deadline
		}
	}
}

// leadPG runs batches off the queue until own is answered or another
// leader has taken it, then gives the slot back.
func (s *Store) leadPG(own *writeReq) {
	defer func() { <-s.writeSlot }()
	for {
		batch := s.take()
		if len(batch) > 0 {
			s.runPGBatch(batch)
		}
		s.mu.Lock()
		mine := !own.taken && !own.finished()
		s.mu.Unlock()
		if !mine {
			return
		}
	}
}

// requeue puts rs back at the head of the queue, in their order, undecided,
// and wakes their writers, who may have stopped leading meanwhile. One
// whose deadline has passed is answered ErrBusy instead.
func (s *Store) requeue(rs []*writeReq) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var back []*writeReq
	for _, r := range rs {
		if err := r.ctx.Err(); err != nil {
			r.finish(fmt.Errorf("%w: %v", ErrBusy, err))
			continue
		}
		r.taken = false
		back = append(back, r)
	}
	s.queue = slices.Insert(s.queue, 0, back...)
	for _, r := range back {
		select {
		case r.back <- struct{}{}:
		default:
		}
	}
}

// outcome is what became of one member of a batch.
type outcome int

const (
	decided  outcome = iota // err is its answer once COMMIT returns
	deferred                // not decided: queued again after the batch
)

// runPGBatch decides batch in one transaction, runs it again while the
// server proves nothing of it was committed, and answers each member
// after COMMIT.
func (s *Store) runPGBatch(batch []*writeReq) {
	ctx, cancel := context.WithDeadline(context.Background(), latestDeadline(batch))
	defer cancel()
	broken := 0
	for delay := time.Millisecond; ; delay = min(2*delay, 32*time.Millisecond) {
		outs, errs, committing, err := s.pgBatchOnce(ctx, batch)
		if err == nil || committing {
			var again []*writeReq
			for i, r := range batch {
				switch {
				case outs[i] == deferred:
					again = append(again, r) // decided nothing: free to run again
				case err == nil:
					r.finish(errs[i])
				default:
					// COMMIT was sent and its answer lost: report it, as a
					// lone writer would, rather than guess what it left.
					r.finish(mapDBError(err))
				}
			}
			s.requeue(again)
			return
		}
		switch {
		case pgRetry(err):
		case brokenConn(err) && broken < pgMaxConns && ctx.Err() == nil:
			broken++ // the pool drops it; after a restart of the server, every pooled one may be broken
		default:
			for _, r := range batch {
				r.finish(mapDBError(err))
			}
			return
		}
		select {
		case <-time.After(delay/2 + rand.N(delay)):
		case <-ctx.Done():
			for _, r := range batch {
				r.finish(mapDBError(err))
			}
			return
		}
		// Nothing was committed: those still waiting run again.
		live := batch[:0]
		for _, r := range batch {
			if e := r.ctx.Err(); e != nil {
				r.finish(fmt.Errorf("%w: %v", ErrBusy, e))
			} else {
				live = append(live, r)
			}
		}
		if batch = live; len(batch) == 0 {
			return
		}
	}
}

// latestDeadline is the latest deadline of batch's members. The batch is
// bounded by it, and each member checks its own at its turn: one member
// about to give up must not abort the others.
func latestDeadline(batch []*writeReq) time.Time {
	deadline, _ := batch[0].ctx.Deadline()
	for _, r := range batch[1:] {
		if d, _ := r.ctx.Deadline(); d.After(deadline) {
			deadline = d
		}
	}
	return deadline
}

// pgBatchOnce runs batch in one transaction on a connection of its own.
// err is the batch's own failure (nothing of it was committed unless
// committing says COMMIT was sent); otherwise outs and errs say each
// member's outcome.
func (s *Store) pgBatchOnce(ctx context.Context, batch []*writeReq) (outs []outcome, errs []error, committing bool, err error) {
	sqlDB, err := s.db.DB()
	if err != nil {
		return nil, nil, false, err
	}
	c, err := sqlDB.Conn(ctx)
	if err != nil {
		return nil, nil, false, err
	}
	// A connection left inside a transaction (a failure midway) is not
	// reused by the pool: it checks the transaction status on return.
	defer c.Close()
	s.txns.Add(1)
	outs, errs = make([]outcome, len(batch)), make([]error, len(batch))
	pending := []string{pgBegin}
	holding := false // some member has taken locks: the rest may not wait
	for i, r := range batch {
		if e := r.ctx.Err(); e != nil {
			errs[i] = fmt.Errorf("%w: %v", ErrBusy, e) // gave up: decide nothing
			continue
		}
		pending = append(pending, pgSave)
		deadline, _ := r.ctx.Deadline()
		q, args := lockSQL(r.sc, !holding, deadline)
		sent := s.clock.Now()
		var got bool
		var micros int64
		m := &memberConn{conn: c, key: Key{RepoID: r.sc.repo, Issue: r.sc.issue}}
		lockQ := pgQuery{q, args, func(row pgx.Row) error { return row.Scan(&got, &micros) }}
		err := pipeline(ctx, c, pending, append([]pgQuery{lockQ}, m.reads()...)...)
		m.read = err == nil && got
		pending = nil
		switch {
		case err == nil && got:
		case err == nil:
			outs[i], pending = deferred, []string{pgUndo}
			continue
		case !holding && lockTimedOut(err):
			errs[i], pending = fmt.Errorf("%w: %v", ErrBusy, oneLine{err}), []string{pgUndo}
			continue
		default:
			return nil, nil, false, err
		}
		if !holding {
			// Later statements are not bounded by this member's deadline.
			holding, pending = true, []string{pgNoWait}
		}
		var now int64
		if s.dbClock {
			s.sampleOffset(micros, sent, s.clock.Now())
			now = s.guard(time.UnixMicro(micros).Unix())
		} else {
			now = s.now()
		}
		tx := s.db.WithContext(ctx)
		tx.Statement.ConnPool = m
		ferr := r.fn(tx, now)
		switch {
		case ferr == nil:
		case isRefusal(ferr):
			errs[i], pending = ferr, append([]string{pgUndo}, pending...)
		case pgRetry(ferr):
			outs[i], pending = deferred, append([]string{pgUndo}, pending...)
		default:
			// Its own failure (a constraint, a bug): undone alone. If the
			// connection is what failed, the undoing fails too, and the
			// whole batch with it.
			errs[i], pending = mapDBError(ferr), append([]string{pgUndo}, pending...)
		}
	}
	if !holding {
		// Nothing was decided: end the transaction and answer at once. If
		// even that fails, the pool drops the connection, still inside it.
		_ = pipeline(ctx, c, append(pending, pgRollback))
		return outs, errs, false, nil
	}
	err = pipeline(ctx, c, append(pending, pgCommit))
	var pe *pgconn.PgError
	if err != nil && !errors.As(err, &pe) {
		return outs, errs, true, err // the answer was lost, not the COMMIT
	}
	// An error the server sent, for COMMIT or before it, rolled the
	// transaction back.
	return outs, errs, false, err
}

// lockTimedOut: the first member's wait for its locks reached its deadline.
func lockTimedOut(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "55P03"
}

// pgQuery is one statement of a pipeline whose one row (if any) scan reads.
type pgQuery struct {
	sql  string
	args []any
	scan func(pgx.Row) error
}

// pipeline sends stmts (without arguments) and then qs in one round trip
// on c, and scans each query's row. The first error is returned; the
// server skips what follows it.
func pipeline(ctx context.Context, c *sql.Conn, stmts []string, qs ...pgQuery) error {
	return c.Raw(func(dc any) error {
		pc := dc.(*stdlib.Conn).Conn()
		b := &pgx.Batch{}
		for _, st := range stmts {
			b.Queue(st)
		}
		for _, q := range qs {
			b.Queue(q.sql, q.args...)
		}
		br := pc.SendBatch(ctx, b)
		var err error
		for range stmts {
			if _, err = br.Exec(); err != nil {
				break
			}
		}
		for _, q := range qs {
			if err != nil {
				break
			}
			err = q.scan(br.QueryRow())
		}
		return errors.Join(err, br.Close())
	})
}

// memberConn is the batch's connection as one member's decision uses it,
// with the rows of the member's issue, read in the round trip that took
// its locks (right after them, so under them). load and loadIssue answer
// from them until the member writes anything.
type memberConn struct {
	conn                     *sql.Conn
	key                      Key
	lease                    leaseRow
	issue                    issueRow
	read, leaseFound, issued bool // issued: issue found
	wrote                    bool
}

// prefetched returns m's rows of k, if it has them and they are current.
func prefetched(tx *gorm.DB, k Key) (*memberConn, bool) {
	m, ok := tx.Statement.ConnPool.(*memberConn)
	return m, ok && m.read && !m.wrote && m.key == k
}

func (m *memberConn) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	m.wrote = true
	return m.conn.ExecContext(ctx, q, args...)
}

// QueryContext is what gorm's writes use too (RETURNING).
func (m *memberConn) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	m.wrote = true
	return m.conn.QueryContext(ctx, q, args...)
}

func (m *memberConn) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	return m.conn.QueryRowContext(ctx, q, args...)
}

func (m *memberConn) PrepareContext(ctx context.Context, q string) (*sql.Stmt, error) {
	return m.conn.PrepareContext(ctx, q)
}

var _ gorm.ConnPool = (*memberConn)(nil)

// reads are the queries that read m's issue's rows after its locks.
func (m *memberConn) reads() []pgQuery {
	if m.key.Issue == 0 {
		return nil
	}
	k := []any{m.key.RepoID, m.key.Issue}
	found := func(dst *bool, err error) error {
		*dst = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	}
	i := &m.issue
	return []pgQuery{
		{loadSQL.postgres, k, func(r pgx.Row) error { return found(&m.leaseFound, r.Scan(m.lease.fields()...)) }},
		{loadIssueSQL.postgres, k, func(r pgx.Row) error {
			return found(&m.issued, r.Scan(&i.RepoID, &i.Issue, &i.Kind, &i.Closed, &i.Deleted, &i.Version, &i.CheckedAt))
		}},
	}
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

// lockSQL is the statement that takes sc's locks and then reads the
// server's clock (Unix microseconds): the locks are taken in a subquery
// whose row the clock's reading waits for, so the time is that of the
// decision. It returns whether every lock was taken, and the time. wait:
// wait for them until deadline (lock_timeout; none if zero); otherwise
// try each and take what is free.
func lockSQL(sc scope, wait bool, deadline time.Time) (string, []any) {
	ls := sc.locks()
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
	got := "true"
	sub := strings.Join(parts, ", ")
	if !wait {
		got, sub = "got", "("+strings.Join(parts, " AND ")+") AS got"
	}
	if sub == "" {
		sub = "1"
	}
	return "SELECT " + got + ", " + pgClockSQL + " FROM (SELECT " + sub + " OFFSET 0) AS locked", args
}
