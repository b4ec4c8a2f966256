package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/collab-lease/collab-lease/integration"
	"github.com/collab-lease/collab-lease/plugin/contract"
)

// The coordinator: it starts the agents of one mode as processes, reads
// their events, kills and restarts what the fault run says, and measures
// what the mode cost.

// The proxy's sources.
const (
	srcSidecar = "sidecar"
	srcAgents  = "agents"
)

// modeTimeout bounds one mode of round two on the machine its bound was
// set on; the runs' bounds are sized from it and Gitea's measured speed
// (sizing.go). Past its bound a mode's agents are killed: a collab-lease
// run fails then, a baseline is measured as far as it got.
const modeTimeout = 4 * time.Minute

// gitModeTimeout is modeTimeout for round three, whose work pushes and
// merges through Gitea's hooks. Its baselines have the same bound: as
// one account their agents pile onto the same issues, and a stop at the
// bound is measured (what is left open), not a failure; the wall-time
// goal compares them with the collab-lease runs, and a baseline stopped
// sooner would look faster than it is.
const gitModeTimeout = 6 * time.Minute

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
	// lockRepo holds the merge locks of round three (owner/name).
	lockRepo string

	// sizing is how the runs are sized from Gitea's speed.
	sizing sizing

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
	// Backlog is the plan its repository holds.
	Backlog backlog
	TTL     time.Duration
	Kill    map[int]int // agent → the work item it is killed at
	// RestartAfter: restart the sidecar once, when this many issues have
	// been closed; 0 never.
	RestartAfter int

	// Round three: Users are the agents' accounts (one per agent, all
	// the same account for a fleet under one bot), Keys their SSH keys
	// for the sidecar; Work makes the work a process that pushes, opens
	// a pull request and merges; Zombies are the agents frozen after
	// their first push and woken once their claim is taken over.
	Round3  bool
	Users   []*integration.User
	Keys    []string
	Zombies map[int]bool
	// Bare switches the agents' own defenses off: their work checks no
	// token and goes on when git collab run stops it (detach.go). Gate
	// runs the sidecar with its gate in Gitea's push path (gate.go).
	Bare, Gate bool
	// Lock is its issue in the merge-lock repository (round three).
	Lock int64
	// Bound is how long its agents may run before they are stopped,
	// sized from Gitea's speed (sizing.go).
	Bound time.Duration
	// MergeVerb: its work merges with `git collab merge`, which takes
	// the turn to merge in the sidecar, instead of holding the merge
	// lock and asking Gitea's API (round three's collab-lease runs but
	// the merge-lock one and those with the agents' defenses off).
	MergeVerb bool
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
	Zombies     []zombie      // round three
	// Bound is the run's bound (modeSpec.Bound). RanOn says it ran on
	// past it, still closing issues (runOn). StoppedAt, if not 0, is when
	// it was stopped, its agents killed: past its bound once no issue had
	// closed for a while, at boundCap times its bound (Capped), or when
	// the program was interrupted (Interrupted).
	Bound, StoppedAt    time.Duration
	RanOn               bool
	Capped, Interrupted bool
	Git                 gitOutcome // round three
	Err                 error      // an agent loop failed, or the mode did not finish
	// WorkErrors: a round-three baseline's pieces of work that failed
	// (measured, not a failure of the benchmark).
	WorkErrors []string
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

