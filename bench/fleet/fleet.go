package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/collab-lease/collab-lease/integration"
)

// The coordinator: it starts the agents of one mode as processes, reads
// their events, kills and restarts what the fault run says, and measures
// what the mode cost.

// The proxy's sources.
const (
	srcSidecar = "sidecar"
	srcAgents  = "agents"
)

// modeTimeout bounds one mode: past it, the agents are killed and the run
// fails.
const modeTimeout = 4 * time.Minute

// assigneesStall is how long an assignees agent that finds nothing free
// waits for the open issues to change before it stops: what is left is
// assigned to others, or blocked by what is.
const assigneesStall = 15 * time.Second

type fleet struct {
	seed    int64
	dir     string
	self    string // this program, which agents run as
	verbose bool
	log     io.Writer

	g       *integration.Gitea
	proxy   *proxy
	agents  []*integration.User
	backlog backlog
	gitBin  string // the directory of git-collab

	sidecar *integration.Sidecar
	// retiredCPU is the CPU time of sidecar processes that have stopped.
	retiredCPU time.Duration
}

// modeSpec says how one mode runs.
type modeSpec struct {
	Key   string // "lease", "assignees", "faults"
	Title string
	Mode  string // modeLease or modeAssignees
	Repo  integration.Repo
	TTL   time.Duration
	Kill  map[int]int // agent → the work item it is killed at
	// RestartAfter: restart the sidecar once, when this many issues have
	// been closed; 0 never.
	RestartAfter int
}

// ModeResult is what one mode measured.
type ModeResult struct {
	Spec        modeSpec
	Report      Report
	Requests    map[string]int64 // to Gitea, by source, during the mode
	Traffic     traffic          // the same, by source and route
	UsesSidecar bool
	SidecarCPU  time.Duration
	GiteaCPU    time.Duration
	AgentsCPU   time.Duration // the agents' processes and their children (git, git-collab, ssh)
	Restart     *restart      // nil: no restart
	OpenInGitea []int64       // what Gitea says is still open afterwards
	Err         error         // an agent loop failed, or the mode did not finish
}

type restart struct {
	AfterCloses int
	At, Took    time.Duration
}

// faults decides, from the seed, which two agents the fault run kills
// (never all of them) and at which of their work items (1st to 3rd).
func faults(seed int64, agents int) map[int]int {
	rng := rand.New(rand.NewPCG(uint64(seed), faultStream))
	kill := map[int]int{}
	for _, i := range rng.Perm(agents)[:min(2, agents-1)] {
		kill[i] = 1 + rng.IntN(3)
	}
	return kill
}

// faultStream keeps the fault plan's random numbers apart from the others.
const faultStream = 1<<62 + 1

// checkout is a git repository where an agent runs `git collab`.
type checkout struct {
	Dir string
	Env []string
}

// checkouts makes each agent's checkout of repo, with its own key, its
// own HOME and the sidecar's address in its git configuration.
func (f *fleet) checkouts(ctx context.Context, repo integration.Repo) ([]checkout, error) {
	out := make([]checkout, len(f.agents))
	var eg errgroup.Group
	eg.SetLimit(4)
	for i, u := range f.agents {
		eg.Go(func() error {
			home := checkoutHome(f.dir, i)
			c := checkout{Dir: filepath.Join(home, repo.Name), Env: integration.CheckoutEnv(home, f.gitBin)}
			for _, args := range [][]string{
				{"init", "-q", c.Dir},
				{"-C", c.Dir, "remote", "add", "origin", "git@127.0.0.1:" + repo.FullName() + ".git"},
				{"-C", c.Dir, "config", "collab.sidecar", f.sidecar.SSHAddr},
				{"-C", c.Dir, "config", "core.sshCommand", f.sidecar.SSHCommand(u.Key.Path)},
			} {
				cmd := exec.CommandContext(ctx, "git", args...)
				cmd.Env = c.Env
				if b, err := cmd.CombinedOutput(); err != nil {
					return fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, b)
				}
			}
			out[i] = c
			return nil
		})
	}
	return out, eg.Wait()
}

