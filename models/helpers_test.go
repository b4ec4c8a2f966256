package models

import (
	"context"
	"hash/fnv"
	"path/filepath"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/clocktest"
)

func openTestStore(t testing.TB, opts ...Option) (*Store, *clocktest.Clock, string) {
	t.Helper()
	clock := clocktest.New()
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
