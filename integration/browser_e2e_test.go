package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// The badges in real headless Chromium, on the real Gitea's pages, with the
// footer written by the real `collab-sidecar install`.

// The themes every browser test runs in: Gitea 1.26's light and dark.
var themes = []string{"gitea-light", "gitea-dark"}

// inThemes runs test once in each theme, as a subtest named for it.
func inThemes(t *testing.T, test func(t *testing.T, theme string)) {
	for _, theme := range themes {
		t.Run(theme, func(t *testing.T) { test(t, theme) })
	}
}

// badgeSidecar is a sidecar installed into the shared Gitea's footer (and
// registered as its OAuth2 application), with Gitea restarted to load the
// footer and to show theme to visitors. The footer is restored when the
// test ends.
func badgeSidecar(t *testing.T, theme string) (*Sidecar, *Gitea, *World) {
	t.Helper()
	g, w, bin := shared(t)
	setDefaultTheme(t, g, theme)
	restoreFooterAtEnd(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := StartInstalled(ctx, SidecarOptions{Binary: bin, Gitea: g, DataDir: filepath.Join(t.TempDir(), "data")}, g.Custom)
	if err != nil {
		t.Fatal(err)
	}
	stopAtEnd(t, s)
	return s, g, w
}

// restoreFooterAtEnd puts the shared Gitea's footer back as it is now
// when the test ends.
func restoreFooterAtEnd(t *testing.T, g *Gitea) {
	t.Helper()
	footer := filepath.Join(g.Custom, "templates", "custom", "footer.tmpl")
	before, beforeErr := os.ReadFile(footer)
	t.Cleanup(func() {
		if beforeErr != nil {
			_ = os.Remove(footer)
		} else {
			_ = os.WriteFile(footer, before, 0o644)
		}
	})
}

// setDefaultTheme sets the theme Gitea shows visitors ([ui] DEFAULT_THEME
// of app.ini), from its next start on; Gitea's own default comes back when
// the test ends.
func setDefaultTheme(t *testing.T, g *Gitea, theme string) {
	t.Helper()
	set := func(theme string) error {
		b, err := os.ReadFile(g.AppIni)
		if err != nil {
			return err
		}
		line := "DEFAULT_THEME = " + theme
		re := regexp.MustCompile(`(?m)^DEFAULT_THEME\s*=.*$`)
		if re.Match(b) {
			b = re.ReplaceAll(b, []byte(line))
		} else {
			b = append(b, []byte("\n[ui]\n"+line+"\n")...)
		}
		return os.WriteFile(g.AppIni, b, 0o600)
	}
	if err := set(theme); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = set("gitea-auto") })
}

// setUserTheme sets the theme Gitea shows u, signed in.
func setUserTheme(t *testing.T, g *Gitea, u *User, theme string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := g.As(u.Login).Do(ctx, "PATCH", "/user/settings", map[string]any{"theme": theme}, nil); err != nil {
		t.Fatalf("set %s's theme: %v", u.Login, err)
	}
}

// signInToGitea are the steps of signing in to Gitea as u, in its login
// form.
func signInToGitea(g *Gitea, u *User) []chromedp.Action {
	return []chromedp.Action{
		chromedp.Navigate(g.URL + "/user/login"),
		chromedp.SendKeys("#user_name", u.Login, chromedp.ByQuery),
		chromedp.SendKeys("#password", u.Password, chromedp.ByQuery),
		chromedp.Submit("#password", chromedp.ByQuery),
		chromedp.WaitNotPresent("#password", chromedp.ByQuery),
	}
}

// theme checks that the page is shown in want.
func (b *browser) theme(t *testing.T, want string) {
	t.Helper()
	var got string
	b.run(t, "the page's theme", chromedp.Evaluate(`document.documentElement.dataset.theme`, &got))
	if got != want {
		t.Fatalf("the page is in theme %q, want %q", got, want)
	}
}

