package models

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"

	"github.com/collab-lease/collab-lease/models/pgtest"
)

// The tests of what is PostgreSQL's own: its write path (locks, retries,
// errors) and its sessions. Every other test of the ledger runs on it
// too (forEachEngine).

// A COMMIT on the ledger's connections returns only once flushed, even
// where the database's default says otherwise.
func TestPostgresSessionsCommitDurably(t *testing.T) {
	db := pgtest.NewDatabase(t)
	s, err := Open(db)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(mustParse(t, db).Path, "/")
	if err := s.db.Exec("ALTER DATABASE " + name + " SET synchronous_commit = off").Error; err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	s, err = Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got string
	if err := s.db.Raw("SHOW synchronous_commit").Scan(&got).Error; err != nil || got != "on" {
		t.Fatalf("synchronous_commit = %q (%v), want on", got, err)
	}
}

// Counting the live leases (every metrics scrape) searches the partial
// index rather than scanning a table that keeps a row for every issue
// ever claimed: with sequential scans made as costly as PostgreSQL can
// make them, its plans still use no other way.
func TestPostgresCountLiveSearchesTheIndex(t *testing.T) {
	s, clock, _ := postgresEngine.open(t)
	mustAcquire(t, s, Key{RepoID: 1, Issue: 1}, "alice", 0)
	mustAcquire(t, s, Key{RepoID: 1, Issue: 2}, "bob", time.Minute)
	mustAcquire(t, s, Key{RepoID: 1, Issue: 3}, "carol", time.Second)
	clock.Advance(time.Minute)
	if n, err := s.CountLive(bg); err != nil || n != 1 {
		t.Fatalf("CountLive = %d, %v; want 1", n, err)
	}
	var plan []string
	err := s.db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec("SET LOCAL enable_seqscan = off").Error; err != nil {
			return err
		}
		return tx.Raw("EXPLAIN "+countLiveSQL, s.now()).Scan(&plan).Error
	})
	if err != nil {
		t.Fatal(err)
	}
	p := strings.Join(plan, "\n")
	if strings.Contains(p, "Seq Scan") || !strings.Contains(p, "idx_leases_held_expiry") {
		t.Fatalf("CountLive's plan does not search idx_leases_held_expiry alone:\n%s", p)
	}
}