// sidecarCPU is the CPU time every sidecar process has used so far.
func (f *fleet) sidecarCPU() (time.Duration, error) {
	if f.sidecar == nil {
		return 0, nil
	}
	d, err := integration.CPUTime(f.sidecar.PID())
	return f.retiredCPU + d, err
}

// restartSidecar stops the sidecar (SIGTERM: running commands finish) and
// starts it again on the same ledger and addresses.
func (f *fleet) restartSidecar(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	old := f.sidecar
	// Read just before it stops: its last milliseconds are not counted.
	cpu, err := integration.CPUTime(old.PID())
	if err != nil {
		return 0, err
	}
	if err := old.Stop(20 * time.Second); err != nil {
		return 0, fmt.Errorf("stop the sidecar: %w", err)
	}
	f.retiredCPU += cpu
	s, err := old.Restart(ctx)
	if err != nil {
		return 0, fmt.Errorf("start the sidecar again: %w", err)
	}
	f.sidecar = s
	return time.Since(start), nil
}

// agentExit is how an agent process ended.
type agentExit struct {
	agent  int
	err    error
	stderr string
	cpu    time.Duration // of the agent and its waited-for children
}

// runMode runs every agent of spec to its end and measures the mode.
func (f *fleet) runMode(ctx context.Context, spec modeSpec, cos []checkout) ModeResult {
	res := ModeResult{Spec: spec, UsesSidecar: spec.Mode == modeLease}
	ctx, cancel := context.WithTimeout(ctx, modeTimeout)
	defer cancel()
	fmt.Fprintf(f.log, "fleet: %s: %d agents on %s\n", spec.Title, len(f.agents), spec.Repo.FullName())

	f.proxy.take() // what came before is not this mode's
	cpuBefore, err := f.sidecarCPU()
	if err != nil {
		res.Err = err
		return res
	}
	giteaBefore, err := integration.CPUTime(f.g.PID())
	if err != nil {
		res.Err = err
		return res
	}
	start := time.Now()
	events := make(chan Event, 4096)
	exits := make(chan agentExit, len(f.agents))
	procs := make([]*exec.Cmd, len(f.agents))
	abort := func(err error) ModeResult {
		for _, p := range procs {
			if p != nil {
				killAgent(p)
			}
		}
		res.Err = fmt.Errorf("%s: %w", spec.Title, err)
		return res
	}
	for i, u := range f.agents {
		cfg := agentConfig{
			Index: i, Login: u.Login, Mode: spec.Mode, Seed: f.seed, Repo: spec.Repo.FullName(),
			API: f.proxy.urls[srcAgents], Token: u.Token, TTL: spec.TTL, DieAt: spec.Kill[i],
			Spread: len(f.agents), Stall: assigneesStall,
		}
		if cos != nil {
			cfg.Dir, cfg.Env = cos[i].Dir, cos[i].Env
		}
		in, err := json.Marshal(cfg)
		if err != nil {
			return abort(err)
		}
		cmd := exec.Command(f.self, agentCommand)
		cmd.Stdin = bytes.NewReader(in)
		agentProcess(cmd)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return abort(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			return abort(fmt.Errorf("start agent %s: %w", u.Login, err))
		}
		procs[i] = cmd
		go func() {
			sc := bufio.NewScanner(stdout)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				var e Event
				if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
					e = Event{Agent: i, Kind: evError, Detail: fmt.Sprintf("unreadable event %q: %v", sc.Text(), err)}
				}
				e.At = time.Since(start)
				events <- e
			}
			err := cmd.Wait()
			x := agentExit{agent: i, err: err, stderr: stderr.String()}
			if st := cmd.ProcessState; st != nil {
				x.cpu = st.UserTime() + st.SystemTime()
			}
			exits <- x
		}()
	}
	kill := func(i int) { killAgent(procs[i]) }

	var (
		all       []Event
		failures  []string
		killed    = map[int]bool{}
		closes    = 0
		restarted = make(chan error, 1)
		restartAt time.Time
		alive     = len(f.agents)
		wall      time.Duration
	)
	handle := func(e Event) {
		all = append(all, e)
		if f.verbose {
			fmt.Fprintf(f.log, "fleet:   %7.3fs %s %s #%d %s\n", e.At.Seconds(), agentLogin(e.Agent), e.Kind, e.Issue, e.Detail)
		}
		switch e.Kind {
		case evDoomed:
			if spec.Kill[e.Agent] > 0 && !killed[e.Agent] {
				kill(e.Agent)
				killed[e.Agent] = true
				all = append(all, Event{Agent: e.Agent, Kind: evKilled, Issue: e.Issue, Token: e.Token, At: time.Since(start)})
				fmt.Fprintf(f.log, "fleet:   killed %s (SIGKILL) while it worked on #%d\n", agentLogin(e.Agent), e.Issue)
			}
		case evClosed:
			closes++
			if spec.RestartAfter > 0 && closes == spec.RestartAfter {
				restartAt = time.Now()
				res.Restart = &restart{AfterCloses: closes, At: time.Since(start)}
				go func() {
					took, err := f.restartSidecar(ctx)
					res.Restart.Took = took
					restarted <- err
				}()
			}
		}
	}
	for alive > 0 {
		select {
		case e := <-events:
			handle(e)
		case x := <-exits:
			alive--
			wall = time.Since(start)
			res.AgentsCPU += x.cpu
			if x.err != nil && !killed[x.agent] {
				failures = append(failures, fmt.Sprintf("agent %s: %v\n%s", agentLogin(x.agent), x.err, x.stderr))
			}
		case <-ctx.Done():
			for i := range procs {
				kill(i)
			}
			for ; alive > 0; alive-- {
				res.AgentsCPU += (<-exits).cpu
			}
			failures = append(failures, fmt.Sprintf("the agents did not finish within %s", modeTimeout))
		}
	}
	// Every reader has sent all its events before its exit.
	for len(events) > 0 {
		handle(<-events)
	}
	if !restartAt.IsZero() {
		fmt.Fprintf(f.log, "fleet:   restarted the sidecar after %d closes\n", spec.RestartAfter)
		if err := <-restarted; err != nil {
			failures = append(failures, "restart: "+err.Error())
		}
	}

	res.Traffic = f.proxy.take()
	res.Requests = res.Traffic.bySource()
	if cpu, err := integration.CPUTime(f.g.PID()); err != nil {
		failures = append(failures, err.Error())
	} else {
		res.GiteaCPU = cpu - giteaBefore
	}
	if res.UsesSidecar {
		cpu, err := f.sidecarCPU()
		if err != nil {
			failures = append(failures, err.Error())
		}
		res.SidecarCPU = cpu - cpuBefore
	}
	res.Report = summarize(f.backlog.Issues, len(f.agents), wall, all)
	failures = append(failures, res.Report.Errors...)
	if res.OpenInGitea, err = openIssues(context.Background(), f.g, spec.Repo); err != nil {
		failures = append(failures, "list the open issues: "+err.Error())
	} else if !slices.Equal(res.OpenInGitea, res.Report.Unclosed) {
		failures = append(failures, fmt.Sprintf("the agents' events leave %v unclosed, Gitea says %v are open",
			res.Report.Unclosed, res.OpenInGitea))
	}
	if len(failures) > 0 {
		res.Err = fmt.Errorf("%s: %s", spec.Title, strings.Join(failures, "\n"))
	}
	fmt.Fprintf(f.log, "fleet: %s: done in %.1fs\n", spec.Title, wall.Seconds())
	return res
}

// startSidecar starts the sidecar, reaching Gitea through the proxy, and
// installs it into Gitea: the system webhook that ends a claim when its
// issue closes. The badge footer goes to a directory of its own, so
// Gitea needs no restart (the benchmark shows no badges).
func (f *fleet) startSidecar(ctx context.Context, bin string) error {
	start := time.Now()
	custom := filepath.Join(f.dir, "custom")
	if err := os.Mkdir(custom, 0o755); err != nil {
		return err
	}
	s, err := integration.StartInstalled(ctx, integration.SidecarOptions{
		Binary: bin, Gitea: f.g, GiteaURL: f.proxy.urls[srcSidecar], DataDir: filepath.Join(f.dir, "sidecar"),
	}, custom)
	if err != nil {
		return err
	}
	f.sidecar = s
	fmt.Fprintf(f.log, "fleet: sidecar started and installed (system webhook) in %.1fs\n", time.Since(start).Seconds())
	return nil
}
