// Command git-collab is the client of the collab-lease sidecar: on PATH it
// is `git collab`, which claims, renews, checks, releases and lists claims
// on the issues of the repository it runs in, and shows their history.
//
// It works out the repository (owner/repo from a remote's URL) and the
// sidecar's address, then runs the user's own ssh with one collab-lease
// command, so the keys, agent and ssh config that already reach the forge
// reach the sidecar too. It decides nothing about leases: the sidecar's
// reply and exit status are the answer, shown as one line for people,
// passed through unchanged with --json for programs, or, under
// `git collab mcp`, handed to coding agents as the results of MCP tools.
//
// Its files: the command line (args.go) and the commands it knows
// (help.go); the repository (git.go, remote.go) and the sidecar's
// address (sidecar.go); one command sent over the user's ssh (ssh.go,
// call.go), its reply read (reply.go) and shown (render.go); sessions, one
// long `collab-lease session` exec (session.go), kept across dropped
// connections (resume.go); `git collab run` (run.go), whose command's own
// git collab calls ride its session (ride.go, ride_unix.go,
// ride_other.go); the claim's token as a push option, in run's
// environment and the checkout's config (pushoption.go); `git collab mcp`
// (mcp.go, mcp_tools.go), and its warnings of lost claims (mcp_lost.go);
// the paths of reservations, named from where git collab runs in the
// work tree (paths.go);
// process groups and lifetimes (proc_unix.go, proc_unix_other.go,
// proc_linux.go, proc_other.go); --version (version.go).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/collab-lease/collab-lease/buildinfo"
	"github.com/collab-lease/collab-lease/plugin/contract"
)

// Exit statuses: the sidecar's (contract.ExitOK, ExitError, ExitConflict,
// ExitTempFail) pass through unchanged; git-collab's own failures before
// anything is sent are contract.ExitError, as the sidecar's bad-argument
// replies are; and ssh's own failure is exitSSH.
const exitSSH = 255 // as OpenSSH reports it

func main() {
	a := &app{
		stdin:  os.Stdin,
		stdout: os.Stdout,
		stderr: os.Stderr,
		env:    os.Environ(),
		now:    time.Now,
		pid:    os.Getpid(),
	}
	a.hostname, _ = os.Hostname()
	a.git = execGit{env: a.env}
	os.Exit(a.run(os.Args[1:]))
}

// app is one run of git-collab with everything it touches passed in, so
// tests run it with their own environment, repository and clock.
type app struct {
	stdin          io.Reader // read by mcp, and by the command run runs
	stdout, stderr io.Writer
	env            []string // the environment of ssh and git
	now            func() time.Time
	git            Git
	// hostname and pid make the default agent of run and mcp.
	hostname string
	pid      int
	// signals, if set, stands for the signals run passes on to its
	// command; nil is the process's own.
	signals <-chan os.Signal
}

func (a *app) getenv(key string) string {
	v, _ := a.lookupEnv(key)
	return v
}

