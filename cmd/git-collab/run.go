package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// `git collab run` holds a claim exactly as long as a command runs: it
// opens a session, claims, runs the command, and releases when it exits.
// The session keeps the claim alive, so the command never renews; and
// when the claim is lost anyway, the command is stopped, because work
// done under a lost claim must not land.

// killDelay is how long a command whose claim was lost has, after
// SIGTERM, before SIGKILL.
var killDelay = 10 * time.Second

// releaseWait bounds the release after the command exits, reconnection
// included; the session's end releases the claim in any case.
var releaseWait = 30 * time.Second

// dialSession is how the app opens or resumes a session on t's sidecar:
// through the user's ssh, as send runs every other command.
func (a *app) dialSession(t target, args sessionArgs, stderr io.Writer) func(context.Context, string, func(contract.Lost)) (*session, error) {
	return func(ctx context.Context, resume string, notify func(contract.Lost)) (*session, error) {
		sa := args
		sa.resume = resume
		argv := t.ssh.Args(append(sa.aliveOptions(), "-p", t.sidecar.Port, t.sidecar.Destination(), sa.line())...)
		s, err := openSession(ctx, argv, a.env, stderr, notify)
		var ee *exec.Error
		if errors.As(err, &ee) || errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("run the ssh command (from %s): %w", t.ssh.Source, err)
		}
		return s, err
	}
}

// sessionAgent is the agent a session of run or mcp acts as: --agent,
// else COLLAB_AGENT, else this host's and process's own name.
func (a *app) sessionAgent(flags []Flag) (string, []Flag, error) {
	var rest []Flag
	agent := ""
	for _, f := range flags {
		if f.Name == "--agent" {
			agent = f.Value
			continue
		}
		rest = append(rest, f)
	}
	if agent == "" {
		agent = a.getenv("COLLAB_AGENT")
	}
	if agent == "" {
		agent = defaultAgent(a.hostname, a.pid)
	}
	if _, err := contract.ParseAgent(agent); err != nil {
		return "", nil, contractUsage(err)
	}
	return agent, rest, nil
}

// defaultAgent is "<short host name>-<pid>": a name of its own for every
// run and mcp of an account, so that two of them never share a claim.
// The host name is cut at its first dot, anything an agent name may not
// hold becomes "-", and it is cut short so the whole fits.
func defaultAgent(hostname string, pid int) string {
	suffix := "-" + strconv.Itoa(pid)
	host, _, _ := strings.Cut(hostname, ".")
	b := []byte(host)
	for i, c := range b {
		if !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			b[i] = '-'
		}
	}
	host = strings.TrimLeft(string(b), "-._")
	if host == "" {
		host = "host"
	}
	if max := contract.MaxAgentLen - len(suffix); len(host) > max {
		host = host[:max]
	}
	return host + suffix
}

// runCommand is `git collab run`.
func (a *app) runCommand(inv Invocation) int {
	// The command's pushes carry the claim's token in a config entry
	// after the caller's own (pushoption.go): a count of theirs that git
	// would refuse is refused before anything is claimed.
	configCount, err := gitConfigCount(a.lookupEnv)
	if err != nil {
		return a.fail(err)
	}
	t, err := a.resolve(inv.Remote)
	if err != nil {
		return a.fail(err)
	}
	if inv, err = a.fromRoot(inv); err != nil {
		return a.fail(err)
	}
	agent, flags, err := a.sessionAgent(inv.Flags)
	if err != nil {
		return a.fail(err)
	}
	verb := contract.VerbAcquire
	if inv.Next {
		verb = contract.VerbNext
	}
	line, req, err := sessionLine(verb, t.repo, inv.Issue, flags)
	if err != nil {
		return a.fail(err)
	}

	sigs := a.signals
	if sigs == nil {
		c := make(chan os.Signal, 1)
		signal.Notify(c, forwardedSignals...)
		defer signal.Stop(c)
		sigs = c
	}

	// Open and claim, which may wait (--wait): a signal meanwhile gives
	// up, and closing the session releases whatever was claimed.
	type claimed struct {
		k     *keptSession
		reply sessionReply
		err   error
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan claimed, 1)
	go func() {
		k, err := keepSession(ctx, a.dialSession(t, sessionArgs{agent: agent, grace: inv.Grace}, a.stderr))
		if err != nil {
			got <- claimed{err: err}
			return
		}
		r, err := k.Do(ctx, line, nil)
		got <- claimed{k, r, err}
	}()
	var c claimed
	select {
	case c = <-got:
	case sig := <-sigs:
		cancel()
		if c = <-got; c.k != nil {
			c.k.Close()
		}
		return signalStatus(sig)
	}
	if c.err != nil {
		if c.k != nil {
			c.k.Close()
		}
		return a.sessionFailed(c.err, t)
	}
	k := c.k
	defer k.Close()

	reply, code, ok := a.sessionAnswer(t.sidecar, req, c.reply)
	if !ok {
		return code // not claimed: run nothing
	}
	tenure := reply.(*contract.Tenure)
	if code, ok := a.reserveClaimed(k, t.sidecar, tenure, inv.Reserve); !ok {
		return code
	}
	return a.runClaimed(k, t.sidecar, tenure, agent, configCount, inv.Command, sigs)
}

