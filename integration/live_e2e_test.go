package integration

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The badges kept current by the sidecar's lease events, in real
// Chromium on the real Gitea's pages.

// badgeWithin polls the page's badge of issue n until its text starts
// with want ("" for no badge), failing once within has passed.
func (b *browser) badgeWithin(t *testing.T, n int64, want string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	js := fmt.Sprintf(`(() => { const b = document.querySelector('.collab-lease-badge[data-collab-lease-issue="%d"]'); return b ? b.textContent : ''; })()`, n)
	for {
		var got string
		b.run(t, "read the badge", chromedp.Evaluate(js, &got))
		if (want == "" && got == "") || (want != "" && strings.HasPrefix(got, want)) {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("issue %d's badge is %q %s after the change, want %q", n, got, time.Since(start).Round(time.Millisecond), want)
		}
	}
}

// setHidden makes the page look hidden (another tab in front) or shown to
// its scripts, as the Page Visibility API tells them: headless Chromium
// keeps every page visible.
func (b *browser) setHidden(t *testing.T, hidden bool) {
	t.Helper()
	b.run(t, "set the page's visibility", chromedp.Evaluate(fmt.Sprintf(`(() => {
		Object.defineProperty(document, 'hidden', { configurable: true, get: () => %t });
		Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => %t ? 'hidden' : 'visible' });
		document.dispatchEvent(new Event('visibilitychange'));
	})()`, hidden, hidden), nil))
}

// noErrors fails on any console error, exception or failed request.
func (b *browser) noErrors(t *testing.T, where string) {
	t.Helper()
	if errs := b.takeErrors(); len(errs) != 0 {
		t.Fatalf("%s:\n%s", where, strings.Join(errs, "\n"))
	}
}

// An open issue list shows a claim made by another client within a
// second, without a reload, and drops it as soon as it is released.
func TestLiveBadgesInChromiumAgainstGitea(t *testing.T) {
	inThemes(t, func(t *testing.T, theme string) {
		s, g, w := badgeSidecar(t, theme)
		b := newBrowser(t, g)
		b.run(t, "open the issue list", chromedp.Navigate(g.URL+"/acme/widgets/issues?state=all"),
			chromedp.WaitVisible("#issue-list a.issue-title", chromedp.ByQuery))
		b.settled(t, s, "acme/widgets")
		b.theme(t, theme)
		waitMetric(t, s, "collab_lease_event_streams", 1)

		expect(t, run(t, s, w.Bob, lease("acquire", w.Widgets, w.OpenIssue, "--ttl", "30m")), 0, "bob claims the issue")
		took := b.badgeWithin(t, w.OpenIssue, "claimed by bob · ", time.Second)
		t.Logf("the claim showed %s after the acquire returned", took.Round(time.Millisecond))
		expect(t, run(t, s, w.Bob, lease("release", w.Widgets, w.OpenIssue)), 0, "bob releases it")
		took = b.badgeWithin(t, w.OpenIssue, "", time.Second)
		t.Logf("the release showed %s after it returned", took.Round(time.Millisecond))

		// Hidden (another tab in front), the page holds no stream; shown
		// again, it catches up at once and follows the events again.
		b.setHidden(t, true)
		waitMetric(t, s, "collab_lease_event_streams", 0)
		expect(t, run(t, s, w.Alice, lease("acquire", w.Widgets, w.OpenIssue, "--ttl", "30m")), 0, "alice claims the issue")
		b.setHidden(t, false)
		b.badgeWithin(t, w.OpenIssue, "claimed by alice · ", time.Second)
		waitMetric(t, s, "collab_lease_event_streams", 1)
		expect(t, run(t, s, w.Alice, lease("release", w.Widgets, w.OpenIssue)), 0, "alice releases it")
		b.badgeWithin(t, w.OpenIssue, "", time.Second)
		b.noErrors(t, "on the live issue list")
	})
}

// signIn signs u in to Gitea, then to the sidecar through Gitea's OAuth2
// (authorizing the application if Gitea asks), and returns to back.
func (b *browser) signIn(t *testing.T, g *Gitea, s *Sidecar, u *User, back string) {
	t.Helper()
	b.run(t, "sign in to Gitea as "+u.Login,
		chromedp.Navigate(g.URL+"/user/login"),
		chromedp.SendKeys("#user_name", u.Login, chromedp.ByQuery),
		chromedp.SendKeys("#password", u.Password, chromedp.ByQuery),
		chromedp.Submit("#password", chromedp.ByQuery),
		chromedp.WaitNotPresent("#password", chromedp.ByQuery),
		chromedp.Navigate(s.HTTPURL+"/oauth/login?return_to="+url.QueryEscape(back)))
	deadline := time.Now().Add(15 * time.Second)
	for {
		var loc string
		var ask bool
		b.run(t, "where the sign-in went", chromedp.Location(&loc),
			chromedp.Evaluate(`!!document.querySelector('#authorize-app')`, &ask))
		switch {
		case loc == back:
			return
		case ask:
			b.run(t, "authorize the sidecar", chromedp.Click("#authorize-app", chromedp.ByQuery))
		case time.Now().After(deadline):
			t.Fatalf("signing in to the sidecar ended at %s", loc)
		}
		time.Sleep(50 * time.Millisecond) // polling the page
	}
}

