package lease_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/forgetest"
	"github.com/collab-lease/collab-lease/plugin/lease"
	"github.com/collab-lease/collab-lease/plugin/leasetest"
)

// takeAll has alice hold every issue next could take in acme/queue
// (1, 2, 4 and 5; 3 is blocked by 5).
func takeAll(t *testing.T, w *world) {
	t.Helper()
	for range 4 {
		if _, err := w.svc.Next(bg, w.as("alice"), "acme", "queue", forge.IssueFilter{}, 0); err != nil {
			t.Fatal(err)
		}
	}
}

// Callers of next --wait queue first come, first served: each release
// gives the oldest waiter the issue it frees, and the others wait on.
func TestNextWaitersAreServedInOrder(t *testing.T) {
	w := nextWorld(t)
	takeAll(t, w)
	results := map[string]chan outcome{}
	for i, who := range []string{"bob", "dave"} {
		results[who] = make(chan outcome, 1)
		go func() {
			r, err := w.svc.NextWait(bg, w.as(who), "acme", "queue", forge.IssueFilter{}, 0, time.Hour, nil)
			results[who] <- outcome{r, err}
		}()
		leasetest.WaitFor(t, who+" in the queue", func() bool { return w.svc.NextWaiting(10) == i+1 })
	}
	if _, err := w.svc.Release(bg, w.as("alice"), "acme", "queue", 4); err != nil {
		t.Fatal(err)
	}
	if o := <-results["bob"]; o.err != nil || o.t.Holder != "bob" || o.t.Issue != 4 {
		t.Fatalf("first in line after the release of #4: %+v %v, want bob on #4", o.t, o.err)
	}
	if n := w.svc.NextWaiting(10); n != 1 {
		t.Fatalf("%d waiting after bob got #4, want dave", n)
	}
	// An admin forces alice off #1: dave gets it.
	w.forge.Grant("acme/queue", "eve", forgetest.Admin)
	if _, err := w.svc.ForceRelease(bg, w.as("eve"), "acme", "queue", 1); err != nil {
		t.Fatal(err)
	}
	if o := <-results["dave"]; o.err != nil || o.t.Holder != "dave" || o.t.Issue != 1 {
		t.Fatalf("after the force release of #1: %+v %v, want dave on #1", o.t, o.err)
	}
	if n := w.svc.NextWaiting(10); n != 0 {
		t.Fatalf("%d still waiting", n)
	}
}

// Two issues freed one right after the other serve two waiters, even when
// the head looks only after both: the one that got the first hands the
// look on to the next, with no further change to wake it.
func TestNextWaitersShareWhatOneChangeFrees(t *testing.T) {
	w := nextWorld(t)
	takeAll(t, w)
	done := make(chan outcome, 2)
	for i, who := range []string{"bob", "dave"} {
		go func() {
			r, err := w.svc.NextWait(bg, w.as(who), "acme", "queue", forge.IssueFilter{}, 0, time.Hour, nil)
			done <- outcome{r, err}
		}()
		leasetest.WaitFor(t, who+" in the queue", func() bool { return w.svc.NextWaiting(10) == i+1 })
	}
	for _, n := range []int64{2, 4} {
		if _, err := w.svc.Release(bg, w.as("alice"), "acme", "queue", n); err != nil {
			t.Fatal(err)
		}
	}
	first, second := <-done, <-done
	got := map[string]int64{first.t.Holder: first.t.Issue, second.t.Holder: second.t.Issue}
	if first.err != nil || second.err != nil || got["bob"] != 2 || got["dave"] != 4 {
		t.Fatalf("after #2 and #4 came free: %+v %v, %+v %v; want bob on #2, dave on #4", first.t, first.err, second.t, second.err)
	}
}

// An issue opened while everything is held has no lease to change: the
// head of the queue finds it when it looks again on its own, once the
// list of open issues is no longer reused.
func TestNextWaiterFindsANewIssueByLookingAgain(t *testing.T) {
	w := nextWorld(t)
	takeAll(t, w)
	told := make(chan int, 4)
	done := make(chan outcome, 1)
	go func() {
		r, err := w.svc.NextWait(bg, w.as("bob"), "acme", "queue", forge.IssueFilter{}, 0, time.Hour, func(ahead int) { told <- ahead })
		done <- outcome{r, err}
	}()
	if ahead := <-told; ahead != 0 {
		t.Fatalf("bob told %d ahead, want 0", ahead)
	}
	leasetest.WaitFor(t, "bob waiting with his timers", func() bool { return w.svc.NextWaiting(10) == 1 && w.clock.Timers() == 2 })
	w.forge.AddIssue("acme/queue", 8, false, false)
	w.clock.Advance(lease.DefaultNextListTTL)
	if o := <-done; o.err != nil || o.t.Holder != "bob" || o.t.Issue != 8 {
		t.Fatalf("after #8 opened: %+v %v, want bob on #8", o.t, o.err)
	}
}