// screenshot takes a picture of the whole page: into docs/name, for the
// README, in the light theme with COLLAB_UPDATE_SCREENSHOT set; else into
// a temporary directory (the taking is tested all the same).
func (b *browser) screenshot(t *testing.T, theme, name string) {
	t.Helper()
	var png []byte
	b.run(t, "screenshot", chromedp.FullScreenshot(&png, 100))
	shot := filepath.Join(t.TempDir(), name)
	if os.Getenv("COLLAB_UPDATE_SCREENSHOT") != "" && theme == "gitea-light" {
		root, _ := moduleRoot(context.Background())
		shot = filepath.Join(root, "docs", name)
	}
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// browser is a fresh headless Chromium (its own profile) that records
// console errors, uncaught exceptions, failed loads and requests answered
// with an error status.
type browser struct {
	ctx    context.Context
	mu     sync.Mutex
	errors []string
	urls   map[network.RequestID]string
}

// The pages it is pointed at must be Gitea's real ones: g must serve its
// real frontend (make gitea-frontend builds it; make test does first),
// else the test fails rather than checking unstyled pages that run none
// of Gitea's scripts.
func newBrowser(t *testing.T, g *Gitea) *browser {
	t.Helper()
	if !g.RealFrontend {
		t.Fatal("the browser tests need Gitea's real frontend, which is not built: run make gitea-frontend (make test does)")
	}
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("Chromium is required for the browser tests (apt-get install chromium)")
	}
	// The profile is removed by hand: Chromium's helper processes may still
	// be writing to it for a moment after the browser is gone, which
	// t.TempDir's cleanup would report as a failure.
	profile, err := os.MkdirTemp("", "collab-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.UserDataDir(profile),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.WindowSize(1280, 800),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelCtx()
		cancelAlloc()
		for i := 0; i < 50 && os.RemoveAll(profile) != nil; i++ {
			time.Sleep(20 * time.Millisecond)
		}
	})
	b := &browser{ctx: ctx, urls: map[network.RequestID]string{}}
	chromedp.ListenTarget(ctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch ev := ev.(type) {
		case *network.EventRequestWillBeSent:
			b.urls[ev.RequestID] = ev.Request.URL
		case *network.EventResponseReceived:
			if ev.Response.Status >= 400 {
				b.errors = append(b.errors, fmt.Sprintf("request: %d %s", ev.Response.Status, ev.Response.URL))
			}
		case *network.EventLoadingFailed:
			// A load the page gave up on (it navigated away, or closed an
			// event stream) is no failure.
			if !ev.Canceled {
				b.errors = append(b.errors, fmt.Sprintf("request: %s %s", ev.ErrorText, b.urls[ev.RequestID]))
			}
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.APITypeError || ev.Type == runtime.APITypeAssert {
				var parts []string
				for _, a := range ev.Args {
					parts = append(parts, string(a.Value)+a.Description)
				}
				line := strings.Join(parts, " ")
				// Gitea's own frontend reports, as an error, that its
				// init functions took long: a busy machine's, not ours.
				if strings.Contains(line, "slow init functions took") {
					break
				}
				b.errors = append(b.errors, "console: "+line)
			}
		case *runtime.EventExceptionThrown:
			b.errors = append(b.errors, "exception: "+ev.ExceptionDetails.Error())
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.LevelError {
				b.errors = append(b.errors, "log: "+ev.Entry.Text+" "+ev.Entry.URL)
			}
		case *page.EventJavascriptDialogOpening:
			b.errors = append(b.errors, "dialog: "+ev.Message)
			go chromedp.Run(ctx, page.HandleJavaScriptDialog(true))
		}
	})
	if err := chromedp.Run(ctx, log.Enable(), runtime.Enable(), network.Enable()); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *browser) run(t *testing.T, what string, actions ...chromedp.Action) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func (b *browser) takeErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.errors
	b.errors = nil
	return e
}

// badges returns issue number -> badge text of the page's badges, once the
// script has had its say: it polls (with a deadline) until want badges are
// drawn, then reads them.
func (b *browser) badges(t *testing.T, want int) map[string]string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var got map[string]string
	for {
		got = map[string]string{}
		var pairs [][]string
		b.run(t, "read badges", chromedp.Evaluate(
			`Array.from(document.querySelectorAll('.collab-lease-badge')).map(b => [b.dataset.collabLeaseIssue, b.textContent])`, &pairs))
		for _, p := range pairs {
			got[p[0]] = p[1]
		}
		if len(got) >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // polling the page, not waiting for a clock
	}
	return got
}

