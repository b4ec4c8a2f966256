package integration

// The benchmarks of this package measure the service end to end, against
// the shared Gitea and the real sidecar binary. Each one does its whole
// measurement once per iteration and reports its results as metrics, so
// run them with -benchtime 1x (bench/run.sh does, and renders
// bench/RESULTS.md from what they report):
//
//	go test -run '^$' -bench . -benchtime 1x ./integration/
//
// A benchmark that compares two things measures them side by side in the
// same run, interleaved, so that a busy machine slows both alike and the
// ratio stays meaningful when the absolute figures do not.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// freshSamples is how many fresh connections each side of
// BenchmarkSSHFreshConnection makes per iteration.
const freshSamples = 60

// BenchmarkSSHFreshConnection compares, in one run, the wall time of
// `ssh … collab-lease acquire` (a fresh OpenSSH connection, key lookup and
// permission check with warm caches, the issue's state from the ledger's
// own record, one ledger transaction) with a no-op exec on the same server
// (`collab-lease help`), interleaved, and reports the medians and their
// ratios. Two acquires are timed: a re-acquire of a lease the client
// already holds (it extends it), and a fresh claim of a free issue (a new
// tenure; the release that frees it again is untimed, over a persistent
// connection).
func BenchmarkSSHFreshConnection(b *testing.B) {
	g, w, bin := sharedB(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	free := openIssuesB(b, g, w, 1, "Fresh claim")[0]
	s := startBenchSidecar(b, ctx, g, bin, b.TempDir())
	reacquire := fmt.Sprintf("collab-lease acquire %s %d --ttl 1h", w.Widgets.FullName(), w.OpenIssue)
	claim := fmt.Sprintf("collab-lease acquire %s %d --ttl 1h", w.Widgets.FullName(), free)
	release := fmt.Sprintf("collab-lease release %s %d", w.Widgets.FullName(), free)
	persistent := dialB(b, s, w.Alice)
	// Warm the key and permission caches, the issues' state in the ledger
	// (the first acquire of an issue asks Gitea, later ones within
	// --issue-state-ttl do not) and the OpenSSH binary.
	for _, cmd := range []string{"collab-lease help", reacquire, claim} {
		if r := s.SSH(ctx, w.Alice.Key.Path, cmd); r.Code != 0 {
			b.Fatalf("%s: %+v", cmd, r)
		}
	}
	freeAgain := func() {
		if r, err := runOn(persistent, release); err != nil || r.Code != 0 {
			b.Fatalf("%s: %+v %v", release, r, err)
		}
	}
	freeAgain()
	var help, reacq, fresh []time.Duration
	for b.Loop() {
		for range freshSamples {
			for _, c := range []struct {
				cmd   string
				out   *[]time.Duration
				after func()
			}{{"collab-lease help", &help, nil}, {reacquire, &reacq, nil}, {claim, &fresh, freeAgain}} {
				start := time.Now()
				r := s.SSH(ctx, w.Alice.Key.Path, c.cmd)
				d := time.Since(start)
				if r.Code != 0 {
					b.Fatalf("%s: %+v", c.cmd, r)
				}
				*c.out = append(*c.out, d)
				if c.after != nil {
					c.after()
				}
			}
		}
	}
	mh, ma, mc := median(help), median(reacq), median(fresh)
	reportMs(b, "help-p50-ms", mh)
	reportMs(b, "acquire-p50-ms", ma)
	reportMs(b, "claim-p50-ms", mc)
	reportMs(b, "help-p90-ms", percentile(help, 90))
	reportMs(b, "acquire-p90-ms", percentile(reacq, 90))
	reportMs(b, "claim-p90-ms", percentile(fresh, 90))
	b.ReportMetric(float64(len(help)), "samples-each")
	b.ReportMetric(float64(ma)/float64(mh), "acquire/help")
	b.ReportMetric(float64(mc)/float64(mh), "claim/help")
	b.Logf("fresh OpenSSH connections, %d of each interleaved: help p50 %s, re-acquire p50 %s, fresh claim p50 %s",
		len(help), mh.Round(10*time.Microsecond), ma.Round(10*time.Microsecond), mc.Round(10*time.Microsecond))
}

func median(d []time.Duration) time.Duration { return percentile(d, 50) }

func mean(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(len(d))
}

// percentile is the nearest-rank p-th percentile of d (0 < p <= 100).
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

func reportMs(b *testing.B, unit string, d time.Duration) {
	b.ReportMetric(float64(d.Microseconds())/1000, unit)
}

// sharedB is shared for benchmarks.
func sharedB(b *testing.B) (*Gitea, *World, string) {
	b.Helper()
	fixtureInit()
	if fixture.err != nil {
		b.Fatalf("shared fixture: %v", fixture.err)
	}
	if !fixture.g.Running() {
		b.Fatal("the shared Gitea is stopped")
	}
	return fixture.g, fixture.w, fixture.bin
}

// startBenchSidecar starts a sidecar on a fresh data directory under dir
// (or on the ledger already there) and stops it when the benchmark ends.
func startBenchSidecar(b *testing.B, ctx context.Context, g *Gitea, bin, dir string, args ...string) *Sidecar {
	b.Helper()
	return startBenchSidecarWith(b, ctx, SidecarOptions{Binary: bin, Gitea: g, DataDir: filepath.Join(dir, "data"), Args: args})
}

// startBenchSidecarWith starts a sidecar as o says and stops it when the
// benchmark ends.
func startBenchSidecarWith(b *testing.B, ctx context.Context, o SidecarOptions) *Sidecar {
	b.Helper()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := StartSidecar(sctx, o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := s.Stop(20 * time.Second); err != nil {
			b.Errorf("sidecar stop: %v", err)
		}
		if b.Failed() {
			b.Logf("sidecar log:\n%s", tail(s.Logs(), 60))
		}
	})
	return s
}

