package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/forgetest"
	"github.com/collab-lease/collab-lease/plugin/lease"
	"github.com/collab-lease/collab-lease/plugin/leasetest"
)

// mergeForge is leasetest.Acme's forge that merges too: pull requests of
// acme/widgets with scripted answers to their merges. A merge that
// succeeds closes the pull request and the issues its body says it
// fixes, as Gitea does.
type mergeForge struct {
	*forgetest.Forge
	now func() time.Time

	mu      sync.Mutex
	pulls   map[int64]forge.PullState
	answers map[int64][]error // MergePull's next answers; none left: it merges
	merging int               // merges under way now
	most    int               // the most at once
	gate    chan struct{}     // if not nil, a merge waits for it
	entered chan int64        // if not nil, told of each merge that begins
	asked   []string          // "merge n as login"
	reads   map[int64]int     // PullForMerge calls, by number
}

func newMergeForge() *mergeForge {
	return &mergeForge{Forge: leasetest.Acme(), pulls: map[int64]forge.PullState{}, answers: map[int64][]error{}}
}

// pull adds pull request n from branch into main, fixing the issues.
func (f *mergeForge) pull(n int64, branch string, fixes ...int64) {
	f.AddIssue("acme/widgets", n, true, false)
	var body []string
	for _, i := range fixes {
		body = append(body, fmt.Sprintf("Fixes #%d", i))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pulls[n] = forge.PullState{Number: n, Mergeable: true, Base: "main", Head: branch, HeadRepoID: 1,
		HeadSHA: strings.Repeat("a", 40), BaseSHA: strings.Repeat("b", 40), Body: strings.Join(body, "\n"),
		Author: f.User("alice"), Updated: f.now()}
}

func (f *mergeForge) set(n int64, change func(*forge.PullState)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.pulls[n]
	change(&p)
	f.pulls[n] = p
}

func (f *mergeForge) PullForMerge(ctx context.Context, login, owner, name string, n int64) (forge.PullState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.reads == nil {
		f.reads = map[int64]int{}
	}
	f.reads[n]++
	p, ok := f.pulls[n]
	if !ok || owner+"/"+name != "acme/widgets" {
		return forge.PullState{}, forge.ErrNotFound
	}
	return p, nil
}

func (f *mergeForge) MergePull(ctx context.Context, login, owner, name string, n int64, o forge.MergeOptions) error {
	f.mu.Lock()
	f.asked = append(f.asked, fmt.Sprintf("merge %d as %s", n, login))
	f.merging++
	f.most = max(f.most, f.merging)
	gate, entered := f.gate, f.entered
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.merging--
		f.mu.Unlock()
	}()
	if entered != nil {
		entered <- n
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	if as := f.answers[n]; len(as) > 0 {
		f.answers[n] = as[1:]
		f.mu.Unlock()
		return as[0]
	}
	p := f.pulls[n]
	p.Merged, p.Closed, p.MergeSHA, p.MergedAt = true, true, strings.Repeat("c", 40), f.now()
	f.pulls[n] = p
	f.mu.Unlock()
	f.Close("acme/widgets", n, true)
	for _, line := range strings.Split(p.Body, "\n") {
		var i int64
		if _, err := fmt.Sscanf(line, "Fixes #%d", &i); err == nil {
			f.Close("acme/widgets", i, false)
		}
	}
	return nil
}

// mergedOnceTested moves the clock on, a pause of the merge's looks at a
// time, until the merge whose outcome done carries ends (Gitea has
// finished its test), and returns that outcome.
func mergedOnceTested(t *testing.T, w *world, done <-chan error) error {
	t.Helper()
	var err error
	leasetest.WaitFor(t, "the merge once Gitea's test is done", func() bool {
		select {
		case err = <-done:
			return true
		default:
			w.clock.Advance(250 * time.Millisecond) // the pause before its next look
			return false
		}
	})
	return err
}

func (f *mergeForge) mergesAsked() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.asked...)
}

func newMergeWorld(t *testing.T, opts ...lease.Option) (*world, *mergeForge) {
	t.Helper()
	mf := newMergeForge()
	lw := leasetest.New(t, leasetest.Options{Forge: mf.Forge})
	mf.now = lw.Clock.Now
	svc := leasetest.NewService(t, mf, lw.Ledger, lw.Clock, opts...)
	w := worldOf(lw)
	w.svc = svc.Service
	return w, mf
}

func mergeReply(err error) any {
	var c *lease.ConflictError
	if errors.As(err, &c) {
		return c.Reply
	}
	return nil
}

