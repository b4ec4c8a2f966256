package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// The issue page's Claim and Release buttons in real Chromium, on the real
// Gitea's pages.

// count is how many elements of the page match the CSS selector sel.
func (b *browser) count(t *testing.T, sel string) int {
	t.Helper()
	var n int
	b.run(t, "count "+sel, chromedp.Evaluate(fmt.Sprintf(`document.querySelectorAll(%q).length`, sel), &n))
	return n
}

// errorsBut fails on any console error, exception or failed request but
// those that name one of allowed.
func (b *browser) errorsBut(t *testing.T, where string, allowed ...string) {
	t.Helper()
	var left []string
	for _, e := range b.takeErrors() {
		ok := false
		for _, a := range allowed {
			ok = ok || strings.Contains(e, a)
		}
		if !ok {
			left = append(left, e)
		}
	}
	if len(left) != 0 {
		t.Fatalf("%s:\n%s", where, strings.Join(left, "\n"))
	}
}

// A writer signed in through Gitea claims an issue with the button, for a
// duration chosen from the list (by keyboard), and the badge says so; the
// button follows the claim as it changes, whoever changes it; a reader
// sees the badge and no button. Release frees the account's own claim and
// its agent's (asking first for an agent's); a refusal shows in one line.
func TestClaimButtonsInChromiumAgainstGitea(t *testing.T) {
	inThemes(t, func(t *testing.T, theme string) {
		s, g, w := badgeSidecar(t, theme)
		page := fmt.Sprintf("%s/acme/widgets/issues/%d", g.URL, w.OpenIssue)
		// The issue page asks the sidecar for the reservations of a claim
		// it shows, which this sidecar may not serve yet: not this test's.
		const reservations = "/reservations"

		// Bob writes the repository.
		a := newBrowser(t, g)
		setUserTheme(t, g, w.Bob, theme)
		a.signIn(t, g, s, w.Bob, page)
		a.run(t, "the Claim button", chromedp.WaitVisible(".collab-lease-claim-button", chromedp.ByQuery))
		a.theme(t, theme)
		var label string
		var values []string
		a.run(t, "the duration's list", chromedp.Evaluate(`document.querySelector('.collab-lease-claim select').labels[0].textContent`, &label),
			chromedp.Evaluate(`Array.from(document.querySelectorAll('.collab-lease-claim option')).map(o => o.value)`, &values))
		if !strings.HasPrefix(label, "Claim for") || strings.Join(values, ",") != ",30m,2h,24h" {
			t.Fatalf("the duration's list: label %q, values %q", label, values)
		}
		if n := a.count(t, ".collab-lease-release"); n != 0 {
			t.Fatal("a Release button on an unclaimed issue")
		}

		// Carol reads it only: no button, and no buttons' script.
		r := newBrowser(t, g)
		setUserTheme(t, g, w.Carol, theme)
		r.signIn(t, g, s, w.Carol, page)
		r.settled(t, s, "acme/widgets")
		r.run(t, "the history panel", chromedp.WaitVisible(".collab-lease-history summary", chromedp.ByQuery))
		var loaded int
		r.run(t, "the buttons' script", chromedp.Evaluate(
			`performance.getEntriesByType('resource').filter(e => e.name.includes('collab-lease-claim')).length`, &loaded))
		if n := r.count(t, ".collab-lease-claim"); n != 0 || loaded != 0 {
			t.Fatalf("a reader's page: %d button rows, the buttons' script loaded %d times", n, loaded)
		}
		r.noErrors(t, "the reader's page")

		// Bob chooses 30 minutes and claims, by keyboard.
		a.run(t, "claim for 30 minutes",
			chromedp.Focus(".collab-lease-claim select", chromedp.ByQuery),
			chromedp.SetValue(".collab-lease-claim select", "30m", chromedp.ByQuery),
			chromedp.Focus(".collab-lease-claim-button", chromedp.ByQuery),
			chromedp.KeyEvent(kb.Enter))
		a.badgeWithin(t, w.OpenIssue, "claimed by bob · ", 5*time.Second) // for 30 minutes: not "assigned"
		a.run(t, "the Release button", chromedp.WaitVisible(".collab-lease-release", chromedp.ByQuery))
		var focused string
		a.run(t, "the focus", chromedp.Evaluate(`document.activeElement.className`, &focused))
		if !strings.Contains(focused, "collab-lease-release") || a.count(t, ".collab-lease-claim-button") != 0 {
			t.Fatalf("after the claim: the focus is on %q, %d Claim buttons", focused, a.count(t, ".collab-lease-claim-button"))
		}
		r.badgeWithin(t, w.OpenIssue, "claimed by bob · ", 5*time.Second)
		if n := r.count(t, ".collab-lease-panel button"); n != 0 {
			t.Fatalf("the reader's page has %d buttons of ours", n)
		}
		a.screenshot(t, theme, "claim-buttons.png")

		// Bob releases with the button.
		a.run(t, "release", chromedp.Click(".collab-lease-release", chromedp.ByQuery))
		a.badgeWithin(t, w.OpenIssue, "", 5*time.Second)
		a.run(t, "the Claim button again", chromedp.WaitVisible(".collab-lease-claim-button", chromedp.ByQuery))
		r.badgeWithin(t, w.OpenIssue, "", 5*time.Second)

		// A claim made elsewhere takes the button away; its release brings
		// it back.
		expect(t, run(t, s, w.Alice, lease("acquire", w.Widgets, w.OpenIssue)), 0, "alice claims the issue over SSH")
		a.badgeWithin(t, w.OpenIssue, "assigned to alice", 5*time.Second)
		a.run(t, "no button while alice holds it", chromedp.WaitNotPresent(".collab-lease-claim button", chromedp.ByQuery))
		// The paths her claim reserves appear in the sidebar of both
		// pages as they are reserved (as text: a glob is anyone's
		// words), and leave with the claim.
		expect(t, run(t, s, w.Alice, fmt.Sprintf("collab-lease reserve %s 'src/<b>x</b>/**' docs/ --issue %d", w.Widgets.FullName(), w.OpenIssue)), 0, "alice reserves paths with her claim")
		for _, b := range []*browser{a, r} {
			b.run(t, "the claim's reservations in the sidebar", chromedp.Poll(
				`Array.from(document.querySelectorAll('.issue-content-right .collab-lease-paths code')).map(c => c.textContent).join(' ') === 'src/<b>x</b>/** docs/'`,
				nil, chromedp.WithPollingTimeout(5*time.Second)))
			if n := b.count(t, ".collab-lease-paths b"); n != 0 {
				t.Fatalf("a glob was read as markup: %d <b> in the sidebar", n)
			}
		}
		expect(t, run(t, s, w.Alice, lease("release", w.Widgets, w.OpenIssue)), 0, "alice releases it")
		r.run(t, "the reservations gone with the claim", chromedp.WaitNotPresent(".issue-content-right .collab-lease-paths code", chromedp.ByQuery))
		a.run(t, "the Claim button once it is free", chromedp.WaitVisible(".collab-lease-claim-button", chromedp.ByQuery))

		// A claim of one of Bob's agents is his account's: he may release it,
		// and is asked first.
		expect(t, run(t, s, w.Bob, lease("acquire", w.Widgets, w.OpenIssue, "--agent", "agent-7")), 0, "bob's agent-7 claims it")
		a.badgeWithin(t, w.OpenIssue, "assigned to bob · agent-7", 5*time.Second)
		a.run(t, "release the agent's claim", chromedp.WaitVisible(".collab-lease-release", chromedp.ByQuery),
			chromedp.Click(".collab-lease-release", chromedp.ByQuery))
		a.badgeWithin(t, w.OpenIssue, "", 5*time.Second)
		var errs []string
		for _, e := range a.takeErrors() {
			if !strings.Contains(e, reservations) {
				errs = append(errs, e)
			}
		}
		if want := fmt.Sprintf("dialog: Release #%d, claimed by bob · agent-7?", w.OpenIssue); len(errs) != 1 || errs[0] != want {
			t.Fatalf("the writer's page: want only the confirmation, got:\n%s", strings.Join(errs, "\n"))
		}

		// A refusal is one line under the button: a closed issue.
		a.run(t, "open the closed issue", chromedp.Navigate(fmt.Sprintf("%s/acme/widgets/issues/%d", g.URL, w.ClosedIssue)),
			chromedp.WaitVisible(".collab-lease-claim-button", chromedp.ByQuery),
			chromedp.Click(".collab-lease-claim-button", chromedp.ByQuery),
			chromedp.WaitVisible(".collab-lease-error", chromedp.ByQuery))
		var line, role string
		a.run(t, "the refusal", chromedp.Text(".collab-lease-error", &line, chromedp.ByQuery),
			chromedp.AttributeValue(".collab-lease-error", "role", &role, nil, chromedp.ByQuery))
		if line != "Issue is closed" || role != "alert" {
			t.Fatalf("the refusal's line %q (role %q)", line, role)
		}
		a.errorsBut(t, "the closed issue's page", "409", reservations)
		r.errorsBut(t, "the reader's page, at the end", reservations)
	})
}
