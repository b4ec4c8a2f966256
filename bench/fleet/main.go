// Command fleet is the fleet benchmark (`make fleet`; `make bench` puts
// its section in bench/RESULTS.md): K agents (default 20), each a Gitea
// user with its own SSH key and each a loop of real `git collab` processes
// (real OpenSSH) in its own checkout, drain a backlog of N open issues
// (default 200; some labelled, a few blocked by a dependency) in a real
// Gitea, three times on three copies of the backlog:
//
//  1. collab-lease: next --ttl, work, renew past half the TTL, check
//     --token, close the issue in Gitea (the webhook ends the claim);
//  2. Gitea's assignees alone: list oldest first, PATCH oneself in as the
//     assignee, re-read and let go if someone else is assigned too, work,
//     close — run before the sidecar exists, so Gitea is stock;
//  3. collab-lease with faults: two agents SIGKILLed mid-work (their
//     claims must come back through expiry) and the sidecar restarted once.
//
// Every request to Gitea, the sidecar's and the agents', goes through a
// counting proxy. It prints a summary and, with -md, writes the markdown
// section; it exits non-zero if any agent's loop failed or if a
// collab-lease run worked an issue twice or left one open. Its choices
// (work times, labels, dependencies, victims, picks, jitter) follow from
// -seed; timings do not.
//
// It is a benchmark harness: it must not be imported, and it never
// writes the ledger except through the sidecar's own verbs.
//
// Its files: the coordinator, which starts, kills and measures the agents
// (fleet.go); an agent's loop (agent.go; with round two's verbs,
// chain.go; over a session, sessions.go) and the work it runs on one
// issue (work.go), which with its agent's own defenses off goes on when
// git collab run stops it (detach.go); the backlog put into Gitea
// (seed.go); the counting proxy in front of Gitea (proxy.go); the
// sidecar's gate in Gitea's push path, for the runs that have it
// (gate.go); what the agents report and what a run computes from it
// (report.go), what landed in git (outcome.go) and the frozen agents
// woken late (zombies.go); the bounds and backlog sized from Gitea's
// speed, measured first (sizing.go); the summary and the markdown section
// (render.go); process groups (proc_linux.go, proc_other.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/collab-lease/collab-lease/integration"
)

// allModes are the modes, by key: round two's three, then round three's
// six (the one-account run twice: merging with git collab merge, and
// holding the merge lock to merge through Gitea's API), then the zombie
// run with the agents' own defenses off, with the gate in Gitea's push
// path and without it.
var allModes = []string{"lease", "assignees", "faults", "sessions", "sessions-lock", "chain", "zombies", "assignees-bot", "assignees-accounts",
	"zombies-bare-gate", "zombies-bare-nogate"}

// isRound3 says whether mode is one of round three's (real pushes and
// merges, sized from Gitea's speed).
func isRound3(mode string) bool {
	return !slices.Contains([]string{"lease", "assignees", "faults"}, mode)
}

// defaultModes are those that run unless -modes names others, as make
// bench runs them: all of them (the two bare zombie runs add about 5
// minutes on 2 cores; bench/README.md).
var defaultModes = allModes

