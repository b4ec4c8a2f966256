package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

// The board in real Chromium, reached from the link the badge script puts
// in Gitea's repository header, in each of Gitea's themes.

// boardRows returns the board's claims as issue number -> holder cell.
func (b *browser) boardRows(t *testing.T) map[string]string {
	t.Helper()
	var pairs [][]string
	b.run(t, "read the board", chromedp.Evaluate(
		`Array.from(document.querySelectorAll('#board tr[data-issue]')).map(r => [r.dataset.issue, r.cells[1].textContent.trim()])`, &pairs))
	out := map[string]string{}
	for _, p := range pairs {
		out[p[0]] = p[1]
	}
	return out
}

// boardRowWithin polls the board until issue n's row is there (or, with
// gone, is not), failing once within has passed.
func (b *browser) boardRowWithin(t *testing.T, n int64, gone bool, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		_, there := b.boardRows(t)[fmt.Sprint(n)]
		if there != gone {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("issue %d's row on the board: there %t %s after the change", n, there, time.Since(start).Round(time.Millisecond))
		}
	}
}

// noOverflow fails if the page is wider than the viewport.
func (b *browser) noOverflow(t *testing.T, where string) {
	t.Helper()
	var widths []int
	b.run(t, "measure the page", chromedp.Evaluate(`[document.documentElement.scrollWidth, document.documentElement.clientWidth, document.body.scrollWidth]`, &widths))
	if widths[0] > widths[1] || widths[2] > widths[1] {
		t.Fatalf("%s overflows: scrollWidth %d (body %d), clientWidth %d", where, widths[0], widths[2], widths[1])
	}
}