// lookupEnv is key's value in the environment, as os.LookupEnv says it.
func (a *app) lookupEnv(key string) (string, bool) {
	for i := len(a.env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(a.env[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

func (a *app) run(args []string) int {
	if len(args) == 1 && args[0] == "--version" {
		fmt.Fprintln(a.stdout, "git-collab "+buildinfo.Read(version).String())
		return contract.ExitOK
	}
	inv, err := ParseArgs(args)
	if err != nil {
		return a.fail(err)
	}
	switch {
	case inv.Verb == "help" && inv.Man:
		fmt.Fprint(a.stdout, manPage())
		return contract.ExitOK
	case inv.Verb == "help" && inv.Topic != "":
		fmt.Fprint(a.stdout, verbHelp(findVerb(inv.Topic)))
		return contract.ExitOK
	case inv.Verb == "help":
		fmt.Fprint(a.stdout, mainHelp())
		return contract.ExitOK
	case inv.Help:
		fmt.Fprint(a.stdout, verbHelp(findVerb(inv.Verb)))
		return contract.ExitOK
	case inv.Verb == "mcp":
		return a.serveMCP(inv)
	case inv.Verb == "run":
		return a.runCommand(inv)
	case inv.Verb == "check" && inv.Issue == 0:
		if inv, err = a.runsClaim(inv); err != nil {
			return a.fail(err)
		}
		if x, ok := a.rideOwnCheck(context.Background(), inv, a.stderr); ok {
			return a.report(inv, target{repo: inv.Repo}, x, "")
		}
	}
	return a.call(findVerb(inv.Verb), inv)
}

// call runs one collab-lease command on the sidecar and reports its reply.
func (a *app) call(v *verb, inv Invocation) int {
	t, err := a.resolve(inv.Remote)
	if err != nil {
		return a.fail(err)
	}
	if inv.Repo != "" {
		t.repo = inv.Repo
	}
	if inv, err = a.fromRoot(inv); err != nil {
		return a.fail(err)
	}
	x, err := a.send(context.Background(), t, v.remote, inv.Issue, inv.Flags, inv.Globs, a.stderr, false)
	if err != nil {
		return a.fail(err)
	}
	note := ""
	if x.replyErr == nil && x.reply != nil {
		if note, err = followReply(a.git, x.req, x.reply); err != nil {
			fmt.Fprintln(a.stderr, "git-collab: warning: "+err.Error())
		}
	}
	return a.report(inv, t, x, note)
}

// report writes what x, the exchange of inv with the sidecar of t, says,
// and note, a line on what the reply changed in the checkout ("" if
// nothing), after the reply's own line. With --json, the sidecar's reply
// is all there is: a program reads the change from the reply itself.
func (a *app) report(inv Invocation, t target, x exchange, note string) int {
	switch x.code {
	case contract.ExitOK, contract.ExitConflict:
	case contract.ExitError, contract.ExitTempFail:
		// The sidecar's error line is already on stderr.
		a.stdout.Write(x.stdout)
		return x.code
	default:
		a.stdout.Write(x.stdout)
		fmt.Fprintln(a.stderr, "git-collab: "+transportHint(x.code, t.sidecar, t.ssh))
		return x.code
	}
	if inv.JSON {
		a.stdout.Write(x.stdout)
		return x.code
	}
	if x.replyErr != nil {
		// Whatever happened on the sidecar happened: show its reply as it
		// is, keep its exit status, and say why there is no summary.
		a.stdout.Write(x.stdout)
		at := "of git collab run's sidecar" // a check that rode run's session
		if t.sidecar.Host != "" {
			at = "of the sidecar at " + t.sidecar.Addr()
		}
		fmt.Fprintf(a.stderr, "git-collab: could not read the reply %s: %v\n", at, x.replyErr)
		return x.code
	}
	out := renderReply(x.req, x.reply, a.now())
	out.addNote(note)
	fmt.Fprint(a.stdout, out.stdout)
	fmt.Fprint(a.stderr, out.stderr)
	return x.code
}

// runsClaim is `check` with no issue and no token: the claim of the git
// collab run it runs under, which its environment names.
func (a *app) runsClaim(inv Invocation) (Invocation, error) {
	issue, token := a.getenv("COLLAB_ISSUE"), a.getenv("COLLAB_TOKEN")
	if issue == "" || token == "" {
		return inv, usagef("check needs <issue> and --token <n>, or COLLAB_ISSUE and COLLAB_TOKEN (git collab run sets them); usage: %s",
			findVerb("check").synopsis)
	}
	n, err := contract.ParseIssue(issue)
	if err != nil {
		return inv, fmt.Errorf("COLLAB_ISSUE: %w", contractUsage(err))
	}
	if repo := a.getenv("COLLAB_REPO"); repo != "" {
		owner, name, err := contract.ParseRepo(repo)
		if err != nil {
			return inv, fmt.Errorf("COLLAB_REPO: %w", contractUsage(err))
		}
		inv.Repo = owner + "/" + name
	}
	inv.Issue = n
	inv.Flags = append(slices.Clone(inv.Flags), Flag{Name: "--token", Value: token})
	return inv, nil
}

// transportHint is the one line added when ssh, not the sidecar, failed.
func transportHint(code int, sc Sidecar, c SSHCommand) string {
	switch code {
	case exitSSH:
		// Say what would change the address: git config wins over the
		// environment, which wins over the remote's host.
		fix := setHint
		switch sc.Source {
		case sourceGitConfig:
			fix = "check git config collab.sidecar (host:port)"
		case sourceEnv:
			fix = "check COLLAB_SIDECAR (host:port)"
		}
		return fmt.Sprintf("could not reach the sidecar at %s over ssh (address from %s); %s", sc.Addr(), sc.Source, fix)
	case 126, 127:
		return fmt.Sprintf("could not run the ssh command from %s (exit status %d); set COLLAB_SSH_COMMAND to an ssh that works",
			c.Source, code)
	}
	return fmt.Sprintf("ssh to the sidecar at %s ended with exit status %d, which the sidecar never uses (the command from %s failed?)",
		sc.Addr(), code, c.Source)
}

// fail reports an error of git-collab itself: nothing reached the sidecar.
func (a *app) fail(err error) int {
	fmt.Fprintln(a.stderr, "git-collab: "+err.Error())
	return contract.ExitError
}