// A write locks what it decides about, and nothing else: while another
// transaction holds issue #42, a write on #43 goes ahead (it would
// otherwise wait for as long as the lock is held), and one on #42, or on
// the whole repository (next), waits, and gives up busy at its deadline,
// having written nothing.
func TestPostgresWritesWaitOnlyForTheirScope(t *testing.T) {
	s, _, _ := postgresEngine.open(t, WithBusyTimeout(time.Minute))
	tx := s.db.Begin()
	if tx.Error != nil {
		t.Fatal(tx.Error)
	}
	defer tx.Rollback()
	if _, err := lock(tx, issueScope(k42)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(bg, Key{RepoID: 7, Issue: 43}, who("alice"), 0, Observed{Kind: KindIssue}); err != nil {
		t.Fatalf("acquire of another issue while #42 is locked: %v", err)
	}
	if _, err := s.EndSessions(bg, who("bob").ID); err != nil {
		t.Fatalf("a write about an account: %v", err)
	}
	short := func() context.Context {
		ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}
	if _, err := s.Acquire(short(), k42, who("alice"), 0, Observed{Kind: KindIssue}); !errors.Is(err, ErrBusy) {
		t.Fatalf("acquire of the locked issue: %v, want ErrBusy", err)
	}
	cands := []Candidate{{Issue: 44, Observed: Observed{Kind: KindIssue}, Verified: true}}
	if _, err := s.AcquireFirst(short(), 7, cands, who("bob"), 0); !errors.Is(err, ErrBusy) {
		t.Fatalf("next in the repository of the locked issue: %v, want ErrBusy", err)
	}
	tx.Rollback()
	for _, n := range []int64{42, 44} {
		if cur, _ := s.Current(bg, Key{RepoID: 7, Issue: n}); cur != nil {
			t.Fatalf("a write that gave up wrote %+v", cur)
		}
	}
	if l, err := s.AcquireFirst(bg, 7, cands, who("bob"), 0); err != nil || l.Issue != 44 {
		t.Fatalf("next once the lock is gone: %+v %v", l, err)
	}
}

// A transaction that PostgreSQL rolled back to be run again (a
// serialization failure, a deadlock) is run again, and its outcome is the
// second run's.
func TestPostgresRetriesWhatTheServerRolledBack(t *testing.T) {
	s, _, _ := postgresEngine.open(t)
	for i, code := range []string{"40001", "40P01"} {
		// The first run writes #first and fails; the second writes #second.
		first, second := Key{RepoID: 1, Issue: int64(10*i + 1)}, Key{RepoID: 1, Issue: int64(10*i + 2)}
		runs := 0
		before := s.txns.Load()
		err := s.write(bg, repoScope(1), func(tx *gorm.DB, now int64) error {
			runs++
			k := first
			if runs > 1 {
				k = second
			}
			if err := store(tx, leaseRow{RepoID: k.RepoID, Issue: k.Issue, Holder: new("alice"), HolderID: new(int64(7)),
				Kind: KindIssue, Token: 1, AcquiredAt: now}, false); err != nil {
				return err
			}
			if runs == 1 {
				return &pgconn.PgError{Code: code, Message: "injected"}
			}
			return nil
		})
		if err != nil || runs != 2 || s.txns.Load()-before != 2 {
			t.Fatalf("%s: %v after %d runs, %d transactions", code, err, runs, s.txns.Load()-before)
		}
		if cur, _ := s.Current(bg, first); cur != nil {
			t.Fatalf("%s: the rolled-back run's write stayed: %+v", code, cur)
		}
		if cur, _ := s.Current(bg, second); cur == nil {
			t.Fatalf("%s: the second run's write is missing", code)
		}
	}
}

// A server that cannot be reached is ErrUnreachable (a kind of ErrBusy:
// exit 75, HTTP 503), for Open and for every operation, and nothing is
// written; once it answers again, so does the ledger. A server that ended
// the ledger's connections (a restart) costs no operation an error.
func TestPostgresUnreachableServer(t *testing.T) {
	db := pgtest.NewDatabase(t)
	proxy := newTCPProxy(t, mustParse(t, db).Host)
	via := mustParse(t, db)
	via.Host = proxy.addr()
	s, err := Open(via.String(), WithBusyTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustAcquire(t, s, k42, "alice", 0)

	proxy.setDown(true)
	// Where nothing listens, without sslmode, pgx dials twice (TLS, then
	// not): two failures to report, in one line.
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_ = closed.Close()
	nothing := *via
	nothing.Host, nothing.RawQuery = closed.Addr().String(), ""
	for _, u := range []string{via.String(), nothing.String()} {
		if _, err := Open(u); !errors.Is(err, ErrUnreachable) || !errors.Is(err, ErrBusy) || strings.Contains(err.Error(), "\n") {
			t.Fatalf("Open of an unreachable server: %q, want ErrUnreachable, in one line", err)
		}
	}
	if _, err := s.Acquire(bg, Key{RepoID: 7, Issue: 43}, who("bob"), 0, Observed{Kind: KindIssue}); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("acquire with the server unreachable: %v, want ErrUnreachable", err)
	}
	if _, err := s.Current(bg, k42); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("a read with the server unreachable: %v, want ErrUnreachable", err)
	}
	if err := s.Ping(bg); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("ping with the server unreachable: %v, want ErrUnreachable", err)
	}

	proxy.setDown(false)
	if cur, err := s.Current(bg, Key{RepoID: 7, Issue: 43}); err != nil || cur != nil {
		t.Fatalf("after the outage: %+v %v (the acquire during it must have written nothing)", cur, err)
	}
	// The server ends every connection of the ledger (as a restart
	// would): the pool's connections are dead, and the next writes find
	// out, one connection at a time.
	var wg sync.WaitGroup
	for i := range int64(pgMaxConns) {
		wg.Go(func() { mustAcquire(t, s, Key{RepoID: 8, Issue: i + 1}, "bob", 0) })
	}
	wg.Wait()
	proxy.cutConnections()
	for i := range int64(3) {
		if l := mustAcquire(t, s, Key{RepoID: 7, Issue: 44 + i}, "bob", 0); l.Token != 1 {
			t.Fatalf("acquire after the connections were cut: %+v", l)
		}
	}
}

// The comparison of BenchmarkPostgres is between two correct ways: the
// serializable transactions, too, let exactly one of many racers win.
func TestPostgresSerializableTransactionsAlsoHaveOneWinner(t *testing.T) {
	s, _, _ := postgresEngine.open(t)
	s.serializable = true
	for round := int64(1); round <= 5; round++ {
		k := Key{RepoID: 1, Issue: round}
		var wg sync.WaitGroup
		var mu sync.Mutex
		won := 0
		for i := range 16 {
			wg.Go(func() {
				_, err := s.Acquire(bg, k, who(fmt.Sprint("agent-", i)), time.Minute, Observed{Kind: KindIssue})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					won++
				case !errors.Is(err, ErrHeld):
					t.Errorf("agent %d: %v", i, err)
				}
			})
		}
		wg.Wait()
		if won != 1 {
			t.Fatalf("round %d: %d won", round, won)
		}
	}
}

