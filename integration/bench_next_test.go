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
	repo := nextRepo(b, ctx, g, w, agents)
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
		r := nextRound(b, s, conns, repo, next, d)
		lat = append(lat, r.lat...)
		elapsed += r.elapsed
		requests += r.requests
		nones += r.nones
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

// BenchmarkNextPriorities: next as in BenchmarkNext, on a repository of
// 1,000 open issues a quarter of which carry priority/high, through a
// sidecar started with --priority-labels priority/high and through one
// without, in alternating rounds (each sidecar its own ledger).
func BenchmarkNextPriorities(b *testing.B) {
	g, w, bin := sharedB(b)
	agents := agentsB(b, g, w, throughputClients)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	repo := nextRepo(b, ctx, g, w, agents)
	var label struct{ ID int64 }
	if err := g.Admin().Do(ctx, "POST", "/repos/"+repo.FullName()+"/labels", map[string]any{"name": "priority/high", "color": "#ee0701"}, &label); err != nil {
		b.Fatal(err)
	}
	if err := inParallel(8, nextIssues/4, func(i int) error {
		return g.Admin().Do(ctx, "POST", fmt.Sprintf("/repos/%s/issues/%d/labels", repo.FullName(), 4*i+3), map[string]any{"labels": []int64{label.ID}}, nil)
	}); err != nil {
		b.Fatal(err)
	}
	sidecars := map[string]*Sidecar{
		"plain":      startBenchSidecar(b, ctx, g, bin, b.TempDir()),
		"priorities": startBenchSidecar(b, ctx, g, bin, b.TempDir(), "--priority-labels", "priority/high"),
	}
	conns := map[string][]*ssh.Client{}
	for name, s := range sidecars {
		for _, u := range agents {
			conns[name] = append(conns[name], dialB(b, s, u))
		}
	}
	next := "collab-lease next " + repo.FullName() + " --ttl 1h"
	res := map[string]*nextResult{"plain": {}, "priorities": {}}
	d := benchDuration(b) / 4
	for b.Loop() {
		for range 2 {
			for _, name := range []string{"plain", "priorities"} {
				r := nextRound(b, sidecars[name], conns[name], repo, next, d)
				res[name].lat = append(res[name].lat, r.lat...)
				res[name].elapsed += r.elapsed
				res[name].requests += r.requests
			}
		}
	}
	rate := func(r *nextResult) float64 { return float64(len(r.lat)) / r.elapsed.Seconds() }
	for _, name := range []string{"plain", "priorities"} {
		r := res[name]
		b.ReportMetric(rate(r), name+"-nexts/s")
		b.ReportMetric(r.requests/float64(len(r.lat)), name+"-gitea-requests/next")
		reportMs(b, name+"-p50-ms", percentile(r.lat, 50))
		reportMs(b, name+"-p99-ms", percentile(r.lat, 99))
	}
	b.ReportMetric(rate(res["priorities"])/rate(res["plain"]), "priorities/plain")
	b.ReportMetric(float64(len(agents)), "agents")
	b.ReportMetric(nextIssues, "issues")
	b.Logf("next with priority labels: %.0f nexts/s, without: %.0f (%d agents, %d issues, a quarter of them priority/high)",
		rate(res["priorities"]), rate(res["plain"]), len(agents), nextIssues)
}

// nextRepo makes a repository of nextIssues open issues that agents may
// write.
func nextRepo(b *testing.B, ctx context.Context, g *Gitea, w *World, agents []*User) Repo {
	b.Helper()
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
	return repo
}

// nextResult is what one round of next cost.
type nextResult struct {
	lat      []time.Duration
	elapsed  time.Duration
	requests float64
	nones    int
}

// nextRound has every connection cycle next (and the release of what it
// got) on s for d.
func nextRound(b *testing.B, s *Sidecar, conns []*ssh.Client, repo Repo, next string, d time.Duration) nextResult {
	times := make([][]time.Duration, len(conns))
	got := make([]int, len(conns))
	noneSeen := make([]int, len(conns))
	var mu sync.Mutex
	var failed error
	before := giteaRequests(b, s)
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for i := range conns {
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
				case r.Code == 75:
					return // still "try again" when the round ended: nothing to count
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
	out := nextResult{elapsed: time.Since(start), requests: giteaRequests(b, s) - before}
	if failed != nil {
		b.Fatal(failed)
	}
	for i := range times {
		out.lat = append(out.lat, times[i]...)
		out.nones += noneSeen[i]
	}
	return out
}