func TestBoardInChromiumAgainstGitea(t *testing.T) {
	inThemes(t, func(t *testing.T, theme string) {
		s, g, w := badgeSidecar(t, theme)
		fresh := newIssues(t, g, w, 2, `a <b>bold</b> & "quoted" title`)
		person, later := fresh[0], fresh[1]
		expect(t, run(t, s, w.Alice, lease("acquire", w.Widgets, w.OpenIssue, "--ttl", "30m", "--agent", "agent-1")), 0, "alice's agent-1 claims the issue")
		expect(t, run(t, s, w.Alice, lease("acquire", w.Widgets, w.PullRequest, "--ttl", "2h", "--agent", "agent-2")), 0, "alice's agent-2 claims the pull request")
		expect(t, run(t, s, w.Bob, lease("acquire", w.Widgets, person, "--ttl", "45m")), 0, "bob claims an issue")
		expect(t, run(t, s, w.Alice, lease("acquire", w.Secret, w.SecretIssue, "--ttl", "1h")), 0, "alice claims the private issue")
		b := newBrowser(t, g)

		// Gitea's issue list: the header links the repository's board, in
		// the theme the page is in.
		link := `document.querySelector('.overflow-menu-items a[href*="/claims"]')`
		b.run(t, "open the issue list", chromedp.Navigate(g.URL+"/acme/widgets/issues"),
			chromedp.WaitVisible(".overflow-menu-items a[href*='/claims']", chromedp.ByQuery))
		var href, text string
		b.run(t, "read the header link", chromedp.Evaluate(link+`.href`, &href), chromedp.Evaluate(link+`.textContent`, &text))
		if want := s.HTTPURL + "/acme/widgets/claims?theme=" + theme; href != want || text != "Claims" {
			t.Fatalf("the header's link: %q %q, want %q", text, href, want)
		}
		b.run(t, "follow it", chromedp.Evaluate(link+`.click()`, nil), chromedp.WaitVisible("#board tr[data-issue]", chromedp.ByQuery))
		waitMetric(t, s, "collab_lease_event_streams", 1)

		// Each claim, its holder and agent, the title escaped, the expiry
		// counting down; the page in Gitea's theme.
		rows := b.boardRows(t)
		want := map[string]string{fmt.Sprint(w.OpenIssue): "alice · agent-1", fmt.Sprint(w.PullRequest): "alice · agent-2", fmt.Sprint(person): "bob"}
		if fmt.Sprint(rows) != fmt.Sprint(want) {
			t.Fatalf("the board's claims: %v, want %v", rows, want)
		}
		var title string
		b.run(t, "read a title", chromedp.Evaluate(fmt.Sprintf(`document.querySelector('tr[data-issue="%d"] .cl-title').textContent`, person), &title))
		if title != `a <b>bold</b> & "quoted" title 1` {
			t.Fatalf("the title reads %q", title)
		}
		left := fmt.Sprintf(`document.querySelector('tr[data-issue="%d"] [data-left]').textContent`, w.OpenIssue)
		var first, now string
		b.run(t, "read the expiry", chromedp.Evaluate(left, &first))
		if !strings.HasPrefix(first, "29m ") && !strings.HasPrefix(first, "30m ") {
			t.Fatalf("the 30-minute claim expires in %q", first)
		}
		for deadline := time.Now().Add(5 * time.Second); ; {
			b.run(t, "read the expiry", chromedp.Evaluate(left, &now))
			if now != first {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the expiry stays at %q", now)
			}
		}
		var dataTheme, background string
		b.run(t, "read the theme", chromedp.Evaluate(`document.documentElement.dataset.theme`, &dataTheme),
			chromedp.Evaluate(`getComputedStyle(document.body).backgroundColor`, &background))
		wantTheme, wantBackground := "light", "rgb(255, 255, 255)"
		if theme == "gitea-dark" {
			wantTheme, wantBackground = "dark", "rgb(30, 31, 32)"
		}
		if dataTheme != wantTheme || background != wantBackground {
			t.Fatalf("the board is in theme %q on %s, want %q on %s", dataTheme, background, wantTheme, wantBackground)
		}
		b.screenshot(t, theme, "board.png")

		// A claim over SSH shows within a second, without a reload; its
		// release takes it away as soon.
		expect(t, run(t, s, w.Bob, lease("acquire", w.Widgets, later, "--ttl", "10m")), 0, "bob claims another issue")
		took := b.boardRowWithin(t, later, false, time.Second)
		t.Logf("the claim showed %s after the acquire returned", took.Round(time.Millisecond))
		expect(t, run(t, s, w.Bob, lease("release", w.Widgets, later)), 0, "bob releases it")
		took = b.boardRowWithin(t, later, true, time.Second)
		t.Logf("the release showed %s after it returned", took.Round(time.Millisecond))

		// Sorting by holder, in place.
		b.run(t, "sort by holder", chromedp.Click(`.cl-sorts a[data-sort="holder"]`, chromedp.ByQuery))
		var order []string
		b.run(t, "read the order", chromedp.Evaluate(`Array.from(document.querySelectorAll('#board tr[data-issue]')).map(r => r.cells[1].textContent.trim())`, &order))
		if fmt.Sprint(order) != "[alice · agent-1 alice · agent-2 bob]" {
			t.Fatalf("sorted by holder: %v", order)
		}

		b.noErrors(t, "the board, at full width")

		// 375 px wide (a phone): nothing overflows.
		b.run(t, "a phone's width", emulation.SetDeviceMetricsOverride(375, 740, 2, true), chromedp.Reload(),
			chromedp.WaitVisible("#board tr[data-issue]", chromedp.ByQuery))
		b.noOverflow(t, "the board at 375 px")
		b.noErrors(t, "the board at 375 px")

		// The private repository's board: nothing for an anonymous viewer
		// (as a missing repository's), and a link to sign in; Carol,
		// signed in through Gitea, sees its claim.
		board := s.HTTPURL + "/acme/secret/claims"
		b.run(t, "the private board, anonymous", chromedp.Navigate(board), chromedp.WaitVisible("#board h1", chromedp.ByQuery))
		var body string
		b.run(t, "read the page", chromedp.OuterHTML("#board", &body))
		if strings.Contains(body, "data-issue") || !strings.Contains(body, "Not found") {
			t.Fatalf("an anonymous viewer's private board: %s", body)
		}
		b.noOverflow(t, "the not-found board at 375 px")
		b.takeErrors() // the 404
		setUserTheme(t, g, w.Carol, theme)
		b.run(t, "sign in to Gitea", append(signInToGitea(g, w.Carol),
			chromedp.Navigate(board),
			chromedp.WaitVisible("#board a[href*='/oauth/login']", chromedp.ByQuery))...)
		b.takeErrors() // the 404: the sidecar does not know Carol yet
		b.run(t, "sign in to the sidecar",
			chromedp.Click("#board a[href*='/oauth/login']", chromedp.ByQuery),
			chromedp.WaitVisible("#authorize-app", chromedp.ByQuery),
			chromedp.Click("#authorize-app", chromedp.ByQuery),
			chromedp.WaitVisible("#board tr[data-issue]", chromedp.ByQuery))
		if rows := b.boardRows(t); fmt.Sprint(rows) != fmt.Sprint(map[string]string{fmt.Sprint(w.SecretIssue): "alice"}) {
			t.Fatalf("Carol's private board: %v", rows)
		}
		var loc string
		b.run(t, "location", chromedp.Location(&loc))
		if loc != board {
			t.Fatalf("sign-in returned to %s, not the board", loc)
		}
		b.noErrors(t, "the private board, signed in")
	})
}
