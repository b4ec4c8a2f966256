package models

import (
	"context"
	"sync"
	"testing"
	"time"
)

// listening waits until n connections of the database LISTEN on the
// changes channel (a NOTIFY sent before is not delivered to them).
func listening(t *testing.T, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var got int
		err := s.db.Raw("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query = ?", listenSQL).Scan(&got).Error
		if err != nil {
			t.Fatal(err)
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d listeners after 10 s, want %d", got, n)
		}
		time.Sleep(10 * time.Millisecond) // polling readiness, with a deadline
	}
}

// follow runs s.Changes until t ends, and returns what it reports.
func follow(t *testing.T, s *Store) <-chan Key {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan Key, 64)
	done := make(chan error, 1)
	go func() { done <- s.Changes(ctx, func(k Key) { got <- k }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Changes: %v", err)
		}
	})
	return got
}

func expectChange(t *testing.T, got <-chan Key, want Key) {
	t.Helper()
	select {
	case k := <-got:
		if k != want {
			t.Fatalf("change %+v, want %+v", k, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no change %+v within 10 s", want)
	}
}

// A change announced through one Store reaches the subscribers of
// another Store on the same database (a replica), its own too; a payload
// that is not a change is ignored.
func TestChangesReachOtherReplicas(t *testing.T) {
	a, _, db := postgresEngine.open(t)
	b, err := Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	fromB, fromA := follow(t, b), follow(t, a)
	listening(t, a, 2)
	if err := a.db.Exec("SELECT pg_notify(?, 'junk'), pg_notify(?, '1:-2')", changesChannel, changesChannel).Error; err != nil {
		t.Fatal(err)
	}
	a.Announce(Key{RepoID: 7, Issue: 3})
	expectChange(t, fromB, Key{RepoID: 7, Issue: 3})
	expectChange(t, fromA, Key{RepoID: 7, Issue: 3})
	a.Announce(Key{RepoID: 7})
	expectChange(t, fromB, Key{RepoID: 7})
	a.Announce(Everything)
	expectChange(t, fromB, Everything)
}

// When the listening connection is lost, Changes connects again and then
// reports Everything: what changed meanwhile cannot be told.
func TestChangesAfterReconnect(t *testing.T) {
	a, _, db := postgresEngine.open(t)
	b, err := Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got := follow(t, b)
	listening(t, a, 1)
	if err := a.db.Exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND query = ?", listenSQL).Error; err != nil {
		t.Fatal(err)
	}
	expectChange(t, got, Everything)
	listening(t, a, 1)
	a.Announce(Key{RepoID: 2, Issue: 9})
	expectChange(t, got, Key{RepoID: 2, Issue: 9})
}

// A lost listening connection is counted and told, once, with its
// error; Changes' own end is neither.
func TestLostListenIsCountedAndTold(t *testing.T) {
	a, _, db := postgresEngine.open(t)
	var mu sync.Mutex
	var told []error
	b, err := Open(db, WithListenLost(func(err error) { mu.Lock(); told = append(told, err); mu.Unlock() }))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan Key, 64)
	done := make(chan error, 1)
	go func() { done <- b.Changes(ctx, func(k Key) { got <- k }) }()
	listening(t, a, 1)
	if n := b.ListensLost(); n != 0 {
		t.Fatalf("%d listens lost before any was", n)
	}
	if err := a.db.Exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND query = ?", listenSQL).Error; err != nil {
		t.Fatal(err)
	}
	expectChange(t, got, Everything)
	listening(t, a, 1)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Changes: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := b.ListensLost(); n != 1 || len(told) != 1 || told[0] == nil {
		t.Fatalf("%d listens lost, told %v; want 1, told with its error", n, told)
	}
	if n := a.ListensLost(); n != 0 {
		t.Fatalf("a store that never listened lost %d", n)
	}
}

// On SQLite, one process, there is nobody else to tell.
func TestChangesOnSQLiteAreNoOps(t *testing.T) {
	s, _, _ := sqliteEngine.open(t)
	s.Announce(Key{RepoID: 1, Issue: 1})
	if err := s.Changes(context.Background(), func(Key) { t.Error("a change on SQLite") }); err != nil {
		t.Fatal(err)
	}
}

func TestChangePayloads(t *testing.T) {
	for _, k := range []Key{{RepoID: 1, Issue: 2}, {RepoID: 9_007_199_254_740_993}, Everything} {
		if got, ok := parseChange(changePayload(k)); !ok || got != k {
			t.Errorf("%+v: payload %q reads back as %+v, %v", k, changePayload(k), got, ok)
		}
	}
	for _, p := range []string{"", "1", "x:1", "1:x", "0:1", "1:0", "-1:2", "1:2:3"} {
		if k, ok := parseChange(p); ok {
			t.Errorf("%q read as %+v", p, k)
		}
	}
}