// sessionAnswer reads r, the answer of run's session on sidecar sc to
// req: a yes (exit 0) is its reply, with ok. Anything else is said on
// stderr, and code is the status run then exits with: the sidecar's 1
// or 75, 4 for an answer that is not a yes, 1 for one it cannot read.
func (a *app) sessionAnswer(sc Sidecar, req contract.Command, r sessionReply) (reply any, code int, ok bool) {
	x := exchange{req: req, code: r.code, stdout: r.body}
	switch x.code {
	case contract.ExitOK, contract.ExitConflict:
		x.reply, x.replyErr = decodeReply(req, x.code, x.stdout)
	case contract.ExitError, contract.ExitTempFail:
		fmt.Fprintln(a.stderr, orSaid(r.said, x.code))
		return nil, x.code, false
	}
	switch {
	case x.replyErr != nil || x.reply == nil:
		fmt.Fprintf(a.stderr, "git-collab: could not read the reply of the sidecar at %s: %v; the reply: %s\n",
			sc.Addr(), x.replyErr, strings.TrimSpace(string(x.stdout)))
		return nil, contract.ExitError, false
	case x.code != contract.ExitOK:
		out := renderReply(x.req, x.reply, a.now())
		fmt.Fprint(a.stderr, out.stdout+out.stderr)
		return nil, contract.ExitConflict, false
	}
	return x.reply, contract.ExitOK, true
}

// reserveClaimed reserves globs (run --reserve) with tenure's claim, over
// its session k on sidecar sc, as git collab reserve --issue would: they
// end with the claim. Not reserved (another holder's reservation in the
// way, or a failure), ok is false: the claim is released, so the command
// never starts, and code is the status run exits with.
func (a *app) reserveClaimed(k *keptSession, sc Sidecar, tenure *contract.Tenure, globs []string) (code int, ok bool) {
	if len(globs) == 0 {
		return contract.ExitOK, true
	}
	issue := []Flag{{Name: "--issue", Value: strconv.FormatInt(tenure.Issue, 10)}}
	line, req, err := sessionLine(contract.VerbReserve, tenure.Repo, 0, issue, globs...)
	var reply any
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), releaseWait)
		var r sessionReply
		r, err = k.Do(ctx, line, nil)
		cancel()
		if err == nil {
			reply, code, ok = a.sessionAnswer(sc, req, r)
		}
	}
	if err != nil {
		code = a.fail(fmt.Errorf("could not reserve for %s: %w", named(tenure.Repo, tenure.Issue), err))
	}
	if !ok {
		a.release(k, tenure)
		fmt.Fprintf(a.stderr, "git-collab: released %s; the command did not start\n", named(tenure.Repo, tenure.Issue))
		return code, false
	}
	for _, x := range reply.(*contract.Reservations).Reservations {
		fmt.Fprintln(a.stderr, "git-collab: reserved "+reservationLine(x, a.now()))
	}
	return contract.ExitOK, true
}

// orSaid is an error reply's line, or one that says it had none.
func orSaid(said string, code int) string {
	if said == "" {
		return fmt.Sprintf("error: the sidecar answered exit status %d without saying why", code)
	}
	return said
}

// sessionFailed reports a session that could not be opened, with the
// exit status its exec ended with.
func (a *app) sessionFailed(err error, t target) int {
	var se *sessionExit
	if !errors.As(err, &se) {
		return a.fail(err)
	}
	// ssh's stderr, with the sidecar's error line, has been passed on.
	switch se.code {
	case contract.ExitError, contract.ExitTempFail:
		return se.code
	case contract.ExitOK, contract.ExitConflict:
		fmt.Fprintf(a.stderr, "git-collab: the sidecar at %s ended the session exec with exit status %d before opening it\n", t.sidecar.Addr(), se.code)
		return contract.ExitError
	}
	fmt.Fprintln(a.stderr, "git-collab: "+transportHint(se.code, t.sidecar, t.ssh))
	return se.code
}

