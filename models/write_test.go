package models

import (
	"context"
	"errors"
	"testing"
	"time"

	"gorm.io/gorm"
)

// These tests are about SQLite's group commit (write.go). PostgreSQL's,
// with its locks, has its own tests in pgbatch_test.go.

// queued runs write calls one after another into s's queue while the test
// holds the write slot, so that they all end up in one batch, in this
// order, once the slot is given back. It returns their errors.
func queued(t *testing.T, s *Store, fns ...func() error) []error {
	t.Helper()
	s.writeSlot <- struct{}{} // as if a writer were committing
	errs := make([]error, len(fns))
	done := make(chan int, len(fns))
	for i, fn := range fns {
		go func() {
			errs[i] = fn()
			done <- i
		}()
		waitQueue(t, s, i+1)
	}
	<-s.writeSlot
	for range fns {
		<-done
	}
	return errs
}

func waitQueue(t *testing.T, s *Store, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		got := len(s.queue)
		s.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue has %d writes, want %d", got, n)
		}
	}
}

// Writes queued behind another are decided in arrival order, in one
// transaction: the first acquirer wins, the later ones are told who holds
// the lease, and the history records one tenure.
func TestBatchedWritesDecideInArrivalOrder(t *testing.T) {
	s, _, _ := openTestStore(t)
	acquire := func(name string) func() error {
		return func() error {
			_, err := s.Acquire(bg, k42, who(name), time.Minute, Observed{Kind: KindIssue})
			return err
		}
	}
	errs := queued(t, s, acquire("alice"), acquire("bob"), acquire("alice"), acquire("carol"))
	var held *HeldError
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("alice's acquires: %v, %v", errs[0], errs[2])
	}
	for _, err := range []error{errs[1], errs[3]} {
		if !errors.As(err, &held) || held.Holder != "alice" {
			t.Fatalf("later acquirer: %v, want held by alice", err)
		}
	}
	h, err := s.History(bg, k42)
	if err != nil || len(h) != 2 || h[0].Action != ActionAcquire || h[1].Action != ActionReacquire || h[1].Token != 1 {
		t.Fatalf("history %+v, %v", h, err)
	}
}

// A refusal inside a batch leaves no trace of what its decision wrote, and
// a member that fails outright sends the others to run on their own: they
// still succeed, and the failed one writes nothing.
func TestBatchMembersFailAlone(t *testing.T) {
	s, _, _ := openTestStore(t)
	boom := errors.New("boom")
	writeThen := func(issue int64, err error) func() error {
		return func() error {
			return s.write(bg, issueScope(Key{RepoID: 1, Issue: issue}), func(tx *gorm.DB, now int64) error {
				h := "mallory"
				if e := tx.Create(&leaseRow{RepoID: 1, Issue: issue, Holder: &h, Token: 1, AcquiredAt: now}).Error; e != nil {
					return e
				}
				return err
			})
		}
	}
	acquire := func(issue int64, name string) func() error {
		return func() error {
			_, err := s.Acquire(bg, Key{RepoID: 1, Issue: issue}, who(name), 0, Observed{Kind: KindIssue})
			return err
		}
	}
	errs := queued(t, s, acquire(1, "alice"), writeThen(2, &HeldError{Holder: "x"}), acquire(3, "bob"))
	if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], ErrHeld) {
		t.Fatalf("refusal in a batch: %v", errs)
	}
	// Refusals one after another on one issue: each is rolled back to its
	// own savepoint before the next runs (else the second insert of #7
	// would break its key and fail outright), and the write after them
	// sees #7 as it was.
	errs = queued(t, s, writeThen(7, &HeldError{Holder: "x"}), writeThen(7, &HeldError{Holder: "y"}), acquire(7, "carol"))
	if !errors.Is(errs[0], ErrHeld) || !errors.Is(errs[1], ErrHeld) || errs[2] != nil {
		t.Fatalf("refusals in a row in a batch: %v", errs)
	}
	errs = queued(t, s, acquire(4, "alice"), writeThen(5, boom), acquire(6, "bob"))
	if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], boom) {
		t.Fatalf("failure in a batch: %v", errs)
	}
	wantHolders(t, s, map[int64]string{1: "alice", 2: "", 3: "bob", 4: "alice", 5: "", 6: "bob", 7: "carol"})
}

