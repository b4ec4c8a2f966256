package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/assets"
	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/contract"
)

const (
	listLeases      = 10000 // live leases in the listed repository
	listLeasesSmall = 1000  // the same, in the second sidecar's ledger
	listSamples     = 200   // timed GETs of each
	badgePage       = 50    // the numbers a page of Gitea's issue list shows
	listSeeders     = 16    // goroutines seeding the ledger
)

// BenchmarkListLeases10k seeds a ledger with 10,000 live leases on
// Widgets (through models.Store.Acquire, before the sidecar starts, from
// 16 goroutines sharing one Store; half with a ttl, half open-ended), starts
// the sidecar on it and times the badge script's request for a page of
// Gitea's issue list, GET /api/v1/repos/acme/widgets/leases?issue=…
// with the 50 numbers the page shows (the newest 50), as an anonymous
// visitor of the public repository. A second sidecar, on a ledger of
// 1,000 leases seeded the same way, answers the same request (its newest
// 50) interleaved with the first, and so does Gitea's own issue list page
// of the repository: the request must cost no more than the page it
// decorates, and must not grow with the repository's leases (10k/1k).
func BenchmarkListLeases10k(b *testing.B) {
	g, w, bin := sharedB(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for b.Loop() {
		big := startListSidecar(b, ctx, g, bin, w, listLeases)
		small := startListSidecar(b, ctx, g, bin, w, listLeasesSmall)
		hc := &http.Client{}
		// Side by side: the page whose badges ask for this list,
		// Gitea's issue list of the repository, as the same visitor.
		page := g.URL + "/" + w.Widgets.FullName() + "/issues"
		timed := func(u string) time.Duration {
			start := time.Now()
			resp, err := hc.Get(u)
			if err != nil {
				b.Fatal(err)
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Fatalf("GET %s: HTTP %d %v", u, resp.StatusCode, err)
			}
			return time.Since(start)
		}
		// The first requests fill the permission caches and Gitea's.
		big.check(b, hc)
		small.check(b, hc)
		timed(page)
		var lat, smallLat, pageLat []time.Duration
		// The two sidecars take turns at going first, so neither always
		// follows Gitea's page (whose work may still be finishing on the
		// same cores) and neither always follows the other.
		for i := range listSamples {
			if i%2 == 0 {
				lat = append(lat, timed(big.url))
				smallLat = append(smallLat, timed(small.url))
			} else {
				smallLat = append(smallLat, timed(small.url))
				lat = append(lat, timed(big.url))
			}
			pageLat = append(pageLat, timed(page))
		}
		p50, p99, pageP50 := percentile(lat, 50), percentile(lat, 99), percentile(pageLat, 50)
		smallP50, smallP99 := percentile(smallLat, 50), percentile(smallLat, 99)
		reportMs(b, "p50-ms", p50)
		reportMs(b, "p99-ms", p99)
		reportMs(b, "1k-p50-ms", smallP50)
		reportMs(b, "1k-p99-ms", smallP99)
		reportMs(b, "gitea-page-p50-ms", pageP50)
		b.ReportMetric(float64(p50)/float64(pageP50), "leases/page")
		b.ReportMetric(float64(p50)/float64(smallP50), "10k/1k")
		b.ReportMetric(float64(big.size)/1024, "body-KiB")
		b.ReportMetric(big.seeded.Seconds(), "seed-s")
		b.ReportMetric(listLeases, "leases")
		b.ReportMetric(badgePage, "numbers")
		b.ReportMetric(listLeasesSmall, "1k-leases")
		b.ReportMetric(float64(len(lat)), "requests")
		b.ReportMetric(listSeeders, "seeders")
		b.Logf("GET …/leases?issue=… (%d numbers) with %d live leases: p50 %s, p99 %s over %d requests, %d KiB each (Gitea's issue list page: p50 %s); seeding took %.1fs",
			badgePage, listLeases, p50.Round(100*time.Microsecond), p99.Round(100*time.Microsecond),
			len(lat), big.size/1024, pageP50.Round(100*time.Microsecond), big.seeded.Seconds())
		b.Logf("the same with %d live leases, interleaved: p50 %s, p99 %s; %d vs %d leases: %.2f× at p50",
			listLeasesSmall, smallP50.Round(100*time.Microsecond), smallP99.Round(100*time.Microsecond),
			listLeases, listLeasesSmall, float64(p50)/float64(smallP50))
	}
}

// listSidecar is a sidecar whose ledger holds n live leases on Widgets,
// and the badge's request for its newest 50.
type listSidecar struct {
	url    string
	seeded time.Duration // how long seeding the ledger took
	size   int           // bytes of an answer
}

// startListSidecar seeds a ledger of n leases and starts a sidecar on it.
func startListSidecar(b *testing.B, ctx context.Context, g *Gitea, bin string, w *World, n int) *listSidecar {
	b.Helper()
	dir := b.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
		b.Fatal(err)
	}
	seed := time.Now()
	if err := seedLeases(ctx, filepath.Join(dir, "data", "collab.db"), w.Widgets.ID, n); err != nil {
		b.Fatal(err)
	}
	seeded := time.Since(seed)
	s := startBenchSidecar(b, ctx, g, bin, dir)
	var q []string
	for i := n - badgePage + 1; i <= n; i++ {
		q = append(q, fmt.Sprintf("issue=%d", i))
	}
	return &listSidecar{url: s.HTTPURL + "/api/v1/repos/" + w.Widgets.FullName() + "/leases?" + strings.Join(q, "&"), seeded: seeded}
}

