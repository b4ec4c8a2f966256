package models

import (
	"context"
	"hash/fnv"
	"path/filepath"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/models/pgtest"
	"github.com/collab-lease/collab-lease/plugin/clocktest"
)

// engine is a database the ledger runs on. The ledger's tests run on
// every engine of the table (forEachEngine); a test that is about one
// engine only says why.
type engine struct {
	name string
	// newDB returns where a new, empty ledger is to be: a file path, or
	// the URL of a database of its own; it is gone when t ends.
	newDB func(t testing.TB) string
}

var (
	sqliteEngine   = engine{"sqlite", func(t testing.TB) string { return filepath.Join(t.TempDir(), "collab.db") }}
	postgresEngine = engine{"postgres", pgtest.NewDatabase} // skipped without COLLAB_TEST_POSTGRES
	engines        = []engine{sqliteEngine, postgresEngine}
)

// forEachEngine runs f as a subtest on each engine.
func forEachEngine(t *testing.T, f func(t *testing.T, e engine)) {
	t.Helper()
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) { f(t, e) })
	}
}

// open opens a new ledger on e with a test clock, closed when t ends, and
// returns where it is (to open it again, from another Store or process).
func (e engine) open(t testing.TB, opts ...Option) (*Store, *clocktest.Clock, string) {
	t.Helper()
	clock := clocktest.New()
	db := e.newDB(t)
	s, err := Open(db, append([]Option{WithClock(clock), WithMaxTTL(168 * time.Hour)}, opts...)...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, clock, db
}

// replica opens another Store on the ledger at db, on clock: another
// replica of a sidecar. It is closed when t ends.
func replica(t testing.TB, db string, clock *clocktest.Clock) *Store {
	t.Helper()
	s, err := Open(db, WithClock(clock), WithMaxTTL(168*time.Hour))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// openTestStore opens a new SQLite ledger, for the tests about SQLite.
func openTestStore(t testing.TB, opts ...Option) (*Store, *clocktest.Clock, string) {
	t.Helper()
	return sqliteEngine.open(t, opts...)
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

// reopenFrom takes the SQLite ledger s (at path) back to an older schema
// with the statements given, closes it and opens it again, as an upgrade
// does; the new Store is closed when t ends.
func reopenFrom(t *testing.T, s *Store, path string, stmts ...string) *Store {
	t.Helper()
	for _, q := range stmts {
		if err := s.db.Exec(q).Error; err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	_ = s.Close()
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s2.Close() })
	return s2
}
