package lease_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/forgetest"
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
		all, err := w.svc.Boards(bg, v, lease.BoardQuery{})
		if err != nil || all.More || all.Unchecked != 0 {
			t.Fatalf("%+v %v", all, err)
		}
		var repos []string
		for _, b := range all.Boards {
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
	// Gitea not answering for the repositories costs their boards, not
	// the page: they are counted as unchecked.
	w.forge.SetHook(func(_ context.Context, method string) error {
		if method == "Repo" {
			return forge.ErrUnavailable
		}
		return nil
	})
	all, err := w.svc.Boards(bg, w.as("reader"), lease.BoardQuery{})
	if err != nil || len(all.Boards) != 0 || all.Unchecked != 2 || all.More {
		t.Fatalf("with Gitea down: %+v %v", all, err)
	}
	// A failing ledger fails the page.
	w.forge.SetHook(nil)
	w.ledger.Close()
	if _, err := w.svc.Boards(bg, w.as("reader"), lease.BoardQuery{}); err == nil {
		t.Fatal("the board of all with the ledger closed: no error")
	}
}

// The board of all shows the first MaxBoardRepos repositories by name
// that the viewer may read, looking at few more than it shows, and says
// that there are more.
func TestBoardsOfAllAreBounded(t *testing.T) {
	w := newWorld(t)
	const n = lease.MaxBoardRepos + 50
	for i := range n {
		name := fmt.Sprintf("many/r%03d", i)
		w.forge.AddRepo(name, int64(1000+i), i%2 == 1)
		w.forge.Grant(name, "alice", forgetest.Write)
		if i%2 == 0 || i > n-10 {
			w.forge.Grant(name, "reader", forgetest.Read)
		}
		w.forge.AddIssue(name, 1, false, false)
		if _, err := w.svc.Acquire(bg, w.as("alice"), "many", fmt.Sprintf("r%03d", i), 1, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	// reader may read the even ones and the last nine: 75 + 5 of 150.
	before := w.forge.Calls("Repo")
	all, err := w.svc.Boards(bg, w.as("reader"), lease.BoardQuery{})
	if err != nil || len(all.Boards) != 80 || all.More || all.Unchecked != 0 {
		t.Fatalf("reader: %d boards, %+v, %v", len(all.Boards), all.More, err)
	}
	if asked := w.forge.Calls("Repo") - before; asked != n {
		t.Errorf("reader: %d checks, want %d", asked, n)
	}
	// alice may read all 150: the first 100 by name, and one batch more
	// looked at to know there are more.
	before = w.forge.Calls("Repo")
	all, err = w.svc.Boards(bg, w.as("alice"), lease.BoardQuery{})
	if err != nil || len(all.Boards) != lease.MaxBoardRepos || !all.More || all.Boards[0].Repo != "many/r000" ||
		all.Boards[lease.MaxBoardRepos-1].Repo != fmt.Sprintf("many/r%03d", lease.MaxBoardRepos-1) {
		t.Fatalf("alice: %d boards, more %v, %v", len(all.Boards), all.More, err)
	}
	if asked := w.forge.Calls("Repo") - before; asked >= n || asked <= lease.MaxBoardRepos {
		t.Errorf("alice: %d checks for %d boards of %d", asked, lease.MaxBoardRepos, n)
	}
}