// check asks once and checks the answer: 50 leases. It records its size.
func (l *listSidecar) check(b *testing.B, hc *http.Client) {
	b.Helper()
	resp, err := hc.Get(l.url)
	if err != nil {
		b.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("GET %s: HTTP %d %v", l.url, resp.StatusCode, err)
	}
	var list contract.List
	if err := json.Unmarshal(body, &list); err != nil || len(list.Leases) != badgePage {
		b.Fatalf("GET %s: %d leases, want %d (%v)", l.url, len(list.Leases), badgePage, err)
	}
	l.size = len(body)
}

// seedLeases acquires issues 1…n of repository repoID in the ledger at
// path, holders agent-00…agent-49, from listSeeders goroutines: all
// issues, the odd ones for 24 hours and the even ones open-ended, like a
// human assignment.
func seedLeases(ctx context.Context, path string, repoID int64, n int) error {
	return seedLeasesOf(ctx, path, repoID, n, func(i int) (models.Kind, time.Duration) {
		if i%2 == 0 {
			return models.KindIssue, 0
		}
		return models.KindIssue, 24 * time.Hour
	})
}

// seedLeasesOf is seedLeases with each number's kind and ttl from lease.
func seedLeasesOf(ctx context.Context, path string, repoID int64, n int, lease func(i int) (models.Kind, time.Duration)) error {
	store, err := models.Open(path)
	if err != nil {
		return err
	}
	defer store.Close()
	return inParallel(listSeeders, listSeeders, func(g int) error {
		for i := g + 1; i <= n; i += listSeeders {
			kind, ttl := lease(i)
			k := models.Key{RepoID: repoID, Issue: int64(i)}
			h := models.Holder{ID: int64(1000 + i%50), Login: fmt.Sprintf("agent-%02d", i%50)}
			if _, err := store.Acquire(ctx, k, h, ttl, models.Observed{Kind: kind}); err != nil {
				return err
			}
		}
		return nil
	})
}

// BenchmarkAssetBundle reports the size of the badge bundle as served to
// browsers that accept gzip: what every Gitea page loads (the badge script
// and the stylesheet: gzip-bytes, raw-bytes), and apart, the buttons'
// script that an issue page loads on top for a viewer who may write
// (buttons-gzip-bytes).
func BenchmarkAssetBundle(b *testing.B) {
	for b.Loop() {
		bundle, err := assets.Load()
		if err != nil {
			b.Fatal(err)
		}
		names := make([]string, 0, len(bundle))
		for n := range bundle {
			names = append(names, n)
		}
		slices.Sort(names)
		var raw, gz int
		for _, n := range names {
			a := bundle[n]
			b.Logf("asset %s: %d bytes, %d gzipped", n, len(a.Body), len(a.Gzip))
			if n != "collab-lease-claim.js" {
				raw, gz = raw+len(a.Body), gz+len(a.Gzip)
			}
		}
		b.ReportMetric(float64(gz), "gzip-bytes")
		b.ReportMetric(float64(raw), "raw-bytes")
		b.ReportMetric(float64(gz)/float64(raw), "gzip/raw")
		b.ReportMetric(float64(len(bundle["collab-lease-claim.js"].Gzip)), "buttons-gzip-bytes")
	}
}

