package lease_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/fence"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/lease"
	"github.com/collab-lease/collab-lease/plugin/leasetest"
)

// The hot path: while the ledger's record of an issue is fresh, acquire,
// renew and release ask the forge nothing about the issue; once it is
// older than the issue TTL, acquire asks again.
func TestAcquireAsksTheForgeOnlyWhileTheLedgerDoesNotKnow(t *testing.T) {
	w := newWorld(t)
	alice := w.as("alice")
	acquire := func() {
		t.Helper()
		if _, err := w.svc.Acquire(bg, alice, "acme", "widgets", 1, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	acquire()
	if got := w.forge.Calls("Issue"); got != 1 {
		t.Fatalf("first acquire asked the forge %d times about the issue, want 1", got)
	}
	if _, err := w.svc.Release(bg, alice, "acme", "widgets", 1); err != nil {
		t.Fatal(err)
	}
	acquire()
	if _, err := w.svc.Renew(bg, alice, "acme", "widgets", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := w.forge.Calls("Issue"); got != 1 {
		t.Fatalf("acquire with a fresh record asked the forge: %d calls, want 1", got)
	}
	w.clock.Advance(lease.DefaultIssueTTL)
	acquire()
	if got := w.forge.Calls("Issue"); got != 2 {
		t.Fatalf("acquire with a stale record: %d calls, want 2", got)
	}
}

// issueReads is a ledger that counts the reads of issue records.
type issueReads struct {
	lease.Ledger
	reads atomic.Int64
}

func (l *issueReads) Issue(ctx context.Context, k models.Key) (*models.IssueState, error) {
	l.reads.Add(1)
	return l.Ledger.Issue(ctx, k)
}

// An acquire of an issue this sidecar saw open lately reads nothing before
// its write; what another replica recorded since (a close, a deletion)
// still decides, with the same answer as without the memory, and the
// forge is asked again once the record it copied has grown stale.
func TestAcquireRemembersOpenIssuesButTheLedgerDecides(t *testing.T) {
	lw := leasetest.New(t, leasetest.Options{Forge: leasetest.Acme()})
	ledger := &issueReads{Ledger: lw.Ledger}
	svc := leasetest.NewService(t, lw.Forge, ledger, lw.Clock)
	other := lw.NewService(t) // another replica on the same ledger
	alice, bob := lw.As("alice"), lw.As("bob")
	cycle := func(n int64) {
		t.Helper()
		if _, err := svc.Acquire(bg, alice, "acme", "widgets", n, time.Hour); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Release(bg, alice, "acme", "widgets", n); err != nil {
			t.Fatal(err)
		}
	}
	cycle(1)
	reads, asked := ledger.reads.Load(), lw.Forge.Calls("Issue")
	cycle(1)
	cycle(1)
	if got := ledger.reads.Load(); got != reads {
		t.Fatalf("acquires of an issue seen open read its record %d more times, want 0", got-reads)
	}
	if lw.Forge.Calls("Issue") != asked {
		t.Fatal("acquires of an issue seen open asked the forge")
	}

	lw.Forge.Close("acme/widgets", 1, false)
	if _, err := other.Apply(bg, forge.Event{Kind: forge.EventClosed, RepoID: 1, Number: 1, Updated: lw.Clock.Now(), Delivery: "d-1"}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := svc.Acquire(bg, bob, "acme", "widgets", 1, time.Hour); !errors.Is(err, lease.ErrIssueClosed) {
			t.Fatalf("acquire of an issue another replica saw closed: %v, want ErrIssueClosed", err)
		}
	}
	if lw.Forge.Calls("Issue") != asked {
		t.Fatal("acquire of a recorded-closed issue asked the forge")
	}

	cycle(4)
	if _, err := other.Apply(bg, forge.Event{Kind: forge.EventDeleted, RepoID: 1, Number: 4, Updated: lw.Clock.Now(), Delivery: "d-2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Acquire(bg, alice, "acme", "widgets", 4, time.Hour); !errors.Is(err, lease.ErrIssueNotFound) {
		t.Fatalf("acquire of an issue another replica saw deleted: %v, want ErrIssueNotFound", err)
	}

	lw.Forge.AddIssue("acme/widgets", 5, false, false)
	asked = lw.Forge.Calls("Issue")
	cycle(5) // the forge is asked, and its answer remembered
	cycle(5)
	if got := lw.Forge.Calls("Issue"); got != asked+1 {
		t.Fatalf("two acquires of a new issue asked the forge %d times, want 1", got-asked)
	}
	asked = lw.Forge.Calls("Issue")
	lw.Clock.Advance(lease.DefaultIssueTTL)
	cycle(5)
	if got := lw.Forge.Calls("Issue"); got != asked+1 {
		t.Fatalf("acquire once the remembered state was stale asked the forge %d times, want 1", got-asked)
	}
}

// Webhook events end live leases and keep the issue closed until it is
// reopened, without asking the forge.
func TestForgeEventsEndLeases(t *testing.T) {
	w := newWorld(t)
	alice, bob := w.as("alice"), w.as("bob")
	l, err := w.svc.Acquire(bg, alice, "acme", "widgets", 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	w.forge.Close("acme/widgets", 1, false)
	a, err := w.svc.Apply(bg, forge.Event{Kind: forge.EventClosed, RepoID: 1, Number: 1, Updated: w.clock.Now(), Delivery: "d-1"})
	if err != nil || len(a.Leases) != 1 || a.Leases[0].Token != l.Token {
		t.Fatalf("Apply(closed) = %+v %v, want alice's lease ended", a, err)
	}
	calls := w.forge.Calls("Issue")
	if _, err := w.svc.Acquire(bg, bob, "acme", "widgets", 1, time.Hour); !errors.Is(err, lease.ErrIssueClosed) {
		t.Fatalf("acquire after the close: %v, want ErrIssueClosed", err)
	}
	if w.forge.Calls("Issue") != calls {
		t.Fatal("acquire of a recorded-closed issue asked the forge")
	}
	if a, err := w.svc.Apply(bg, forge.Event{Kind: forge.EventClosed, RepoID: 1, Number: 1, Updated: w.clock.Now(), Delivery: "d-1"}); err != nil || !a.Duplicate {
		t.Fatalf("repeated delivery = %+v %v, want a duplicate", a, err)
	}
	w.forge.Reopen("acme/widgets", 1)
	if _, err := w.svc.Apply(bg, forge.Event{Kind: forge.EventReopened, RepoID: 1, Number: 1, Updated: w.clock.Now().Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	if r, err := w.svc.Acquire(bg, bob, "acme", "widgets", 1, time.Hour); err != nil || r.Token != l.Token+1 {
		t.Fatalf("acquire after the reopen = %+v %v, want token %d", r, err, l.Token+1)
	}
	if _, err := w.svc.Apply(bg, forge.Event{Kind: "bogus", RepoID: 1, Number: 1}); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("unknown event: %v, want ErrInvalid", err)
	}
}

// The reconcile repairs what missed deliveries left: issues closed or
// merged at the forge end their leases, with the reason in the history, and
// a deleted repository ends all of its leases.
func TestReconcileRepairsMissedDeliveries(t *testing.T) {
	w := newWorld(t)
	alice := w.as("alice")
	for _, n := range []int64{1, 2, 4} {
		if _, err := w.svc.Acquire(bg, alice, "acme", "widgets", n, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.svc.Acquire(bg, alice, "acme", "tools", 1, 0); err != nil {
		t.Fatal(err)
	}
	w.forge.Close("acme/widgets", 1, false)
	w.forge.Close("acme/widgets", 2, true)  // the pull request, merged
	w.forge.Close("acme/widgets", 3, false) // never leased: nothing to end
	ended, err := w.svc.Reconcile(bg, w.clock.Now())
	if err != nil || ended != 2 {
		t.Fatalf("Reconcile = %d %v, want 2 leases ended", ended, err)
	}
	l, err := w.svc.List(bg, alice, "acme", "widgets")
	if err != nil || len(l.Leases) != 1 || l.Leases[0].Issue != 4 {
		t.Fatalf("leases after the reconcile = %+v %v, want #4 alone", l, err)
	}
	if ended, err := w.svc.Reconcile(bg, w.clock.Now()); err != nil || ended != 0 {
		t.Fatalf("second Reconcile = %d %v, want nothing more to do", ended, err)
	}
	h, err := w.svc.Lease(bg, alice, "acme", "widgets", 2)
	if err != nil || h.Lease != nil {
		t.Fatalf("merged pull request still leased: %+v %v", h, err)
	}
	w.forge.DeleteRepo("acme/tools")
	if ended, err := w.svc.Reconcile(bg, w.clock.Now()); err != nil || ended != 1 {
		t.Fatalf("Reconcile after a repository was deleted = %d %v, want 1", ended, err)
	}
	w.forge.SetDown(true)
	if _, err := w.svc.Reconcile(bg, w.clock.Now()); !errors.Is(err, forge.ErrUnavailable) {
		t.Fatalf("Reconcile with the forge down: %v, want ErrUnavailable", err)
	}
}

// A reconcile that ends a vanished repository's leases tells everyone a
// release would: the waiter of acquire --wait wakes (and learns the
// repository is gone), the live stream says released, and the fence
// worker recomputes the status of the pull request that closes the
// issue. (Before the change bus, the reconcile's EndRepo told nobody:
// the waiter slept to its deadline, the stream kept the lease, and the
// status stayed "claimed".)
func TestReconcileOfAVanishedRepositoryTellsEveryone(t *testing.T) {
	w := newWorld(t)
	alice, bob := w.as("alice"), w.as("bob")
	fenceCtx, stopFence := context.WithCancel(bg)
	fenced := make(chan error, 1)
	worker := fence.New(w.ledger, w.forge, w.bus, fence.Options{Now: w.clock.Now, After: w.clock.After})
	go func() { fenced <- worker.Run(fenceCtx) }()
	t.Cleanup(func() { stopFence(); <-fenced })

	const sha = "3333333333333333333333333333333333333333"
	if _, err := w.svc.Apply(bg, forge.Event{Kind: forge.EventPullChanged, RepoID: 3, Number: 2, Updated: w.clock.Now(),
		Pull: &forge.PullEvent{Repo: "acme/tools", Head: sha, Author: w.forge.User("alice"), Title: "Work", Body: "Fixes #1", Open: true}}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.svc.Acquire(bg, alice, "acme", "tools", 1, 0); err != nil {
		t.Fatal(err)
	}
	lastStatus := func() string {
		sts := w.forge.Statuses("acme/tools", sha)
		if len(sts) == 0 {
			return ""
		}
		return sts[len(sts)-1].State + ": " + sts[len(sts)-1].Description
	}
	leasetest.WaitFor(t, "the status of a claimed pull request", func() bool { return strings.HasPrefix(lastStatus(), "success: claimed by alice") })

	wt := w.watch(t, "reader", "acme/tools", "")
	started(t, wt)
	waited := make(chan error, 1)
	go func() {
		_, err := w.svc.AcquireWait(bg, bob, "acme", "tools", 1, time.Hour, 10*time.Minute)
		waited <- err
	}()
	leasetest.WaitFor(t, "bob to wait", func() bool { return w.svc.Waiting(3, 1) == 1 })

	w.forge.DeleteRepo("acme/tools")
	if ended, err := w.svc.Reconcile(bg, w.clock.Now()); err != nil || ended != 1 {
		t.Fatalf("Reconcile = %d %v, want 1 lease ended", ended, err)
	}
	expectEvent(t, wt, contract.EventReleased, released(1))
	select {
	case err := <-waited:
		if !errors.Is(err, lease.ErrRepoNotFound) {
			t.Fatalf("the waiter woke with %v, want the repository gone", err)
		}
	case <-time.After(10 * time.Second): // the test clock stands still: only a wake ends the wait
		t.Fatal("the waiter was not woken by the reconcile")
	}
	leasetest.WaitFor(t, "the status to say the claim is gone", func() bool { return lastStatus() == "failure: claim #1 before merging" })
}