// benchAgentCount is how many agents the benchmarks can use.
const benchAgentCount = 64

// benchAgents are users bench00…bench63, each with a key and an API token,
// write collaborators on Widgets; created once per process.
var benchAgents struct {
	once  sync.Once
	users []*User
	err   error
}

// agentsB returns the first n bench agents, creating all of them on first use.
func agentsB(b *testing.B, g *Gitea, w *World, n int) []*User {
	b.Helper()
	if n > benchAgentCount {
		b.Fatalf("%d agents asked for, %d exist", n, benchAgentCount)
	}
	benchAgents.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		users := make([]*User, benchAgentCount)
		benchAgents.err = inParallel(8, len(users), func(i int) error {
			u, err := NewUser(ctx, g, w.KeyDir, fmt.Sprintf("bench%02d", i))
			if err != nil {
				return err
			}
			users[i] = u
			return g.Admin().Do(ctx, "PUT", "/repos/"+w.Widgets.FullName()+"/collaborators/"+u.Login,
				map[string]any{"permission": "write"}, nil)
		})
		benchAgents.users = users
	})
	if benchAgents.err != nil {
		b.Fatalf("bench agents: %v", benchAgents.err)
	}
	return benchAgents.users[:n]
}

// openIssuesB opens n new issues in Widgets and returns their numbers.
func openIssuesB(b *testing.B, g *Gitea, w *World, n int, title string) []int64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := make([]int64, n)
	err := inParallel(8, n, func(i int) error {
		var is struct{ Number int64 }
		err := g.Admin().Do(ctx, "POST", "/repos/"+w.Widgets.FullName()+"/issues",
			map[string]any{"title": fmt.Sprintf("%s %d", title, i+1)}, &is)
		out[i] = is.Number
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// inParallel runs f(0)…f(n-1) with at most width at a time and returns
// their errors joined.
func inParallel(width, n int, f func(i int) error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, width)
	)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := f(i); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// dialB opens a persistent SSH connection of u to s.
func dialB(b *testing.B, s *Sidecar, u *User) *ssh.Client {
	b.Helper()
	cfg, err := clientConfig(s, u)
	if err != nil {
		b.Fatal(err)
	}
	c, err := ssh.Dial("tcp", s.SSHAddr, cfg)
	if err != nil {
		b.Fatalf("dial as %s: %v", u.Login, err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// runOn runs one command in a new session on c, as an agent with a
// persistent connection does.
func runOn(c *ssh.Client, cmd string) (SSHResult, error) {
	sess, err := c.NewSession()
	if err != nil {
		return SSHResult{}, err
	}
	defer sess.Close()
	var out, errb bytes.Buffer
	sess.Stdout, sess.Stderr = &out, &errb
	err = sess.Run(cmd)
	r := SSHResult{Stdout: out.String(), Stderr: errb.String()}
	var exit *ssh.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.Code = exit.ExitStatus()
	default:
		return r, fmt.Errorf("%s: %w", cmd, err)
	}
	return r, nil
}