// settled waits until the script has fetched the page's leases, so a
// check for "no badge" is not merely too early.
func (b *browser) settled(t *testing.T, s *Sidecar, repo string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var n int
		b.run(t, "count lease fetches", chromedp.Evaluate(fmt.Sprintf(
			`performance.getEntriesByType('resource').filter(e => e.name.startsWith(%q) && e.responseEnd > 0).length`,
			s.HTTPURL+"/api/v1/repos/"+repo+"/leases"), &n))
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the badge script never asked the sidecar for %s's leases", repo)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestBadgesInChromiumAgainstGitea(t *testing.T) {
	inThemes(t, func(t *testing.T, theme string) {
		s, g, w := badgeSidecar(t, theme)
		expect(t, run(t, s, w.Alice, lease("acquire", w.Widgets, w.OpenIssue, "--ttl", "30m")), 0, "alice claims the issue")
		expect(t, run(t, s, w.Bob, lease("acquire", w.Widgets, w.PullRequest, "--agent", "agent-7")), 0, "bob's agent-7 is assigned the pull request")
		b := newBrowser(t, g)
		open := fmt.Sprint(w.OpenIssue)

		// The issue list: a badge on the claimed issue, none on the others.
		b.run(t, "open the issue list", chromedp.Navigate(g.URL+"/acme/widgets/issues?state=all"))
		got := b.badges(t, 1)
		if len(got) != 1 || !strings.HasPrefix(got[open], "claimed by alice · ") || !strings.HasSuffix(got[open], "m left") {
			t.Fatalf("issue list badges: %v", got)
		}
		b.theme(t, theme)
		var beside string
		b.run(t, "badge placement", chromedp.Evaluate(
			`document.querySelector('.collab-lease-badge').previousElementSibling.getAttribute('href')`, &beside))
		if !strings.HasSuffix(beside, "/acme/widgets/issues/"+open) {
			t.Fatalf("badge is next to %q", beside)
		}
		b.screenshot(t, theme, "badge-issue-list.png")

		// The pull request list: the open-ended claim reads "assigned to",
		// naming the agent of the account that holds it.
		b.run(t, "open the pull requests", chromedp.Navigate(g.URL+"/acme/widgets/pulls"))
		if got := b.badges(t, 1); got[fmt.Sprint(w.PullRequest)] != "assigned to bob · agent-7" {
			t.Fatalf("pull request badges: %v", got)
		}

		// The issue page: the badge stands by the title.
		b.run(t, "open the issue", chromedp.Navigate(fmt.Sprintf("%s/acme/widgets/issues/%d", g.URL, w.OpenIssue)))
		if got := b.badges(t, 1); !strings.HasPrefix(got[open], "claimed by alice") {
			t.Fatalf("issue page badges: %v", got)
		}
		var inTitle bool
		b.run(t, "badge in title", chromedp.Evaluate(`!!document.querySelector('#issue-title-display h1 .collab-lease-badge')`, &inTitle))
		if !inTitle {
			t.Fatal("the issue page's badge is not by the title")
		}

		// An issue nobody claims: no badge, once the script has looked.
		b.run(t, "open an unclaimed issue", chromedp.Navigate(fmt.Sprintf("%s/acme/widgets/issues/%d", g.URL, w.ClosedIssue)))
		b.settled(t, s, "acme/widgets")
		if got := b.badges(t, 0); len(got) != 0 {
			t.Fatalf("badges on an unclaimed issue: %v", got)
		}
		if errs := b.takeErrors(); len(errs) != 0 {
			t.Fatalf("console errors on pages with claims:\n%s", strings.Join(errs, "\n"))
		}

		// Thirty-one minutes later (the page's clock moved on), the claim has
		// expired and a reload shows no badge; the open-ended one stays.
		b.run(t, "move the page clock", chromedp.ActionFunc(func(ctx context.Context) error {
			_, err := page.AddScriptToEvaluateOnNewDocument(
				`(() => { const skew = 31 * 60 * 1000, now = Date.now; Date.now = () => now() + skew; })()`).Do(ctx)
			return err
		}))
		b.run(t, "reload the issue list", chromedp.Navigate(g.URL+"/acme/widgets/issues?state=all"))
		b.settled(t, s, "acme/widgets")
		if got := b.badges(t, 0); len(got) != 0 {
			t.Fatalf("expired claim still drawn: %v", got)
		}
		b.run(t, "reload the pull requests", chromedp.Navigate(g.URL+"/acme/widgets/pulls"))
		if got := b.badges(t, 1); got[fmt.Sprint(w.PullRequest)] != "assigned to bob · agent-7" {
			t.Fatalf("open-ended claim after the clock moved: %v", got)
		}
		if errs := b.takeErrors(); len(errs) != 0 {
			t.Fatalf("console errors:\n%s", strings.Join(errs, "\n"))
		}

		// The sidecar goes away (and with it the badge script Gitea's footer
		// loads from it): no badge, and Gitea's page still works; the failed
		// loads are the only complaint, with no exception and no dialog.
		if err := s.Stop(20 * time.Second); err != nil {
			t.Fatal(err)
		}
		b.run(t, "the issue list without the sidecar", chromedp.Navigate(g.URL+"/acme/widgets/issues?state=all"),
			chromedp.WaitVisible("#issue-list a.issue-title", chromedp.ByQuery))
		if got := b.badges(t, 0); len(got) != 0 {
			t.Fatalf("badges with the sidecar down: %v", got)
		}
		for _, e := range b.takeErrors() {
			if !strings.HasPrefix(e, "log: ") && !strings.HasPrefix(e, "request: ") {
				t.Fatalf("with the sidecar down: %s", e)
			}
		}
	})
}

