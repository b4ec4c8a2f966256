package models

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"gorm.io/gorm"
)

// Group commit. Every write is one decision taken under SQLite's write
// lock, and what makes it durable is the fsync of its COMMIT
// (synchronous=FULL), which costs milliseconds on a busy disk while the
// decision itself costs microseconds. So writers that arrive while another
// one holds the lock queue up, and the next one to get the lock decides for
// everyone queued, in arrival order, each at its own turn and with its own
// reading of the clock, inside one transaction, and commits once.
//
// Why this keeps every promise of a lone transaction:
//   - Durability: nobody learns the outcome of its write before the COMMIT
//     that contains it has returned, so an acknowledged write survived the
//     same fsync it always did.
//   - Atomicity per operation: each decision runs inside a savepoint, and
//     a refusal (held, not the holder) is rolled back to it; any other
//     failure rolls the whole batch back, and its members then run one by
//     one, each in a transaction of its own, exactly as without batching.
//   - Linearizability: decisions run one at a time under the write lock,
//     each reading the rows as the previous ones left them, so the batch
//     is a sequence of operations, all made visible to readers by one
//     COMMIT, which happens after every member was called and before any
//     of them returns. A refusal can be based on an earlier member's
//     write, which is why refusals, too, are reported only after COMMIT.
//   - Time: each decision reads the clock at its own turn while the lock is
//     held, so in the ledger's order the decisions' clock readings never
//     decrease.
//
// A write that is alone runs as before: BEGIN IMMEDIATE, fn, COMMIT.
//
// PostgreSQL has its own group commit, with a lock per write: pgbatch.go.

// defaultMaxBatch bounds how many writes one transaction decides.
const defaultMaxBatch = 128

// writeReq is one queued write.
type writeReq struct {
	ctx   context.Context
	fn    func(tx *gorm.DB, now int64) error
	sc    scope // what it decides about (PostgreSQL)
	taken bool  // popped off the queue by a slot holder; guarded by Store.mu
	err   error
	done  chan struct{} // closed once err is final
	// back: on PostgreSQL, a leader put it back in the queue undecided
	// (pgbatch.go).
	back chan struct{}
}

func (r *writeReq) finish(err error) {
	r.err = err
	close(r.done)
}

func (r *writeReq) finished() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// write runs fn in a write transaction: the in-process slot, then BEGIN
// IMMEDIATE, then fn, then COMMIT, possibly together with other writers'
// fns (see above). now is read after the lock is held, so the decision and
// its timestamp belong to the same instant of the ledger's history. fn
// must return a refusal (*HeldError, *NotHolderError, *CoolingError, *QuarantinedError, *LimitError) only if it wrote
// nothing it wants kept; other errors fail the whole transaction. fn may
// run more than once (alone after a failed batch; again after a
// serialization failure on PostgreSQL, or in a batch run again with
// savepoints, pgbatch.go), so it sets its results afresh.
//
// sc is all that fn decides about: on PostgreSQL, it is what write locks
// before fn runs (writePostgres); fn must read and write nothing else
// that another write decides on.
func (s *Store) write(ctx context.Context, sc scope, fn func(tx *gorm.DB, now int64) error) error {
	if s.pg {
		if s.serializable || s.maxBatch <= 1 || len(sc.locks()) == 0 {
			return s.writePostgres(ctx, sc, fn)
		}
		return s.writeBatched(ctx, sc, fn)
	}
	ctx, cancel := context.WithTimeout(ctx, s.busyTimeout)
	defer cancel()
	r := &writeReq{ctx: ctx, fn: fn, done: make(chan struct{})}
	s.mu.Lock()
	s.queue = append(s.queue, r)
	s.mu.Unlock()
	select {
	case s.writeSlot <- struct{}{}:
		s.lead(r)
	case <-r.done:
	case <-ctx.Done():
		if s.withdraw(r) {
			return fmt.Errorf("%w: %v", ErrBusy, ctx.Err())
		}
		// A slot holder has taken it; the outcome follows within that
		// holder's bounded transaction.
		<-r.done
	}
	return r.err
}

// lead runs queued writes, oldest first, in batches until own's outcome is
// known, then gives up the slot to the next waiting writer. own is always
// still queued or finished here: only the slot holder takes from the
// queue, and it finishes all it takes before it lets go of the slot.
func (s *Store) lead(own *writeReq) {
	defer func() { <-s.writeSlot }()
	for !own.finished() {
		s.runBatch(s.take())
	}
}

// take pops up to s.maxBatch writes off the queue, its share if several
// leaders run at once. Those whose deadline has
// already passed are answered ErrBusy without running.
func (s *Store) take() []*writeReq {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Leaders that run at once (PostgreSQL) share what is queued.
	leaders := cap(s.writeSlot)
	n := min(len(s.queue), s.maxBatch, (len(s.queue)+leaders-1)/leaders)
	batch := make([]*writeReq, 0, n)
	for _, r := range s.queue[:n] {
		r.taken = true
		if err := r.ctx.Err(); err != nil {
			r.finish(fmt.Errorf("%w: %v", ErrBusy, err))
			continue
		}
		batch = append(batch, r)
	}
	rest := copy(s.queue, s.queue[n:])
	clear(s.queue[rest:])
	s.queue = s.queue[:rest]
	return batch
}