func TestMergeAsTheHolder(t *testing.T) {
	w, mf := newMergeWorld(t)
	mf.pull(10, "work-1", 1)
	alice, bob := w.as("alice"), w.as("bob")
	if _, err := w.svc.Acquire(bg, alice, "acme", "widgets", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	// bob holds nothing it closes: not_holder, naming alice on #1.
	_, err := w.svc.Merge(bg, bob, "acme", "widgets", lease.MergeRequest{Pull: 10}, nil)
	if c, ok := mergeReply(err).(contract.Conflict); !ok || c.Status != contract.StatusNotHolder || c.Issue != 1 || *c.Holder != "alice" {
		t.Fatalf("bob's merge: %v, want not_holder naming alice's claim of #1", err)
	}
	// alice under a token it never had: stale, naming the current one.
	_, err = w.svc.Merge(bg, alice, "acme", "widgets", lease.MergeRequest{Pull: 10, Token: 5}, nil)
	if s, ok := mergeReply(err).(contract.Stale); !ok || s.Issue != 1 || s.Token == nil || *s.Token != 1 {
		t.Fatalf("alice's merge under token 5: %v, want stale (token 1)", err)
	}
	if got := mf.mergesAsked(); len(got) != 0 {
		t.Fatalf("merges asked of the forge: %v, want none", got)
	}
	m, err := w.svc.Merge(bg, alice, "acme", "widgets", lease.MergeRequest{Pull: 10, Token: 1}, nil)
	if err != nil || m.Status != contract.StatusMerged || m.Token != 1 || m.SHA != strings.Repeat("c", 40) || m.Pull != 10 {
		t.Fatalf("alice's merge: %+v %v", m, err)
	}
	if got := mf.mergesAsked(); len(got) != 1 || got[0] != "merge 10 as alice" {
		t.Fatalf("merges asked of the forge: %v, want one as alice", got)
	}
	// The claim the merge closed has ended, at once.
	if l, err := w.ledger.Current(bg, models.Key{RepoID: 1, Issue: 1}); err != nil || l != nil {
		t.Fatalf("#1's claim after the merge: %+v %v, want none", l, err)
	}
	// Asked again (a reply lost): merged, under the token the merge
	// ended, and nothing asked of the forge; bob is still no holder.
	if m, err := w.svc.Merge(bg, alice, "acme", "widgets", lease.MergeRequest{Pull: 10}, nil); err != nil || m.Status != contract.StatusMerged || m.Token != 1 {
		t.Fatalf("a merged pull request merged again: %+v %v", m, err)
	}
	if _, err := w.svc.Merge(bg, bob, "acme", "widgets", lease.MergeRequest{Pull: 10}, nil); mergeReply(err) == nil {
		t.Fatalf("bob merging alice's merged pull request: %v, want not_holder", err)
	}
	// A claim of an issue it closes, held when asked again: merged.
	if _, err := w.svc.Acquire(bg, alice, "acme", "widgets", 4, time.Hour); err != nil {
		t.Fatal(err)
	}
	mf.set(10, func(p *forge.PullState) { p.Body = "Fixes #4" })
	if m, err := w.svc.Merge(bg, alice, "acme", "widgets", lease.MergeRequest{Pull: 10}, nil); err != nil || m.Status != contract.StatusMerged {
		t.Fatalf("a merged pull request merged again: %+v %v", m, err)
	}
	if got := mf.mergesAsked(); len(got) != 1 {
		t.Fatalf("merges asked of the forge: %v, want still one", got)
	}
	// Bad input changes nothing.
	for _, m := range []lease.MergeRequest{{Pull: 0}, {Pull: 10, Style: "manually-merged"}} {
		if _, err := w.svc.Merge(bg, alice, "acme", "widgets", m, nil); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("%+v: %v, want invalid", m, err)
		}
	}
	if _, err := w.svc.Merge(bg, alice, "acme", "widgets", lease.MergeRequest{Pull: 99}, nil); !errors.Is(err, lease.ErrIssueNotFound) {
		t.Errorf("a pull request that is not there: %v, want not found", err)
	}
}

