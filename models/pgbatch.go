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

	"github.com/jackc/pgx/v5/pgconn"
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
// Two round trips decide a batch, each one pipeline ended by one Sync
// (pgpipe.go):
//
//  1. BEGIN, and for each member in turn: the statement that takes its
//     locks and reads the server's clock (lockSQL), and the one that
//     reads its issue's rows. Its decision then runs here, without asking
//     the server again (memberConn), and its writes wait.
//  2. The members' writes, then COMMIT.
//
// A member that decides after another one of the batch about the same
// issue reads its rows once that one's writes are sent, in a round trip
// of its own with them: it sees what the batch's order says it follows.
// A statement not of the hot path (gorm's, the count of a claim cap) goes
// to the server when the decision makes it, after everything pending.
//
// Savepoints. The server's work on the statements is most of what a
// batch costs on a machine it shares, and a savepoint around each
// member's statements would double them. So a batch runs first without
// any; if the server refuses a member's statement (its locks are taken,
// a constraint refuses its write), the whole transaction is rolled back,
// nothing decided, and the batch runs again at once with them (careful):
// each later member's locks, and each member's writes, inside a
// savepoint of the member's own, which undoes that member alone. A
// member whose decision sends a statement on its own (memberConn.live)
// has its savepoint from then on, either way.
//
// Locks. A member's locks (its scope, as postgres.go takes them) are
// transaction-level, held by the batch until its COMMIT. A batch that
// waited for a lock while holding others could deadlock with another
// batch (of this replica or another one) doing the same. So only the
// first member may wait, in the first statement of the transaction: it
// takes its locks in the one order of postgres.go, bounded by its own
// deadline (lock_timeout). Every later member only tries its locks; if
// one of them is taken, its statement fails on purpose, so that the
// server skips the rest of the round trip. In a careful batch, that
// member and those after it are then undecided, and go back to the head
// of the queue, in their order, where the first of them is the first
// member of a next batch; the next round trip begins by rolling back to
// that member's savepoint, which lets go of the locks it did take. So a
// transaction waits only in its first statement, holding only the locks
// that statement took before, which come earlier in the one order than
// the one it waits for (a lone write, writePostgres, waits the same way);
// a cycle of waits would need that order to go round. Members of one
// batch never wait for each other: locks of one transaction do not
// conflict. Nor does a batch wait for rows: the rows a member writes are
// those its locks cover.
//
// Why this keeps every promise of a lone transaction:
//   - Durability: no member is answered before the COMMIT that contains
//     it returns (synchronous_commit = on).
//   - Atomicity per operation: a refusal or a failure of a member's
//     decision sends its writes not at all, or rolls back to its
//     savepoint if it sent some on its own. A write the server refuses
//     rolls the batch back, to run again careful; in a careful batch, it
//     rolls back to that member's savepoint, and the rest of the round
//     trip goes again: no later member decided on what it would have
//     written, since one that reads the same issue read it after that
//     write was sent, and learnt then. A member the server rolled back
//     (deadlock) is queued again, undecided. A failure of the batch
//     itself (a connection that broke before COMMIT was sent) decided
//     nothing, and the batch runs again.
//   - Linearizability: each member decides under its locks, which it
//     holds from its reading of the clock until COMMIT, after every
//     transaction that held them committed; within the batch, in order,
//     reading what the members before it wrote. Its clock is read with
//     its locks, in the batch's order.
//   - Nothing leaves the database while the batch holds its locks: a
//     decision calls no network (a write that needs the forge asks it
//     before it is queued), and the locks are held for the round trips
//     above.
//
// A write that decides about nothing (no scope) and the SERIALIZABLE
// comparison run alone, as writePostgres did before (postgres.go).
//
// Round trips: two for a lone acquire, renew or release (three with a
// round trip for each member's writes, seven with a statement each), two
// for a batch of them on different issues; one more for each member
// after another about the same issue. A refusal by the server costs the
// batch's run without savepoints, and in a careful batch one round trip
// more for each write refused.