type options struct {
	seed      int64
	issues    int
	gitIssues int // round three's backlog
	// gitIssuesSet: -git-issues was given, so the backlog is not cut
	// for a slow Gitea (sizing.go).
	gitIssuesSet bool
	agents       int
	ttl          time.Duration
	faultTTL     time.Duration
	markdown     string
	modes        map[string]bool // which modes run, by key
	keep         bool
	verbose      bool
	giteaGit     string // the git Gitea runs; "" is integration/build-git.sh's
	reproduction string // the command line, for the report
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == agentCommand {
		os.Exit(agentMain(os.Stdin, os.Stdout))
	}
	if len(os.Args) > 1 && os.Args[1] == workCommand {
		os.Exit(workMain(os.Stdout))
	}
	var o options
	flag.Int64Var(&o.seed, "seed", 1, "seed of every choice: work times, labels, dependencies, victims, picks, jitter")
	flag.IntVar(&o.issues, "issues", 200, "open issues in round two's backlog")
	flag.IntVar(&o.gitIssues, "git-issues", 60, "open issues in round three's backlog (real pushes and merges)")
	flag.IntVar(&o.agents, "agents", 20, "agents in the fleet")
	flag.DurationVar(&o.ttl, "ttl", 30*time.Second, "claim TTL of the collab-lease run (whole seconds)")
	flag.DurationVar(&o.faultTTL, "fault-ttl", 10*time.Second, "claim TTL of the fault run, which the killed agents' claims wait out")
	flag.StringVar(&o.markdown, "md", "", "also write the markdown section for bench/RESULTS.md to this file")
	flag.BoolVar(&o.keep, "keep", false, "keep the working directory (Gitea, ledger, checkouts) and print where it is")
	flag.BoolVar(&o.verbose, "v", false, "print every agent event")
	flag.StringVar(&o.giteaGit, "gitea-git", "", "the git executable Gitea runs; \"\" builds (once, cached) integration/build-git.sh's, recent enough that Gitea tests a pull request's mergeability with git merge-tree")
	only := flag.String("modes", strings.Join(defaultModes, ","), "the modes to run, comma-separated, of "+strings.Join(allModes, ", ")+")")
	flag.Parse()
	flag.Visit(func(fl *flag.Flag) { o.gitIssuesSet = o.gitIssuesSet || fl.Name == "git-issues" })
	o.modes = map[string]bool{}
	for _, m := range strings.Split(*only, ",") {
		if !slices.Contains(allModes, m) {
			fail(fmt.Errorf("-modes: unknown mode %q (%s)", m, strings.Join(allModes, ", ")))
		}
		o.modes[m] = true
	}
	o.reproduction = reproduction(o)
	switch {
	case o.issues < 1 || o.agents < 1 || o.gitIssues < 1:
		fail(errors.New("-issues, -git-issues and -agents must be positive"))
	case o.ttl < time.Second || o.ttl%time.Second != 0 || o.faultTTL < time.Second || o.faultTTL%time.Second != 0:
		fail(errors.New("-ttl and -fault-ttl must be whole seconds"))
	}
	if runtime.GOOS != "linux" {
		fail(errors.New("the fleet benchmark runs on Linux only: it reads CPU times from /proc"))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fail(err)
	}
}

// versionOf is what `git version` says of the git Gitea runs, for the
// report: below 2.40, Gitea tests every pull request's mergeability with
// a temporary clone instead of git merge-tree, which round three feels.
func versionOf(ctx context.Context, git string) (string, error) {
	out, err := exec.CommandContext(ctx, git, "version").Output()
	if err != nil {
		return "", fmt.Errorf("%s version: %w", git, err)
	}
	return strings.TrimSpace(string(out)), nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "fleet: FAIL:", err)
	os.Exit(1)
}

// reproduction is the make command that repeats this run's choices.
func reproduction(o options) string {
	cmd := "make fleet"
	var flags string
	if o.seed != 1 {
		flags += fmt.Sprintf(" -seed %d", o.seed)
	}
	if o.issues != 200 {
		flags += fmt.Sprintf(" -issues %d", o.issues)
	}
	if o.gitIssues != 60 {
		flags += fmt.Sprintf(" -git-issues %d", o.gitIssues)
	}
	if o.agents != 20 {
		flags += fmt.Sprintf(" -agents %d", o.agents)
	}
	if o.ttl != 30*time.Second {
		flags += " -ttl " + o.ttl.String()
	}
	if o.faultTTL != 10*time.Second {
		flags += " -fault-ttl " + o.faultTTL.String()
	}
	if o.giteaGit != "" {
		flags += " -gitea-git " + o.giteaGit
	}
	var modes []string
	for _, m := range allModes {
		if o.modes[m] {
			modes = append(modes, m)
		}
	}
	if !slices.Equal(modes, defaultModes) {
		flags += " -modes " + strings.Join(modes, ",")
	}
	if flags != "" {
		cmd += " FLEET_FLAGS='" + flags[1:] + "'"
	}
	return cmd
}