// A wait ends with none when its time is up, and at once when its caller
// goes away; either way the caller leaves the queue.
func TestNextWaitEnds(t *testing.T) {
	w := nextWorld(t)
	takeAll(t, w)
	done := make(chan outcome, 1)
	go func() {
		r, err := w.svc.NextWait(bg, w.as("bob"), "acme", "queue", forge.IssueFilter{}, 0, time.Minute, nil)
		done <- outcome{r, err}
	}()
	leasetest.WaitFor(t, "bob waiting with his timers", func() bool { return w.svc.NextWaiting(10) == 1 && w.clock.Timers() == 2 })
	w.clock.Advance(time.Minute)
	if o := <-done; status(o.t, o.err) != contract.StatusNone {
		t.Fatalf("after the wait: %+v %v, want none", o.t, o.err)
	}
	if n := w.svc.NextWaiting(10); n != 0 {
		t.Fatalf("%d waiting after the wait ended", n)
	}

	ctx, cancel := context.WithCancel(bg)
	go func() {
		r, err := w.svc.NextWait(ctx, w.as("bob"), "acme", "queue", forge.IssueFilter{}, 0, time.Hour, nil)
		done <- outcome{r, err}
	}()
	leasetest.WaitFor(t, "bob waiting", func() bool { return w.svc.NextWaiting(10) == 1 })
	cancel() // the client disconnected
	if o := <-done; !errors.Is(o.err, context.Canceled) {
		t.Fatalf("cancelled waiter: %+v %v", o.t, o.err)
	}
	if n := w.svc.NextWaiting(10); n != 0 {
		t.Fatalf("%d waiting after the caller went away", n)
	}
	// Without a wait, next answers at once.
	if r, err := w.svc.NextWait(bg, w.as("bob"), "acme", "queue", forge.IssueFilter{}, 0, 0, nil); status(r, err) != contract.StatusNone {
		t.Fatalf("no wait: %+v %v, want none", r, err)
	}
}

// A holder that lets go has often just merged the pull request that
// closed the issue, and its webhook is still on its way: next hands such
// an issue out again only once the forge's list of issues closed since
// the list of open issues was read, asked for after the release, does
// not show it, instead of trusting the list of open issues alone.
func TestNextDoesNotHandOutAnIssueClosedRightBeforeItsRelease(t *testing.T) {
	w := nextWorld(t)
	r, err := w.svc.Next(bg, w.as("alice"), "acme", "queue", forge.IssueFilter{}, 0)
	if err != nil || r.Issue != 1 {
		t.Fatalf("alice's next: %+v %v, want #1", r, err)
	}
	w.forge.Close("acme/queue", 1, false) // merged; no webhook yet
	w.clock.Advance(time.Second)
	if _, err := w.svc.Release(bg, w.as("alice"), "acme", "queue", 1); err != nil {
		t.Fatal(err)
	}
	lists, closed := w.forge.Calls("OpenIssues"), w.forge.Calls("ClosedSince")
	r, err = w.svc.Next(bg, w.as("bob"), "acme", "queue", forge.IssueFilter{}, 0)
	if err != nil || r.Issue != 2 {
		t.Fatalf("bob's next after #1 closed and was released: %+v %v, want #2", r, err)
	}
	if n, m := w.forge.Calls("OpenIssues")-lists, w.forge.Calls("ClosedSince")-closed; n != 0 || m != 1 {
		t.Fatalf("the forge was asked for %d lists of open issues and %d of closed ones, want 0 and 1", n, m)
	}
	if n := w.forge.Calls("Issue"); n != 0 {
		t.Fatalf("the forge was asked about %d single issues, want none (the list says)", n)
	}
	// An issue released while still open is handed out again, once the
	// forge has said so.
	w.clock.Advance(time.Second)
	if _, err := w.svc.Release(bg, w.as("bob"), "acme", "queue", 2); err != nil {
		t.Fatal(err)
	}
	if r, err := w.svc.Next(bg, w.as("dave"), "acme", "queue", forge.IssueFilter{}, 0); err != nil || r.Issue != 2 {
		t.Fatalf("dave's next after #2 was released open: %+v %v, want #2", r, err)
	}
}

