package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
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
	load := cycleLoad{conns: conns, cmds: cycleCommands(w, issues)}
	if err := load.warm(); err != nil {
		b.Fatal(err)
	}

	d := benchDuration(b)
	var st cycleStats
	var cpuSidecar, cpuGitea, cpuClients time.Duration
	for b.Loop() {
		sc, gc, cc := cpuTime(b, s.PID()), cpuTime(b, giteaPID(b, g)), cpuTime(b, 0)
		stopProfile := sidecarProfile(b, d)
		err := load.run(d, &st)
		stopProfile()
		cpuSidecar += cpuTime(b, s.PID()) - sc
		cpuGitea += cpuTime(b, giteaPID(b, g)) - gc
		cpuClients += cpuTime(b, 0) - cc
		if err != nil {
			b.Fatal(err)
		}
	}
	all, elapsed := st.all(), st.elapsed
	ops := len(all)
	st.report(b, "")
	b.ReportMetric(throughputClients, "agents")
	b.ReportMetric(elapsed.Seconds(), "seconds")
	for v, name := range []string{"acquire", "renew", "release"} {
		reportMs(b, name+"-p50-ms", percentile(st.byVerb[v], 50))
		reportMs(b, name+"-p99-ms", percentile(st.byVerb[v], 99))
		reportMs(b, name+"-mean-ms", mean(st.byVerb[v]))
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
	acquires := float64(len(st.byVerb[0])) / elapsed.Seconds()
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
	for _, p := range []string{"allocs", "block", "mutex"} {
		if err := save(p, "sidecar-"+p+"-before.pprof"); err != nil {
			b.Fatalf("sidecar profile: %v", err)
		}
	}
	secs := max(int(d/time.Second), 1)
	done := make(chan error, 2)
	go func() { done <- save(fmt.Sprintf("profile?seconds=%d", secs), "sidecar-cpu.pprof") }()
	// Where the sidecar's goroutines wait, halfway through the load.
	halfway := time.AfterFunc(d/2, func() { done <- save("goroutine?debug=1", "sidecar-goroutines.txt") })
	return func() {
		waits := 1
		if halfway.Stop() {
			waits = 0 // the load ended first: no goroutine dump
		}
		for range 1 + waits {
			if err := <-done; err != nil {
				b.Fatalf("sidecar profile: %v", err)
			}
		}
		for _, p := range []string{"allocs", "block", "mutex"} {
			if err := save(p, "sidecar-"+p+"-after.pprof"); err != nil {
				b.Fatalf("sidecar profile: %v", err)
			}
		}
		b.Logf("sidecar profiles (%d s of CPU under load; allocations before and after) in %s", secs, dir)
	}
}

// cycleLoad is the load of the throughput benchmarks: agent i cycles
// cmds[i] (acquire, renew and release of an issue of its own) over its
// persistent connection conns[i], one session per command.
type cycleLoad struct {
	conns []*ssh.Client
	cmds  [][3]string
	// send, if set, runs agent i's command instead (over a session of
	// its own): its exit code, and what it answered, for errors.
	send func(i int, cmd string) (int, string, error)
}

// exec runs agent i's command: its exit code and its answer.
func (l cycleLoad) exec(i int, cmd string) (int, string, error) {
	if l.send != nil {
		return l.send(i, cmd)
	}
	r, err := runOn(l.conns[i], cmd)
	return r.Code, r.Stdout + r.Stderr, err
}

// cycleCommands are the commands of agents cycling on issues of Widgets,
// one issue each.
func cycleCommands(w *World, issues []int64) [][3]string {
	cmds := make([][3]string, len(issues))
	for i, n := range issues {
		verb := func(v, extra string) string {
			return fmt.Sprintf("collab-lease %s %s %d%s", v, w.Widgets.FullName(), n, extra)
		}
		cmds[i] = [3]string{verb("acquire", " --ttl 1h"), verb("renew", " --ttl 1h"), verb("release", "")}
	}
	return cmds
}

// warm runs each agent's cycle once, all at once: the sidecar's
// permission cache, the issue's state in the ledger, the first session.
func (l cycleLoad) warm() error {
	return inParallel(len(l.conns), len(l.conns), func(i int) error {
		for _, cmd := range l.cmds[i] {
			if r, err := runOn(l.conns[i], cmd); err != nil || r.Code != 0 {
				return fmt.Errorf("warm-up %s: %+v %v", cmd, r, err)
			}
		}
		return nil
	})
}

// cycleStats are the completed operations of one or more runs of a load.
type cycleStats struct {
	byVerb  [3][]time.Duration // latencies: acquire, renew, release
	elapsed time.Duration      // the runs' wall time
	retried int64              // commands answered exit 75 and run again
}

// all is every operation's latency.
func (st *cycleStats) all() []time.Duration {
	return slices.Concat(st.byVerb[0], st.byVerb[1], st.byVerb[2])
}

// opsPerSec is the completed operations per second of wall time.
func (st *cycleStats) opsPerSec() float64 {
	return float64(len(st.all())) / st.elapsed.Seconds()
}

// report reports the operations per second, their count, the commands
// retried after exit 75 and the p50 and p99 latencies, each unit named
// after prefix.
func (st *cycleStats) report(b *testing.B, prefix string) {
	all := st.all()
	b.ReportMetric(st.opsPerSec(), prefix+"ops/s")
	b.ReportMetric(float64(len(all)), prefix+"ops")
	b.ReportMetric(float64(st.retried), prefix+"exit75-retries")
	reportMs(b, prefix+"p50-ms", percentile(all, 50))
	reportMs(b, prefix+"p99-ms", percentile(all, 99))
}

// run runs the load until d has passed: each agent starts its next
// command while the deadline is ahead, and the run ends when the last
// command in flight has returned. What it measured is added to st. A
// command answered with exit 75 (retry) is run again, as an agent would,
// and counted; its latency runs from the first attempt. Any other failure
// ends the agent's loop and is returned.
func (l cycleLoad) run(d time.Duration, st *cycleStats) error {
	lat := make([][3][]time.Duration, len(l.cmds))
	var retried atomic.Int64
	var failed error
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for i := range l.cmds {
		wg.Go(func() {
			cmds := l.cmds[i]
			for n := 0; time.Now().Before(deadline); n = (n + 1) % 3 {
				t0 := time.Now()
				code, out, err := l.exec(i, cmds[n])
				for err == nil && code == 75 && time.Now().Before(deadline) {
					// Temporary (Gitea too slow to answer within the
					// forge timeout): an agent retries.
					retried.Add(1)
					code, out, err = l.exec(i, cmds[n])
				}
				if err == nil && code != 0 {
					err = fmt.Errorf("%s: exit %d: %s", cmds[n], code, out)
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
	st.elapsed += time.Since(start)
	st.retried += retried.Load()
	for i := range lat {
		for v := range 3 {
			st.byVerb[v] = append(st.byVerb[v], lat[i][v]...)
		}
	}
	return failed
}
