package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	giteaforge "github.com/collab-lease/collab-lease/plugin/gitea"
)

// throughputClients is how many agents BenchmarkSSHThroughput runs at once.
const throughputClients = 64

// giteaConc is how many issue GETs BenchmarkSSHThroughput keeps in flight
// when it measures Gitea alone: the sidecar's own cap on requests to
// Gitea (plugin/gitea, Options.MaxConns).
const giteaConc = giteaforge.DefaultMaxConns

// benchDuration is how long a sustained-load benchmark runs:
// COLLAB_BENCH_DURATION (a Go duration), default 10 s.
func benchDuration(b *testing.B) time.Duration {
	b.Helper()
	v := os.Getenv("COLLAB_BENCH_DURATION")
	if v == "" {
		return 10 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		b.Fatalf("COLLAB_BENCH_DURATION=%q: want a positive Go duration", v)
	}
	return d
}

// BenchmarkSSHThroughput runs 64 agents for benchDuration, each over one
// persistent SSH connection (one session per command) cycling acquire,
// renew and release on an issue of its own, and reports the completed
// operations per second and the latency percentiles, overall and by verb.
// A command answered with exit 75 (retry) is run again, as an agent
// would, and counted; its latency runs from the first attempt.
// After the warm-up none of the three asks Gitea anything: the key and
// permission answers are cached, and acquire reads the issue's state from
// the ledger's own record (fresh for --issue-state-ttl after the warm-up's
// acquire); the CPU Gitea uses meanwhile is reported. bench/run.sh divides
// the operations per second by the ledger's alone (models'
// BenchmarkCycle64, group commit) measured in the same run.
//
// With BENCH_SIDECAR_PPROF=host:port (a sidecar built to serve
// net/http/pprof there, as `bench/run.sh profile` builds one) it also
// saves, in BENCH_PROFILE_DIR, the sidecar's CPU profile of the timed
// load and its allocation profiles just before and after it.
func BenchmarkSSHThroughput(b *testing.B) {
	g, w, bin := sharedB(b)
	agents := agentsB(b, g, w, throughputClients)
	issues := openIssuesB(b, g, w, throughputClients, "Throughput")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := startBenchSidecar(b, ctx, g, bin, b.TempDir())
	conns := make([]*ssh.Client, throughputClients)
	for i, u := range agents {
		conns[i] = dialB(b, s, u)
	}
	cycle := func(i int) [3]string {
		verb := func(v, extra string) string {
			return fmt.Sprintf("collab-lease %s %s %d%s", v, w.Widgets.FullName(), issues[i], extra)
		}
		return [3]string{verb("acquire", " --ttl 1h"), verb("renew", " --ttl 1h"), verb("release", "")}
	}
	// Warm every connection's path once (permission cache, first session).
	if err := inParallel(throughputClients, throughputClients, func(i int) error {
		for _, cmd := range cycle(i) {
			if r, err := runOn(conns[i], cmd); err != nil || r.Code != 0 {
				return fmt.Errorf("warm-up %s: %+v %v", cmd, r, err)
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}

	d := benchDuration(b)
	var byVerb [3][]time.Duration
	var elapsed, cpuSidecar, cpuGitea, cpuClients time.Duration
	var retried atomic.Int64 // commands answered exit 75 and run again
	for b.Loop() {
		sc, gc, cc := cpuTime(b, s.PID()), cpuTime(b, giteaPID(b, g)), cpuTime(b, 0)
		lat := make([][3][]time.Duration, throughputClients)
		var failed error
		var mu sync.Mutex
		var wg sync.WaitGroup
		stopProfile := sidecarProfile(b, d)
		start := time.Now()
		deadline := start.Add(d)
		for i := range throughputClients {
			wg.Go(func() {
				cmds := cycle(i)
				for n := 0; time.Now().Before(deadline); n = (n + 1) % 3 {
					t0 := time.Now()
					r, err := runOn(conns[i], cmds[n])
					for err == nil && r.Code == 75 && time.Now().Before(deadline) {
						// Temporary (Gitea too slow to answer within
						// the forge timeout): an agent retries.
						retried.Add(1)
						r, err = runOn(conns[i], cmds[n])
					}
					if err == nil && r.Code != 0 {
						err = fmt.Errorf("%s: exit %d: %s%s", cmds[n], r.Code, r.Stdout, r.Stderr)
					}
					if err != nil {
						mu.Lock()
						failed = err
						mu.Unlock()
						return
					}
					lat[i][n] = append(lat[i][n], time.Since(t0))
				}
			})
		}
		wg.Wait()
		elapsed += time.Since(start)
		stopProfile()
		cpuSidecar += cpuTime(b, s.PID()) - sc
		cpuGitea += cpuTime(b, giteaPID(b, g)) - gc
		cpuClients += cpuTime(b, 0) - cc
		if failed != nil {
			b.Fatal(failed)
		}
		for i := range lat {
			for v := range 3 {
				byVerb[v] = append(byVerb[v], lat[i][v]...)
			}
		}
	}
	all := append(append(append([]time.Duration(nil), byVerb[0]...), byVerb[1]...), byVerb[2]...)
	ops := len(all)
	b.ReportMetric(float64(ops)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(float64(ops), "ops")
	b.ReportMetric(throughputClients, "agents")
	b.ReportMetric(float64(retried.Load()), "exit75-retries")
	b.ReportMetric(elapsed.Seconds(), "seconds")
	reportMs(b, "p50-ms", percentile(all, 50))
	reportMs(b, "p99-ms", percentile(all, 99))
	for v, name := range []string{"acquire", "renew", "release"} {
		reportMs(b, name+"-p50-ms", percentile(byVerb[v], 50))
		reportMs(b, name+"-p99-ms", percentile(byVerb[v], 99))
		reportMs(b, name+"-mean-ms", mean(byVerb[v]))
	}
	// Where the machine's CPU went: the sidecar, Gitea, and the 64
	// clients (this process), per operation and in cores.
	for _, c := range []struct {
		who string
		cpu time.Duration
	}{{"sidecar", cpuSidecar}, {"gitea", cpuGitea}, {"clients", cpuClients}} {
		b.ReportMetric(float64(c.cpu.Microseconds())/1000/float64(ops), c.who+"-cpu-ms/op")
		b.ReportMetric(c.cpu.Seconds()/elapsed.Seconds(), c.who+"-cores")
	}
	// What Gitea alone serves of the request an acquire made before the
	// ledger kept the issue's state (the issue, as the agent sees it), at
	// the concurrency the sidecar allows itself towards Gitea: the ceiling
	// acquires had when each one asked Gitea.
	acquires := float64(len(byVerb[0])) / elapsed.Seconds()
	ceiling := giteaIssueRate(b, g, w, agents, issues, giteaConc, d/2)
	b.ReportMetric(acquires, "acquires/s")
	b.ReportMetric(ceiling, "gitea-issue-GETs/s")
	b.ReportMetric(giteaConc, "gitea-GET-concurrency")
	b.ReportMetric(acquires/ceiling, "acquires/gitea-GETs")
	b.Logf("throughput: %d agents, %d operations in %.1fs: %.0f ops/s, p50 %s, p99 %s",
		throughputClients, ops, elapsed.Seconds(), float64(ops)/elapsed.Seconds(),
		percentile(all, 50).Round(100*time.Microsecond), percentile(all, 99).Round(100*time.Microsecond))
}

// giteaIssueRate measures how many GET /repos/{o}/{r}/issues/{n} Gitea
// answers per second, asked by conc clients at once for d, each request
// made the way the sidecar makes it (admin token, Sudo: the agent).
func giteaIssueRate(b *testing.B, g *Gitea, w *World, agents []*User, issues []int64, conc int, d time.Duration) float64 {
	b.Helper()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc}}
	defer hc.CloseIdleConnections()
	var n atomic.Int64
	deadline := time.Now().Add(d)
	start := time.Now()
	err := inParallel(conc, conc, func(c int) error {
		for i := c; time.Now().Before(deadline); i += conc {
			a := &API{URL: g.URL, Token: g.AdminToken, Sudo: agents[i%len(agents)].Login, HTTP: hc}
			path := fmt.Sprintf("/repos/%s/issues/%d", w.Widgets.FullName(), issues[i%len(issues)])
			if err := a.Do(context.Background(), "GET", path, nil, nil); err != nil {
				return err
			}
			n.Add(1)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return float64(n.Load()) / time.Since(start).Seconds()
}

// giteaPID is the process ID of the running Gitea g.
func giteaPID(b *testing.B, g *Gitea) int {
	b.Helper()
	pid := g.PID()
	if pid == 0 {
		b.Fatal("Gitea is not running")
	}
	return pid
}

// sidecarProfile starts, when BENCH_SIDECAR_PPROF names where the sidecar
// serves net/http/pprof, a CPU profile of d (whole seconds) and an
// allocation snapshot, and returns what waits for the profile and takes the
// second snapshot; without it, it does nothing. The files go to
// BENCH_PROFILE_DIR (default: the current directory).
func sidecarProfile(b *testing.B, d time.Duration) func() {
	b.Helper()
	addr := os.Getenv("BENCH_SIDECAR_PPROF")
	if addr == "" {
		return func() {}
	}
	dir := os.Getenv("BENCH_PROFILE_DIR")
	save := func(path, name string) error {
		resp, err := http.Get("http://" + addr + "/debug/pprof/" + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /debug/pprof/%s: HTTP %d", path, resp.StatusCode)
		}
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, resp.Body); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	if err := save("allocs", "sidecar-allocs-before.pprof"); err != nil {
		b.Fatalf("sidecar profile: %v", err)
	}
	secs := max(int(d/time.Second), 1)
	done := make(chan error, 1)
	go func() { done <- save(fmt.Sprintf("profile?seconds=%d", secs), "sidecar-cpu.pprof") }()
	return func() {
		if err := <-done; err != nil {
			b.Fatalf("sidecar profile: %v", err)
		}
		if err := save("allocs", "sidecar-allocs-after.pprof"); err != nil {
			b.Fatalf("sidecar profile: %v", err)
		}
		b.Logf("sidecar profiles (%d s of CPU under load; allocations before and after) in %s", secs, dir)
	}
}