// A waiter woken by the release of an issue its holder has just closed
// (the webhook not yet in) is not handed that issue: it waits on, and
// gets the next one that comes free open.
func TestNextWaiterIsNotHandedAnIssueClosedRightBeforeItsRelease(t *testing.T) {
	w := nextWorld(t)
	takeAll(t, w)
	done := make(chan outcome, 1)
	go func() {
		r, err := w.svc.NextWait(bg, w.as("bob"), "acme", "queue", forge.IssueFilter{}, 0, time.Hour, nil)
		done <- outcome{r, err}
	}()
	leasetest.WaitFor(t, "bob waiting with his timers", func() bool { return w.svc.NextWaiting(10) == 1 && w.clock.Timers() == 2 })
	// Within the life of what next knows of #1's dependencies.
	w.clock.Advance(time.Second)
	w.forge.Close("acme/queue", 1, false)
	before := w.forge.Calls("ClosedSince")
	if _, err := w.svc.Release(bg, w.as("alice"), "acme", "queue", 1); err != nil {
		t.Fatal(err)
	}
	leasetest.WaitFor(t, "bob asking the forge what was closed", func() bool { return w.forge.Calls("ClosedSince") > before })
	if _, err := w.svc.Release(bg, w.as("alice"), "acme", "queue", 2); err != nil {
		t.Fatal(err)
	}
	if o := <-done; o.err != nil || o.t.Holder != "bob" || o.t.Issue != 2 {
		t.Fatalf("bob after #2 came free: %+v %v, want #2", o.t, o.err)
	}
}

// Releases by a churning fleet cost the forge one question between them,
// not one per issue: every issue let go before the forge was asked which
// issues were closed is known open (or closed) from its answer.
func TestNextChecksIssuesLetGoWithOneList(t *testing.T) {
	w := nextWorld(t)
	takeAll(t, w) // alice holds 1, 2, 4 and 5
	w.clock.Advance(time.Second)
	w.forge.Close("acme/queue", 2, false) // merged; no webhook yet
	for _, n := range []int64{1, 2, 4, 5} {
		if _, err := w.svc.Release(bg, w.as("alice"), "acme", "queue", n); err != nil {
			t.Fatal(err)
		}
	}
	lists, closed, deps := w.forge.Calls("OpenIssues"), w.forge.Calls("ClosedSince"), w.forge.Calls("Blocked")
	var got []int64
	for _, who := range []string{"bob", "dave", "eve"} {
		r, err := w.svc.Next(bg, w.as(who), "acme", "queue", forge.IssueFilter{}, 0)
		if err != nil {
			t.Fatalf("%s's next: %v", who, err)
		}
		got = append(got, r.Issue)
	}
	if want := []int64{1, 4, 5}; !slices.Equal(got, want) {
		t.Fatalf("handed out %v, want %v (#2 was closed before its release)", got, want)
	}
	if n, m := w.forge.Calls("OpenIssues")-lists, w.forge.Calls("ClosedSince")-closed; n != 0 || m != 1 {
		t.Fatalf("%d lists of open issues and %d of closed ones asked for, want 0 and 1", n, m)
	}
	if n := w.forge.Calls("Blocked") - deps; n != 0 {
		t.Fatalf("%d questions about dependencies, want none (still known)", n)
	}
	if n := w.forge.Calls("Issue"); n != 0 {
		t.Fatalf("%d questions about single issues, want none", n)
	}
}

// An issue let go while next is asking the forge about others (its list
// read before) is checked like one let go before the call: closed before
// its release, it is not handed out.
func TestNextChecksAnIssueLetGoDuringTheCall(t *testing.T) {
	w := nextWorld(t)
	if r, err := w.svc.Next(bg, w.as("alice"), "acme", "queue", forge.IssueFilter{}, 0); err != nil || r.Issue != 1 {
		t.Fatalf("alice's next: %+v %v, want #1", r, err)
	}
	// Past what next knows of dependencies, within the list's life: bob's
	// next asks about the free ones, and meanwhile alice merges and lets go.
	w.clock.Advance(lease.DefaultNextCacheTTL + time.Second)
	var once sync.Once
	var released error
	w.forge.SetHook(func(ctx context.Context, method string) error {
		if method == "Blocked" {
			once.Do(func() {
				w.forge.Close("acme/queue", 1, false) // merged; no webhook yet
				_, released = w.svc.Release(bg, w.as("alice"), "acme", "queue", 1)
			})
		}
		return nil
	})
	lists, closed := w.forge.Calls("OpenIssues"), w.forge.Calls("ClosedSince")
	r, err := w.svc.Next(bg, w.as("bob"), "acme", "queue", forge.IssueFilter{}, 0)
	if released != nil {
		t.Fatal(released)
	}
	if err != nil || r.Issue != 2 {
		t.Fatalf("bob's next, #1 closed and let go during it: %+v %v, want #2", r, err)
	}
	if n, m := w.forge.Calls("OpenIssues")-lists, w.forge.Calls("ClosedSince")-closed; n != 0 || m != 1 {
		t.Fatalf("%d lists of open issues and %d of closed ones asked for, want 0 and 1", n, m)
	}
}

