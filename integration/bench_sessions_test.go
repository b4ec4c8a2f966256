package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/crypto/ssh"
)

// Agent sessions (collab-lease session, docs/ssh.md) under load: what one
// command costs over an open session against what a fresh connection
// costs, 64 agents cycling over one session each, what 1,000 idle
// sessions holding a claim cost the sidecar (memory, and heartbeat writes
// to the ledger), and MCP tool calls over one session against one ssh
// per call.

// goSession is one collab-lease session over a Go SSH client connection:
// the benchmarks that open hundreds of sessions would otherwise measure
// as many OpenSSH processes.
type goSession struct {
	c   *ssh.Client
	in  io.WriteCloser
	out *bufio.Reader
}

// openGoSession opens a session on a new connection of u to s.
func openGoSession(s *Sidecar, cfg *ssh.ClientConfig, args string) (*goSession, error) {
	c, err := ssh.Dial("tcp", s.SSHAddr, cfg)
	if err != nil {
		return nil, err
	}
	sess, err := c.NewSession()
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	in, err := sess.StdinPipe()
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	stdout, err := sess.StdoutPipe()
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	if err := sess.Start("collab-lease session " + args); err != nil {
		_ = c.Close()
		return nil, err
	}
	g := &goSession{c: c, in: in, out: bufio.NewReader(stdout)}
	first, err := g.line()
	if err != nil || first["status"] != "session" {
		_ = c.Close()
		return nil, fmt.Errorf("session did not open: %v %v", first, err)
	}
	return g, nil
}

func (g *goSession) line() (map[string]any, error) {
	b, err := g.out.ReadBytes('\n')
	if err != nil {
		return nil, err
	}
	var m map[string]any
	err = json.Unmarshal(b, &m)
	return m, err
}

// do sends one command and returns its reply (lost lines are skipped).
func (g *goSession) do(line string) (map[string]any, error) {
	if _, err := io.WriteString(g.in, line+"\n"); err != nil {
		return nil, err
	}
	for {
		m, err := g.line()
		if err != nil {
			return nil, err
		}
		if _, ok := m["exit"]; ok {
			return m, nil
		}
	}
}