// BenchmarkListLeasesSignedIn is BenchmarkListLeases10k's request as a
// viewer who costs the sidecar the most: signed in through Gitea (the
// sidecar's session cookie), on a private repository (Secret), with
// access to one unit only (Dave, in a team that may use Issues but not
// Pull Requests), so every answer is filtered by unit. The ledger holds
// 10,000 live leases on Secret, the odd numbers issues and the even ones
// pull requests; the badge asks for the newest 50 numbers, of which Dave
// may see the 25 issues. Interleaved with Gitea's issue list page of
// Secret, signed in as Dave in the same browser.
func BenchmarkListLeasesSignedIn(b *testing.B) {
	g, w, bin := sharedB(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for b.Loop() {
		dir := b.TempDir()
		data := filepath.Join(dir, "data")
		if err := os.MkdirAll(data, 0o700); err != nil {
			b.Fatal(err)
		}
		mixed := func(i int) (models.Kind, time.Duration) {
			if i%2 == 0 {
				return models.KindPull, 24 * time.Hour
			}
			return models.KindIssue, 24 * time.Hour
		}
		if err := seedLeasesOf(ctx, filepath.Join(data, "collab.db"), w.Secret.ID, listLeases, mixed); err != nil {
			b.Fatal(err)
		}
		s, err := StartInstalled(ctx, SidecarOptions{Binary: bin, Gitea: g, DataDir: data}, b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Stop(20 * time.Second) })
		dave := newSignInBrowser(b)
		dave.signInToGitea(g, w.Dave)
		dave.signInToSidecar(s, g, g.URL+"/")
		if login := dave.sessionLogin(s); login != w.Dave.Login {
			b.Fatalf("signed in as %q, want %s", login, w.Dave.Login)
		}
		var q []string
		for i := listLeases - badgePage + 1; i <= listLeases; i++ {
			q = append(q, fmt.Sprintf("issue=%d", i))
		}
		url := s.HTTPURL + "/api/v1/repos/" + w.Secret.FullName() + "/leases?" + strings.Join(q, "&")
		page := g.URL + "/" + w.Secret.FullName() + "/issues"
		timed := func(u string) (time.Duration, []byte) { return timedGet(b, dave.c, u) }
		// The first requests fill the caches; the answer is checked once.
		_, body := timed(url)
		var list contract.List
		if err := json.Unmarshal(body, &list); err != nil || len(list.Leases) != badgePage/2 {
			b.Fatalf("Dave sees %d leases, want the %d issues among the %d numbers (%v)", len(list.Leases), badgePage/2, badgePage, err)
		}
		for _, l := range list.Leases {
			if l.Issue%2 == 0 {
				b.Fatalf("Dave, who may not read pull requests, sees the lease of pull request %d", l.Issue)
			}
		}
		timed(page)
		var lat, pageLat []time.Duration
		for range listSamples {
			d, _ := timed(url)
			lat = append(lat, d)
			d, _ = timed(page)
			pageLat = append(pageLat, d)
		}
		p50, p99, pageP50 := percentile(lat, 50), percentile(lat, 99), percentile(pageLat, 50)
		reportMs(b, "p50-ms", p50)
		reportMs(b, "p99-ms", p99)
		reportMs(b, "gitea-page-p50-ms", pageP50)
		b.ReportMetric(float64(p50)/float64(pageP50), "leases/page")
		b.ReportMetric(listLeases, "leases")
		b.ReportMetric(badgePage, "numbers")
		b.ReportMetric(float64(len(list.Leases)), "visible")
		b.ReportMetric(float64(len(lat)), "requests")
		b.Logf("GET …/leases?issue=… (%d numbers, %d visible) signed in as %s (Issues unit only) on private %s with %d live leases: p50 %s, p99 %s over %d requests (Gitea's issue list page as %s: p50 %s)",
			badgePage, len(list.Leases), w.Dave.Login, w.Secret.FullName(), listLeases, p50.Round(100*time.Microsecond), p99.Round(100*time.Microsecond),
			len(lat), w.Dave.Login, pageP50.Round(100*time.Microsecond))
	}
}