// Processes that open a new ledger at once all succeed, and it ends up at
// the current schema version.
func TestOpenConcurrentlyMigratesOnce(t *testing.T) {
	forEachEngine(t, testOpenConcurrentlyMigratesOnce)
}

func testOpenConcurrentlyMigratesOnce(t *testing.T, e engine) {
	db := e.newDB(t)
	stores := make([]*Store, 6)
	errs := make([]error, len(stores))
	var wg sync.WaitGroup
	for i := range stores {
		wg.Go(func() { stores[i], errs[i] = Open(db) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open %d: %v", i, err)
		}
		defer stores[i].Close()
	}
	q := "PRAGMA user_version"
	if e.name == "postgres" {
		q = "SELECT version FROM collab_schema"
	}
	var versions []int
	if err := stores[0].db.Raw(q).Scan(&versions).Error; err != nil || len(versions) != 1 || versions[0] != schemaVersion {
		t.Fatalf("schema versions %v (%v), want one: %d", versions, err, schemaVersion)
	}
	mustAcquire(t, stores[len(stores)-1], k42, "alice", 0)
}

// What --db accepts, and what is shown of it.
func TestCheckAndRedactDB(t *testing.T) {
	for _, c := range []struct {
		db, shown, bad string // bad: a part of the refusal; "" accepted
	}{
		{"data/collab.db", "data/collab.db", ""},
		{"postgres://collab@db.example.com/collab", "postgres://collab@db.example.com/collab", ""},
		{"postgresql://collab:s3cret@db.example.com:5433/collab?sslmode=verify-full",
			"postgresql://collab:xxxxx@db.example.com:5433/collab?sslmode=verify-full", ""},
		{"postgres://collab@db/collab?password=s3cret&sslmode=require", "postgres://collab@db/collab?password=xxxxx&sslmode=require", ""},
		{"postgres://collab:s3cret@db.example.com:notaport/collab", "", "not a URL"},
		{"postgres://collab:s3cret@db.example.com/", "postgres://collab:xxxxx@db.example.com/", "no database name"},
		{"postgres://collab:s3cret@db.example.com/collab?sslmode=sometimes", "postgres://collab:xxxxx@db.example.com/collab?sslmode=sometimes", "sslmode"},
		{"postgres://collab:s3c#ret@db.example.com/collab", "", "not a URL"},
		{"postgres://db/collab?connect_timeout=soon&password=s3cret", "postgres://db/collab?connect_timeout=soon&password=xxxxx", "connect_timeout"},
		{"", "", "empty"},
	} {
		if c.shown != "" {
			if got := Redact(c.db); got != c.shown {
				t.Errorf("Redact(%q) = %q, want %q", c.db, got, c.shown)
			}
		}
		err := CheckDB(c.db)
		switch {
		case c.bad == "" && err != nil:
			t.Errorf("CheckDB(%q): %v", c.db, err)
		case c.bad != "" && (err == nil || !strings.Contains(err.Error(), c.bad)):
			t.Errorf("CheckDB(%q) = %v, want an error about %s", c.db, err, c.bad)
		case err != nil && (strings.Contains(err.Error(), "s3c") || strings.Contains(err.Error(), "\n")):
			t.Errorf("CheckDB(%q) = %q: shows the password, or is more than one line", c.db, err)
		}
		if strings.Contains(Redact(c.db), "s3c") {
			t.Errorf("Redact(%q) = %q shows the password", c.db, Redact(c.db))
		}
	}
	if _, err := Open("postgres://collab:s3cret@db.example.com:notaport/collab"); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("Open of a bad URL: %v", err)
	}
}

func mustParse(t *testing.T, db string) *url.URL {
	t.Helper()
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// tcpProxy forwards connections to a server, and can play it unreachable
// (refusing every connection, cutting those open) or cut its connections.
type tcpProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]bool
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	t.Cleanup(func() {
		_ = ln.Close()
		p.cutConnections()
	})
	go p.serve()
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			_ = c.Close()
			continue
		}
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			_ = dst.Close()
			_ = src.Close()
		}
		go pipe(up, c)
		go pipe(c, up)
	}
}

func (p *tcpProxy) setDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
	if down {
		p.cutConnections()
	}
}

func (p *tcpProxy) cutConnections() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}
