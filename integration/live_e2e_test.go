package integration

import (
	"fmt"
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
	s, g, w := badgeSidecar(t)
	b := newBrowser(t)
	b.run(t, "open the issue list", chromedp.Navigate(g.URL+"/acme/widgets/issues?state=all"),
		chromedp.WaitVisible("#issue-list a.issue-title", chromedp.ByQuery))
	b.settled(t, s, "acme/widgets")
	waitMetric(t, s, "collab_lease_event_streams", 1)

	expect(t, run(t, s, w.Bob, lease("acquire", w.Widgets, w.OpenIssue, "--ttl", "30m")), 0, "bob claims the issue")
	took := b.badgeWithin(t, w.OpenIssue, "claimed by bob · ", time.Second)
	t.Logf("the claim showed %s after the acquire returned", took.Round(time.Millisecond))
	expect(t, run(t, s, w.Bob, lease("release", w.Widgets, w.OpenIssue)), 0, "bob releases it")
	took = b.badgeWithin(t, w.OpenIssue, "", time.Second)
	t.Logf("the release showed %s after it returned", took.Round(time.Millisecond))
	b.noErrors(t, "on the live issue list")
}
