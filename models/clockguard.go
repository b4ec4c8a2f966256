package models

import (
	"context"
	"time"
)

// The ledger's time never goes backwards. Expiry is decided by comparing
// the clock with the expiries written, so a wall clock stepped back (NTP,
// a restored VM) would revive leases that had expired and been answered
// as free; tokens would stay safe, but two holders could both believe
// they hold the issue. So every reading is at least the latest one the
// ledger has used, which survives restarts: it is the time of the newest
// history row (every write records one) or issue state.

// now is the ledger's current time in Unix seconds: the clock, or the
// latest time already used if the clock reads earlier.
func (s *Store) now() int64 {
	c := s.clock.Now().Unix()
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
