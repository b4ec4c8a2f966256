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

// BenchmarkNext: 64 agents, one persistent SSH connection each, drain a
// repository of 1,000 open issues with `next --ttl 1h` until every agent
// is told `none`. It reports the next commands answered per second, their
// latency percentiles, and the requests to Gitea per next (from the
// sidecar's own metrics). Each iteration reopens the backlog: the agents
// release what they got, untimed.
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
	for b.Loop() {
		got := make([][]int64, len(agents))
		times := make([][]time.Duration, len(agents))
		var mu sync.Mutex
		var failed error
		before := giteaRequests(b, s)
		start := time.Now()
		var wg sync.WaitGroup
		for i := range agents {
			wg.Go(func() {
				for {
					t0 := time.Now()
					r, err := runOn(conns[i], next)
					for err == nil && r.Code == 75 {
						r, err = runOn(conns[i], next)
					}
					d := time.Since(t0)
					switch {
					case err == nil && r.Code == 4:
						times[i] = append(times[i], d)
						return
					case err == nil && r.Code == 0:
						times[i] = append(times[i], d)
						got[i] = append(got[i], parseMaybe(r).Issue)
						continue
					case err == nil:
						err = fmt.Errorf("next: exit %d: %s%s", r.Code, r.Stdout, r.Stderr)
					}
					mu.Lock()
					failed = err
					mu.Unlock()
					return
				}
			})
		}
		wg.Wait()
		elapsed += time.Since(start)
		requests += giteaRequests(b, s) - before
		if failed != nil {
			b.Fatal(failed)
		}
		seen := map[int64]bool{}
		for i := range got {
			for _, n := range got[i] {
				if seen[n] {
					b.Fatalf("issue %d handed out twice", n)
				}
				seen[n] = true
			}
			lat = append(lat, times[i]...)
			nones++
		}
		if len(seen) != nextIssues {
			b.Fatalf("the agents claimed %d issues, want all %d", len(seen), nextIssues)
		}
		// Untimed: the backlog opens again for the next iteration.
		if err := inParallel(len(agents), len(agents), func(i int) error {
			for _, n := range got[i] {
				if r, err := runOn(conns[i], fmt.Sprintf("collab-lease release %s %d", repo.FullName(), n)); err != nil || r.Code != 0 {
					return fmt.Errorf("release %d: %+v %v", n, r, err)
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "nexts/s")
	b.ReportMetric(float64(len(lat)), "nexts")
	b.ReportMetric(float64(nones), "nones")
	b.ReportMetric(float64(len(agents)), "agents")
	b.ReportMetric(nextIssues, "issues")
	b.ReportMetric(requests/float64(len(lat)), "gitea-requests/next")
	reportMs(b, "p50-ms", percentile(lat, 50))
	reportMs(b, "p99-ms", percentile(lat, 99))
	b.Logf("next: %d agents drained %d issues with %d nexts in %.1fs: %.0f nexts/s, p50 %s, p99 %s, %.3f Gitea requests per next",
		len(agents), nextIssues, len(lat), elapsed.Seconds(), float64(len(lat))/elapsed.Seconds(),
		percentile(lat, 50).Round(100*time.Microsecond), percentile(lat, 99).Round(100*time.Microsecond), requests/float64(len(lat)))
}