// checkouts makes each agent's checkout of spec's repository, with its
// own HOME and, when the sidecar runs, its address and the agent's own
// key in its git configuration. Round two's checkouts never fetch; round
// three's reach Gitea over HTTP through the counting proxy, as the
// agent's account, and commit as the agent.
func (f *fleet) checkouts(ctx context.Context, spec modeSpec) ([]checkout, error) {
	// Its own bound: the modes before it may have taken longer than setup's.
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	repo := spec.Repo
	out := make([]checkout, len(spec.Users))
	var eg errgroup.Group
	eg.SetLimit(4)
	for i, u := range spec.Users {
		eg.Go(func() error {
			home := checkoutHome(f.dir, i)
			c := checkout{Dir: filepath.Join(home, repo.Name), Env: integration.CheckoutEnv(home, f.gitBin)}
			remote := func(repo string) string { return "git@127.0.0.1:" + repo + ".git" }
			if spec.Round3 {
				remote = func(repo string) string {
					return strings.Replace(f.proxy.urls[srcAgents], "://", "://"+u.Login+":"+u.Token+"@", 1) + "/" + repo + ".git"
				}
			}
			cmds := [][]string{
				{"init", "-q", c.Dir},
				{"-C", c.Dir, "remote", "add", "origin", remote(repo.FullName())},
				{"-C", c.Dir, "config", "user.name", agentLogin(i)},
				{"-C", c.Dir, "config", "user.email", agentLogin(i) + "@fleet.invalid"},
			}
			if spec.Round3 {
				cmds = append(cmds, []string{"-C", c.Dir, "remote", "add", lockRemote, remote(f.lockRepo)})
			}
			if f.sidecar != nil {
				cmds = append(cmds,
					[]string{"-C", c.Dir, "config", "collab.sidecar", f.sidecar.SSHAddr},
					[]string{"-C", c.Dir, "config", "core.sshCommand", f.sidecar.SSHCommand(spec.Keys[i])})
			}
			for _, args := range cmds {
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

// keepEvents writes a mode's events, one JSON line each, to
// events-<key>.jsonl in the working directory: with the Gitea log and
// database beside them, what a failed run leaves to look into.
func (f *fleet) keepEvents(key string, events []Event) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, e := range events {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(f.dir, "events-"+key+".jsonl"), b.Bytes(), 0o644)
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
	res := ModeResult{Spec: spec, UsesSidecar: spec.Mode != modeAssignees}
	timeout := spec.Bound
	if timeout == 0 {
		timeout = modeTimeout
		if spec.Round3 {
			timeout = gitModeTimeout
		}
	}
	res.Bound = timeout
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bound := time.NewTimer(timeout)
	defer bound.Stop()
	fmt.Fprintf(f.log, "fleet: %s: %d agents on %s\n", spec.Title, len(spec.Users), spec.Repo.FullName())

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
	exits := make(chan agentExit, len(spec.Users))
	procs := make([]*exec.Cmd, len(spec.Users))
	abort := func(err error) ModeResult {
		for _, p := range procs {
			if p != nil {
				killAgent(p)
			}
		}
		res.Err = fmt.Errorf("%s: %w", spec.Title, err)
		return res
	}
	for i, u := range spec.Users {
		cfg := agentConfig{
			Index: i, Login: u.Login, Mode: spec.Mode, Seed: f.seed, Repo: spec.Repo.FullName(),
			API: f.proxy.urls[srcAgents], Token: u.Token, TTL: spec.TTL, DieAt: spec.Kill[i],
			Spread: len(spec.Users), Stall: assigneesStall,
			Work: spec.Round3, Self: f.self, Grace: sessionGrace, Lock: spec.Lock, LockRepo: f.lockRepo, Bare: spec.Bare,
			MergeDeadline: f.sizing.MergeDeadline, LockHold: f.sizing.LockHold, CallTimeout: f.sizing.CallTimeout, MergeVerb: spec.MergeVerb,
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
		alive     = len(spec.Users)
		wall      time.Duration
		lastClose time.Time // zero: none yet
		zombies   []zombie
		taken     = make(chan takeover, len(spec.Zombies))
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
		case evPushed:
			if spec.Zombies[e.Agent] && !slices.ContainsFunc(zombies, func(z zombie) bool { return z.Agent == e.Agent }) {
				pid, _ := strconv.Atoi(e.Detail)
				signalTree(syscall.SIGSTOP, procs[e.Agent].Process.Pid, pid)
				z := zombie{Agent: e.Agent, Issue: e.Issue, Token: e.Token, workPID: pid, trigger: len(all) - 1, Frozen: time.Since(start)}
				zombies = append(zombies, z)
				fmt.Fprintf(f.log, "fleet:   froze %s (SIGSTOP) after its first push of #%d (token %d)\n", agentLogin(e.Agent), e.Issue, e.Token)
				k := len(zombies) - 1
				go func() {
					tctx, cancel := context.WithTimeout(ctx, cmp.Or(f.sizing.ZombieWait, zombieWait))
					defer cancel()
					t, err := f.takenOver(tctx, spec.Keys[z.Agent], spec.Repo.FullName(), z.Issue, z.Token)
					taken <- takeover{k: k, by: t, err: err}
				}()
			}
		case evClosed:
			closes++
			lastClose = time.Now()
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
	// stopAll kills every agent (and every zombie's work) and waits for
	// them: the run is stopped. What it left open is counted; whether
	// that fails the run is the verdict's to say.
	stopAll := func() {
		if spec.Bare {
			// A bare work runs in a process group of its own, which
			// killing its agent's group does not reach.
			for _, p := range procs {
				signalTree(syscall.SIGKILL, p.Process.Pid)
			}
		}
		for i := range procs {
			kill(i)
		}
		for _, z := range zombies {
			signalTree(syscall.SIGKILL, z.workPID)
		}
		for ; alive > 0; alive-- {
			res.AgentsCPU += (<-exits).cpu
		}
		wall = time.Since(start)
		res.StoppedAt = wall
	}
	for alive > 0 {
		select {
		case e := <-events:
			handle(e)
		case t := <-taken:
			// Woken whether or not the takeover came: a zombie left
			// frozen would hold the run up to its deadline.
			z := &zombies[t.k]
			signalTree(syscall.SIGCONT, procs[z.Agent].Process.Pid, z.workPID)
			z.Woke = time.Since(start)
			if t.err != nil {
				z.Err = t.err.Error()
				failures = append(failures, fmt.Sprintf("zombie %s: %v", agentLogin(z.Agent), t.err))
			} else {
				z.TakenOver, z.ByToken = z.Woke, t.by.Token
				if t.by.Agent != nil {
					z.ByAgent = *t.by.Agent
				}
			}
			fmt.Fprintf(f.log, "fleet:   woke %s (SIGCONT): #%d taken over by token %d (%s)\n", agentLogin(z.Agent), z.Issue, z.ByToken, z.ByAgent)
		case x := <-exits:
			alive--
			wall = time.Since(start)
			res.AgentsCPU += x.cpu
			if x.err != nil && !killed[x.agent] {
				failures = append(failures, fmt.Sprintf("agent %s: %v\n%s", agentLogin(x.agent), x.err, x.stderr))
			}
		case <-bound.C:
			since := time.Since(start)
			if !lastClose.IsZero() {
				since = time.Since(lastClose)
			}
			if next, ok := runOn(timeout, time.Since(start), since); ok {
				if !res.RanOn {
					fmt.Fprintf(f.log, "fleet:   %s: its bound, %s, came %s after its last close: it runs on while it closes issues, up to %s\n",
						spec.Title, dur(timeout), dur(since), dur(boundCap*timeout))
				}
				res.RanOn = true
				bound.Reset(next)
				continue
			}
			res.Capped = time.Since(start) >= boundCap*timeout
			stopAll()
		case <-ctx.Done():
			res.Interrupted = true
			stopAll()
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
	res.Report = summarize(spec.Backlog.Issues, len(spec.Users), wall, all)
	if err := f.keepEvents(spec.Key, all); err != nil {
		failures = append(failures, err.Error())
	}
	if spec.Round3 {
		res.Zombies = zombies
		if res.Git, err = f.judge(context.Background(), spec.Repo, all, zombies, res.StoppedAt > 0); err != nil {
			failures = append(failures, err.Error())
		}
	}
	switch {
	case spec.Mode == modeAssignees && spec.Round3, spec.Bare && !spec.Gate:
		// Uncoordinated agents merging one pull request at once make
		// Gitea fail some merges (HTTP 500), and so do zombies that
		// nothing stops: what the baselines measure, reported, not a
		// failure of the benchmark.
		res.WorkErrors = res.Report.Errors
	case spec.Bare:
		// A zombie's work that nothing of its own stops may fail in
		// ways a live one does not (its pull request merged by the
		// agent that took it over): what it met is reported.
		res.WorkErrors = res.Git.ZombieErrors
		failures = append(failures, without(res.Report.Errors, res.Git.ZombieErrors)...)
	default:
		failures = append(failures, res.Report.Errors...)
	}
	if res.OpenInGitea, err = openIssues(context.Background(), f.g, spec.Repo); err != nil {
		failures = append(failures, "list the open issues: "+err.Error())
	} else if !slices.Equal(res.OpenInGitea, res.Report.Unclosed) && res.StoppedAt == 0 {
		failures = append(failures, fmt.Sprintf("the agents' events leave %v unclosed, Gitea says %v are open",
			res.Report.Unclosed, res.OpenInGitea))
	}
	if len(failures) > 0 {
		res.Err = fmt.Errorf("%s: %s", spec.Title, strings.Join(failures, "\n"))
	}
	fmt.Fprintf(f.log, "fleet: %s: done in %.1fs (last close %.1fs): %d closed, %d worked more than once, %d never closed, %d commits lost, %d zombie commits and %d zombie merges landed; agents' CPU %.1f s, sidecar's %.1f s\n",
		spec.Title, wall.Seconds(), res.Report.LastClose.Seconds(), res.Report.Closed, len(res.Report.Duplicates), len(res.Report.Unclosed),
		len(res.Git.Lost), len(res.Git.ZombiePushes), len(res.Git.ZombieMerges), res.AgentsCPU.Seconds(), res.SidecarCPU.Seconds())
	return res
}

// A run's bound is not a deadline while it still closes issues: a
// machine busier during the run than when Gitea's speed was measured
// (another job started meanwhile) slows every run alike, and stopping
// one that still makes progress would measure the machine, not the
// fleet. So at its bound a run that closed an issue within its stall
// window runs on, until no issue has closed for that long, or until
// boundCap times its bound.
const boundCap = 3

// stallWindow is how long without a close stops a run past its bound:
// a sixth of its bound, at least 2 minutes.
func stallWindow(bound time.Duration) time.Duration { return max(2*time.Minute, bound/6) }

// runOn says whether a run whose bound has come runs on, at elapsed into
// it, its last close sinceClose ago (or its start, if none), and when to
// ask again.
func runOn(bound, elapsed, sinceClose time.Duration) (time.Duration, bool) {
	limit, window := boundCap*bound, stallWindow(bound)
	if elapsed >= limit || sinceClose >= window {
		return 0, false
	}
	return min(window-sinceClose, limit-elapsed), true
}

// stopped says when and why the run was stopped ("" if it was not).
func (r ModeResult) stopped() string {
	at := dur(r.StoppedAt)
	switch {
	case r.StoppedAt == 0:
		return ""
	case r.Interrupted:
		return "at " + at + ", interrupted"
	case r.Capped:
		return fmt.Sprintf("at %s, %d× its bound of %s, while it still closed issues", at, boundCap, dur(r.Bound))
	case !r.RanOn:
		return fmt.Sprintf("at its bound, %s, with no issue closed in the %s before it", dur(r.Bound), dur(stallWindow(r.Bound)))
	}
	return fmt.Sprintf("at %s, %s past its bound of %s, once no issue had closed for %s", at, dur(r.StoppedAt-r.Bound), dur(r.Bound), dur(stallWindow(r.Bound)))
}

// verdict is why a collab-lease run fails the benchmark: it worked an
// issue twice, left one open, was stopped (past its bound, sized from
// Gitea's speed, once it closed no more issues: it stalled), or (round
// three) landed a zombie's push or merge, lost a commit, or replaced a
// pull request while merging with git collab merge. A commit of work
// still in flight when the run was stopped (gitOutcome.InFlight) is not
// lost. Baselines only measure: the assignees runs, round three's claims
// without sessions (TTL claims that a loaded machine's late renewal can
// let lapse; it is there for its CPU), and the bare zombies without the
// gate (what lands when nothing stops them). The bare zombies with the
// gate fail on what the gate and the sidecar promise: a zombie's push
// landed, or its merge through git collab merge; and, as every run, on
// an issue left open, a stop or a commit lost. An issue worked twice
// there is reported, not failed on: a zombie's work reports its work
// done before its merge is refused.
func (r ModeResult) verdict() error {
	if r.Spec.Mode == modeAssignees || r.Spec.Mode == modeChain || r.Spec.Bare && !r.Spec.Gate {
		return nil
	}
	g := r.Git
	var why []string
	if r.StoppedAt > 0 {
		flying := ""
		if r.Spec.Round3 {
			flying = fmt.Sprintf(" and %d commits of work in flight", len(g.InFlight))
		}
		stalled := " (its bound was sized from Gitea's measured speed, and it runs on past it while it closes issues: it stalled)"
		if r.Interrupted {
			stalled = ""
		}
		why = append(why, fmt.Sprintf("stopped %s, with %d issues open%s%s", r.stopped(), len(r.Report.Unclosed), flying, stalled))
	}
	if r.Spec.Bare {
		merges := 0 // a zombie's merge through the sidecar is refused; through Gitea's API, nothing refuses it
		if r.Spec.MergeVerb {
			merges = len(g.ZombieMerges)
		}
		if len(g.ZombiePushes) > 0 || merges > 0 || len(r.Report.Unclosed) > 0 && r.StoppedAt == 0 || len(g.Lost) > 0 {
			why = append(why, fmt.Sprintf("%d zombie commits landed through the gate, %d zombie merges through git collab merge, %d issues never closed, %d commits lost; all must be 0",
				len(g.ZombiePushes), merges, len(r.Report.Unclosed), len(g.Lost)))
		}
	} else if len(r.Report.Duplicates) > 0 || len(r.Report.Unclosed) > 0 && r.StoppedAt == 0 || len(g.ZombiePushes) > 0 || len(g.ZombieMerges) > 0 || len(g.Lost) > 0 {
		why = append(why, fmt.Sprintf("%d issues worked more than once, %d never closed, %d zombie commits and %d zombie merges landed, %d commits lost; all must be 0",
			len(r.Report.Duplicates), len(r.Report.Unclosed), len(g.ZombiePushes), len(g.ZombieMerges), len(g.Lost)))
	}
	if r.Spec.MergeVerb && len(r.Report.Replaced) > 0 {
		// The sidecar recovers a pull request whose test Gitea lost.
		why = append(why, fmt.Sprintf("%d pull requests replaced, merging with git collab merge; must be 0", len(r.Report.Replaced)))
	}
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %s", r.Spec.Title, strings.Join(why, "; "))
}

// takeover is what the history said of a frozen claim.
type takeover struct {
	k   int // the zombie, by its index
	by  contract.TenureView
	err error
}

// zombieWait bounds the wait for a frozen claim to be taken over.
const zombieWait = 90 * time.Second

// sessionGrace is the grace of round three's sessions: a frozen agent's
// claim lapses this long after its last sign of life. It is the least a
// session allows (the issue asked for 3 s, which sessions refuse).
const sessionGrace = 5 * time.Second

// judge reads what a round-three run left in Gitea: its branches (a
// bare clone, straight from Gitea, not counted): main's commits, and
// each work/<n> branch's commits that main lacks; and, for each
// zombie's late commit, whether Gitea has it at all. stopped says the
// run was stopped at its bound: a commit still on its issue's branch
// whose work had not finished then was in flight, not lost.
func (f *fleet) judge(ctx context.Context, repo integration.Repo, events []Event, zombies []zombie, stopped bool) (gitOutcome, error) {
	dir, err := os.MkdirTemp(f.dir, "judge-")
	if err != nil {
		return gitOutcome{}, err
	}
	defer os.RemoveAll(dir)
	git := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Env = integration.CheckoutEnv(dir, f.gitBin)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		return string(out), nil
	}
	if _, err := git("clone", "-q", "--bare", f.g.URL+"/"+repo.FullName()+".git", dir); err != nil {
		return gitOutcome{}, fmt.Errorf("clone %s to judge it: %w", repo.FullName(), err)
	}
	out, err := git("-C", dir, "rev-list", "main")
	if err != nil {
		return gitOutcome{}, fmt.Errorf("list main's commits of %s: %w", repo.FullName(), err)
	}
	inMain := map[string]bool{}
	for _, sha := range strings.Fields(out) {
		inMain[sha] = true
	}
	// What each issue's branch holds beyond main.
	onBranch := map[int64]map[string]bool{}
	refs, err := git("-C", dir, "for-each-ref", "--format=%(refname:short)", "refs/heads/work/")
	if err != nil {
		return gitOutcome{}, err
	}
	for _, ref := range strings.Fields(refs) {
		n, err := strconv.ParseInt(strings.TrimPrefix(ref, "work/"), 10, 64)
		if err != nil {
			continue // not an issue's branch
		}
		out, err := git("-C", dir, "rev-list", ref, "^main")
		if err != nil {
			return gitOutcome{}, err
		}
		onBranch[n] = map[string]bool{}
		for _, sha := range strings.Fields(out) {
			onBranch[n][sha] = true
		}
	}
	var askErr error
	inGitea := func(sha string) bool {
		err := f.g.Admin().Do(ctx, "GET", "/repos/"+repo.FullName()+"/git/commits/"+sha+"?stat=false&files=false", nil, nil)
		var apiErr *integration.APIError
		if err != nil && !(errors.As(err, &apiErr) && (apiErr.Status == http.StatusNotFound || apiErr.Status == http.StatusUnprocessableEntity)) {
			askErr = errors.Join(askErr, err)
		}
		return err == nil
	}
	o := judgeGit(events, zombies, func(sha string) bool { return inMain[sha] }, inGitea)
	if stopped {
		o = o.inFlightAtBound(events, func(n int64, sha string) bool { return onBranch[n][sha] })
	}
	return o, askErr
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
		// Gitea's repository root lets git collab merge tell a conflict
		// from a test Gitea has not finished (lease.WithConflictTest).
		Args: append(append([]string(nil), sidecarFlags...), "--gitea-repo-root", repoRoot(f.g)),
	}, custom)
	if err != nil {
		return err
	}
	f.sidecar = s
	fmt.Fprintf(f.log, "fleet: sidecar started and installed (system webhook) in %.1fs\n", time.Since(start).Seconds())
	return nil
}