func run(ctx context.Context, o options) (err error) {
	began := time.Now()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "collab-fleet-")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Fprintln(os.Stderr, "fleet: working directory", dir)
	}
	defer func() {
		switch {
		case o.keep:
		case err != nil:
			// What a failure leaves (Gitea's log and database, the
			// ledger, each mode's events) is kept to look into.
			fmt.Fprintln(os.Stderr, "fleet: the run failed; its working directory is kept:", dir)
		default:
			os.RemoveAll(dir)
		}
	}()
	f := &fleet{seed: o.seed, dir: dir, self: self, verbose: o.verbose, log: os.Stderr,
		backlog: planBacklog(o.seed, o.issues), gitBin: filepath.Join(dir, "bin")}
	setup, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()

	step := time.Now()
	var sidecarBin, giteaGit, gateHook string
	var eg errgroup.Group
	eg.Go(func() (err error) {
		if giteaGit = o.giteaGit; giteaGit == "" {
			if giteaGit, err = integration.BuildGit(setup); err != nil {
				return err
			}
		}
		f.g, err = integration.StartGitea(setup, integration.Options{Dir: filepath.Join(dir, "gitea"), Git: giteaGit})
		return err
	})
	eg.Go(func() (err error) { sidecarBin, err = integration.BuildSidecar(setup, dir); return err })
	if o.modes["zombies-bare-gate"] {
		eg.Go(func() (err error) { gateHook, err = buildGateHook(setup, dir); return err })
	}
	eg.Go(func() error { _, err := integration.BuildGitCollab(setup, f.gitBin); return err })
	err = eg.Wait()
	if f.g != nil {
		defer f.g.Close()
	}
	if err != nil {
		return err
	}
	gitVersion, err := versionOf(setup, giteaGit)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "fleet: Gitea (running %s) started, collab-sidecar and git-collab built in %.1fs\n", gitVersion, time.Since(step).Seconds())

	if f.proxy, err = startProxy(f.g.URL, srcSidecar, srcAgents); err != nil {
		return err
	}
	defer f.proxy.close()

	step = time.Now()
	const org = "fleet"
	if err := f.g.Admin().Do(setup, "POST", "/orgs", map[string]any{"username": org, "visibility": "public"}, nil); err != nil {
		return err
	}
	keys := filepath.Join(dir, "keys")
	if err := os.Mkdir(keys, 0o700); err != nil {
		return err
	}
	if f.agents, err = seedAgents(setup, f.g, keys, o.agents); err != nil {
		return err
	}
	bot, botKeys, err := seedBot(setup, f.g, keys, o.agents)
	if err != nil {
		return err
	}
	ownKeys := make([]string, len(f.agents))
	botUsers := make([]*integration.User, len(f.agents))
	for i, u := range f.agents {
		ownKeys[i], botUsers[i] = u.Key.Path, bot
	}
	// Round three's runs are sized from Gitea's speed, measured first.
	var speed giteaSpeed
	if slices.ContainsFunc(allModes, func(m string) bool { return o.modes[m] && isRound3(m) }) {
		warm := time.Now()
		if speed, err = f.measureGitea(setup, org, bot, warmupRounds); err != nil {
			return fmt.Errorf("measure Gitea's speed: %w", err)
		}
		fmt.Fprintf(os.Stderr, "fleet: measured Gitea on a warm-up repository in %.1fs: push %s, pull request %s, test %s, merge %s\n",
			time.Since(warm).Seconds(), ms(speed.Push), ms(speed.Create), ms(speed.Ready), ms(speed.Merge))
	}
	f.sizing = sizeRuns(speed, o.issues, o.gitIssues, o.gitIssuesSet)
	gitBacklog := planBacklog(o.seed, f.sizing.GitIssues)
	specs := []modeSpec{
		{Key: "lease", Title: "collab-lease", Mode: modeLease, TTL: o.ttl},
		{Key: "assignees", Title: "assignees only", Mode: modeAssignees},
		{Key: "faults", Title: "collab-lease, faults", Mode: modeLease, TTL: o.faultTTL,
			Kill: faults(o.seed, o.agents), RestartAfter: max(1, o.issues/2)},
		{Key: "sessions", Title: "collab-lease, one account", Mode: modeSession, Round3: true, Users: botUsers, Keys: botKeys, MergeVerb: true},
		{Key: "sessions-lock", Title: "collab-lease, one account, merge lock", Mode: modeSession, Round3: true, Users: botUsers, Keys: botKeys},
		{Key: "chain", Title: "collab-lease, one account, no sessions", Mode: modeChain, Round3: true, Users: botUsers, Keys: botKeys, TTL: chainTTL,
			MergeVerb: true},
		{Key: "zombies", Title: "collab-lease, 3 zombies", Mode: modeSession, Round3: true, Users: botUsers, Keys: botKeys,
			Zombies: pickZombies(o.seed, o.agents), MergeVerb: true},
		{Key: "zombies-bare-gate", Title: "3 zombies, defenses off, gate", Mode: modeSession, Round3: true, Users: botUsers, Keys: botKeys,
			Zombies: pickZombies(o.seed, o.agents), Bare: true, Gate: true, MergeVerb: true},
		{Key: "zombies-bare-nogate", Title: "3 zombies, defenses off, no gate", Mode: modeSession, Round3: true, Users: botUsers, Keys: botKeys,
			Zombies: pickZombies(o.seed, o.agents), Bare: true, MergeVerb: true},
		{Key: "assignees-bot", Title: "assignees only, one account", Mode: modeAssignees, Round3: true, Users: botUsers, Keys: botKeys},
		{Key: "assignees-accounts", Title: "assignees only, 20 accounts", Mode: modeAssignees, Round3: true, Users: f.agents, Keys: ownKeys},
	}
	for i := range specs {
		sp := &specs[i]
		if !sp.Round3 {
			sp.Users, sp.Keys, sp.Backlog, sp.Bound = f.agents, ownKeys, f.backlog, f.sizing.Bound2
		} else {
			sp.Backlog, sp.Bound = gitBacklog, f.sizing.Bound3
		}
		if isRound3(sp.Key) != sp.Round3 {
			return fmt.Errorf("mode %s: isRound3 says %v", sp.Key, !sp.Round3)
		}
		if o.modes[sp.Key] {
			eg.Go(func() (err error) {
				sp.Repo, err = seedRepo(setup, f.g, org, "backlog-"+sp.Key, sp.Backlog, sp.Round3, sp.Mode == modeSession || sp.Mode == modeChain, f.agents, bot)
				return err
			})
		}
	}
	if err := eg.Wait(); err != nil {
		return err
	}
	locks, err := seedLocks(setup, f.g, org, specs, o.modes, f.agents, bot)
	if err != nil {
		return err
	}
	f.lockRepo = locks.FullName()
	fmt.Fprintf(os.Stderr, "fleet: seeded %d agents, the account bot with %d keys and %d backlogs (%d issues for round two, %d for round three) in %.1fs\n",
		o.agents, len(botKeys), len(o.modes), o.issues, f.sizing.GitIssues, time.Since(step).Seconds())

	results := map[string]ModeResult{}
	// The assignees runs first, while Gitea is stock: no sidecar, no
	// webhook, no statuses.
	for _, spec := range specs {
		if o.modes[spec.Key] && spec.Mode == modeAssignees {
			cos, err := f.checkouts(ctx, spec)
			if err != nil {
				return err
			}
			results[spec.Key] = f.runMode(ctx, spec, cos)
		}
	}
	if slices.ContainsFunc(specs, func(sp modeSpec) bool { return o.modes[sp.Key] && sp.Mode != modeAssignees }) {
		// Its own bound: the assignees runs before it may have taken
		// longer than setup's.
		start, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := f.startSidecar(start, sidecarBin)
		cancel()
		if err != nil {
			return err
		}
		defer func() { _ = f.sidecar.Stop(20 * time.Second) }()
		// The gated runs last: once the sidecar has put the gate's hook
		// into Gitea's repositories, it stays there.
		for _, gated := range []bool{false, true} {
			var repos []integration.Repo
			for _, spec := range specs {
				if o.modes[spec.Key] && spec.Gate == gated && spec.Mode != modeAssignees {
					repos = append(repos, spec.Repo)
				}
			}
			if gated && len(repos) > 0 {
				if err := f.gateOn(ctx, sidecarBin, gateHook, repos); err != nil {
					return err
				}
			}
			for _, spec := range specs {
				if !o.modes[spec.Key] || spec.Gate != gated || spec.Mode == modeAssignees {
					continue
				}
				cos, err := f.checkouts(ctx, spec)
				if err != nil {
					return err
				}
				results[spec.Key] = f.runMode(ctx, spec, cos)
			}
		}
	}
	var ran []ModeResult
	for _, spec := range specs {
		if r, ok := results[spec.Key]; ok {
			ran = append(ran, r)
		}
	}
	total := time.Since(began)
	sum := summary{opts: o, backlog: f.backlog, results: ran, total: total, load: loadAverage(), giteaGit: gitVersion, sizing: f.sizing}
	fmt.Print(sum.text())
	if o.markdown != "" {
		if err := os.WriteFile(o.markdown, []byte(sum.markdown()), 0o644); err != nil {
			return err
		}
	}
	var errs []error
	for _, r := range ran {
		if r.Err != nil {
			errs = append(errs, r.Err)
		}
		if err := r.verdict(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		if f.sidecar != nil {
			fmt.Fprintf(os.Stderr, "fleet: the sidecar's last log lines:\n%s\n", tail(f.sidecar.Logs(), 40))
		}
		return err
	}
	return nil
}
