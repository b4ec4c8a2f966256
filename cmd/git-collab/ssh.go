package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// SSHCommand is how the user's git reaches SSH remotes, reused so their
// keys, agent and ssh config apply to the sidecar too.
type SSHCommand struct {
	// Shell is a command string run the way git runs GIT_SSH_COMMAND and
	// core.sshCommand: sh -c '<Shell> "$@"' with ssh's arguments after it.
	Shell string
	// Program is run directly, its arguments not split (git's GIT_SSH).
	// Used only when Shell is empty.
	Program string
	// Source names where the command came from, for messages.
	Source string
}

// ResolveSSH picks the ssh command: $COLLAB_SSH_COMMAND, $GIT_SSH_COMMAND,
// git config core.sshCommand, then, as git does, $GIT_SSH (a program,
// not a command string), else plain "ssh". Empty values count as unset.
// coreSSHCommand is consulted only when both variables are unset.
func ResolveSSH(getenv func(string) string, coreSSHCommand func() string) SSHCommand {
	if v := getenv("COLLAB_SSH_COMMAND"); v != "" {
		return SSHCommand{Shell: v, Source: "COLLAB_SSH_COMMAND"}
	}
	if v := getenv("GIT_SSH_COMMAND"); v != "" {
		return SSHCommand{Shell: v, Source: "GIT_SSH_COMMAND"}
	}
	if v := coreSSHCommand(); v != "" {
		return SSHCommand{Shell: v, Source: "git config core.sshCommand"}
	}
	if v := getenv("GIT_SSH"); v != "" {
		return SSHCommand{Program: v, Source: "GIT_SSH"}
	}
	return SSHCommand{Program: "ssh", Source: "ssh"}
}

// Args is the argv that runs ssh with args (ssh's own arguments, then the
// destination and the remote command).
func (c SSHCommand) Args(args ...string) []string {
	if c.Shell == "" {
		return append([]string{c.Program}, args...)
	}
	return append([]string{"sh", "-c", c.Shell + ` "$@"`, "ssh"}, args...)
}

// RemoteCommand is the collab-lease exec line for the sidecar, and the
// command the sidecar's grammar reads in it: verb on repo, then issue
// (if > 0), globs (reserve's and unreserve's, from the repository's
// root) and flags. Every argument is
// single-quoted; the callers have already restricted the repository to
// safe characters, so the quoting is a second fence, not the only one.
//
// The line is parsed with the sidecar's own grammar (contract.ParseCommand)
// before anything is sent, so a flag's value is held to exactly the
// sidecar's rules (durations, tokens, limits, labels, a flag given twice)
// and a mistake is reported in its words, as a *usageError. Only the
// maximum TTL, which the sidecar alone knows, is left to it.
func RemoteCommand(verb contract.Verb, repo string, issue int64, flags []Flag, globs ...string) (string, contract.Command, error) {
	words := []string{"collab-lease", string(verb), shellQuote(repo)}
	if issue > 0 {
		words = append(words, shellQuote(strconv.FormatInt(issue, 10)))
	}
	for _, g := range globs {
		words = append(words, shellQuote(g))
	}
	for _, f := range flags {
		switch {
		case sidecarOption(f.Name) == nil:
			// Only ParseArgs makes flags; this is a second fence.
			return "", contract.Command{}, usagef("unknown option %s; see git collab -h", quote(f.Name))
		case sidecarOption(f.Name).meta == "":
			words = append(words, f.Name)
		case f.Value == "":
			// The grammar refuses an empty word outright; "--token=" gets
			// the error that names the flag, as the sidecar would give it.
			words = append(words, f.Name+"=")
		default:
			words = append(words, f.Name, shellQuote(f.Value))
		}
	}
	line := strings.Join(words, " ")
	cmd, err := contract.ParseCommand(line, 0)
	if err != nil {
		return "", contract.Command{}, contractUsage(err)
	}
	return line, cmd, nil
}

// shellQuote quotes s as one word for a POSIX shell (and for the
// sidecar's word splitter, which follows the same rules).
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// sshResult is what one ssh run produced.
type sshResult struct {
	Stdout []byte
	Code   int // the remote's exit status, or ssh's own (255) on failure
}

// runSSH runs argv with no stdin (so ssh never swallows input meant for
// the caller, e.g. a shell loop reading lines, or an MCP client's
// requests), stdout captured and stderr passed through as it comes: the
// server's error line, and ssh's own prompts and complaints, reach the
// user unchanged.
//
// When ctx ends, ssh is stopped, and the sidecar forgets whatever it was
// doing for it (a claim --wait stops waiting). detached runs ssh without
// a controlling terminal, in a process group of its own, all of which
// ctx's end stops: for a server with no user at a terminal, where a
// passphrase prompt would hang forever and where ssh must not outlive the
// call that started it (through a wrapper like sh -c).
func runSSH(ctx context.Context, argv, env []string, stderr io.Writer, detached bool) (sshResult, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, stderr
	// ssh may leave a process holding its pipes (a ControlPersist master,
	// a child of a stopped ssh): do not wait for it for long.
	cmd.WaitDelay = 5 * time.Second
	if detached {
		detach(cmd)
	}
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil, errors.Is(err, exec.ErrWaitDelay): // ssh itself succeeded
		return sshResult{Stdout: out.Bytes()}, nil
	case errors.As(err, &ee):
		code := ee.ExitCode()
		if code < 0 { // killed by a signal: ssh did not finish
			code = exitSSH
		}
		return sshResult{Stdout: out.Bytes(), Code: code}, nil
	default:
		return sshResult{}, err
	}
}
