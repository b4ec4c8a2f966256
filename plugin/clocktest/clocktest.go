// Package clocktest is the one fake clock of the tests: it stands still
// until a test moves it, so tests jump past an expiry instead of sleeping.
// It satisfies models.Clock, and its Now method value serves wherever a
// func() time.Time is taken.
package clocktest

import (
	"sync"
	"time"
)

// Start is where a New clock stands: 2026-09-05T12:00:00Z.
var Start = time.Date(2026, 9, 5, 12, 0, 0, 0, time.UTC)

// Clock is a settable clock, safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a clock standing at Start.
func New() *Clock { return &Clock{t: Start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}