// When more issues were closed than the forge's answer holds, an issue
// let go that is not on it is asked about alone: closed, it is not handed
// out; open, it is.
func TestNextAsksAboutEachIssueLetGoWhenTheClosedListIsCutShort(t *testing.T) {
	w := nextWorld(t)
	takeAll(t, w) // alice holds 1, 2, 4 and 5
	w.clock.Advance(time.Second)
	w.forge.SetClosedCap(1)
	w.forge.Close("acme/queue", 1, false) // merged; no webhook yet
	w.forge.Reopen("acme/queue", 6)
	w.forge.Close("acme/queue", 6, false) // newer: the one on the answer
	for _, n := range []int64{1, 2} {
		if _, err := w.svc.Release(bg, w.as("alice"), "acme", "queue", n); err != nil {
			t.Fatal(err)
		}
	}
	closed, single := w.forge.Calls("ClosedSince"), w.forge.Calls("Issue")
	r, err := w.svc.Next(bg, w.as("bob"), "acme", "queue", forge.IssueFilter{}, 0)
	if err != nil || r.Issue != 2 {
		t.Fatalf("bob's next: %+v %v, want #2 (#1 was closed before its release)", r, err)
	}
	if n, m := w.forge.Calls("ClosedSince")-closed, w.forge.Calls("Issue")-single; n != 1 || m != 2 {
		t.Fatalf("%d lists of closed issues and %d single issues asked for, want 1 and 2", n, m)
	}
	if asked := w.forge.Asked("Issue"); len(asked) < 2 || asked[len(asked)-1] != "bob" {
		t.Fatalf("single issues asked as %v, want as bob", asked)
	}
}

// One answer about the issues closed lately serves callers whose lists
// of open issues were read at different times: it reaches back as far
// as any list in use may.
func TestNextCallersWithListsOfDifferentAgesShareOneAnswer(t *testing.T) {
	w := nextWorld(t)
	for _, want := range []int64{1, 2} { // the list of all open issues is read now
		if r, err := w.svc.Next(bg, w.as("alice"), "acme", "queue", forge.IssueFilter{}, 0); err != nil || r.Issue != want {
			t.Fatalf("alice's next: %+v %v, want #%d", r, err, want)
		}
	}
	w.clock.Advance(5 * time.Second)
	bugs := forge.IssueFilter{Labels: []string{"bug"}}
	if r, err := w.svc.Next(bg, w.as("eve"), "acme", "queue", bugs, 0); status(r, err) != contract.StatusNone {
		t.Fatalf("eve's next of bugs while alice holds #2: %+v %v, want none", r, err)
	}
	w.clock.Advance(time.Second)
	for _, n := range []int64{1, 2} {
		if _, err := w.svc.Release(bg, w.as("alice"), "acme", "queue", n); err != nil {
			t.Fatal(err)
		}
	}
	closed := w.forge.Calls("ClosedSince")
	w.clock.Advance(time.Second)
	if r, err := w.svc.Next(bg, w.as("bob"), "acme", "queue", bugs, 0); err != nil || r.Issue != 2 {
		t.Fatalf("bob's next of bugs (a list 2 s old): %+v %v, want #2", r, err)
	}
	w.clock.Advance(time.Second)
	if r, err := w.svc.Next(bg, w.as("dave"), "acme", "queue", forge.IssueFilter{}, 0); err != nil || r.Issue != 1 {
		t.Fatalf("dave's next (a list 8 s old): %+v %v, want #1", r, err)
	}
	if n := w.forge.Calls("ClosedSince") - closed; n != 1 {
		t.Fatalf("%d lists of closed issues asked for, want 1 for both", n)
	}
}
