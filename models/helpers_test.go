package models

import (
	"context"
	"hash/fnv"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// fakeClock is moved by tests; nothing ever sleeps to cross an expiry.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 9, 5, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func openTestStore(t testing.TB, opts ...Option) (*Store, *fakeClock, string) {
	t.Helper()
	clock := newFakeClock()
	path := filepath.Join(t.TempDir(), "collab.db")
	s, err := Open(path, append([]Option{WithClock(clock), WithMaxTTL(168 * time.Hour)}, opts...)...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, clock, path
}

var bg = context.Background()

func mustAcquire(t testing.TB, s *Store, k Key, holder string, ttl time.Duration) Lease {
	t.Helper()
	return mustAcquireAs(t, s, k, who(holder), ttl)
}

// who is the test account with this login: the ID is derived from the
// login, so the same name is always the same account.
func who(login string) Holder {
	h := fnv.New32a()
	_, _ = h.Write([]byte(login))
	return Holder{ID: int64(h.Sum32()) + 1, Login: login}
}
