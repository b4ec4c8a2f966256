package integration

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// liveClients is how many event streams BenchmarkLiveEvents holds open on
// one repository.
const liveClients = 1000

// liveRounds is how many changes BenchmarkLiveEvents makes (an acquire
// and a release each).
const liveRounds = 25

// BenchmarkLiveEvents reports what 1,000 browsers watching one
// repository's lease events (docs/http.md, Live events) cost the sidecar and how soon
// each of them hears of a change: 1,000 anonymous streams of
// GET /api/v1/repos/acme/widgets/leases/events, then 50 changes (an
// acquire, then a release, of one issue, over one persistent SSH
// connection) one after the other, each once every stream has had the
// one before. A delivery's delay runs from the moment the command was sent
// to the moment a stream's client read the event: it includes the
// command's own round trip. The sidecar's VmRSS is read idle, with the
// streams open, and after each change (the largest is reported).
func BenchmarkLiveEvents(b *testing.B) {
	g, w, bin := sharedB(b)
	agent := agentsB(b, g, w, 1)[0]
	issue := openIssuesB(b, g, w, 1, "A live issue")[0]
	raiseFileLimit(b, 2*liveClients+256)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for b.Loop() {
		s := startBenchSidecar(b, ctx, g, bin, b.TempDir(), "--event-streams-per-address", fmt.Sprint(2*liveClients))
		c := dialB(b, s, agent)
		acquire := lease("acquire", w.Widgets, issue, "--ttl", "1h")
		release := lease("release", w.Widgets, issue)
		// Warm the issue's state and the caches, untimed.
		for _, cmd := range []string{acquire, release} {
			if r, err := runOn(c, cmd); err != nil || r.Code != 0 {
				b.Fatalf("%s: %+v %v", cmd, r, err)
			}
		}
		time.Sleep(time.Second)
		idle := vmRSS(b, s.PID())

		// arrived[k][i]: when stream i read the k-th event (Unix ns).
		arrived := make([][]atomic.Int64, 2*liveRounds)
		for k := range arrived {
			arrived[k] = make([]atomic.Int64, liveClients)
		}
		heard := make([]atomic.Int64, 2*liveRounds)
		sctx, stop := context.WithCancel(ctx)
		var readers sync.WaitGroup
		defer func() {
			stop()
			readers.Wait()
		}()
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: -1, DisableCompression: true}}
		url := s.HTTPURL + "/api/v1/repos/" + w.Widgets.FullName() + "/leases/events"
		start := time.Now()
		err := inParallel(32, liveClients, func(i int) error {
			req, _ := http.NewRequestWithContext(sctx, http.MethodGet, url, nil)
			resp, err := client.Do(req)
			if err != nil {
				return fmt.Errorf("stream %d: %w", i, err)
			}
			if resp.StatusCode != http.StatusOK {
				resp.Body.Close()
				return fmt.Errorf("stream %d: %s", i, resp.Status)
			}
			readers.Go(func() {
				defer resp.Body.Close()
				r := bufio.NewReader(resp.Body)
				k := 0
				for k < len(arrived) {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if strings.HasPrefix(line, "event: lease") || strings.HasPrefix(line, "event: released") {
						arrived[k][i].Store(time.Now().UnixNano())
						heard[k].Add(1)
						k++
					}
				}
			})
			return nil
		})
		opened := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		waitStreams(b, s, liveClients)
		time.Sleep(2 * time.Second)
		loaded := vmRSS(b, s.PID())

		var delays []time.Duration
		missed := 0
		peak := loaded
		for k := range arrived {
			cmd := acquire
			if k%2 == 1 {
				cmd = release
			}
			sent := time.Now()
			if r, err := runOn(c, cmd); err != nil || r.Code != 0 {
				b.Fatalf("%s: %+v %v", cmd, r, err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for heard[k].Load() < liveClients && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			for i := range arrived[k] {
				at := arrived[k][i].Load()
				if at == 0 {
					missed++
					continue
				}
				delays = append(delays, time.Unix(0, at).Sub(sent))
			}
			peak = max(peak, vmRSS(b, s.PID()))
		}
		mb := func(kib int64) float64 { return float64(kib) * 1024 / 1e6 }
		b.ReportMetric(liveClients, "clients")
		b.ReportMetric(float64(len(arrived)), "events")
		b.ReportMetric(float64(missed), "missed")
		reportMs(b, "delivery-p50-ms", percentile(delays, 50))
		reportMs(b, "delivery-p99-ms", percentile(delays, 99))
		reportMs(b, "delivery-max-ms", percentile(delays, 100))
		b.ReportMetric(mb(idle), "idle-RSS-MB")
		b.ReportMetric(mb(loaded), "loaded-RSS-MB")
		b.ReportMetric(mb(peak), "peak-RSS-MB")
		b.ReportMetric(float64(peak-idle)/liveClients, "KiB/stream")
		b.ReportMetric(opened.Seconds(), "open-s")
	}
}

// waitStreams polls the sidecar's metrics until it has n event streams
// open.
func waitStreams(b *testing.B, s *Sidecar, n int) {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	want := fmt.Sprintf("collab_lease_event_streams %d", n)
	for {
		for _, line := range scrape(b, s) {
			if line == want {
				return
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("the sidecar never had %d event streams open", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
