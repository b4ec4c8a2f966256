package lease_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/lease"
	"github.com/collab-lease/collab-lease/plugin/leasetest"
)

// claimsOf renders a board's claims as "#n holder[·agent] title".
func claimsOf(b lease.Board) []string {
	out := []string{}
	for _, c := range b.Claims {
		who := c.Holder
		if c.Agent != "" {
			who += "·" + c.Agent
		}
		out = append(out, fmt.Sprintf("#%d %s %q", c.Number, who, c.Title))
	}
	return out
}

// The board shows each viewer what the list shows them, in the order
// asked, with titles, waiters and the claims that ended against their
// holder's will; a repository the viewer may not read is not found.
func TestBoardIsTheViewersList(t *testing.T) {
	w := newWorld(t)
	w.forge.SetTitle("acme/tools", 1, "<b>fix</b> the widget")
	w.forge.SetTitle("acme/tools", 2, "a pull request")
	a1, a2 := w.as("alice"), w.as("alice")
	a1.Agent, a2.Agent = "a1", "a2"
	for _, c := range []struct {
		v   lease.Viewer
		n   int64
		ttl time.Duration
	}{{a1, 1, time.Hour}, {w.as("bob"), 2, 10 * time.Minute}, {a2, 4, time.Minute}} {
		if _, err := w.svc.Acquire(bg, c.v, "acme", "tools", c.n, c.ttl); err != nil {
			t.Fatal(err)
		}
	}
	w.clock.Advance(2 * time.Minute) // a2's claim of #4 has lapsed

	board := func(who lease.Viewer, sort string) (lease.Board, error) {
		return w.svc.Board(bg, who, "acme", "tools", lease.BoardQuery{Sort: sort})
	}
	b, err := board(w.as("reader"), "")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(claimsOf(b)), `[#2 bob "a pull request" #1 alice·a1 "<b>fix</b> the widget"]`; got != want || b.Total != 2 {
		t.Fatalf("by expiry: %s (%d), want %s", got, b.Total, want)
	}
	if len(b.Ended) != 1 || b.Ended[0].Number != 4 || b.Ended[0].How != "expired" || b.Ended[0].Agent != "a2" || b.Claims[0].Pull != true {
		t.Fatalf("ended: %+v", b.Ended)
	}
	if b, _ := board(w.as("reader"), "-holder"); fmt.Sprint(claimsOf(b)) != `[#2 bob "a pull request" #1 alice·a1 "<b>fix</b> the widget"]` {
		t.Fatalf("by holder, descending: %v", claimsOf(b))
	}
	if b, _ := board(w.as("reader"), "issue"); claimsOf(b)[0] != `#1 alice·a1 "<b>fix</b> the widget"` {
		t.Fatalf("by number: %v", claimsOf(b))
	}
	// Dave reads issues only: no pull request's claim, nor its title.
	if b, err := board(w.as("dave"), ""); err != nil || fmt.Sprint(claimsOf(b)) != `[#1 alice·a1 "<b>fix</b> the widget"]` || len(b.Ended) != 1 {
		t.Fatalf("dave's board: %v %+v %v", claimsOf(b), b.Ended, err)
	}
	for _, v := range []lease.Viewer{w.as("eve"), {}} {
		if _, err := board(v, ""); !errors.Is(err, lease.ErrRepoNotFound) {
			t.Fatalf("%q's board of a private repository: %v", v.Login, err)
		}
	}

	// A waiter for #1 is counted on its claim.
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() {
		_, err := w.svc.AcquireWaitTold(ctx, w.as("bob"), "acme", "tools", 1, time.Hour, time.Hour, nil)
		done <- err
	}()
	leasetest.WaitFor(t, "the waiter on the board", func() bool {
		b, err := board(w.as("reader"), "issue")
		return err == nil && b.Claims[0].Waiters == 1
	})
	cancel()
	<-done
}

// The board of all: every repository with live claims the viewer may
// read, and nothing of the others.
func TestBoardsOfAll(t *testing.T) {
	w := newWorld(t)
	for _, r := range []string{"widgets", "tools"} {
		if _, err := w.svc.Acquire(bg, w.as("alice"), "acme", r, 1, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	for who, want := range map[string]string{"reader": "[acme/tools acme/widgets]", "eve": "[acme/widgets]", "": "[acme/widgets]"} {
		v := lease.Viewer{}
		if who != "" {
			v = w.as(who)
		}
		bs, err := w.svc.Boards(bg, v, lease.BoardQuery{})
		if err != nil {
			t.Fatal(err)
		}
		var repos []string
		for _, b := range bs {
			repos = append(repos, b.Repo)
		}
		if fmt.Sprint(repos) != want {
			t.Errorf("%q sees the boards of %v, want %s", who, repos, want)
		}
	}
	// The names are kept: a second look asks the forge for none.
	before := w.forge.Calls("RepoName")
	if _, err := w.svc.Boards(bg, w.as("reader"), lease.BoardQuery{}); err != nil || w.forge.Calls("RepoName") != before {
		t.Fatalf("a second look asked for %d names (%v)", w.forge.Calls("RepoName")-before, err)
	}
}