// runClaimed runs argv under the claim tenure of session k (on sidecar
// sc), and stops it if the claim is lost. The command's own git collab
// calls that read ride the session (ride.go), and its pushes carry the
// claim's token as a push option, in a config entry after the
// configCount its caller's environment gives git.
//
// The token the command is given is the claim's for as long as the
// command runs: a tenure keeps its token (renewing and resuming the
// session change only its expiry), and a new token is a new tenure,
// which comes only after this one ended, and a claim that ends stops the
// command (lossOf). So neither COLLAB_TOKEN nor the push option ever
// needs to change under a running command.
func (a *app) runClaimed(k *keptSession, sc Sidecar, tenure *contract.Tenure, agent string, configCount int, argv []string, sigs <-chan os.Signal) int {
	name := named(tenure.Repo, tenure.Issue)
	opened := k.Opened()
	riders, stopRiders := serveRiders(k, sc, agent, runClaim{repo: tenure.Repo, issue: tenure.Issue})
	defer stopRiders()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(slices.Clone(a.env),
		"COLLAB_REPO="+tenure.Repo,
		"COLLAB_ISSUE="+strconv.FormatInt(tenure.Issue, 10),
		"COLLAB_TOKEN="+strconv.FormatInt(tenure.Token, 10),
		"COLLAB_HOLDER="+tenure.Holder,
		"COLLAB_AGENT="+agent,
		"COLLAB_SESSION="+opened.Session,
		riders)
	cmd.Env = append(cmd.Env, pushOptionEnv(configCount, gateOption(tenure.Issue, tenure.Token))...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = a.stdin, a.stdout, a.stderr
	cmd.WaitDelay = time.Second // a process left holding its pipes keeps no one waiting
	ownGroup(cmd)
	fmt.Fprintf(a.stderr, "git-collab: claimed %s (token %d); running %s\n", name, tenure.Token, argv[0])
	if err := cmd.Start(); err != nil {
		a.release(k, tenure)
		code := 126
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = 127
		}
		fmt.Fprintf(a.stderr, "git-collab: run %s: %v; released %s\n", argv[0], err, name)
		return code
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()

	lost := ""
	var kill <-chan time.Time
	for {
		select {
		case <-exited:
			if lost != "" {
				return contract.ExitConflict
			}
			a.release(k, tenure)
			return exitStatus(cmd.ProcessState)
		case sig := <-sigs:
			signalGroup(cmd, sig)
		case <-k.Wake():
			for _, e := range k.TakeEvents() {
				why, info := lossOf(e, tenure)
				if info != "" {
					fmt.Fprintln(a.stderr, "git-collab: "+info)
				}
				if why == "" || lost != "" {
					continue
				}
				lost = why
				fmt.Fprintf(a.stderr, "git-collab: lost %s (%s); stopping the command\n", name, why)
				signalGroup(cmd, stopSignal)
				kill = time.After(killDelay)
			}
		case <-kill:
			signalGroup(cmd, killSignal)
			kill = nil
		}
	}
}

// lossOf reads one event of the session holding tenure: why the claim is
// lost ("" if it is not), and a line worth telling ("" if none).
func lossOf(e sessionEvent, tenure *contract.Tenure) (why, info string) {
	switch {
	case e.lost != nil:
		n := e.lost
		if strings.EqualFold(n.Repo, tenure.Repo) && n.Issue == tenure.Issue && (n.Token == 0 || n.Token == tenure.Token) {
			return n.EndedBy, ""
		}
	case e.resumed != nil:
		for _, l := range leasesOf(*e.resumed) {
			if strings.EqualFold(l.Repo, tenure.Repo) && l.Issue == tenure.Issue && l.Token == tenure.Token {
				return "", fmt.Sprintf("the connection to the sidecar dropped; reconnected, and %s is still claimed", named(tenure.Repo, tenure.Issue))
			}
		}
		return "it ended while the connection to the sidecar was down", ""
	case e.gone != "":
		return e.gone, ""
	}
	return "", ""
}

// release releases tenure's claim over k, after its command exited. The
// session's end releases it too; a failure here only means it ends then.
func (a *app) release(k *keptSession, tenure *contract.Tenure) {
	line, _, err := sessionLine(contract.VerbRelease, tenure.Repo, tenure.Issue, nil)
	if err != nil {
		return // cannot happen: the sidecar named the repository and issue
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseWait)
	defer cancel()
	r, err := k.Do(ctx, line, nil)
	switch {
	case err != nil:
		fmt.Fprintf(a.stderr, "git-collab: could not release %s: %v\n", named(tenure.Repo, tenure.Issue), err)
	case r.code == contract.ExitError || r.code == contract.ExitTempFail:
		fmt.Fprintf(a.stderr, "git-collab: could not release %s: %s\n", named(tenure.Repo, tenure.Issue), orSaid(r.said, r.code))
	}
}
