package models

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// The batch state machine of group commit on PostgreSQL: one transaction
// deciding a batch, run again while nothing of it was committed (the queue
// and the design are in pgbatch.go).

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
	// as they must once the server has refused one (see pgbatch.go).
	careful bool
	// broken: the batch failed midway (the connection did, or a statement
	// of the batch's own); nothing more is sent.
	broken error
	// Of the first round trip (begin): each member's reading of the
	// server's clock (Unix microseconds), where its locks are in the
	// round trip, and the member that may wait for its locks.
	micros []int64
	lockAt []int
	first  int
}

// run decides the batch: its first round trip, the members' decisions,
// and its last round trip (see pgbatch.go).
func (b *pgBatch) run(batch []*writeReq) (committing bool, err error) {
	if !b.begin(batch) {
		return false, nil // every member gave up: nothing was sent
	}
	held, ok, err := b.lock(batch)
	if !ok {
		return false, err
	}
	if err := b.decide(batch, held); err != nil {
		return false, err
	}
	return b.commit()
}

// begin queues the first round trip: BEGIN, and for each member that
// has not given up, the statement that takes its locks and reads the
// server's clock, and the one that reads its issue's rows. False: every
// member gave up.
func (b *pgBatch) begin(batch []*writeReq) bool {
	b.micros = make([]int64, len(batch))
	b.lockAt = make([]int, len(batch))
	b.pend = []pgReq{{sql: pgBegin, member: -1}}
	var taken []advisory // by the members before
	b.first = -1         // the member that may wait
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
		q, args := lockSQL(ls, b.first < 0, deadline)
		lockQ := pgReq{sql: q, args: args, member: i, scan: func(row pgRow) error { return row.Scan(&b.micros[i]) }}
		if b.first >= 0 && !unbounded {
			// What follows the first member's locks is not bounded by its
			// deadline.
			unbounded, b.pend = true, append(b.pend, pgReq{sql: pgNoWait, member: -1})
		}
		if b.first < 0 {
			// It holds nothing yet, nor does the transaction: it waits,
			// and nothing after it does.
			b.first, b.lockAt[i] = i, len(b.pend)
			b.pend = append(b.pend, lockQ)
		} else if b.careful {
			b.lockAt[i] = len(b.pend) + 1
			b.pend = append(b.pend, pgReq{sql: pgSave, member: i}, lockQ, pgReq{sql: pgKeep, member: i})
		} else {
			b.lockAt[i] = len(b.pend)
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
	return b.first >= 0
}

// lock sends the first round trip. held: the members before it hold their
// locks (the first held members decide; those after are deferred). Not
// ok: the batch ends here with err (nil: nothing was decided, and the
// transaction is ended).
func (b *pgBatch) lock(batch []*writeReq) (held int, ok bool, err error) {
	s, first := b.s, b.first
	sent := s.clock.Now()
	failed, err := roundTrip(b.ctx, b.c, b.pend)
	got := s.clock.Now()
	k := -1 // the member whose locks were not all free
	if failed >= 0 {
		k = b.pend[failed].member
	}
	b.pend = b.pend[:0]
	held = len(batch) // the members before k hold their locks
	if failed >= 0 {
		switch {
		case k < 0 || failed != b.lockAt[k]:
			return 0, false, err
		case k == first && lockTimedOut(err):
			b.errs[k] = fmt.Errorf("%w: %v", ErrBusy, oneLine{err})
		case k != first && locksTaken(err) && !b.careful:
			// Nothing can undo the locks it took alone.
			_, _ = roundTrip(b.ctx, b.c, []pgReq{{sql: pgRollback, member: -1}})
			return 0, false, fmt.Errorf("%w: %w", errCareful, err)
		case k == first && pgRetry(err), k != first && locksTaken(err):
			b.outs[k] = deferred
		default:
			return 0, false, err
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
			return 0, false, nil
		}
		// Undo its savepoint, and with it the locks it took.
		b.pend = append(b.pend, pgReq{sql: pgUndo, member: -1}, pgReq{sql: pgKeep, member: -1})
	} else if err != nil {
		return 0, false, err
	}
	if s.dbClock {
		s.sampleOffset(b.micros[first], sent, got)
	}
	return held, true, nil
}

// decide runs the decisions of the first held members, in order, each
// reading its rows after the writes of those before it, and settles each
// (settle). An error: the batch broke.
func (b *pgBatch) decide(batch []*writeReq, held int) error {
	s := b.s
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
				return b.broken
			}
		}
		var now int64
		if s.dbClock {
			now = s.guard(time.UnixMicro(b.micros[i]).Unix())
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
			return b.broken
		}
	}
	return nil
}

// commit sends the members' writes left, and COMMIT. committing: COMMIT
// was sent and its answer lost.
func (b *pgBatch) commit() (committing bool, err error) {
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
