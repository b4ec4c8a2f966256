// Package leasetest builds the world every unit test of the lease service
// and its transports runs in: a real SQLite ledger in the test's
// temporary directory, the fake forge of plugin/forgetest, a fake clock
// that both read, and the lease service over them, with the change bus
// and the live hub it is built over (as the sidecar's serve builds them).
// It also has the one synchronised log buffer the tests share.
//
// It is for tests only: the unit tests, and the harness of the end-to-end
// tests in integration/ (for LogBuffer); the sidecar's binaries never
// import it.
package leasetest

import (
	"bytes"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/changes"
	"github.com/collab-lease/collab-lease/plugin/clocktest"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/forgetest"
	"github.com/collab-lease/collab-lease/plugin/lease"
	"github.com/collab-lease/collab-lease/plugin/live"
)

// MaxTTL is the ledger's maximum lease of a World (the sidecar's default).
const MaxTTL = lease.DefaultMaxTTL

// World is one sidecar's parts for a test.
type World struct {
	Forge   *forgetest.Forge
	Clock   *clocktest.Clock
	Ledger  *models.Store
	Service *lease.Service
	// Bus and Hub are the change bus the service publishes on and the
	// live hub its streams come from.
	Bus *changes.Bus
	Hub *live.Hub
	// Dir is the test's directory that holds the ledger's file.
	Dir string
}

// Options shape a World; the zero value is a fresh forge with nobody in
// it, a ledger at Dir/collab.db, and a service with its defaults.
type Options struct {
	// Forge is the forge to use (nil: an empty forgetest.New()). Its
	// clock is set to the World's.
	Forge *forgetest.Forge
	// Ledger and Service are added to the options the World passes
	// models.Open and lease.NewService (its clock and timers first).
	Ledger  []models.Option
	Service []lease.Option
	// Live bounds the live hub's feeds and the service's streams.
	Live live.Options
	// DB is the ledger's file name in Dir ("" = collab.db).
	DB string
}

// New builds a World for t; everything it opened closes when t ends.
func New(t testing.TB, o Options) *World {
	t.Helper()
	w := &World{Forge: o.Forge, Clock: clocktest.New(), Dir: t.TempDir()}
	if w.Forge == nil {
		w.Forge = forgetest.New()
	}
	w.Forge.SetClock(w.Clock.Now)
	db := o.DB
	if db == "" {
		db = "collab.db"
	}
	var err error
	w.Ledger, err = models.Open(filepath.Join(w.Dir, db), append([]models.Option{models.WithClock(w.Clock), models.WithMaxTTL(MaxTTL)}, o.Ledger...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Ledger.Close() })
	svc := newService(t, w.Forge, w.Ledger, w.Clock, o.Live, o.Service...)
	w.Service, w.Bus, w.Hub = svc.Service, svc.Bus, svc.Hub
	return w
}

// Service is a lease service with the change bus and the live hub it was
// built over: one sidecar's.
type Service struct {
	*lease.Service
	Bus *changes.Bus
	Hub *live.Hub
}

// Clock is what a service's clock and timers are read from: a
// clocktest.Clock, or RealClock.
type Clock interface {
	Now() time.Time
	After(d time.Duration) (<-chan time.Time, func() bool)
}

// RealClock is the system's clock and timers.
type RealClock struct{}

// Now is time.Now.
func (RealClock) Now() time.Time { return time.Now() }

// After is changes.RealAfter.
func (RealClock) After(d time.Duration) (<-chan time.Time, func() bool) { return changes.RealAfter(d) }

// NewService returns another lease service over the World's forge and
// ledger, on its clock, with a bus and a hub of its own (a sidecar
// restarted on the same ledger file, or another replica on it).
func (w *World) NewService(t testing.TB, opts ...lease.Option) *Service {
	t.Helper()
	return NewService(t, w.Forge, w.Ledger, w.Clock, opts...)
}

// NewService returns a lease service over f and l, with a change bus and
// a live hub of its own, all of whose clocks and timers are c's.
func NewService(t testing.TB, f lease.Forge, l lease.Ledger, c Clock, opts ...lease.Option) *Service {
	t.Helper()
	return newService(t, f, l, c, live.Options{}, opts...)
}

// newService is NewService with the live hub bounded by lo. It builds the
// parts in serve's order: the bus, the hub on it, then the service.
func newService(t testing.TB, f lease.Forge, l lease.Ledger, c Clock, lo live.Options, opts ...lease.Option) *Service {
	t.Helper()
	bus := changes.New(c.Now, c.After)
	hub := live.New(l, bus, c.Now, c.After, lo)
	svc, err := lease.NewService(f, l, bus, hub, append([]lease.Option{lease.WithClock(c.Now), lease.WithTimer(c.After)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return &Service{Service: svc, Bus: bus, Hub: hub}
}

// As is the viewer with this login, as the World's forge knows it.
func (w *World) As(login string) lease.Viewer {
	return lease.Viewer{User: w.Forge.User(login)}
}

// User is the forge's account with this login; it fails t if there is none.
func (w *World) User(t testing.TB, login string) forge.User {
	t.Helper()
	u := w.Forge.User(login)
	if u.ID == 0 {
		t.Fatalf("the forge has no account %q", login)
	}
	return u
}

// Acquire claims repoID#issue for login straight in the ledger (no forge,
// no access check): a fixture for the reads under test.
func (w *World) Acquire(t testing.TB, repoID, issue int64, login string, ttl time.Duration) models.Lease {
	t.Helper()
	u := w.User(t, login)
	l, err := w.Ledger.Acquire(t.Context(), models.Key{RepoID: repoID, Issue: issue}, models.Holder{ID: u.ID, Login: u.Login}, ttl, models.Observed{Kind: models.KindIssue})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// LogBuffer is a bytes.Buffer that several goroutines may write (a
// server's logger) while a test reads it.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Reset forgets what was written so far.
func (b *LogBuffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Reset()
}

// Acme is the forge most of the lease service's tests run against:
//
//   - alice and bob write acme/widgets (ID 1, public) and acme/tools
//     (ID 3, private); reader reads both; dave may write only the issues
//     of acme/tools; eve writes neither; alice also writes acme/secret
//     (ID 2, private);
//   - acme/widgets and acme/tools have issue 1, pull request 2, closed
//     issue 3 and issue 4; acme/secret has issue 1;
//   - each account has an SSH key "SHA256:<login>".
func Acme() *forgetest.Forge {
	f := forgetest.New()
	for _, u := range []string{"alice", "bob", "reader", "dave", "eve"} {
		f.AddUser(u)
		f.AddKey(u, "SHA256:"+u)
	}
	f.AddRepo("acme/widgets", 1, false)
	f.AddRepo("acme/tools", 3, true)
	f.AddRepo("acme/secret", 2, true)
	for _, r := range []string{"acme/widgets", "acme/tools"} {
		f.Grant(r, "alice", forgetest.Write)
		f.Grant(r, "bob", forgetest.Write)
		f.Grant(r, "reader", forgetest.Read)
		f.AddIssue(r, 1, false, false)
		f.AddIssue(r, 2, true, false) // a pull request
		f.AddIssue(r, 3, false, true) // closed
		f.AddIssue(r, 4, false, false)
	}
	f.Grant("acme/tools", "dave", forgetest.IssuesOnly)
	f.Grant("acme/secret", "alice", forgetest.Write)
	f.AddIssue("acme/secret", 1, false, false)
	return f
}

// WaitFor polls cond until it holds, and fails t if it does not within
// 10 seconds: for what happens on another goroutine (a woken waiter, a
// posted status), which a test must not sleep for.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