// A private repository: no claim for a viewer the sidecar does not know;
// after signing in to Gitea and following "sign in to see claims", the
// badge shows.
func TestPrivateBadgesNeedSignInInChromiumAgainstGitea(t *testing.T) {
	inThemes(t, func(t *testing.T, theme string) {
		s, g, w := badgeSidecar(t, theme)
		expect(t, run(t, s, w.Alice, lease("acquire", w.Secret, w.SecretIssue, "--ttl", "1h")), 0, "alice claims the private issue")
		b := newBrowser(t, g)
		list := g.URL + "/acme/secret/issues"

		// Anonymous: Gitea itself hides the repository; nothing of the claim shows.
		b.run(t, "anonymous visit", chromedp.Navigate(list))
		var html string
		b.run(t, "read page", chromedp.OuterHTML("html", &html))
		if strings.Contains(html, "collab-lease-badge") || strings.Contains(html, "claimed by") {
			t.Fatal("a claim on a private repository shown to an anonymous visitor")
		}
		b.takeErrors() // Gitea's own 404 page logs a failed load

		// Carol signs in to Gitea (she may read acme/secret); the sidecar does
		// not know her yet: no badge, a sign-in link instead.
		setUserTheme(t, g, w.Carol, theme)
		b.run(t, "sign in to Gitea", append(signInToGitea(g, w.Carol),
			chromedp.Navigate(list),
			chromedp.WaitVisible(".collab-lease-signin a", chromedp.ByQuery))...)
		if got := b.badges(t, 0); len(got) != 0 {
			t.Fatalf("badges before signing in to the sidecar: %v", got)
		}
		b.theme(t, theme)
		b.takeErrors() // the 404 of the lease request before sign-in

		// Follow the link: Gitea asks Carol to authorize the application once,
		// then she is back on the list, and the claim shows.
		b.run(t, "follow sign in", chromedp.Click(".collab-lease-signin a", chromedp.ByQuery))
		b.run(t, "authorize", chromedp.WaitVisible("#authorize-app", chromedp.ByQuery), chromedp.Click("#authorize-app", chromedp.ByQuery))
		got := b.badges(t, 1)
		if !strings.HasPrefix(got[fmt.Sprint(w.SecretIssue)], "claimed by alice") {
			t.Fatalf("after signing in: badges %v", got)
		}
		var loc string
		b.run(t, "location", chromedp.Location(&loc))
		if !strings.HasPrefix(loc, list) {
			t.Fatalf("sign-in returned to %s, not the list", loc)
		}
		var links int
		b.run(t, "no sign-in link", chromedp.Evaluate(`document.querySelectorAll('.collab-lease-signin').length`, &links))
		if links != 0 {
			t.Fatal("sign-in link still shown after signing in")
		}
		if errs := b.takeErrors(); len(errs) != 0 {
			t.Fatalf("console errors after sign-in:\n%s", strings.Join(errs, "\n"))
		}
	})
}

