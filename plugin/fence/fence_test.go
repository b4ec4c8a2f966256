package fence_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/clocktest"
	"github.com/collab-lease/collab-lease/plugin/fence"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/forgetest"
	"github.com/collab-lease/collab-lease/plugin/lease"
	"github.com/collab-lease/collab-lease/plugin/leasetest"
)

var bg = context.Background()

// fenceWorld runs the fenced-merge worker over leasetest's world of the
// Acme forge.
type fenceWorld struct {
	*leasetest.World
	forge    *forgetest.Forge
	clock    *clocktest.Clock
	svc      *lease.Service
	cancel   context.CancelFunc
	done     chan error
	outcomes *outcomeLog
	// pushes turns the push fence on; pushOutcomes are its outcomes;
	// recheck is its Options.Recheck.
	pushes       bool
	pushOutcomes *outcomeLog
	recheck      time.Duration
	// ledger, if set, is what the worker reads and records through
	// instead of the world's.
	ledger fence.Ledger
}

type outcomeLog struct {
	mu  sync.Mutex
	got []string
}

func (l *outcomeLog) add(o string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, o)
}

func (l *outcomeLog) count(o string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, g := range l.got {
		if g == o {
			n++
		}
	}
	return n
}

func newFenceWorld(t *testing.T) *fenceWorld { return newWorld(t, false) }

// newWorld starts the worker, with the push fence on if pushes.
func newWorld(t *testing.T, pushes bool) *fenceWorld {
	lw := leasetest.New(t, leasetest.Options{Forge: leasetest.Acme()})
	w := &fenceWorld{World: lw, forge: lw.Forge, clock: lw.Clock, svc: lw.Service, outcomes: &outcomeLog{}, pushes: pushes, pushOutcomes: &outcomeLog{}}
	w.start(t)
	return w
}

func (w *fenceWorld) start(t *testing.T) {
	ctx, cancel := context.WithCancel(bg)
	w.cancel, w.done = cancel, make(chan error, 1)
	var ledger fence.Ledger = w.Ledger
	if w.ledger != nil {
		ledger = w.ledger
	}
	go func() {
		wk := fence.New(ledger, w.forge, w.Bus, fence.Options{GiteaURL: "http://gitea.example", Observe: w.outcomes.add,
			FencePushes: w.pushes, ObservePush: w.pushOutcomes.add, Recheck: w.recheck, Now: w.clock.Now, After: w.clock.After})
		w.done <- wk.Run(ctx)
	}()
	t.Cleanup(w.stop)
}

func (w *fenceWorld) stop() {
	if w.cancel != nil {
		w.cancel()
		<-w.done
		w.cancel = nil
	}
}

const sha1, sha2 = "1111111111111111111111111111111111111111", "2222222222222222222222222222222222222222"

// pull tells the service what the webhook says of pull request 2 of
// acme/widgets, by alice.
func (w *fenceWorld) pull(t *testing.T, kind forge.EventKind, head, body string, open bool) {
	t.Helper()
	w.pullOn(t, kind, head, "", body, open)
}

// pullOn is pull with its head on branch of the same repository.
func (w *fenceWorld) pullOn(t *testing.T, kind forge.EventKind, head, branch, body string, open bool) {
	t.Helper()
	w.clock.Advance(time.Second) // a newer description each time
	_, err := w.svc.Apply(bg, forge.Event{Kind: kind, RepoID: 1, Number: 2, Updated: w.clock.Now(),
		Pull: &forge.PullEvent{Repo: "acme/widgets", Head: head, Branch: branch, Author: w.forge.User("alice"), Title: "Work", Body: body, Open: open}})
	if err != nil {
		t.Fatal(err)
	}
}