// A write still waiting in the queue when its deadline passes is answered
// ErrBusy at once and never runs.
func TestQueuedWritePastItsDeadlineIsBusy(t *testing.T) {
	s, _, _ := openTestStore(t)
	s.writeSlot <- struct{}{}
	ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.Acquire(ctx, k42, who("alice"), 0, Observed{Kind: KindIssue})
	if !errors.Is(err, ErrBusy) || time.Since(start) > 5*time.Second {
		t.Fatalf("acquire stuck in the queue: %v after %s", err, time.Since(start))
	}
	waitQueue(t, s, 0)
	<-s.writeSlot
	if cur, _ := s.Current(bg, k42); cur != nil {
		t.Fatalf("a write that gave up ran anyway: %+v", cur)
	}
	if l := mustAcquire(t, s, k42, "bob", 0); l.Token != 1 {
		t.Fatalf("next acquire: %+v", l)
	}
}

// A member whose deadline passes while the batch runs does not abort the
// batch (which would send every other member to a transaction of its own
// while the slot is held): it alone is answered ErrBusy, having written
// nothing, and the others commit together, in one transaction.
func TestExpiringMemberDoesNotAbortItsBatch(t *testing.T) {
	s, _, _ := openTestStore(t)
	short, cancel := context.WithTimeout(bg, 100*time.Millisecond)
	defer cancel()
	// The first member decides while the expiring member's own deadline
	// (its write's context, a child of short) runs out: it waits on that
	// context itself, since a parent's Done closes before its children's.
	var expired <-chan struct{}
	fns := []func() error{
		func() error {
			return s.write(bg, issueScope(Key{RepoID: 1, Issue: 1}), func(tx *gorm.DB, now int64) error {
				<-expired
				return store(tx, leaseRow{RepoID: 1, Issue: 1, Holder: new("alice"), HolderID: new(int64(7)), Kind: KindIssue, Token: 1, AcquiredAt: now}, false)
			})
		},
		func() error {
			_, err := s.Acquire(short, Key{RepoID: 1, Issue: 2}, who("bob"), 0, Observed{Kind: KindIssue})
			return err
		},
		func() error {
			_, err := s.Acquire(bg, Key{RepoID: 1, Issue: 3}, who("carol"), 0, Observed{Kind: KindIssue})
			return err
		},
	}
	before := s.txns.Load()
	s.writeSlot <- struct{}{} // as if a writer were committing
	errs := make([]error, len(fns))
	done := make(chan int, len(fns))
	for i, fn := range fns {
		go func() {
			errs[i] = fn()
			done <- i
		}()
		waitQueue(t, s, i+1)
	}
	s.mu.Lock()
	expired = s.queue[1].ctx.Done()
	s.mu.Unlock()
	<-s.writeSlot // the batch starts
	for range fns {
		<-done
	}
	if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], ErrBusy) {
		t.Fatalf("batch with an expiring member: %v, want nil, ErrBusy, nil (%d transactions)", errs, s.txns.Load()-before)
	}
	if got := s.txns.Load() - before; got != 1 {
		t.Fatalf("the batch took %d transactions, want 1", got)
	}
	for issue, want := range map[int64]bool{1: true, 2: false, 3: true} {
		if cur, _ := s.Current(bg, Key{RepoID: 1, Issue: issue}); (cur != nil) != want {
			t.Errorf("#%d leased %v, want %v", issue, cur != nil, want)
		}
	}
}

// wantHolders checks who holds each issue of repository 1 ("": free).
func wantHolders(t *testing.T, s *Store, want map[int64]string) {
	t.Helper()
	for issue, login := range want {
		cur, err := s.Current(bg, Key{RepoID: 1, Issue: issue})
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if cur != nil {
			got = cur.Holder.Login
		}
		if got != login {
			t.Errorf("#%d held by %q, want %q (\"\" = free)", issue, got, login)
		}
	}
}