// tamperProxy stands between the browser and a real sidecar: it passes
// everything through, and once tamper is set it changes one byte of every
// script it passes (in the script's opening comment, so the script would
// still run as it did).
type tamperProxy struct {
	*httptest.Server
	tamper atomic.Bool
}

func newTamperProxy(t *testing.T, to string) *tamperProxy {
	t.Helper()
	target, err := url.Parse(to)
	if err != nil {
		t.Fatal(err)
	}
	p := &tamperProxy{}
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Header.Del("Accept-Encoding") // plain bytes, to change one
	}}
	rp.ModifyResponse = func(resp *http.Response) error {
		if !p.tamper.Load() || resp.StatusCode != http.StatusOK || !strings.HasSuffix(resp.Request.URL.Path, ".js") {
			return nil
		}
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return err
		}
		if !bytes.HasPrefix(b, []byte("/* collab-lease")) {
			return fmt.Errorf("unexpected script: %.40q", b)
		}
		b[3] = 'C' // "/* Collab-lease": still a comment
		resp.Body = io.NopCloser(bytes.NewReader(b))
		resp.ContentLength = int64(len(b))
		resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
		resp.Header.Del("ETag")
		return nil
	}
	p.Server = httptest.NewServer(rp)
	t.Cleanup(p.Close)
	return p
}

// The footer pins the badge script by its SHA-384: Chromium runs the
// sidecar's script on Gitea's pages only if its bytes are the ones install
// saw. Through a proxy that passes them faithfully the badge shows; with
// one byte changed, a fresh browser refuses the script (no badge, not even
// a request for leases) and says why.
func TestTamperedBadgeScriptIsRefusedInChromiumAgainstGitea(t *testing.T) {
	g, w, bin := shared(t)
	restoreFooterAtEnd(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o := SidecarOptions{Binary: bin, Gitea: g, DataDir: filepath.Join(t.TempDir(), "data")}
	s, err := StartSidecar(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	stopAtEnd(t, s)
	proxy := newTamperProxy(t, s.HTTPURL)
	if _, err := Install(ctx, o, proxy.URL, g.Custom); err != nil {
		t.Fatal(err)
	}
	if err := g.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	expect(t, run(t, s, w.Alice, lease("acquire", w.Widgets, w.OpenIssue, "--ttl", "30m")), 0, "alice claims the issue")
	list := g.URL + "/acme/widgets/issues?state=all"

	b := newBrowser(t, g)
	b.run(t, "open the issue list", chromedp.Navigate(list))
	if got := b.badges(t, 1); !strings.HasPrefix(got[fmt.Sprint(w.OpenIssue)], "claimed by alice") {
		t.Fatalf("badges through a faithful proxy: %v", got)
	}
	if errs := b.takeErrors(); len(errs) != 0 {
		t.Fatalf("console errors through a faithful proxy:\n%s", strings.Join(errs, "\n"))
	}

	proxy.tamper.Store(true)
	b = newBrowser(t, g) // nothing cached
	b.run(t, "open the issue list", chromedp.Navigate(list), chromedp.WaitVisible("#issue-list a.issue-title", chromedp.ByQuery))
	deadline := time.Now().Add(15 * time.Second)
	var errs []string
	for !strings.Contains(strings.Join(errs, "\n"), "integrity") {
		if time.Now().After(deadline) {
			t.Fatalf("no integrity error for the tampered script; console:\n%s", strings.Join(errs, "\n"))
		}
		time.Sleep(50 * time.Millisecond) // polling the console, not waiting for a clock
		errs = append(errs, b.takeErrors()...)
	}
	var asked, drawn int
	b.run(t, "look for the script's work", chromedp.Evaluate(fmt.Sprintf(
		`performance.getEntriesByType('resource').filter(e => e.name.startsWith(%q)).length`, proxy.URL+"/api/"), &asked),
		chromedp.Evaluate(`document.querySelectorAll('.collab-lease-badge').length`, &drawn))
	if asked != 0 || drawn != 0 {
		t.Fatalf("the tampered script ran: %d requests for leases, %d badges", asked, drawn)
	}
}
