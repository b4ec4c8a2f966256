package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// nextIssues is how many open issues BenchmarkNext's repository has.
const nextIssues = 1000

// BenchmarkNext: 64 agents, one persistent SSH connection each, on a
// repository of 1,000 open issues, each cycling `next --ttl 1h` and the
// release of what it got, for benchDuration. It reports the next commands
// answered per second, their latency percentiles, and the requests to
// Gitea per next (from the sidecar's own metrics): the list of open issues
// and the dependency questions, shared by all agents through the cache.
func BenchmarkNext(b *testing.B) {
	g, w, bin := sharedB(b)
	agents := agentsB(b, g, w, throughputClients)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	repo := Repo{Owner: w.Org, Name: "next-" + randomHex(4)}
	var out struct{ ID int64 }
	if err := g.Admin().Do(ctx, "POST", "/orgs/"+w.Org+"/repos", map[string]any{"name": repo.Name}, &out); err != nil {
		b.Fatal(err)
	}
	repo.ID = out.ID
	if err := inParallel(8, len(agents), func(i int) error {
		return g.Admin().Do(ctx, "PUT", "/repos/"+repo.FullName()+"/collaborators/"+agents[i].Login, map[string]any{"permission": "write"}, nil)
	}); err != nil {
		b.Fatal(err)
	}
	if err := inParallel(8, nextIssues, func(i int) error {
		return g.Admin().Do(ctx, "POST", "/repos/"+repo.FullName()+"/issues", map[string]any{"title": fmt.Sprintf("Backlog %d", i+1)}, nil)
	}); err != nil {
		b.Fatal(err)
	}
	s := startBenchSidecar(b, ctx, g, bin, b.TempDir())
	conns := make([]*ssh.Client, len(agents))
	for i, u := range agents {
		conns[i] = dialB(b, s, u)
	}
	next := "collab-lease next " + repo.FullName() + " --ttl 1h"

	var lat []time.Duration
	var elapsed time.Duration
	var requests float64
	nones := 0
	d := benchDuration(b)
	for b.Loop() {
		times := make([][]time.Duration, len(agents))
		got := make([]int, len(agents))
		noneSeen := make([]int, len(agents))
		var mu sync.Mutex
		var failed error
		before := giteaRequests(b, s)
		start := time.Now()
		deadline := start.Add(d)
		var wg sync.WaitGroup
		for i := range agents {
			wg.Go(func() {
				fail := func(err error) {
					mu.Lock()
					failed = err
					mu.Unlock()
				}
				for time.Now().Before(deadline) {
					t0 := time.Now()
					r, err := runOn(conns[i], next)
					for err == nil && r.Code == 75 && time.Now().Before(deadline) {
						r, err = runOn(conns[i], next)
					}
					took := time.Since(t0)
					switch {
					case err != nil:
						fail(err)
						return
					case r.Code == 4:
						noneSeen[i]++
						times[i] = append(times[i], took)
						continue
					case r.Code != 0:
						fail(fmt.Errorf("next: exit %d: %s%s", r.Code, r.Stdout, r.Stderr))
						return
					}
					times[i] = append(times[i], took)
					got[i]++
					n := parseMaybe(r).Issue
					if r, err := runOn(conns[i], fmt.Sprintf("collab-lease release %s %d", repo.FullName(), n)); err != nil || r.Code != 0 {
						fail(fmt.Errorf("release %d: %+v %v", n, r, err))
						return
					}
				}
			})
		}
		wg.Wait()
		elapsed += time.Since(start)
		requests += giteaRequests(b, s) - before
		if failed != nil {
			b.Fatal(failed)
		}
		for i := range times {
			lat = append(lat, times[i]...)
			nones += noneSeen[i]
		}
	}
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "nexts/s")
	b.ReportMetric(float64(len(lat)), "nexts")
	b.ReportMetric(float64(nones), "nones")
	b.ReportMetric(float64(len(agents)), "agents")
	b.ReportMetric(nextIssues, "issues")
	b.ReportMetric(elapsed.Seconds(), "seconds")
	b.ReportMetric(requests/float64(len(lat)), "gitea-requests/next")
	reportMs(b, "p50-ms", percentile(lat, 50))
	reportMs(b, "p99-ms", percentile(lat, 99))
	b.Logf("next: %d agents on %d open issues made %d nexts (each then released) in %.1fs: %.0f nexts/s, p50 %s, p99 %s, %.3f Gitea requests per next",
		len(agents), nextIssues, len(lat), elapsed.Seconds(), float64(len(lat))/elapsed.Seconds(),
		percentile(lat, 50).Round(100*time.Microsecond), percentile(lat, 99).Round(100*time.Microsecond), requests/float64(len(lat)))
}
