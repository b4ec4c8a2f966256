package lease_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/forgetest"
	"github.com/collab-lease/collab-lease/plugin/lease"
	"github.com/collab-lease/collab-lease/plugin/leasetest"
)

// The agent verbs (docs/ssh.md) in the lease service: next, acquire
// --wait, check, history and release --force.

// status is the reply's status of an outcome: the tenure's, or the
// conflict's, or "" for any other error.
func status(t contract.Tenure, err error) string {
	var c *lease.ConflictError
	switch {
	case err == nil:
		return t.Status
	case errors.As(err, &c):
		return c.Status()
	}
	return ""
}

// a repository of its own for next: issues 1..5 open, 6 closed, 7 a pull
// request; 2 is labelled "bug", 3 depends on 5.
func nextWorld(t *testing.T) *world {
	w := newWorld(t)
	w.forge.AddRepo("acme/queue", 10, false)
	for _, u := range []string{"alice", "bob", "dave", "eve"} {
		w.forge.Grant("acme/queue", u, forgetest.Write)
	}
	w.forge.Grant("acme/queue", "reader", forgetest.Read)
	for n := int64(1); n <= 5; n++ {
		w.forge.AddIssue("acme/queue", n, false, false)
	}
	w.forge.AddIssue("acme/queue", 6, false, true)
	w.forge.AddIssue("acme/queue", 7, true, false)
	w.forge.Label("acme/queue", 2, "bug")
	w.forge.Depend("acme/queue", 3, 5)
	return w
}

