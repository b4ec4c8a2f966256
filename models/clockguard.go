package models

import (
	"context"
	"time"

	"gorm.io/gorm"
)

// The ledger's time never goes backwards. Expiry is decided by comparing
// the clock with the expiries written, so a wall clock stepped back (NTP,
// a restored VM) would revive leases that had expired and been answered
// as free; tokens would stay safe, but two holders could both believe
// they hold the issue. So every reading is at least the latest one the
// ledger has used, which survives restarts: it is the time of the newest
// history row (every write records one) or issue state.

// now is the ledger's current time in Unix seconds: the clock (corrected
// to the database server's, see below), or the latest time already used
// if the clock reads earlier.
func (s *Store) now() int64 {
	c := s.Clock().Now().Unix()
	if s.dbClock {
		// Only the server's clock, read by writes, moves the latest time
		// used: this process's clock, even corrected, may have stepped
		// since the offset was last measured.
		return max(c, s.highWater.Load())
	}
	return s.guard(c)
}

// guard returns c, or the latest time already used if c is earlier.
func (s *Store) guard(c int64) int64 {
	for {
		hw := s.highWater.Load()
		if c <= hw {
			if c < hw-1 && s.onStep != nil && s.warned.Swap(hw) != hw {
				s.onStep(time.Duration(hw-c) * time.Second)
			}
			return hw
		}
		if s.highWater.CompareAndSwap(hw, c) {
			return c
		}
	}
}

// WithClockStep sets what to tell when the clock reads earlier than a time
// the ledger already used (by how much); once per such time.
func WithClockStep(f func(back time.Duration)) Option { return func(o *options) { o.onStep = f } }

// loadHighWater starts the ledger's time at the latest time it recorded.
func (s *Store) loadHighWater(ctx context.Context) error {
	var at struct{ Events, States *int64 }
	err := s.db.WithContext(ctx).Raw("SELECT (SELECT max(at) FROM lease_events) AS events, (SELECT max(checked_at) FROM issue_states) AS states").
		Scan(&at).Error
	if err != nil {
		return mapDBError(err)
	}
	for _, p := range []*int64{at.Events, at.States} {
		if p != nil && *p > s.highWater.Load() {
			s.highWater.Store(*p)
		}
	}
	return nil
}

// Replicas on one PostgreSQL database decide by one clock: the database
// server's. Each replica's own clock may be off the others' (a host whose
// NTP stopped), and a replica whose clock ran ahead would take a lease
// from its holder before the expiry the holder was given, while one that
// lagged would let a holder renew a lease the others had already counted
// as expired. So on PostgreSQL, unless a test sets the clock, every write
// reads the server's clock right after taking its locks (in the same
// statement, lock), decides by it, and keeps it from going backwards like
// any other (guard). Every read that decides whether a claim is live
// reads the server's clock too, in its own statement (readNow): a read
// that judged by this process's clock, even corrected, could call a claim
// lapsed a moment before the write that follows finds it live (the offset
// is measured from readings up to offsetMaxRTT wide, and the host's clock
// may step since), and with expiries in whole seconds that flips a claim
// at a second's turn. The service's timers (Clock) use this process's
// clock corrected by its offset from the server's, measured at Open and
// again by every write that came back quickly: they only wake a waiter,
// who then asks the ledger.

// offsetMaxRTT: a write's reading of the server's clock corrects the
// offset only if its statement came back within this (the reading was
// taken between the statement's send and its answer).
const offsetMaxRTT = 20 * time.Millisecond

// Clock is the ledger's clock as this process reads it: the clock given
// to Open, corrected on PostgreSQL by its offset from the database
// server's clock. Timers that wait for the ledger's expiries use it.
func (s *Store) Clock() Clock {
	if !s.dbClock {
		return s.clock
	}
	return ClockFunc(func() time.Time { return s.clock.Now().Add(time.Duration(s.offset.Load())) })
}

// ClockOffset is how far the database server's clock is ahead of this
// process's (negative: behind), as last measured; 0 where the ledger
// decides by this process's clock (SQLite, or a clock given to Open).
func (s *Store) ClockOffset() time.Duration { return time.Duration(s.offset.Load()) }

// sampleOffset records the server's clock, read as dbMicros (Unix
// microseconds) by a statement sent at sent and answered at got (both on
// this process's clock), if the answer was quick enough to say anything.
func (s *Store) sampleOffset(dbMicros int64, sent, got time.Time) {
	rtt := got.Sub(sent)
	if rtt < 0 || rtt > offsetMaxRTT {
		return
	}
	mid := sent.Add(rtt / 2)
	s.offset.Store(int64(time.UnixMicro(dbMicros).Sub(mid)))
}

// pgClockSQL reads the PostgreSQL server's clock (not the transaction's
// start, which now() would give) in Unix microseconds.
const pgClockSQL = "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint"

// pgReadNowSQL is, in a read's statement on PostgreSQL, the time it
// decides liveness by: the server's clock in whole seconds, cut as a
// write's reading is (time.UnixMicro(micros).Unix()), never below its
// argument, the latest time this process used. A scalar subquery, so the
// clock is read once per statement (clock_timestamp() elsewhere in a
// WHERE would be read once per row).
const pgReadNowSQL = "GREATEST((SELECT " + pgClockSQL + " / 1000000), ?::bigint)"

// readNow is the time a read decides liveness by, as the argument of its
// statement that stands for now (liveSQL's): on PostgreSQL deciding by
// the server's clock, that clock, read by the statement itself
// (pgReadNowSQL); elsewhere s.now().
func (s *Store) readNow() any {
	if !s.dbClock {
		return s.now()
	}
	return gorm.Expr(pgReadNowSQL, s.highWater.Load())
}

// readNowValue is readNow as a value, for a read that decides liveness
// in Go: on PostgreSQL deciding by the server's clock, read in a
// statement of its own, after the reads it judges (so never before their
// snapshots).
func (s *Store) readNowValue(ctx context.Context) (int64, error) {
	if !s.dbClock {
		return s.now(), nil
	}
	var now int64
	if err := s.db.WithContext(ctx).Raw("SELECT "+pgReadNowSQL, s.highWater.Load()).Scan(&now).Error; err != nil {
		return 0, mapDBError(err)
	}
	return now, nil
}

// measureOffset sets the offset from the best of a few readings of the
// server's clock (the quickest answer says the most).
func (s *Store) measureOffset(ctx context.Context) error {
	best := time.Duration(-1)
	for range 3 {
		var micros int64
		sent := s.clock.Now()
		if err := s.db.WithContext(ctx).Raw("SELECT " + pgClockSQL).Scan(&micros).Error; err != nil {
			return mapDBError(err)
		}
		got := s.clock.Now()
		if rtt := got.Sub(sent); best < 0 || rtt < best {
			best = rtt
			s.offset.Store(int64(time.UnixMicro(micros).Sub(sent.Add(rtt / 2))))
		}
	}
	return nil
}