// history opens the issue page's claim history and returns its rows
// (header first) once it shows want tenures, the newest ending as ended.
func (b *browser) history(t *testing.T, want int, ended string) [][]string {
	t.Helper()
	var open bool
	b.run(t, "the history panel", chromedp.WaitVisible(".collab-lease-history summary", chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelector('.collab-lease-history').open`, &open))
	if !open {
		b.run(t, "open the history", chromedp.Click(".collab-lease-history summary", chromedp.ByQuery))
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		var rows [][]string
		b.run(t, "read the history", chromedp.Evaluate(
			`Array.from(document.querySelectorAll('.collab-lease-history tr')).map(r => Array.from(r.cells).map(c => c.textContent))`, &rows))
		if len(rows) == want+1 && rows[1][4] == ended {
			return rows
		}
		if time.Now().After(deadline) {
			t.Fatalf("history rows %q, want %d tenures, the newest %q", rows, want, ended)
		}
		time.Sleep(50 * time.Millisecond) // polling the page
	}
}

// The issue page shows the claim history, collapsed; a repository admin
// (and only an admin) gets a force-release button, which asks first and
// then frees the issue: the badge goes, the history says who forced it.
func TestClaimHistoryAndForceReleaseInChromiumAgainstGitea(t *testing.T) {
	inThemes(t, func(t *testing.T, theme string) {
		s, g, w := badgeSidecar(t, theme)
		expect(t, run(t, s, w.Alice, lease("acquire", w.Widgets, w.OpenIssue, "--ttl", "30m")), 0, "alice claims the issue")
		expect(t, run(t, s, w.Alice, lease("release", w.Widgets, w.OpenIssue)), 0, "alice releases it")
		expect(t, run(t, s, w.Bob, lease("acquire", w.Widgets, w.OpenIssue)), 0, "bob takes it")
		page := fmt.Sprintf("%s/acme/widgets/issues/%d", g.URL, w.OpenIssue)

		// Anyone who may read it sees the history, collapsed, and no button.
		b := newBrowser(t, g)
		b.run(t, "open the issue", chromedp.Navigate(page))
		b.badgeWithin(t, w.OpenIssue, "assigned to bob", 15*time.Second)
		b.theme(t, theme)
		var open bool
		b.run(t, "the history panel", chromedp.WaitVisible(".collab-lease-history summary", chromedp.ByQuery),
			chromedp.Evaluate(`document.querySelector('.collab-lease-history').open`, &open))
		if open {
			t.Fatal("the claim history is not collapsed")
		}
		rows := b.history(t, 2, "holds it")
		if strings.Join(rows[0], "|") != "Token|Holder|From|To|Ended" || rows[1][0] != "#2" || rows[1][1] != "bob" ||
			rows[1][3] != "" || rows[1][4] != "holds it" || rows[2][1] != "alice" || rows[2][4] != "released" {
			t.Fatalf("history %q", rows)
		}
		var buttons, badges int
		b.run(t, "no button", chromedp.Evaluate(`document.querySelectorAll('.collab-lease-force').length`, &buttons),
			chromedp.Evaluate(`document.querySelectorAll('.collab-lease-badge').length`, &badges))
		if buttons != 0 {
			t.Fatal("a force-release button for a visitor")
		}
		if badges != 1 { // drawn again and again as the page changed: still one
			t.Fatalf("%d badges on the issue page", badges)
		}
		b.noErrors(t, "the issue page, anonymous")

		// Olivia administers the repository.
		a := newBrowser(t, g)
		setUserTheme(t, g, w.Olivia, theme)
		a.signIn(t, g, s, w.Olivia, page)
		a.badgeWithin(t, w.OpenIssue, "assigned to bob", 15*time.Second)
		a.theme(t, theme)
		a.history(t, 2, "holds it")
		a.run(t, "the force-release button", chromedp.WaitVisible(".collab-lease-force", chromedp.ByQuery))
		a.screenshot(t, theme, "claim-history.png")
		a.run(t, "force release", chromedp.Click(".collab-lease-force", chromedp.ByQuery))
		a.badgeWithin(t, w.OpenIssue, "", 5*time.Second)
		rows = a.history(t, 2, "force released by olivia")
		if rows[1][1] != "bob" || rows[1][3] == "" {
			t.Fatalf("history after the force release %q", rows)
		}
		a.run(t, "the button goes", chromedp.WaitNotPresent(".collab-lease-force", chromedp.ByQuery))
		if errs := a.takeErrors(); len(errs) != 1 || errs[0] != fmt.Sprintf("dialog: Force-release #%d, claimed by bob?", w.OpenIssue) {
			t.Fatalf("the admin's page: want only the confirmation, got:\n%s", strings.Join(errs, "\n"))
		}
		// The anonymous page saw the release live, too.
		b.badgeWithin(t, w.OpenIssue, "", 5*time.Second)
		b.noErrors(t, "the issue page, anonymous, after the release")
	})
}