// What the forge answers: a refusal is refused with its words, a moved
// base is tried once more, a merge that failed but happened is merged,
// and a conflict is refused at once, never waited out.
func TestMergeAnswersWhatTheForgeSays(t *testing.T) {
	conflictTest := func(ctx context.Context, owner, name, base, head string) (bool, []string, error) {
		return head == strings.Repeat("d", 40), []string{"a.txt"}, nil
	}
	w, mf := newMergeWorld(t, lease.WithConflictTest(conflictTest))
	alice := w.as("alice")
	for i, n := range []int64{10, 11, 12, 13, 14} {
		mf.pull(n, fmt.Sprintf("work-%d", i))
		if _, err := w.svc.Acquire(bg, alice, "acme", "widgets", n, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	mf.answers[10] = []error{&forge.MergeRefusedError{Reason: "Not all required status checks were successful"}}
	mf.answers[11] = []error{forge.ErrBaseMoved}
	mf.answers[12] = []error{forge.ErrBaseMoved, forge.ErrBaseMoved}
	mf.answers[13] = []error{&forge.MergeRefusedError{Failed: true, Reason: "Gitea failed"}}
	mf.set(14, func(p *forge.PullState) { p.Mergeable, p.HeadSHA = false, strings.Repeat("d", 40) })
	merge := func(n int64) (contract.Merged, error) {
		return w.svc.Merge(bg, alice, "acme", "widgets", lease.MergeRequest{Pull: n}, nil)
	}
	if _, err := merge(10); mergeReply(err) != (contract.MergeRefused{Status: contract.StatusRefused, Repo: "acme/widgets", Pull: 10,
		Reason: "Not all required status checks were successful"}) {
		t.Errorf("a refusal: %v", err)
	}
	if m, err := merge(11); err != nil || m.Status != contract.StatusMerged {
		t.Errorf("a base that moved once: %+v %v, want merged", m, err)
	}
	if _, err := merge(12); !strings.Contains(fmt.Sprint(mergeReply(err)), "moved during the merge, twice") {
		t.Errorf("a base that moved twice: %v, want refused", err)
	}
	// 13: Gitea failed, and did not merge: refused.
	if _, err := merge(13); !strings.Contains(fmt.Sprint(mergeReply(err)), "Gitea failed") {
		t.Errorf("a merge Gitea failed: %v, want refused", err)
	}
	if _, err := merge(14); !strings.Contains(fmt.Sprint(mergeReply(err)), "the pull request conflicts with main in a.txt") {
		t.Errorf("a conflict: %v, want refused naming a.txt", err)
	}
	asked := map[string]int{}
	for _, a := range mf.mergesAsked() {
		asked[a]++
	}
	for n, want := range map[int64]int{10: 1, 11: 2, 12: 2, 13: 1, 14: 0} {
		if got := asked[fmt.Sprintf("merge %d as alice", n)]; got != want {
			t.Errorf("pull request %d asked to merge %d times, want %d", n, got, want)
		}
	}
}

// While the forge tests a pull request, the merge waits, looking again
// (a look also makes Gitea test again one whose test it lost), and
// merges once it is mergeable.
func TestMergeWaitsForTheForgesTest(t *testing.T) {
	w, mf := newMergeWorld(t, lease.WithConflictTest(func(context.Context, string, string, string, string) (bool, []string, error) {
		return false, nil, nil
	}))
	alice := w.as("alice")
	mf.pull(10, "work")
	mf.set(10, func(p *forge.PullState) { p.Mergeable = false })
	if _, err := w.svc.Acquire(bg, alice, "acme", "widgets", 10, time.Hour); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := w.svc.Merge(bg, alice, "acme", "widgets", lease.MergeRequest{Pull: 10}, nil)
		done <- err
	}()
	// It waits on the clock for its next look; Gitea finishes its test.
	leasetest.WaitFor(t, "the merge to wait for the test", func() bool { return w.clock.Timers() > 0 })
	mf.set(10, func(p *forge.PullState) { p.Mergeable = true })
	if err := mergedOnceTested(t, w, done); err != nil {
		t.Fatalf("merge: %v", err)
	}
	if l, _ := w.ledger.Current(bg, models.Key{RepoID: 1, Issue: 10}); l != nil {
		t.Fatalf("the pull request's claim after its merge: %+v", l)
	}
}

// One merge at a time into a base branch, first come first served; a
// merge whose turn does not come within its wait is busy.
func TestMergesTakeTurns(t *testing.T) {
	w, mf := newMergeWorld(t)
	alice, bob := w.as("alice"), w.as("bob")
	mf.pull(10, "a")
	mf.pull(11, "b")
	mf.pull(12, "c")
	for n, v := range map[int64]lease.Viewer{10: alice, 11: bob, 12: bob} {
		if _, err := w.svc.Acquire(bg, v, "acme", "widgets", n, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	gate := make(chan struct{})
	mf.mu.Lock()
	mf.gate, mf.entered = gate, make(chan int64, 4)
	mf.mu.Unlock()
	first := make(chan error, 1)
	go func() {
		_, err := w.svc.Merge(bg, alice, "acme", "widgets", lease.MergeRequest{Pull: 10}, nil)
		first <- err
	}()
	if n := <-mf.entered; n != 10 {
		t.Fatalf("first merge asked of the forge: %d", n)
	}
	second := make(chan error, 1)
	var places []int
	var pmu sync.Mutex
	go func() {
		_, err := w.svc.Merge(bg, bob, "acme", "widgets", lease.MergeRequest{Pull: 11, Wait: time.Minute}, func(ahead int) {
			pmu.Lock()
			places = append(places, ahead)
			pmu.Unlock()
		})
		second <- err
	}()
	// A third waits a second only: busy, with two ahead of it... the
	// second merge waits too, so it is told it is behind one.
	leasetest.WaitFor(t, "the second merge to queue", func() bool {
		pmu.Lock()
		defer pmu.Unlock()
		return len(places) > 0
	})
	third := make(chan error, 1)
	queued := make(chan int, 1)
	go func() {
		_, err := w.svc.Merge(bg, bob, "acme", "widgets", lease.MergeRequest{Pull: 12, Wait: time.Second}, func(ahead int) {
			select {
			case queued <- ahead:
			default:
			}
		})
		third <- err
	}()
	if ahead := <-queued; ahead != 1 {
		t.Fatalf("the third merge was told %d ahead, want 1", ahead)
	}
	w.clock.Advance(time.Second)
	if b, ok := mergeReply(<-third).(contract.MergeBusy); !ok || b.Ahead != 2 || b.Pull != 12 {
		t.Fatalf("the third merge: %+v, want busy with 2 ahead", b)
	}
	mf.mu.Lock()
	most := mf.most
	mf.mu.Unlock()
	if most != 1 {
		t.Fatalf("%d merges asked of the forge at once", most)
	}
	// The first merge moves main: Gitea tests #11 again. The second
	// merge, whose turn comes late, must not go by what it read before
	// its wait (mergeable): it reads #11 again and waits for the test.
	mf.set(11, func(p *forge.PullState) { p.Mergeable = false })
	close(gate)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	leasetest.WaitFor(t, "the second merge to read #11 again", func() bool {
		mf.mu.Lock()
		defer mf.mu.Unlock()
		return mf.reads[11] >= 2
	})
	if asked := mf.mergesAsked(); len(asked) != 1 {
		t.Fatalf("merges asked while #11 was under test: %q", asked)
	}
	mf.set(11, func(p *forge.PullState) { p.Mergeable = true })
	if err := mergedOnceTested(t, w, second); err != nil {
		t.Fatalf("the second merge, after the first: %v", err)
	}
	pmu.Lock()
	defer pmu.Unlock()
	if places[0] != 0 {
		t.Fatalf("the second merge was told %v, want 0 ahead first (next, behind the merge under way)", places)
	}
	if mf.most != 1 {
		t.Fatalf("%d merges asked of the forge at once", mf.most)
	}
}

// The holder's own merge ends the claims its agent session keeps as the
// session's own doing: no lost line (git collab run goes on), while a
// claim another ends is still told.
func TestMergeIsNoLossToTheMergingSession(t *testing.T) {
	w, mf := newMergeWorld(t)
	mf.pull(10, "work", 1)
	v := w.as("alice")
	v.Agent = "a1"
	ss, _, err := w.svc.OpenSession(t.Context(), v, 10*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	var answering atomic.Bool
	answering.Store(true)
	ran := runSession(t, ss, &answering)
	for _, n := range []int64{1, 4} {
		if _, err := w.svc.Acquire(bg, ss.Viewer(), "acme", "widgets", n, 0); err != nil {
			t.Fatal(err)
		}
	}
	// git collab merge runs beside the session, as the same agent.
	if m, err := w.svc.Merge(bg, v, "acme", "widgets", lease.MergeRequest{Pull: 10}, nil); err != nil || m.Status != contract.StatusMerged {
		t.Fatalf("merge: %+v %v", m, err)
	}
	// A handoff of #4 from beside the session is a loss it is told of;
	// by then it has looked at #1 too (one look at a time).
	if _, err := w.svc.Handoff(bg, v, "acme", "widgets", 4, "bob", ""); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ss.Told():
		lost := ss.TakeLost()
		if len(lost) != 1 || lost[0].Issue != 4 {
			t.Fatalf("lost lines %+v, want #4's only", lost)
		}
	case err := <-ran:
		t.Fatalf("Run ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no lost line for the handed-off claim")
	}
}
