package lease_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/forgetest"
	"github.com/collab-lease/collab-lease/plugin/lease"
	"github.com/collab-lease/collab-lease/plugin/leasetest"
)

// quarantineWorld is Acme with quarantine after two lapses, alice an admin
// of acme/widgets, and the quarantine worker running.
func quarantineWorld(t *testing.T) (*leasetest.World, *outcomes) {
	t.Helper()
	f := leasetest.Acme()
	f.Grant("acme/widgets", "alice", forgetest.Admin)
	w := leasetest.New(t, leasetest.Options{Forge: f, Ledger: []models.Option{models.WithQuarantineAfter(2)}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	seen := &outcomes{}
	go func() { done <- w.Service.RunQuarantine(ctx, lease.QuarantineOptions{Observe: seen.add}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return w, seen
}

// outcomes records what the worker told the forge.
type outcomes struct {
	mu sync.Mutex
	ch []string
}

func (o *outcomes) add(s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ch = append(o.ch, s)
}

func (o *outcomes) all() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.ch)
}

// lapse has login claim issue n of acme/widgets for a minute, and moves
// the clock to the claim's expiry instant.
func lapse(t *testing.T, w *leasetest.World, login string, n int64) contract.Tenure {
	t.Helper()
	got, err := w.Service.Acquire(t.Context(), w.As(login), "acme", "widgets", n, time.Minute)
	if err != nil {
		t.Fatalf("%s's acquire of #%d: %v", login, n, err)
	}
	w.Clock.Advance(time.Minute)
	return got
}

func quarantinedReply(err error) (contract.Quarantined, bool) {
	var c *lease.ConflictError
	if !errors.As(err, &c) {
		return contract.Quarantined{}, false
	}
	q, ok := c.Reply.(contract.Quarantined)
	return q, ok
}

// Two claims that lapse quarantine the issue at the second's instant:
// acquire answers quarantined, next skips it, and the worker labels it
// (making the label) and comments once, naming the tenures. An admin's
// --force takes it; unquarantine lifts it and takes the label off;
// removing the label in the forge lifts it too.
func TestQuarantineThroughTheService(t *testing.T) {
	w, seen := quarantineWorld(t)
	ctx := t.Context()
	lapse(t, w, "bob", 1)
	second := time.Time(*lapse(t, w, "alice", 1).ExpiresAt)
	_, err := w.Service.Acquire(ctx, w.As("bob"), "acme", "widgets", 1, time.Minute)
	if q, ok := quarantinedReply(err); !ok || !time.Time(q.Since).Equal(second) || q.Repo != "acme/widgets" || q.Issue != 1 {
		t.Fatalf("acquire at the second lapse's instant: %v, want quarantined since %s", err, second)
	}
	if info := lease.Classify(err); info.Class != lease.Conflict || info.Outcome != contract.StatusQuarantined {
		t.Fatalf("the quarantined reply classifies as %+v", info)
	}
	got, err := w.Service.Next(ctx, w.As("bob"), "acme", "widgets", forge.IssueFilter{}, time.Minute)
	if err != nil || got.Issue != 4 {
		t.Fatalf("next over the quarantined issue: %+v %v, want #4", got, err)
	}
	leasetest.WaitFor(t, "the label and the comment", func() bool {
		return slices.Contains(w.Forge.Labels("acme/widgets", 1), lease.QuarantineLabel) && len(w.Forge.Comments("acme/widgets", 1)) == 1
	})
	comment := w.Forge.Comments("acme/widgets", 1)[0]
	for _, want := range []string{"| 2 | alice | expired at ", "| 1 | bob | expired at ", "collab-lease unquarantine acme/widgets 1"} {
		if !strings.Contains(comment, want) {
			t.Errorf("the comment lacks %q:\n%s", want, comment)
		}
	}
	if ls := w.Forge.RepoLabels("acme/widgets"); len(ls) != 1 || ls[0].Name != lease.QuarantineLabel {
		t.Fatalf("labels made: %+v", ls)
	}
	boardLists := func(want ...int64) {
		t.Helper()
		b, err := w.Service.Board(ctx, w.As("bob"), "acme", "widgets", lease.BoardQuery{})
		var got []int64
		for _, q := range b.Quarantined {
			got = append(got, q.Number)
		}
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("the board's quarantined issues: %v %v, want %v", got, err, want)
		}
	}
	boardLists(1)

	// --force: only an admin's, and it leaves the quarantine.
	var wr *lease.WriteRequiredError
	if _, err := w.Service.ForceAcquireWaitTold(ctx, w.As("bob"), "acme", "widgets", 1, time.Minute, 0, nil); !errors.As(err, &wr) || !wr.Admin {
		t.Fatalf("a writer's acquire --force: %v, want admin required", err)
	}
	if got, err := w.Service.ForceAcquireWaitTold(ctx, w.As("alice"), "acme", "widgets", 1, time.Minute, 0, nil); err != nil || got.Token != 3 {
		t.Fatalf("an admin's acquire --force: %+v %v", got, err)
	}
	if _, err := w.Service.Release(ctx, w.As("alice"), "acme", "widgets", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Service.Acquire(ctx, w.As("bob"), "acme", "widgets", 1, time.Minute); !errors.Is(err, lease.ErrConflict) {
		t.Fatalf("acquire after the forced claim: %v, want quarantined", err)
	}

	// unquarantine: an admin's; the worker takes the label off.
	if _, err := w.Service.Unquarantine(ctx, w.As("bob"), "acme", "widgets", 1); !errors.As(err, &wr) {
		t.Fatalf("a writer's unquarantine: %v, want admin required", err)
	}
	if got, err := w.Service.Unquarantine(ctx, w.As("alice"), "acme", "widgets", 1); err != nil || !got.Lifted || got.Status != contract.StatusUnquarantined {
		t.Fatalf("unquarantine: %+v %v", got, err)
	}
	leasetest.WaitFor(t, "the label taken off", func() bool { return len(w.Forge.Labels("acme/widgets", 1)) == 0 })
	boardLists()
	if got, err := w.Service.Unquarantine(ctx, w.As("alice"), "acme", "widgets", 1); err != nil || got.Lifted {
		t.Fatalf("unquarantine again: %+v %v, want nothing lifted", got, err)
	}

	// Quarantined again (two more lapses), then the label removed in
	// the forge: the webhook's delivery lifts it.
	lapse(t, w, "bob", 1)
	lapse(t, w, "bob", 1)
	leasetest.WaitFor(t, "the second quarantine's label and comment", func() bool {
		return slices.Contains(w.Forge.Labels("acme/widgets", 1), lease.QuarantineLabel) && len(w.Forge.Comments("acme/widgets", 1)) == 2
	})
	// A delivery still listing the label, or an old one from before it
	// was put on while it is on, lifts nothing.
	for _, labels := range [][]string{{lease.QuarantineLabel}, {}} {
		if _, err := w.Service.Apply(ctx, forge.Event{Kind: forge.EventLabels, RepoID: 1, Repo: "acme/widgets", Number: 1, Labels: labels}); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Service.Acquire(ctx, w.As("bob"), "acme", "widgets", 1, time.Minute); !errors.Is(err, lease.ErrConflict) {
			t.Fatalf("acquire after a delivery with labels %v while the label is on: %v, want quarantined", labels, err)
		}
	}
	w.Forge.Unlabel("acme/widgets", 1, lease.QuarantineLabel)
	if _, err := w.Service.Apply(ctx, forge.Event{Kind: forge.EventLabels, RepoID: 1, Repo: "acme/widgets", Number: 1, Labels: []string{}}); err != nil {
		t.Fatal(err)
	}
	if got, err := w.Service.Acquire(ctx, w.As("bob"), "acme", "widgets", 1, time.Minute); err != nil {
		t.Fatalf("acquire once the label was removed: %+v %v", got, err)
	}
	if want := []string{"quarantined", "unlabelled", "quarantined"}; !slices.Equal(seen.all(), want) {
		t.Fatalf("the worker's outcomes: %v, want %v", seen.all(), want)
	}
}

// Replicas on one ledger: each runs the worker, and the forge gets one
// label and one comment.
func TestQuarantineToldOnceByReplicas(t *testing.T) {
	w, _ := quarantineWorld(t)
	other := w.NewService(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- other.RunQuarantine(ctx, lease.QuarantineOptions{}) }()
	defer func() {
		cancel()
		<-done
	}()
	lapse(t, w, "bob", 4)
	lapse(t, w, "alice", 4)
	leasetest.WaitFor(t, "the comment", func() bool { return len(w.Forge.Comments("acme/widgets", 4)) == 1 })
	// Both replicas have heard the lapse; neither posts again.
	leasetest.WaitFor(t, "the record of what the forge was told", func() bool {
		q, err := w.Ledger.QuarantineOf(ctx, models.Key{RepoID: 1, Issue: 4})
		return err == nil && q.Forged
	})
	if n := w.Forge.Calls("CommentOnce"); n != 1 {
		t.Fatalf("%d comments asked for, want 1", n)
	}
}