// pgMaxBatch bounds how many writes one PostgreSQL transaction decides:
// in a careful batch each member is a subtransaction, and one with more
// than 64 of them that wrote makes every other transaction's snapshot
// look beyond the shared cache of subtransaction IDs.
const pgMaxBatch = 64

// pgLeaders is how many batches one Store runs at once, each on a
// connection of its own (of pgMaxConns). Two: while one batch waits for
// its round trip or its COMMIT's flush, the other decides; more only
// split the queue into smaller batches, each with a COMMIT and the
// server's work around it. Measured (BenchmarkEngines, Cycle64, on 2
// cores): with 2, 0.51 to 1.0 times SQLite's writes/s over five runs;
// with 4, 0.27 to 0.44 over three.
const pgLeaders = 2

// Statements a batch sends around its members' own, without arguments, so
// that each is prepared once per connection.
const (
	pgBegin    = "BEGIN ISOLATION LEVEL READ COMMITTED"
	pgSave     = "SAVEPOINT m" // one name: ROLLBACK TO goes to the latest
	pgUndo     = "ROLLBACK TO SAVEPOINT m"
	pgKeep     = "RELEASE SAVEPOINT m"
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
	broken, careful := 0, false
	for delay := time.Millisecond; ; delay = min(2*delay, 32*time.Millisecond) {
		outs, errs, committing, err := s.pgBatchOnce(ctx, batch, careful)
		if errors.Is(err, errCareful) && !careful {
			careful = true // nothing was committed: at once, each write in a savepoint
			continue
		}
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
func (s *Store) pgBatchOnce(ctx context.Context, batch []*writeReq, careful bool) (outs []outcome, errs []error, committing bool, err error) {
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
	b := &pgBatch{s: s, ctx: ctx, c: c, careful: careful, members: make([]*memberConn, len(batch)),
		outs: make([]outcome, len(batch)), errs: make([]error, len(batch))}
	committing, err = b.run(batch)
	return b.outs, b.errs, committing, err
}

// pgBatch is one transaction deciding a batch.
type pgBatch struct {
	s       *Store
	ctx     context.Context
	c       *sql.Conn
	members []*memberConn // nil: gave up before the batch began
	outs    []outcome
	errs    []error
	// pend is what the next round trip sends: the members' writes, in
	// the batch's order.
	pend []pgReq
	// careful: each member's writes go inside a savepoint of their own,
	// as they must once the server has refused one (see the top).
	careful bool
	// broken: the batch failed midway (the connection did, or a statement
	// of the batch's own); nothing more is sent.
	broken error
}

// run decides the batch: its first round trip, the members' decisions,
// and its last round trip (see the top of this file).
func (b *pgBatch) run(batch []*writeReq) (committing bool, err error) {
	s := b.s
	micros := make([]int64, len(batch))
	lockAt := make([]int, len(batch)) // where each member's locks are in the first round trip
	b.pend = []pgReq{{sql: pgBegin, member: -1}}
	var taken []advisory // by the members before
	first := -1          // the member that may wait
	unbounded := false   // the lock timeout of the first member is reset
	for i, r := range batch {
		if e := r.ctx.Err(); e != nil {
			b.errs[i] = fmt.Errorf("%w: %v", ErrBusy, e) // gave up: decide nothing
			continue
		}
		m := &memberConn{b: b, member: i, key: Key{RepoID: r.sc.repo, Issue: r.sc.issue}}
		b.members[i] = m
		ls := r.sc.locks()
		deadline, _ := r.ctx.Deadline()
		q, args := lockSQL(ls, first < 0, deadline)
		lockQ := pgReq{sql: q, args: args, member: i, scan: func(row pgRow) error { return row.Scan(&micros[i]) }}
		if first >= 0 && !unbounded {
			// What follows the first member's locks is not bounded by its
			// deadline.
			unbounded, b.pend = true, append(b.pend, pgReq{sql: pgNoWait, member: -1})
		}
		if first < 0 {
			// It holds nothing yet, nor does the transaction: it waits,
			// and nothing after it does.
			first, lockAt[i] = i, len(b.pend)
			b.pend = append(b.pend, lockQ)
		} else if b.careful {
			lockAt[i] = len(b.pend) + 1
			b.pend = append(b.pend, pgReq{sql: pgSave, member: i}, lockQ, pgReq{sql: pgKeep, member: i})
		} else {
			lockAt[i] = len(b.pend)
			b.pend = append(b.pend, lockQ)
		}
		// An earlier member decides about its rows first: what it reads
		// now would not show that member's writes, sent later. It reads
		// them when it decides, after them.
		if m.key.Issue != 0 && !conflict(taken, ls) {
			m.fetch = true
			b.pend = append(b.pend, m.reads())
		}
		taken = append(taken, ls...)
	}
	if first < 0 {
		return false, nil // every member gave up: nothing was sent
	}
	sent := s.clock.Now()
	failed, err := roundTrip(b.ctx, b.c, b.pend)
	got := s.clock.Now()
	k := -1 // the member whose locks were not all free
	if failed >= 0 {
		k = b.pend[failed].member
	}
	b.pend = b.pend[:0]
	held := len(batch) // the members before k hold their locks
	if failed >= 0 {
		switch {
		case k < 0 || failed != lockAt[k]:
			return false, err
		case k == first && lockTimedOut(err):
			b.errs[k] = fmt.Errorf("%w: %v", ErrBusy, oneLine{err})
		case k != first && locksTaken(err) && !b.careful:
			// Nothing can undo the locks it took alone.
			_, _ = roundTrip(b.ctx, b.c, []pgReq{{sql: pgRollback, member: -1}})
			return false, fmt.Errorf("%w: %w", errCareful, err)
		case k == first && pgRetry(err), k != first && locksTaken(err):
			b.outs[k] = deferred
		default:
			return false, err
		}
		for j := k + 1; j < len(batch); j++ {
			if b.members[j] != nil {
				b.outs[j] = deferred // not run
			}
		}
		if held = k; k == first {
			// Nothing was decided: end the transaction and answer at
			// once. If even that fails, the pool drops the connection,
			// still inside it.
			_, _ = roundTrip(b.ctx, b.c, []pgReq{{sql: pgRollback, member: -1}})
			return false, nil
		}
		// Undo its savepoint, and with it the locks it took.
		b.pend = append(b.pend, pgReq{sql: pgUndo, member: -1}, pgReq{sql: pgKeep, member: -1})
	} else if err != nil {
		return false, err
	}
	if s.dbClock {
		s.sampleOffset(micros[first], sent, got)
	}
	for i := range held {
		m := b.members[i]
		if m == nil {
			continue
		}
		m.start = len(b.pend)
		if m.fetch {
			m.read = true
		} else if m.key.Issue != 0 {
			// It reads its rows after the members before it wrote theirs,
			// with them in one round trip.
			if b.careful {
				m.save()
			}
			b.pend = append(b.pend, m.reads())
			err := b.flush(i)
			m.sent, m.start = m.saved, len(b.pend)
			m.read = err == nil && m.failed == nil
			if b.broken != nil {
				return false, b.broken
			}
		}
		var now int64
		if s.dbClock {
			now = s.guard(time.UnixMicro(micros[i]).Unix())
		} else {
			now = s.now()
		}
		var ferr error
		if ferr = m.failed; ferr == nil {
			tx := s.db.WithContext(b.ctx)
			tx.Statement.ConnPool = m
			ferr = batch[i].fn(tx, now)
		}
		b.settle(m, ferr)
		if b.broken != nil {
			return false, b.broken
		}
	}
	b.pend = append(b.pend, pgReq{sql: pgCommit, member: -1})
	if err := b.flush(-1); err != nil {
		var pe *pgconn.PgError
		// An error the server sent, for COMMIT or before it, rolled the
		// transaction back; any other, the answer was lost, not the
		// COMMIT.
		return !errors.As(err, &pe), err
	}
	return false, nil
}

// settle records m's outcome, ferr being what its decision returned, and
// undoes what it wrote unless it succeeded.
func (b *pgBatch) settle(m *memberConn, ferr error) {
	if b.broken != nil {
		return
	}
	if m.failed != nil {
		ferr = m.failed // a write of its own the server refused
	}
	i := m.member
	switch {
	case ferr == nil:
		if m.saved {
			b.pend = append(b.pend, pgReq{sql: pgKeep, member: i})
		}
		return
	case isRefusal(ferr):
		b.errs[i] = ferr
	case pgRetry(ferr):
		b.outs[i] = deferred
	default:
		// Its own failure (a constraint, a bug): undone alone. If the
		// connection is what failed, the undoing fails too, and the
		// whole batch with it.
		b.errs[i] = mapDBError(ferr)
	}
	b.pend = b.pend[:m.start] // what of it was not sent
	if m.sent {
		b.pend = append(b.pend, pgReq{sql: pgUndo, member: -1}, pgReq{sql: pgKeep, member: -1})
	}
}

// flush sends what is pending in one round trip, and, each time a
// member's write is refused, undoes that member (whose outcome becomes
// the refusal) and sends the rest again. current is the member deciding
// now (-1: none): if its own write is refused, it learns it from the
// statement it was about to send (memberConn.live), and undoes itself.
func (b *pgBatch) flush(current int) error {
	for len(b.pend) > 0 {
		failed, err := roundTrip(b.ctx, b.c, b.pend)
		if err == nil {
			b.pend = b.pend[:0]
			return nil
		}
		k := -1
		if failed >= 0 {
			k = b.pend[failed].member
		}
		if k < 0 {
			b.broken = err // the connection's, or the batch's own statement's: its COMMIT, an undoing
			return err
		}
		if !b.members[k].saved {
			// Nothing can undo it alone, and the transaction is aborted.
			b.broken = fmt.Errorf("%w: %w", errCareful, err)
			_, _ = roundTrip(b.ctx, b.c, []pgReq{{sql: pgRollback, member: -1}})
			return b.broken
		}
		end := failed + 1
		for end < len(b.pend) && b.pend[end].member == k {
			end++
		}
		rest := b.pend[end:]
		b.members[k].failed = err
		if k == current {
			b.pend = append(b.pend[:0], rest...)
			return err
		}
		if pgRetry(err) {
			b.outs[k] = deferred
		} else {
			b.errs[k] = mapDBError(err)
		}
		b.pend = append([]pgReq{{sql: pgUndo, member: -1}, {sql: pgKeep, member: -1}}, rest...)
	}
	return nil
}

// errCareful: the server refused a member's statement (its locks, or a
// write) that had no savepoint of its own; the batch is rolled back, and
// runs again with savepoints.
var errCareful = errors.New("a member refused in a batch without savepoints")

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

// memberConn is the batch's connection as one member's decision uses it.
// Its writes (execSQL's: their result is not read) wait in the batch's
// pending statements, to go with a later round trip. Its issue's rows,
// read with its locks (right after them, so under them) or after the
// writes of the members before it, answer load and loadIssue until it
// writes them. Any other
// statement goes to the server at once, after everything pending.
type memberConn struct {
	b                      *pgBatch
	member                 int
	key                    Key
	lease                  leaseRow
	issue                  issueRow
	fetch, read            bool // its rows: asked for, and read
	leaseFound, issued     bool // issued: issue found
	wroteLease, wroteIssue bool // since its rows were read
	saved, sent            bool // its savepoint: pending, sent
	start                  int  // where its statements not sent yet begin in the pending ones
	failed                 error
}

// prefetched returns m's rows of k, if it has them and the one asked
// for (issue: the issue's state; otherwise its lease) is current.
func prefetched(tx *gorm.DB, k Key, issue bool) (*memberConn, bool) {
	m, ok := tx.Statement.ConnPool.(*memberConn)
	return m, ok && m.read && m.key == k && !(issue && m.wroteIssue || !issue && m.wroteLease)
}

// save opens m's savepoint, before its first statement.
func (m *memberConn) save() {
	if !m.saved {
		m.saved = true
		m.b.pend = slices.Insert(m.b.pend, m.start, pgReq{sql: pgSave, member: m.member})
	}
}

// queue adds a write of m's to the pending statements.
func (m *memberConn) queue(q stmt, args []any) {
	switch q {
	case insertIssueSQL, updateIssueSQL:
		m.wroteIssue = true
	case recordSQL: // the history only
	default:
		m.wroteLease, m.wroteIssue = true, true
	}
	if m.b.careful {
		m.save()
	}
	m.b.pend = append(m.b.pend, pgReq{sql: q.postgres, args: args, member: m.member})
}

// live sends what is pending, so that a statement of m's can go to the
// server on its own: it reads what the members before wrote, and its
// own writes so far. An error means it must not be sent.
func (m *memberConn) live() error {
	if m.b.broken != nil {
		return m.b.broken
	}
	m.save()
	err := m.b.flush(m.member)
	m.sent, m.start = true, len(m.b.pend)
	if m.failed != nil {
		return m.failed
	}
	return err
}

func (m *memberConn) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	m.wroteLease, m.wroteIssue = true, true
	if err := m.live(); err != nil {
		return nil, err
	}
	return m.b.c.ExecContext(ctx, q, args...)
}

// QueryContext is what gorm's writes use too (RETURNING).
func (m *memberConn) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	m.wroteLease, m.wroteIssue = true, true
	if err := m.live(); err != nil {
		return nil, err
	}
	return m.b.c.QueryContext(ctx, q, args...)
}