// doLine sends line and returns the exit code of its answer and the
// answer as sent, reading no more of it than its exit: the 64 clients of
// the throughput row share the machine with the sidecar, and decoding
// every answer into a map would take CPU from what is measured.
func (g *goSession) doLine(line string) (int, string, error) {
	if _, err := io.WriteString(g.in, line+"\n"); err != nil {
		return 0, "", err
	}
	for {
		b, err := g.out.ReadSlice('\n')
		if err != nil {
			return 0, string(b), err
		}
		var r struct {
			Exit *int `json:"exit"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			return 0, string(b), err
		}
		if r.Exit != nil { // else a lost line, told between answers
			return *r.Exit, string(b), nil
		}
	}
}

func exitOf(m map[string]any) int {
	f, _ := m["exit"].(float64)
	return int(f)
}

// BenchmarkSessionCommand times a no-op command (help) over an open
// session (the real OpenSSH client, its stdin and stdout) against the same
// no-op exec over a fresh OpenSSH connection, and a re-acquire over the
// session beside them, interleaved: what a command costs once the
// connection and its handshake are paid for.
func BenchmarkSessionCommand(b *testing.B) {
	g, w, bin := sharedB(b)
	u := agentsB(b, g, w, 1)[0]
	n := openIssuesB(b, g, w, 1, "Session command")[0]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := startBenchSidecar(b, ctx, g, bin, b.TempDir())
	p, err := s.OpenSession(ctx, u.Key.Path, "--agent", "bench")
	if err != nil {
		b.Fatal(err)
	}
	defer p.Kill()
	acquire := fmt.Sprintf("acquire %s %d", w.Widgets.FullName(), n)
	if r, err := p.Do(ctx, acquire); err != nil || exitOf(r) != 0 {
		b.Fatalf("acquire: %v %v", r, err)
	}
	const samples = 40
	var fresh, help, reacquire []time.Duration
	for b.Loop() {
		for range samples {
			t0 := time.Now()
			if r := s.SSH(ctx, u.Key.Path, "collab-lease", "help"); r.Code != 0 {
				b.Fatalf("help: %+v", r)
			}
			fresh = append(fresh, time.Since(t0))
			t0 = time.Now()
			if r, err := p.Do(ctx, "help"); err != nil || exitOf(r) != 0 {
				b.Fatalf("help over the session: %v %v", r, err)
			}
			help = append(help, time.Since(t0))
			t0 = time.Now()
			if r, err := p.Do(ctx, acquire); err != nil || exitOf(r) != 0 {
				b.Fatalf("acquire over the session: %v %v", r, err)
			}
			reacquire = append(reacquire, time.Since(t0))
		}
	}
	reportMs(b, "fresh-exec-p50-ms", percentile(fresh, 50))
	reportMs(b, "session-help-p50-ms", percentile(help, 50))
	reportMs(b, "session-help-p99-ms", percentile(help, 99))
	reportMs(b, "session-acquire-p50-ms", percentile(reacquire, 50))
	reportMs(b, "session-acquire-p99-ms", percentile(reacquire, 99))
	b.ReportMetric(float64(percentile(help, 50))/float64(percentile(fresh, 50)), "session/fresh")
	b.ReportMetric(float64(percentile(reacquire, 50))/float64(percentile(fresh, 50)), "acquire/fresh")
	b.ReportMetric(samples, "samples-each")
	b.Logf("sessions: help over an open session p50 %s, a re-acquire p50 %s, help over a fresh OpenSSH connection p50 %s",
		percentile(help, 50).Round(10*time.Microsecond), percentile(reacquire, 50).Round(10*time.Microsecond), percentile(fresh, 50).Round(10*time.Microsecond))
}

// BenchmarkSessionThroughput is BenchmarkSSHThroughput over sessions: 64
// agents, one session each, cycling acquire, renew and release lines on an
// issue of their own for benchDuration. bench/run.sh divides the
// operations per second by the ledger's alone measured in the same run.
// It profiles the sidecar as BenchmarkSSHThroughput does.
func BenchmarkSessionThroughput(b *testing.B) {
	g, w, bin := sharedB(b)
	agents := agentsB(b, g, w, throughputClients)
	issues := openIssuesB(b, g, w, throughputClients, "Session throughput")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := startBenchSidecar(b, ctx, g, bin, b.TempDir())
	sessions := make([]*goSession, len(agents))
	if err := inParallel(16, len(agents), func(i int) error {
		cfg, err := clientConfig(s, agents[i])
		if err != nil {
			return err
		}
		sessions[i], err = openGoSession(s, cfg, "")
		return err
	}); err != nil {
		b.Fatal(err)
	}
	defer func() {
		for _, g := range sessions {
			_ = g.c.Close()
		}
	}()
	cmds := cycleCommands(w, issues)
	for i := range cmds {
		for v := range cmds[i] {
			cmds[i][v] = strings.TrimPrefix(cmds[i][v], "collab-lease ")
		}
	}
	load := cycleLoad{cmds: cmds, send: func(i int, cmd string) (int, string, error) {
		return sessions[i].doLine(cmd)
	}}
	run := load.run
	var warm cycleStats
	if err := run(time.Second, &warm); err != nil {
		b.Fatal(err)
	}
	var st cycleStats
	d := benchDuration(b)
	var cpuSidecar, cpuClients time.Duration
	for b.Loop() {
		sc, cc := cpuTime(b, s.PID()), cpuTime(b, 0)
		stopProfile := sidecarProfile(b, d)
		err := run(d, &st)
		stopProfile()
		if err != nil {
			b.Fatal(err)
		}
		cpuSidecar += cpuTime(b, s.PID()) - sc
		cpuClients += cpuTime(b, 0) - cc
	}
	st.report(b, "")
	b.ReportMetric(float64(len(sessions)), "agents")
	b.ReportMetric(st.elapsed.Seconds(), "seconds")
	// The sidecar and the 64 clients (this process) share the machine's
	// cores: what each took, in cores and per operation.
	ops := float64(len(st.all()))
	for _, c := range []struct {
		who string
		cpu time.Duration
	}{{"sidecar", cpuSidecar}, {"clients", cpuClients}} {
		b.ReportMetric(c.cpu.Seconds()/st.elapsed.Seconds(), c.who+"-cores")
		b.ReportMetric(float64(c.cpu.Microseconds())/1000/ops, c.who+"-cpu-ms/op")
	}
	b.Logf("sessions: %d agents, one session each, %.0f ops/s, p50 %s, p99 %s", len(sessions), st.opsPerSec(),
		percentile(st.all(), 50).Round(100*time.Microsecond), percentile(st.all(), 99).Round(100*time.Microsecond))
}

// idleSessions is how many idle sessions BenchmarkIdleSessions holds.
const idleSessions = 1000

// BenchmarkIdleSessions opens 1,000 sessions over 64 agents' keys, each
// holding a claim of its own, then lets them idle (the sidecar keeping
// them alive: a keepalive and a heartbeat per session every grace/3) and
// reports the sidecar's RSS and the heartbeat writes per second they
// cost the ledger, read from its metrics.
func BenchmarkIdleSessions(b *testing.B) {
	g, w, bin := sharedB(b)
	agents := agentsB(b, g, w, benchAgentCount)
	issues := openIssuesB(b, g, w, idleSessions, "Idle session")
	raiseFileLimit(b, 2*idleSessions+256)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const grace = 15 * time.Second
	for b.Loop() {
		s := startBenchSidecar(b, ctx, g, bin, b.TempDir(), "--max-conns-per-addr", fmt.Sprint(2*idleSessions))
		idle := vmRSS(b, s.PID())
		cfgs := make([]*ssh.ClientConfig, len(agents))
		for i, u := range agents {
			cfg, err := clientConfig(s, u)
			if err != nil {
				b.Fatal(err)
			}
			cfgs[i] = cfg
		}
		sessions := make([]*goSession, idleSessions)
		defer func() {
			for _, g := range sessions {
				if g != nil {
					_ = g.c.Close()
				}
			}
		}()
		start := time.Now()
		if err := inParallel(32, idleSessions, func(i int) error {
			sess, err := openGoSession(s, cfgs[i%len(cfgs)], fmt.Sprintf("--agent idle-%d --grace %s", i, grace))
			if err != nil {
				return fmt.Errorf("session %d: %w", i, err)
			}
			sessions[i] = sess
			r, err := sess.do(fmt.Sprintf("acquire %s %d", w.Widgets.FullName(), issues[i]))
			if err == nil && exitOf(r) != 0 {
				err = fmt.Errorf("%v", r)
			}
			if err != nil {
				return fmt.Errorf("session %d: acquire: %w", i, err)
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		opened := time.Since(start)
		// Idle for four rounds of keepalives, then measure.
		beats0, at0 := gauge(b, s, "collab_lease_session_heartbeats_total"), time.Now()
		time.Sleep(4 * grace / 3)
		beats1, at1 := gauge(b, s, "collab_lease_session_heartbeats_total"), time.Now()
		loaded := vmRSS(b, s.PID())
		if live := gauge(b, s, "collab_lease_live_leases"); live < idleSessions {
			b.Fatalf("%v live leases after idling, want the %d sessions' claims", live, idleSessions)
		}
		if open := gauge(b, s, "collab_lease_sessions"); open != idleSessions {
			b.Fatalf("%v sessions open, want %d", open, idleSessions)
		}
		// The last session still answers.
		if r, err := sessions[idleSessions-1].do(fmt.Sprintf("check %s %d --token 1", w.Widgets.FullName(), issues[idleSessions-1])); err != nil || exitOf(r) != 0 {
			b.Fatalf("check on the last session: %v %v", r, err)
		}
		mb := func(kib int64) float64 { return float64(kib) * 1024 / 1e6 } // MB, as the goal says
		rate := (beats1 - beats0) / at1.Sub(at0).Seconds()
		b.ReportMetric(mb(idle), "idle-RSS-MB")
		b.ReportMetric(mb(loaded), "sessions-RSS-MB")
		b.ReportMetric(float64(loaded-idle)/idleSessions, "KiB/session")
		b.ReportMetric(rate, "heartbeat-writes/s")
		b.ReportMetric(float64(idleSessions)/(grace.Seconds()/3), "heartbeat-writes/s-expected")
		b.ReportMetric(idleSessions, "sessions")
		b.ReportMetric(grace.Seconds(), "grace-s")
		b.ReportMetric(opened.Seconds(), "open-s")
		b.Logf("sessions: %d idle sessions with a claim each: sidecar RSS %.1f MB (%.1f idle), %.1f heartbeat writes/s (grace %s); opening them took %.1fs",
			idleSessions, mb(loaded), mb(idle), rate, grace, opened.Seconds())
	}
}

// gauge is the value of one sample of s's /metrics (its first line
// named so, without labels).
func gauge(b *testing.B, s *Sidecar, name string) float64 {
	b.Helper()
	resp, err := http.Get(s.AdminURL + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			return f
		}
	}
	b.Fatalf("no %s in /metrics", name)
	return 0
}

// mcpBefore is the git-collab whose MCP server runs one ssh per tool call,
// BenchmarkMCPSession's "before": BENCH_MCP_BEFORE, default the last
// commit before sessions.
func mcpBefore() string {
	if rev := os.Getenv("BENCH_MCP_BEFORE"); rev != "" {
		return rev
	}
	return "dc49e9f"
}

// BenchmarkMCPSession has an MCP client call a read-only tool (claims)
// of `git collab mcp` over and over, through git-collab built from
// mcpBefore (an ssh process and a handshake per call) and through this
// tree's (every call over one session), alternating rounds, and reports
// the tool calls per second of each.
func BenchmarkMCPSession(b *testing.B) {
	g, w, bin := sharedB(b)
	u := agentsB(b, g, w, 1)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s := startBenchSidecar(b, ctx, g, bin, b.TempDir())
	dir := b.TempDir()
	after, err := BuildGitCollab(ctx, filepath.Join(dir, "after"))
	if err != nil {
		b.Fatal(err)
	}
	before, err := buildGitCollabAt(ctx, mcpBefore(), filepath.Join(dir, "before"))
	if err != nil {
		b.Fatal(err)
	}
	type side struct {
		name  string
		cs    *mcp.ClientSession
		calls int
		took  time.Duration
	}
	var sides []*side
	for _, c := range []struct{ name, bin string }{{"before", before}, {"after", after}} {
		cs := startBenchMCP(b, ctx, s, g, w, u, c.bin)
		defer cs.Close()
		sides = append(sides, &side{name: c.name, cs: cs})
	}
	d := benchDuration(b)
	for b.Loop() {
		for round := range 4 {
			for _, sd := range sides {
				_ = round
				t0 := time.Now()
				for time.Since(t0) < d/8 {
					res, err := sd.cs.CallTool(ctx, &mcp.CallToolParams{Name: "claims", Arguments: map[string]any{}})
					if err != nil || res.IsError {
						b.Fatalf("%s: claims: %v %+v", sd.name, err, res)
					}
					sd.calls++
				}
				sd.took += time.Since(t0)
			}
		}
	}
	rate := func(sd *side) float64 { return float64(sd.calls) / sd.took.Seconds() }
	b.ReportMetric(rate(sides[0]), "before-calls/s")
	b.ReportMetric(rate(sides[1]), "after-calls/s")
	b.ReportMetric(rate(sides[1])/rate(sides[0]), "after/before")
	b.Logf("sessions: MCP tool calls through git collab mcp: %.1f/s one ssh per call (git-collab of %s), %.1f/s over one session",
		rate(sides[0]), mcpBefore(), rate(sides[1]))
}

// startBenchMCP starts `git collab mcp` of the git-collab at bin in a new
// checkout of Widgets as u, and connects an MCP client to it.
func startBenchMCP(b *testing.B, ctx context.Context, s *Sidecar, g *Gitea, w *World, u *User, bin string) *mcp.ClientSession {
	b.Helper()
	home := b.TempDir()
	repo := filepath.Join(home, "widgets")
	env := CheckoutEnv(home, filepath.Dir(bin))
	for _, args := range [][]string{
		{"init", "-q", repo},
		{"-C", repo, "remote", "add", "origin", g.URL + "/" + w.Widgets.FullName() + ".git"},
		{"-C", repo, "config", "collab.sidecar", s.SSHAddr},
		{"-C", repo, "config", "core.sshCommand", s.SSHCommand(u.Key.Path)},
	} {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	cmd := exec.Command("git", "collab", "mcp")
	cmd.Dir, cmd.Env = repo, env
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "collab-bench", Version: "1"}, nil).
		Connect(cctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		b.Fatalf("start git collab mcp (%s): %v", bin, err)
	}
	return cs
}

// buildGitCollabAt builds cmd/git-collab as it was at revision rev of
// this repository into dir and returns the binary's path.
func buildGitCollabAt(ctx context.Context, rev, dir string) (string, error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return "", err
	}
	tree := filepath.Join(dir, "tree")
	if err := os.MkdirAll(tree, 0o755); err != nil {
		return "", err
	}
	archive := exec.CommandContext(ctx, "sh", "-c", "git -C \"$1\" archive \"$2\" | tar -x -C \"$3\"", "sh", root, rev, tree)
	if out, err := archive.CombinedOutput(); err != nil {
		return "", fmt.Errorf("git archive %s: %v\n%s", rev, err, out)
	}
	bin := filepath.Join(dir, "bin", "git-collab")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/git-collab")
	build.Dir = tree
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build git-collab at %s: %v\n%s", rev, err, out)
	}
	return bin, nil
}
