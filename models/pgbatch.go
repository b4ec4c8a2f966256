package models

import (
	"context"
	"fmt"
	"slices"

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
