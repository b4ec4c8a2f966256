package integration

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	boardClaims  = 1000 // live claims in the repository whose board is timed
	boardSamples = 200  // timed GETs of the board, and of Gitea's page
	boardRows    = 100  // the claims the board's first page shows
)

// BenchmarkBoard1k seeds a ledger with 1,000 live claims on Widgets
// (through models.Store.Acquire, as BenchmarkListLeases10k does: half
// with a ttl, half open-ended), starts the sidecar on it and times the
// board's first page, GET /acme/widgets/claims, rendered whole on the
// server with the titles of its 100 claims, as an anonymous visitor of
// the public repository, interleaved with Gitea's own issue list page of
// the repository: the board must cost no more than the page people
// would otherwise look at. The first requests fill the caches (the
// permission, and the titles, which Gitea is asked for a page at a
// time).
func BenchmarkBoard1k(b *testing.B) {
	g, w, bin := sharedB(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for b.Loop() {
		dir := b.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
			b.Fatal(err)
		}
		seed := time.Now()
		if err := seedLeases(ctx, filepath.Join(dir, "data", "collab.db"), w.Widgets.ID, boardClaims); err != nil {
			b.Fatal(err)
		}
		seeded := time.Since(seed)
		s := startBenchSidecar(b, ctx, g, bin, dir)
		board := s.HTTPURL + "/" + w.Widgets.FullName() + "/claims"
		page := g.URL + "/" + w.Widgets.FullName() + "/issues"
		hc := &http.Client{}
		timed := func(u string) (time.Duration, string) {
			d, body := timedGet(b, hc, u)
			return d, string(body)
		}
		var body string
		for range 5 {
			_, body = timed(board)
		}
		if rows := strings.Count(body, "<tr data-issue="); rows != boardRows || !strings.Contains(body, "Page 1 of 10") {
			b.Fatalf("the board's first page shows %d claims, want %d of %d", rows, boardRows, boardClaims)
		}
		timed(page)
		var lat, pageLat []time.Duration
		for i := range boardSamples {
			// Taking turns at going first, as row 4a does.
			if i%2 == 0 {
				d, _ := timed(board)
				lat = append(lat, d)
				d, _ = timed(page)
				pageLat = append(pageLat, d)
			} else {
				d, _ := timed(page)
				pageLat = append(pageLat, d)
				d, _ = timed(board)
				lat = append(lat, d)
			}
		}
		p50, p99, pageP50 := percentile(lat, 50), percentile(lat, 99), percentile(pageLat, 50)
		reportMs(b, "p50-ms", p50)
		reportMs(b, "p99-ms", p99)
		reportMs(b, "gitea-page-p50-ms", pageP50)
		b.ReportMetric(float64(p50)/float64(pageP50), "board/page")
		b.ReportMetric(float64(len(body))/1024, "body-KiB")
		b.ReportMetric(boardClaims, "claims")
		b.ReportMetric(boardRows, "rows")
		b.ReportMetric(float64(len(lat)), "requests")
		b.ReportMetric(seeded.Seconds(), "seed-s")
		b.Logf("GET /%s/claims with %d live claims (%d on its first page): p50 %s, p99 %s over %d requests, %d KiB each (Gitea's issue list page: p50 %s)",
			w.Widgets.FullName(), boardClaims, boardRows, p50.Round(100*time.Microsecond), p99.Round(100*time.Microsecond),
			len(lat), len(body)/1024, pageP50.Round(100*time.Microsecond))
	}
}

// timedGet GETs u with c, fails b unless it answers 200, and returns how
// long the whole answer took, and its body.
func timedGet(b *testing.B, c *http.Client, u string) (time.Duration, []byte) {
	b.Helper()
	start := time.Now()
	resp, err := c.Get(u)
	if err != nil {
		b.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("GET %s: HTTP %d %v", u, resp.StatusCode, err)
	}
	return time.Since(start), body
}