func TestNextClaimsTheOldestFreeUnblockedIssue(t *testing.T) {
	w := nextWorld(t)
	var got []int64
	for _, who := range []string{"alice", "bob", "dave", "eve"} {
		r, err := w.svc.Next(bg, w.as(who), "acme", "queue", forge.IssueFilter{}, time.Hour)
		if err != nil {
			got = append(got, 0)
			var c *lease.ConflictError
			if !errors.As(err, &c) || c.Reply != (contract.None{Status: contract.StatusNone, Repo: "acme/queue"}) {
				t.Fatalf("%s: %v, want none", who, err)
			}
			continue
		}
		if r.Holder != who || r.Token != 1 || r.Status != contract.StatusAcquired {
			t.Fatalf("%s: %+v", who, r)
		}
		got = append(got, r.Issue)
	}
	// 3 is blocked by 5 (open), 6 is closed and 7 is a pull request.
	if want := []int64{1, 2, 4, 5}; !equal(got, want) {
		t.Fatalf("next gave %v, want %v", got, want)
	}
	r, err := w.svc.Next(bg, w.as("alice"), "acme", "queue", forge.IssueFilter{}, time.Hour)
	if status(r, err) != contract.StatusNone {
		t.Fatalf("a fifth next: %+v %v, want none (3 is still blocked)", r, err)
	}

	// 5 closes at the forge; its webhook arrives: 3 is free to take.
	w.forge.Close("acme/queue", 5, false)
	if _, err := w.svc.Apply(bg, forge.Event{Kind: forge.EventClosed, RepoID: 10, Number: 5, Updated: w.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	r, err = w.svc.Next(bg, w.as("alice"), "acme", "queue", forge.IssueFilter{}, time.Hour)
	if err != nil || r.Issue != 3 {
		t.Fatalf("after its dependency closed: %+v %v, want #3", r, err)
	}
}

func TestNextFiltersByLabelAndUnit(t *testing.T) {
	w := nextWorld(t)
	r, err := w.svc.Next(bg, w.as("alice"), "acme", "queue", forge.IssueFilter{Labels: []string{"bug"}}, 0)
	if err != nil || r.Issue != 2 {
		t.Fatalf("--label bug: %+v %v, want #2", r, err)
	}
	r, err = w.svc.Next(bg, w.as("bob"), "acme", "queue", forge.IssueFilter{Labels: []string{"bug"}}, 0)
	if status(r, err) != contract.StatusNone {
		t.Fatalf("--label bug again: %+v %v, want none", r, err)
	}
	r, err = w.svc.Next(bg, w.as("bob"), "acme", "queue", forge.IssueFilter{Pulls: true}, 0)
	if err != nil || r.Issue != 7 {
		t.Fatalf("--pulls: %+v %v, want #7", r, err)
	}
	if cur, _ := w.svc.Lease(bg, w.as("bob"), "acme", "queue", 7); cur.Lease == nil || cur.Lease.Holder != "bob" {
		t.Fatalf("the pull request's lease: %+v", cur.Lease)
	}
}

func TestNextRefusals(t *testing.T) {
	w := nextWorld(t)
	var write *lease.WriteRequiredError
	if _, err := w.svc.Next(bg, w.as("reader"), "acme", "queue", forge.IssueFilter{}, 0); !errors.As(err, &write) {
		t.Errorf("reader: %v, want write access required", err)
	}
	if _, err := w.svc.Next(bg, w.as("alice"), "acme", "secret-nothing", forge.IssueFilter{}, 0); !errors.Is(err, lease.ErrRepoNotFound) {
		t.Errorf("unknown repo: %v", err)
	}
	if _, err := w.svc.Next(bg, w.as("eve"), "acme", "secret", forge.IssueFilter{}, 0); !errors.Is(err, lease.ErrRepoNotFound) {
		t.Errorf("private repo: %v", err)
	}
	if _, err := w.svc.Next(bg, lease.Viewer{}, "acme", "queue", forge.IssueFilter{}, 0); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("anonymous: %v", err)
	}
	w.forge.SetDown(true)
	if _, err := w.svc.Next(bg, w.as("alice"), "acme", "queue", forge.IssueFilter{}, 0); !errors.Is(err, forge.ErrUnavailable) {
		t.Errorf("forge down: %v", err)
	}
}

// Many callers at once on few free issues: every free issue goes to
// exactly one of them, the rest get none; the forge's list is shared.
func TestConcurrentNextGivesDistinctIssues(t *testing.T) {
	w := nextWorld(t)
	var mu sync.Mutex
	won := map[int64]string{}
	none := 0
	var wg sync.WaitGroup
	for i := 0; i < 12; i++ {
		who := []string{"alice", "bob", "dave", "eve"}[i%4]
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := w.svc.Next(bg, w.as(who), "acme", "queue", forge.IssueFilter{}, time.Hour)
			mu.Lock()
			defer mu.Unlock()
			switch status(r, err) {
			case contract.StatusAcquired:
				if prev, dup := won[r.Issue]; dup && prev != who {
					t.Errorf("#%d went to %s and %s", r.Issue, prev, who)
				}
				won[r.Issue] = who
			case contract.StatusNone:
				none++
			default:
				t.Errorf("%s: %+v %v", who, r, err)
			}
		}()
	}
	wg.Wait()
	// The same account may get one issue twice (re-acquire is
	// idempotent), so count distinct issues: 1, 2, 4, 5.
	if len(won) != 4 {
		t.Fatalf("issues claimed %v, want 1, 2, 4 and 5", won)
	}
	// Each open issue's dependencies are asked once, however many race.
	if n := w.forge.Calls("Blocked"); n > 5 {
		t.Errorf("%d dependency questions for 5 open issues", n)
	}
	if n := w.forge.Calls("OpenIssues"); n > 2 {
		t.Errorf("%d lists of open issues for 12 callers within the cache interval, want them shared", n)
	}
}

