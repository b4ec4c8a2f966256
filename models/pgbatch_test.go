package models

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// The tests of PostgreSQL's group commit (pgbatch.go). They are about
// PostgreSQL alone: SQLite's batches are write_test.go's, and its one
// writer at a time leaves nothing to lock.

// queuedOn runs write calls one after another into the queues of stores
// while the test holds every write slot of each, so that they end up
// queued in this order; then it gives the slots of all stores back at
// once and returns the calls' errors. call[i] runs on stores[on[i]].
func queuedOn(t *testing.T, stores []*Store, on []int, calls ...func() error) []error {
	t.Helper()
	for _, s := range stores {
		for range cap(s.writeSlot) {
			s.writeSlot <- struct{}{}
		}
	}
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	want := make([]int, len(stores))
	for i, call := range calls {
		wg.Go(func() { errs[i] = call() })
		want[on[i]]++
		waitQueue(t, stores[on[i]], want[on[i]])
	}
	for _, s := range stores {
		for range cap(s.writeSlot) {
			<-s.writeSlot
		}
	}
	wg.Wait()
	return errs
}

// oneLeader makes s decide everything queued in one batch: with several
// leaders, each takes its share of the queue.
func oneLeader(s *Store) { s.writeSlot = make(chan struct{}, 1) }

// In one batch, a refusal, a failure of the member's own (a Go error, and
// a constraint the database enforces) leave no trace of what they wrote
// and change nothing of the others' outcomes, which commit together in
// one transaction. The database refuses one write when a later member
// reads the same issue (erin, who must see #7 as never written), and
// one with the batch's COMMIT (the member after it, frank, commits).
func TestPostgresBatchMembersFailAlone(t *testing.T) {
	s, _, _ := postgresEngine.open(t)
	oneLeader(s)
	boom := errors.New("boom")
	writeThen := func(issue int64, err error) func() error {
		return func() error {
			return s.write(bg, issueScope(Key{RepoID: 1, Issue: issue}), func(tx *gorm.DB, now int64) error {
				if e := store(tx, leaseRow{RepoID: 1, Issue: issue, Holder: new("mallory"), HolderID: new(int64(66)),
					Kind: KindIssue, Token: 1, AcquiredAt: now}, false); e != nil {
					return e
				}
				return err
			})
		}
	}
	// A second row for held, which an earlier member holds: the primary
	// key refuses it, in the database, after the member's write to fresh.
	duplicate := func(held, fresh int64) func() error {
		return func() error {
			return s.write(bg, scope{keys: []Key{{RepoID: 1, Issue: held}, {RepoID: 1, Issue: fresh}}}, func(tx *gorm.DB, now int64) error {
				if e := store(tx, leaseRow{RepoID: 1, Issue: fresh, Holder: new("mallory"), Kind: KindIssue, Token: 1, AcquiredAt: now}, false); e != nil {
					return e
				}
				return store(tx, leaseRow{RepoID: 1, Issue: held, Holder: new("mallory"), Kind: KindIssue, Token: 1, AcquiredAt: now}, false)
			})
		}
	}
	acquire := func(issue int64, name string) func() error {
		return func() error {
			_, err := s.Acquire(bg, Key{RepoID: 1, Issue: issue}, who(name), 0, Observed{Kind: KindIssue})
			return err
		}
	}
	before := s.txns.Load()
	errs := queuedOn(t, []*Store{s}, make([]int, 10),
		acquire(1, "alice"), writeThen(2, &HeldError{Holder: "x"}), acquire(3, "bob"),
		writeThen(5, boom), duplicate(1, 7), acquire(6, "carol"), acquire(1, "dave"),
		acquire(7, "erin"), duplicate(3, 8), acquire(9, "frank"))
	// One without savepoints around the members' writes, rolled back
	// when the database refused one of them; one with them.
	if n := s.txns.Load() - before; n != 2 {
		t.Fatalf("%d transactions for one batch, want 2", n)
	}
	var held *HeldError
	switch {
	case errs[0] != nil || errs[2] != nil || errs[5] != nil || errs[7] != nil || errs[9] != nil:
		t.Fatalf("the others' acquires: %v", errs)
	case !errors.Is(errs[1], ErrHeld):
		t.Fatalf("refusal in a batch: %v", errs[1])
	case !errors.Is(errs[3], boom):
		t.Fatalf("failure in a batch: %v", errs[3])
	case errs[4] == nil || isRefusal(errs[4]) || errs[8] == nil || isRefusal(errs[8]):
		t.Fatalf("writes the primary key refuses: %v, %v", errs[4], errs[8])
	case !errors.As(errs[6], &held) || held.Holder != "alice":
		t.Fatalf("acquire after alice's in the same batch: %v, want held by alice", errs[6])
	}
	wantHolders(t, s, map[int64]string{1: "alice", 2: "", 3: "bob", 5: "", 6: "carol", 7: "erin", 8: "", 9: "frank"})
	for _, n := range []int64{1, 7} {
		if h, err := s.History(bg, Key{RepoID: 1, Issue: n}); err != nil || len(h) != 1 || h[0].Token != 1 {
			t.Fatalf("history of #%d: %+v, %v", n, h, err)
		}
	}
}

