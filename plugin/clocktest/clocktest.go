// Package clocktest is the one fake clock of the tests: it stands still
// until a test moves it, so tests jump past an expiry instead of sleeping.
// It satisfies models.Clock, its Now method value serves wherever a
// func() time.Time is taken, and its After method value wherever a timer
// is (lease.WithTimer): a timer fires when the clock is moved to or past
// its deadline.
package clocktest

import (
	"sync"
	"time"
)

// Start is where a New clock stands: 2026-09-05T12:00:00Z.
var Start = time.Date(2026, 9, 5, 12, 0, 0, 0, time.UTC)

// Clock is a settable clock, safe for concurrent use.
type Clock struct {
	mu     sync.Mutex
	t      time.Time
	timers map[*timer]struct{}
}

type timer struct {
	at time.Time
	c  chan time.Time
}

// New returns a clock standing at Start.
func New() *Clock { return &Clock{t: Start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d, firing the timers now due.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	c.fire()
}

// Set moves the clock to t, firing the timers now due.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
	c.fire()
}

// After returns a channel that receives the clock's time once the clock
// stands at or past now+d, and a function that stops the timer (reporting
// whether it stopped it before it fired). d <= 0 fires at once.
func (c *Clock) After(d time.Duration) (<-chan time.Time, func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tm := &timer{at: c.t.Add(d), c: make(chan time.Time, 1)}
	if c.timers == nil {
		c.timers = map[*timer]struct{}{}
	}
	c.timers[tm] = struct{}{}
	c.fire()
	return tm.c, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, pending := c.timers[tm]
		delete(c.timers, tm)
		return pending
	}
}

// Timers returns how many timers are pending: a test polls it to know
// that a waiter has set its timer before moving the clock.
func (c *Clock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

func (c *Clock) fire() {
	for tm := range c.timers {
		if !c.t.Before(tm.at) {
			tm.c <- c.t
			delete(c.timers, tm)
		}
	}
}