// One failed list of open issues, shared by every next waiting for it, is
// asked once more before they are all told to try again; a list that
// keeps failing is asked twice in all, and they are told.
func TestNextAsksAFailedListOnceMore(t *testing.T) {
	w := nextWorld(t)
	var mu sync.Mutex
	failed, release := 0, make(chan struct{})
	w.forge.SetHook(func(ctx context.Context, method string) error {
		if method != "OpenIssues" {
			return nil
		}
		mu.Lock()
		first := failed == 0
		failed++
		mu.Unlock()
		if first {
			<-release // the others join this flight meanwhile
			return forge.ErrUnavailable
		}
		return nil
	})
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i, who := range []string{"alice", "bob", "dave", "eve"} {
		wg.Go(func() { _, errs[i] = w.svc.Next(bg, w.as(who), "acme", "queue", forge.IssueFilter{}, time.Hour) })
	}
	deadline := time.Now().Add(10 * time.Second)
	for w.forge.Calls("OpenIssues") == 0 && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("next %d after one failed list: %v", i, err)
		}
	}
	if n := w.forge.Calls("OpenIssues"); n != 2 {
		t.Errorf("%d lists asked, want the failed one and its retry", n)
	}

	w.forge.SetHook(func(ctx context.Context, method string) error {
		if method == "OpenIssues" {
			return forge.ErrUnavailable
		}
		return nil
	})
	w.clock.Advance(time.Minute) // past the cached list
	before := w.forge.Calls("OpenIssues")
	if _, err := w.svc.Next(bg, w.as("alice"), "acme", "queue", forge.IssueFilter{}, time.Hour); !errors.Is(err, forge.ErrUnavailable) {
		t.Errorf("lists failing: %v", err)
	}
	if n := w.forge.Calls("OpenIssues") - before; n != 2 {
		t.Errorf("lists failing: %d asked, want 2", n)
	}
}

func TestWaiterWokenAtTheExpiryInstant(t *testing.T) {
	w := newWorld(t)
	first, err := w.svc.Acquire(bg, w.as("alice"), "acme", "widgets", 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := w.svc.AcquireWait(bg, w.as("bob"), "acme", "widgets", 1, time.Hour, 10*time.Minute)
		done <- outcome{r, err}
	}()
	// Bob waits, with a timer for the end of his wait and one for the
	// expiry of alice's lease.
	leasetest.WaitFor(t, "bob waiting with two timers", func() bool { return w.svc.Waiting(1, 1) == 1 && w.clock.Timers() == 2 })
	w.clock.Advance(59 * time.Second)
	if w.svc.Waiting(1, 1) != 1 {
		t.Fatal("bob stopped waiting a second before the expiry")
	}
	w.clock.Advance(time.Second)
	o := <-done
	if o.err != nil || o.t.Holder != "bob" || o.t.Token != first.Token+1 || time.Time(o.t.AcquiredAt) != time.Time(*first.ExpiresAt) {
		t.Fatalf("bob after the expiry: %+v %v; want token %d acquired at %v", o.t, o.err, first.Token+1, time.Time(*first.ExpiresAt))
	}
	if w.svc.Waiting(1, 1) != 0 {
		t.Fatal("bob still counted as waiting")
	}
}

type outcome struct {
	t   contract.Tenure
	err error
}

func TestWaitersAreServedInOrderOnRelease(t *testing.T) {
	w := newWorld(t)
	w.forge.Grant("acme/widgets", "dave", forgetest.Write)
	if _, err := w.svc.Acquire(bg, w.as("alice"), "acme", "widgets", 1, 0); err != nil {
		t.Fatal(err)
	}
	results := map[string]chan outcome{}
	for i, who := range []string{"bob", "dave"} {
		results[who] = make(chan outcome, 1)
		go func() {
			r, err := w.svc.AcquireWait(bg, w.as(who), "acme", "widgets", 1, 0, time.Hour)
			results[who] <- outcome{r, err}
		}()
		leasetest.WaitFor(t, who+" in the queue", func() bool { return w.svc.Waiting(1, 1) == i+1 })
	}
	if _, err := w.svc.Release(bg, w.as("alice"), "acme", "widgets", 1); err != nil {
		t.Fatal(err)
	}
	if o := <-results["bob"]; o.err != nil || o.t.Holder != "bob" {
		t.Fatalf("first in line after the release: %+v %v, want bob", o.t, o.err)
	}
	if w.svc.Waiting(1, 1) != 1 {
		t.Fatal("dave left the queue while bob holds the issue")
	}
	// An admin forces bob's lease off: the next waiter gets it.
	w.forge.Grant("acme/widgets", "eve", forgetest.Admin)
	if _, err := w.svc.ForceRelease(bg, w.as("eve"), "acme", "widgets", 1); err != nil {
		t.Fatal(err)
	}
	if o := <-results["dave"]; o.err != nil || o.t.Holder != "dave" {
		t.Fatalf("after the force release: %+v %v, want dave", o.t, o.err)
	}
}

