// Command collab-gate-hook is collab-lease's gate in Gitea's push path.
// Gitea runs it on every push and merge, through the script
// hooks/pre-receive.d/collab-lease that the sidecar keeps in each
// repository (plugin/gatehook); it asks the sidecar's admin listener one
// question about the push and exits by the answer: 0 lets the push in, 1
// refuses it, and the answer's lines reach the pusher as "remote: <line>".
//
// It decides nothing about claims: the rules are the sidecar's. It builds
// the question from what Gitea gives its hooks, bounds it, and, when no
// answer comes, does what the configuration says (GateConfig.Unreachable).
// It imports only the standard library, plugin/contract and buildinfo,
// and is built with CGO_ENABLED=0, so that one static binary runs in
// Gitea's environment, or in Gitea's container (deps_test.go holds it to
// both).
//
// Its files: the command line and its exit statuses (main.go); the
// configuration and secret it finds beside itself (config.go); the
// question, from the environment and stdin (question.go); the paths the
// push changes, listed with git (paths.go); one request to the sidecar
// (call.go); asking about a push and exiting by the answer (ask.go);
// ping, for doctor (ping.go); --version (version.go).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/collab-lease/collab-lease/buildinfo"
)

// Exit statuses. Gitea refuses the push on any status but exitAllow, so
// a usage error refuses it too (Gitea passes no arguments: only a person
// running the program by hand meets one).
const (
	exitAllow  = 0
	exitRefuse = 1
	exitUsage  = 2
)

const usage = `usage:
  collab-gate-hook [--dir d]        as Gitea's pre-receive hook: ask the sidecar about the push on stdin
  collab-gate-hook ping [--dir d]   ask the sidecar whether it answers the gate (for doctor)
  collab-gate-hook --version        show the version, commit and Go version of this build
--dir is the directory holding gate.json and gate.secret (by default, this program's own)
`

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, pushedTo(), os.Stdin, os.Stdout, os.Stderr))
}

// run is the program, with its environment (getenv), the repository it
// is run in and its streams given.
func run(args []string, getenv func(string) string, repo lister, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 1 && args[0] == "--version" {
		fmt.Fprintln(stdout, "collab-gate-hook "+buildinfo.Read(version).String())
		return exitAllow
	}
	ping := len(args) > 0 && args[0] == "ping"
	if ping {
		args = args[1:]
	}
	flags := flag.NewFlagSet("collab-gate-hook", flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	dir := flags.String("dir", "", "")
	if err := flags.Parse(args); err != nil || flags.NArg() > 0 {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return exitAllow
		}
		if err == nil {
			err = fmt.Errorf("unexpected argument %q", flags.Arg(0))
		}
		fmt.Fprintf(stderr, "collab-gate-hook: %v\n%s", err, usage)
		return exitUsage
	}
	if *dir == "" {
		// Left "" when the system cannot say where this program is:
		// loadGate then reports the gate as not configured.
		if exe, err := os.Executable(); err == nil {
			*dir = filepath.Dir(exe)
		}
	}
	if ping {
		return runPing(*dir, stdout, stderr)
	}
	return preReceive(*dir, getenv, repo, stdin, stderr)
}