// A member whose locks another transaction holds does not make its batch
// wait: the members before it commit, and it goes back to the queue with
// those after it, in their order, to wait for its locks at the head of a
// next batch.
func TestPostgresBatchMemberWhoseLockIsTakenWaitsItsTurn(t *testing.T) {
	s, _, db := postgresEngine.open(t, WithBusyTimeout(20*time.Second))
	oneLeader(s)
	other, err := pgx.Connect(bg, db)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(bg)
	hold, err := other.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hold.Rollback(bg) }()
	if _, err := hold.Exec(bg, "SELECT pg_advisory_xact_lock($1, $2)", lockIssue, lockKey(1, 2)); err != nil {
		t.Fatal(err)
	}
	acquire := func(issue int64, name string) func() error {
		return func() error {
			_, err := s.Acquire(bg, Key{RepoID: 1, Issue: issue}, who(name), 0, Observed{Kind: KindIssue})
			return err
		}
	}
	// Once alice's acquire is committed, bob's and carol's must still
	// wait; then the other transaction lets go of #2.
	released := make(chan struct{})
	go func() {
		defer close(released)
		defer func() { _ = hold.Commit(bg) }()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if cur, err := s.Current(bg, Key{RepoID: 1, Issue: 1}); err != nil || cur != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Error("alice's acquire waited for bob's lock")
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
		for _, n := range []int64{2, 3} {
			if cur, err := s.Current(bg, Key{RepoID: 1, Issue: n}); err != nil || cur != nil {
				t.Errorf("#%d while bob's lock was held: %+v, %v", n, cur, err)
			}
		}
	}()
	if errs := queuedOn(t, []*Store{s}, make([]int, 3), acquire(1, "alice"), acquire(2, "bob"), acquire(3, "carol")); errors.Join(errs...) != nil {
		t.Fatal(errs)
	}
	<-released
	wantHolders(t, s, map[int64]string{1: "alice", 2: "bob", 3: "carol"})
}

// Two replicas' batches (two Stores on one database) that claim the same
// issues, in opposite orders, all at once: each issue has one winner,
// whom every other claim names, and no claim waits for its deadline
// (batches that each held one issue and waited for the other's would).
func TestPostgresBatchesOfTwoReplicasHaveOneWinner(t *testing.T) {
	a, clock, db := postgresEngine.open(t, WithBusyTimeout(20*time.Second))
	b, err := Open(db, WithClock(clock), WithMaxTTL(168*time.Hour), WithBusyTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	stores := []*Store{a, b}
	oneLeader(a)
	oneLeader(b)
	for round := range 5 {
		k1, k2 := Key{RepoID: 1, Issue: int64(2*round + 1)}, Key{RepoID: 1, Issue: int64(2*round + 2)}
		var on []int
		var keys []Key
		var names []string
		var calls []func() error
		for i := range 16 {
			s, k := i%2, k1
			if (i/2)%2 == s {
				k = k2 // replica 0 claims k1, k2, k1, …; replica 1 k2, k1, k2, …
			}
			name := fmt.Sprintf("agent%d", i)
			on, keys, names = append(on, s), append(keys, k), append(names, name)
			calls = append(calls, func() error {
				_, err := stores[s].Acquire(bg, k, who(name), 0, Observed{Kind: KindIssue})
				return err
			})
		}
		errs := queuedOn(t, stores, on, calls...)
		for _, k := range []Key{k1, k2} {
			cur, err := a.Current(bg, k)
			if err != nil || cur == nil {
				t.Fatalf("round %d, #%d: %+v, %v; claims: %v", round, k.Issue, cur, err, errs)
			}
			var winners []string
			for i, err := range errs {
				if keys[i] != k {
					continue
				}
				var held *HeldError
				switch {
				case err == nil:
					winners = append(winners, names[i])
				case !errors.As(err, &held) || held.Holder != cur.Holder.Login:
					t.Fatalf("round %d, #%d: claim %d: %v, want held by %s", round, k.Issue, i, err, cur.Holder.Login)
				}
			}
			h, err := b.History(bg, k)
			if len(winners) != 1 || winners[0] != cur.Holder.Login || err != nil || len(h) != 1 {
				t.Fatalf("round %d, #%d: winners %v, history %+v (%v), held by %s", round, k.Issue, winners, h, err, cur.Holder.Login)
			}
		}
	}
}

// roundTrips counts the round trips of the ledger's connections to the
// server: each time a connection sends after it received (or first
// sends), it starts one. It counts at the socket, so pipelines, prepared
// statements and anything else pgx sends are counted alike.
type roundTrips struct{ n atomic.Int64 }

// tripConn is one connection whose round trips rt counts.
type tripConn struct {
	net.Conn
	rt   *roundTrips
	read atomic.Bool // received since it last sent
}

func (c *tripConn) Write(p []byte) (int, error) {
	if c.read.Swap(false) {
		c.rt.n.Add(1)
	}
	return c.Conn.Write(p)
}

func (c *tripConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.read.Store(true)
	}
	return n, err
}