func TestWaiterLeavesWhenItsCallerGoesAwayOrItsWaitEnds(t *testing.T) {
	w := newWorld(t)
	if _, err := w.svc.Acquire(bg, w.as("alice"), "acme", "widgets", 1, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	done := make(chan outcome, 1)
	go func() {
		r, err := w.svc.AcquireWait(ctx, w.as("bob"), "acme", "widgets", 1, 0, time.Hour)
		done <- outcome{r, err}
	}()
	leasetest.WaitFor(t, "bob waiting", func() bool { return w.svc.Waiting(1, 1) == 1 })
	cancel() // the client disconnected
	if o := <-done; !errors.Is(o.err, context.Canceled) {
		t.Fatalf("cancelled waiter: %+v %v", o.t, o.err)
	}
	if n := w.svc.Waiting(1, 1); n != 0 {
		t.Fatalf("%d waiting after the caller went away", n)
	}

	go func() {
		r, err := w.svc.AcquireWait(bg, w.as("bob"), "acme", "widgets", 1, 0, time.Minute)
		done <- outcome{r, err}
	}()
	leasetest.WaitFor(t, "bob waiting with his timer", func() bool { return w.svc.Waiting(1, 1) == 1 && w.clock.Timers() == 1 })
	w.clock.Advance(time.Minute)
	o := <-done
	if status(o.t, o.err) != contract.StatusHeld {
		t.Fatalf("after the wait: %+v %v, want held", o.t, o.err)
	}
	if n := w.svc.Waiting(1, 1); n != 0 {
		t.Fatalf("%d waiting after the wait ended", n)
	}
}

func TestWaitersAreBounded(t *testing.T) {
	w := newWorld(t, lease.WithWaiters(1, 10))
	svc := w.svc
	if _, err := svc.Acquire(bg, w.as("alice"), "acme", "widgets", 1, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	go func() { _, _ = svc.AcquireWait(ctx, w.as("bob"), "acme", "widgets", 1, 0, time.Hour) }()
	leasetest.WaitFor(t, "bob waiting", func() bool { return svc.Waiting(1, 1) == 1 })
	if _, err := svc.AcquireWait(bg, w.as("bob"), "acme", "widgets", 1, 0, time.Hour); !errors.Is(err, lease.ErrTooManyWaiters) {
		t.Fatalf("a second waiter past the bound of one: %v", err)
	}
}

func TestCheckSaysStaleAfterATakeover(t *testing.T) {
	w := newWorld(t)
	a, err := w.svc.Acquire(bg, w.as("alice"), "acme", "widgets", 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	r, err := w.svc.Check(bg, w.as("reader"), "acme", "widgets", 1, a.Token)
	if err != nil || r.Status != contract.StatusCurrent || r.Holder != "alice" || r.Token != a.Token {
		t.Fatalf("check of the live token: %+v %v", r, err)
	}
	w.clock.Advance(time.Minute)
	b, err := w.svc.Acquire(bg, w.as("bob"), "acme", "widgets", 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.svc.Check(bg, w.as("alice"), "acme", "widgets", 1, a.Token)
	var c *lease.ConflictError
	if !errors.As(err, &c) || c.Reply != any(contract.Stale{Status: contract.StatusStale, Repo: "acme/widgets", Issue: 1, Token: c.Reply.(contract.Stale).Token}) ||
		*c.Reply.(contract.Stale).Token != b.Token {
		t.Fatalf("check after the takeover: %v, want stale naming token %d", err, b.Token)
	}
	if _, err := w.svc.Release(bg, w.as("bob"), "acme", "widgets", 1); err != nil {
		t.Fatal(err)
	}
	_, err = w.svc.Check(bg, w.as("bob"), "acme", "widgets", 1, b.Token)
	if !errors.As(err, &c) || c.Reply.(contract.Stale).Token != nil {
		t.Fatalf("check after the release: %v, want stale with no token", err)
	}
	// Who may not read the repository learns nothing.
	if _, err := w.svc.Check(bg, w.as("eve"), "acme", "secret", 1, 1); !errors.Is(err, lease.ErrRepoNotFound) {
		t.Fatalf("check on a private repository: %v", err)
	}
}

func TestForceReleaseIsForAdminsAndHistoryNamesThem(t *testing.T) {
	w := newWorld(t)
	w.forge.Grant("acme/widgets", "eve", forgetest.Admin)
	a, err := w.svc.Acquire(bg, w.as("alice"), "acme", "widgets", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	var write *lease.WriteRequiredError
	if _, err := w.svc.ForceRelease(bg, w.as("bob"), "acme", "widgets", 1); !errors.As(err, &write) || !write.Admin ||
		err.Error() != "admin access to acme/widgets is required" {
		t.Fatalf("force release by a writer: %v", err)
	}
	if cur, _ := w.svc.Lease(bg, w.as("bob"), "acme", "widgets", 1); cur.Lease == nil {
		t.Fatal("a refused force release freed the lease")
	}
	w.clock.Advance(time.Minute)
	if _, err := w.svc.ForceRelease(bg, w.as("eve"), "acme", "widgets", 1); err != nil {
		t.Fatal(err)
	}
	h, err := w.svc.History(bg, w.as("reader"), "acme", "widgets", 1, 20)
	if err != nil || len(h.Tenures) != 1 {
		t.Fatalf("history: %+v %v", h, err)
	}
	got := h.Tenures[0]
	if got.Token != a.Token || got.Holder != "alice" || got.EndedBy == nil || *got.EndedBy != contract.EndForceReleased ||
		got.ForcedBy != "eve" || got.EndedAt == nil || !time.Time(*got.EndedAt).Equal(w.clock.Now()) {
		t.Fatalf("history after the force release: %+v", got)
	}
	if _, err := w.svc.History(bg, w.as("eve"), "acme", "secret", 1, 20); !errors.Is(err, lease.ErrRepoNotFound) {
		t.Fatalf("history of a private repository: %v", err)
	}
}

// History and check on a number of a unit the viewer may not read are
// "issue not found", as for any other read.
func TestTenureReadsNeedTheUnit(t *testing.T) {
	w := newWorld(t)
	if _, err := w.svc.Acquire(bg, w.as("alice"), "acme", "tools", 2, 0); err != nil { // a pull request
		t.Fatal(err)
	}
	if _, err := w.svc.History(bg, w.as("dave"), "acme", "tools", 2, 20); !errors.Is(err, lease.ErrIssueNotFound) {
		t.Errorf("history of a pull request for an issues-only member: %v", err)
	}
	if _, err := w.svc.Check(bg, w.as("dave"), "acme", "tools", 2, 1); !errors.Is(err, lease.ErrIssueNotFound) {
		t.Errorf("check of a pull request for an issues-only member: %v", err)
	}
	if _, err := w.svc.History(bg, w.as("dave"), "acme", "tools", 1, 20); err != nil {
		t.Errorf("history of an issue for an issues-only member: %v", err)
	}
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A waiter learns of a new expiry too: the holder of an open-ended claim
// re-acquires it for a minute, and the waiter gets the issue a minute
// later, with nobody watching the repository and no pull request linking
// the issue (nothing else would look at it then).
func TestWaiterFollowsARenewedExpiry(t *testing.T) {
	w := newWorld(t)
	alice, bob := w.as("alice"), w.as("bob")
	if _, err := w.svc.Acquire(bg, alice, "acme", "widgets", 1, 0); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := w.svc.AcquireWait(bg, bob, "acme", "widgets", 1, time.Hour, 10*time.Minute)
		got <- err
	}()
	leasetest.WaitFor(t, "bob to wait", func() bool { return w.svc.Waiting(1, 1) == 1 })
	if _, err := w.svc.Acquire(bg, alice, "acme", "widgets", 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	leasetest.WaitFor(t, "the new expiry queued", func() bool { return w.bus.Pending() == 1 })
	w.clock.Advance(time.Minute)
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("bob's wait: %v, want the issue", err)
		}
	case <-time.After(10 * time.Second): // the wait would end only at its deadline, ten test minutes on
		t.Fatal("bob was not woken at the new expiry")
	}
}