// withdraw removes r from the queue unless a slot holder has taken it.
func (s *Store) withdraw(r *writeReq) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.taken {
		return false
	}
	i := slices.Index(s.queue, r)
	s.queue = slices.Delete(s.queue, i, i+1)
	return true
}

// runBatch decides every write of batch in one transaction and answers
// each of them after COMMIT.
func (s *Store) runBatch(batch []*writeReq) {
	switch len(batch) {
	case 0:
		return
	case 1:
		batch[0].finish(s.writeAlone(batch[0].ctx, batch[0].fn))
		return
	}
	// Bounded by the latest deadline of its members (each is bounded by
	// the busy timeout), and each member checks its own at its turn: one
	// member about to give up must not abort the batch and send all the
	// others to run alone while the slot is held. A member decided before
	// its deadline is answered after COMMIT, like every other.
	ctx, cancel := context.WithDeadline(context.Background(), latestDeadline(batch))
	defer cancel()
	errs := make([]error, len(batch))
	memberFailed := false
	err := s.retryBusy(ctx, func(db *gorm.DB) error {
		s.txns.Add(1)
		return db.Transaction(func(tx *gorm.DB) error {
			memberFailed = false
			for i, r := range batch {
				if err := r.ctx.Err(); err != nil {
					errs[i] = fmt.Errorf("%w: %v", ErrBusy, err) // gave up: decide nothing
					continue
				}
				errs[i] = s.member(tx, r.fn)
				if errs[i] != nil && !isRefusal(errs[i]) {
					memberFailed = true
					return errs[i]
				}
			}
			return nil
		})
	})
	switch {
	case err == nil:
		for i, r := range batch {
			r.finish(errs[i])
		}
	case memberFailed || errors.Is(err, ErrBusy):
		// Rolled back, nothing of the batch was written: let each
		// member run alone, within its own deadline.
		for _, r := range batch {
			r.finish(s.writeAlone(r.ctx, r.fn))
		}
	default:
		// COMMIT itself failed: report it to everyone, as a lone
		// writer would have, rather than guess what it left behind.
		for _, r := range batch {
			r.finish(err)
		}
	}
}

// The savepoint around each member of a batch. One name serves them all,
// since members run one after the other and each releases its savepoint
// before the next begins; fixed text lets the statements be prepared once
// (gorm's nested transactions name each savepoint anew, and never release
// it, so a batch of 64 left 64 on SQLite's stack).
var (
	savepointSQL  = sqlStmt("SAVEPOINT member")
	rollbackToSQL = sqlStmt("ROLLBACK TO SAVEPOINT member")
	releaseSQL    = sqlStmt("RELEASE SAVEPOINT member")
)

// member decides fn inside a savepoint of the batch's transaction tx: if fn
// fails (a refusal included), whatever it wrote is rolled back and the
// members before it are kept. A savepoint that cannot be rolled back or
// released fails the member with that error, never with fn's refusal, so
// that the whole batch is rolled back and its members run alone.
func (s *Store) member(tx *gorm.DB, fn func(tx *gorm.DB, now int64) error) error {
	if err := execSQL(tx, savepointSQL); err != nil {
		return err
	}
	if err := fn(tx, s.now()); err != nil {
		if rbErr := execSQL(tx, rollbackToSQL); rbErr != nil {
			return fmt.Errorf("roll back a write that failed (%v): %w", err, rbErr)
		}
		if relErr := execSQL(tx, releaseSQL); relErr != nil {
			return fmt.Errorf("release the savepoint of a write that failed (%v): %w", err, relErr)
		}
		return err
	}
	return execSQL(tx, releaseSQL)
}

// writeAlone runs fn in a transaction of its own.
func (s *Store) writeAlone(ctx context.Context, fn func(tx *gorm.DB, now int64) error) error {
	return s.retryBusy(ctx, func(db *gorm.DB) error {
		s.txns.Add(1)
		return db.Transaction(func(tx *gorm.DB) error {
			return fn(tx, s.now())
		})
	})
}

// isRefusal tells a lease decision that said no from a failure.
func isRefusal(err error) bool {
	var unverified *UnverifiedError
	return errors.Is(err, ErrHeld) || errors.Is(err, ErrNotHolder) || errors.Is(err, ErrClosed) ||
		errors.Is(err, ErrCooling) || errors.Is(err, ErrQuarantined) || errors.Is(err, ErrLimit) || errors.Is(err, ErrReserved) || errors.Is(err, ErrAlreadyHolder) || errors.Is(err, ErrNoneFree) || errors.As(err, &unverified) ||
		errors.Is(err, ErrSessionGone) || errors.Is(err, ErrSessionMoved) || errors.Is(err, ErrTooManySessions)
}