// traced points s at connections that count their round trips.
func traced(t testing.TB, s *Store) *roundTrips {
	t.Helper()
	rt := &roundTrips{}
	cfg := s.pgCfg.Copy()
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc := &tripConn{Conn: c, rt: rt}
		tc.read.Store(true)
		return tc, nil
	}
	sqlDB := stdlib.OpenDB(*cfg)
	sqlDB.SetMaxOpenConns(pgMaxConns)
	sqlDB.SetMaxIdleConns(pgMaxConns)
	t.Cleanup(func() { _ = sqlDB.Close() })
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), &gorm.Config{
		Logger: logger.Default.LogMode(logger.Silent), SkipDefaultTransaction: true, NowFunc: s.db.NowFunc})
	if err != nil {
		t.Fatal(err)
	}
	s.db = db
	return rt
}

// A write costs two round trips: one for BEGIN, its locks, the clock and
// the rows of its issue, one for its writes and COMMIT (they were 7, 6
// and 6 for an acquire, a renew and a release with a statement each,
// then 3). A batch costs the same two, whatever its size, and one more
// for each member that decides after another about the same issue: it
// reads the issue's rows once the other wrote them. Counted at the
// socket, once every statement is prepared on the connections used.
func TestPostgresRoundTripsPerWrite(t *testing.T) {
	s, _, _ := postgresEngine.open(t)
	oneLeader(s)
	rt := traced(t, s)
	k := Key{RepoID: 1, Issue: 1}
	count := func(op func() error) int64 {
		t.Helper()
		before := rt.n.Load()
		if err := op(); err != nil {
			t.Fatal(err)
		}
		return rt.n.Load() - before
	}
	acquire := func() error {
		_, err := s.Acquire(bg, k, who("alice"), time.Minute, Observed{Kind: KindIssue})
		return err
	}
	renew := func() error { _, err := s.Renew(bg, k, who("alice"), time.Minute); return err }
	release := func() error { _, err := s.Release(bg, k, who("alice")); return err }
	for range 3 { // every statement prepared, on the one connection used
		for _, op := range []func() error{acquire, renew, release} {
			count(op)
		}
	}
	for _, c := range []struct {
		name string
		op   func() error
		want int64
	}{{"acquire", acquire, 2}, {"renew", renew, 2}, {"release", release, 2}} {
		if n := count(c.op); n != c.want {
			t.Errorf("%s: %d round trips, want %d", c.name, n, c.want)
		}
	}
	// Batches of eight: on eight issues, then four on one issue and four
	// on others.
	batch := func(issues ...int64) (int64, []error) {
		t.Helper()
		var calls []func() error
		for i, n := range issues {
			calls = append(calls, func() error {
				_, err := s.Acquire(bg, Key{RepoID: 2, Issue: n}, who(fmt.Sprint("agent", i)), time.Minute, Observed{Kind: KindIssue})
				return err
			})
		}
		before, txns := rt.n.Load(), s.txns.Load()
		errs := queuedOn(t, []*Store{s}, make([]int, len(calls)), calls...)
		if n := s.txns.Load() - txns; n != 1 {
			t.Fatalf("%d transactions for one batch", n)
		}
		return rt.n.Load() - before, errs
	}
	batch(1, 2, 3, 4, 5, 6, 7, 8) // prepared
	if n, errs := batch(11, 12, 13, 14, 15, 16, 17, 18); n != 2 || errors.Join(errs...) != nil {
		t.Errorf("a batch of eight on eight issues: %d round trips (%v), want 2", n, errs)
	}
	n, errs := batch(21, 22, 21, 23, 21, 24, 21, 25)
	for i, err := range errs {
		var held *HeldError
		if i%2 == 0 && i > 0 && (!errors.As(err, &held) || held.Holder != "agent0") || (i%2 == 1 || i == 0) && err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
	}
	if n != 5 {
		t.Errorf("a batch of eight, four on one issue: %d round trips, want 5", n)
	}
}