// status waits for the status shown on sha to be want (a prefix of
// "state: description") and returns how many were posted on it.
func (w *fenceWorld) status(t *testing.T, sha, want string) int {
	t.Helper()
	var last string
	deadline := time.Now().Add(10 * time.Second)
	for {
		sts := w.forge.Statuses("acme/widgets", sha)
		if len(sts) > 0 {
			st := sts[len(sts)-1]
			last = st.State + ": " + st.Description
			if strings.HasPrefix(last, want) {
				if st.Context != fence.StatusContext {
					t.Fatalf("context %q", st.Context)
				}
				return len(sts)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("status on %s is %q, want %q", sha[:4], last, want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestFencedMergeStatusFollowsTheTenure(t *testing.T) {
	w := newFenceWorld(t)
	w.pull(t, forge.EventPullChanged, sha1, "Fixes #1", true)
	w.status(t, sha1, "failure: claim #1 before merging")
	if st := w.forge.Statuses("acme/widgets", sha1); st[0].TargetURL != "http://gitea.example/acme/widgets/issues/1" {
		t.Fatalf("target URL %q", st[0].TargetURL)
	}

	first, err := w.svc.Acquire(bg, w.As("alice"), "acme", "widgets", 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	w.status(t, sha1, "success: claimed by alice (#1 token 1)")

	// Lazy expiry is not enough: a timer at the expiry instant flips it.
	leasetest.WaitFor(t, "the expiry timer", func() bool { return w.clock.Timers() >= 1 })
	w.clock.Set(time.Time(*first.ExpiresAt))
	w.status(t, sha1, "failure: claim #1 before merging")

	if _, err := w.svc.Acquire(bg, w.As("bob"), "acme", "widgets", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	w.status(t, sha1, "failure: issue #1 is claimed by bob until ")

	// A push: the new head gets the status.
	w.pull(t, forge.EventPullChanged, sha2, "Fixes #1", true)
	w.status(t, sha2, "failure: issue #1 is claimed by bob until ")
	if _, err := w.svc.Release(bg, w.As("bob"), "acme", "widgets", 1); err != nil {
		t.Fatal(err)
	}
	w.status(t, sha2, "failure: claim #1 before merging")

	// The description no longer closes anything: nothing to require.
	w.pull(t, forge.EventPullChanged, sha2, "Refs #1", true)
	w.status(t, sha2, "success: no claimed work linked")
	// The pull request itself leased by someone else counts.
	if _, err := w.svc.Acquire(bg, w.As("bob"), "acme", "widgets", 2, 0); err != nil {
		t.Fatal(err)
	}
	w.status(t, sha2, "failure: issue #2 is claimed by bob")
	// Closed: nothing more is posted for it.
	w.pull(t, forge.EventClosed, sha2, "Refs #1", false)
	n := len(w.forge.Statuses("acme/widgets", sha2))
	if _, err := w.svc.Release(bg, w.As("bob"), "acme", "widgets", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := w.svc.Acquire(bg, w.As("alice"), "acme", "widgets", 1, 0); err != nil {
		t.Fatal(err)
	}
	// Another pull request's status after those changes shows that the
	// worker has handled them.
	_, err = w.svc.Apply(bg, forge.Event{Kind: forge.EventPullChanged, RepoID: 1, Number: 9, Updated: w.clock.Now(),
		Pull: &forge.PullEvent{Repo: "acme/widgets", Head: sha1, Author: w.forge.User("alice"), Body: "Closes #1", Open: true}})
	if err != nil {
		t.Fatal(err)
	}
	w.status(t, sha1, "success: claimed by alice (#1 token 3)")
	if got := w.forge.Statuses("acme/widgets", sha2); len(got) != n {
		t.Fatalf("%d statuses posted on a closed pull request: %+v", len(got)-n, got[n:])
	}
}

// A post computed for the old tenure that lands after the new tenure
// began is not left standing: the worker posts again from the ledger.
func TestAStalePostIsNeverLeftStanding(t *testing.T) {
	w := newFenceWorld(t)
	if _, err := w.svc.Acquire(bg, w.As("alice"), "acme", "widgets", 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	w.pull(t, forge.EventPullChanged, sha1, "Fixes #1", true)
	posts := w.status(t, sha1, "success: claimed by alice")

	// Hold the next post on its way to the forge.
	var held atomic.Bool
	arrived, release := make(chan struct{}), make(chan struct{})
	w.forge.SetHook(func(ctx context.Context, method string) error {
		if method == "PostStatus" && held.CompareAndSwap(false, true) {
			close(arrived)
			<-release
		}
		return nil
	})
	// alice's claim expires: the worker computes "claim #1" and posts it…
	w.clock.Advance(time.Minute)
	<-arrived
	// …while bob takes the issue over.
	if _, err := w.svc.Acquire(bg, w.As("bob"), "acme", "widgets", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	close(release)
	w.status(t, sha1, "failure: issue #1 is claimed by bob")
	sts := w.forge.Statuses("acme/widgets", sha1)
	if len(sts) != posts+2 || sts[posts].Description != "claim #1 before merging" {
		t.Fatalf("statuses after the takeover: %+v", sts[posts:])
	}
}

func TestFencedMergeStatusesAreRetriedAndRepostedAfterARestart(t *testing.T) {
	w := newFenceWorld(t)
	if _, err := w.svc.Acquire(bg, w.As("alice"), "acme", "widgets", 1, 0); err != nil {
		t.Fatal(err)
	}
	w.forge.SetHook(func(ctx context.Context, method string) error {
		if method == "PostStatus" {
			return errors.New("gitea is down")
		}
		return nil
	})
	w.pull(t, forge.EventPullChanged, sha1, "Fixes #1", true)
	leasetest.WaitFor(t, "a failed post", func() bool { return w.outcomes.count("failed") >= 1 })
	w.forge.SetHook(nil)
	leasetest.WaitFor(t, "the retry timer", func() bool { return w.clock.Timers() >= 1 })
	w.clock.Advance(time.Second) // the first backoff
	posts := w.status(t, sha1, "success: claimed by alice (#1 token 1)")

	// A restarted worker posts the status of every open linked pull
	// request again.
	w.stop()
	w.start(t)
	leasetest.WaitFor(t, "the re-post", func() bool { return len(w.forge.Statuses("acme/widgets", sha1)) == posts+1 })
}