func (m *memberConn) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	// If live failed, the statement fails too (the transaction is
	// aborted, or the connection broke), and the member's outcome is
	// live's error (settle).
	_ = m.live()
	return m.b.c.QueryRowContext(ctx, q, args...)
}

func (m *memberConn) PrepareContext(ctx context.Context, q string) (*sql.Stmt, error) {
	if err := m.live(); err != nil {
		return nil, err
	}
	return m.b.c.PrepareContext(ctx, q)
}

var _ gorm.ConnPool = (*memberConn)(nil)

// reads is the statement that reads m's issue's rows after its locks:
// its lease and its state, in one row whose halves are null for a row
// that is missing.
func (m *memberConn) reads() pgReq {
	return pgReq{sql: loadBothSQL, args: []any{m.key.RepoID, m.key.Issue}, member: m.member, scan: func(r pgRow) error {
		if r.values == nil {
			return errors.New("no row for an issue's rows")
		}
		lease, issue := r.cols(0, leaseFields), r.cols(leaseFields, len(r.values))
		m.leaseFound, m.issued = !lease.null(0), !issue.null(0)
		if m.leaseFound {
			if err := lease.Scan(m.lease.fields()...); err != nil {
				return err
			}
		}
		if m.issued {
			i := &m.issue
			return issue.Scan(&i.RepoID, &i.Issue, &i.Kind, &i.Closed, &i.Deleted, &i.Version, &i.CheckedAt)
		}
		return nil
	}}
}

// loadBothSQL is loadSQL's row then loadIssueSQL's, of one issue.
var loadBothSQL = "SELECT " + prefixed("l.", leaseColumns) + ", " + prefixed("i.", issueColumns) +
	" FROM (SELECT $1::bigint AS repo_id, $2::bigint AS issue) AS k" +
	" LEFT JOIN leases AS l ON l.repo_id = k.repo_id AND l.issue = k.issue" +
	" LEFT JOIN issue_states AS i ON i.repo_id = k.repo_id AND i.issue = k.issue"

// leaseFields is how many columns leaseColumns has.
var leaseFields = len(strings.Split(leaseColumns, ","))

// prefixed is columns (a, b, …) as p+a, p+b, ….
func prefixed(p, columns string) string {
	cs := strings.Split(columns, ", ")
	for i := range cs {
		cs[i] = p + cs[i]
	}
	return strings.Join(cs, ", ")
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
