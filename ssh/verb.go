package ssh

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/lease"
)

// errForgeUnavailable marks a connection whose key could not be resolved
// because the forge was down: it is let in, and every command is answered
// as the forge's ErrUnavailable (exit 75) so the agent retries instead of
// seeing an auth failure.
var errForgeUnavailable = fmt.Errorf("key lookup: %w", forge.ErrUnavailable)

// errTooManyConnections marks a connection its account opened beyond
// Server.MaxConnsPerAccount: every command on it answers exit 75.
var errTooManyConnections = &lease.Refusal{Class: lease.Unavailable, Msg: "too many connections for this account",
	Line: strings.TrimPrefix(contract.LineTooManyConnections, contract.ErrorPrefix), Outcome: "too_many_connections"}

// LeaseVerb is the collab-lease verb (docs/ssh.md) as a Handler: it parses a
// command with the contract's grammar, has the lease service run it for
// the connection's account, translates the outcome (exitCode), and logs
// one line per command.
type LeaseVerb struct {
	Leases Leases        // required: the lease service
	MaxTTL time.Duration // largest --ttl accepted (default 168h)
	Logger *slog.Logger  // nil: slog.Default()
	// Observe, if set, is told about every command (for metrics).
	Observe func(verb contract.Verb, outcome string, d time.Duration)
}

var (
	_ Handler   = (*LeaseVerb)(nil)
	_ Patient   = (*LeaseVerb)(nil)
	_ Sessioned = (*LeaseVerb)(nil)
)

// Timeout gives a command that waits (acquire --wait, next --wait) its
// wait on top of the server's timeout, and a merge its turn and the merge
// itself (runFor).
func (v *LeaseVerb) Timeout(line string, def time.Duration) time.Duration {
	cmd, err := contract.ParseCommand(line, v.maxTTL())
	if err != nil {
		return def
	}
	return runFor(cmd, def)
}

func (v *LeaseVerb) maxTTL() time.Duration {
	if v.MaxTTL <= 0 {
		return lease.DefaultMaxTTL
	}
	return v.MaxTTL
}

func (v *LeaseVerb) logger() *slog.Logger {
	if v.Logger == nil {
		return slog.Default()
	}
	return v.Logger
}

// Exec answers one command line. help needs no identity; every other
// command of a connection the forge could not identify answers exit 75.
func (v *LeaseVerb) Exec(ctx context.Context, c ConnInfo, line string) Reply {
	return v.ExecStreaming(ctx, c, line, io.Discard)
}

// ExecStreaming is Exec that tells stderr, while a command waits its
// turn (acquire --wait, next --wait, merge), where it stands: a line
// "waiting: 2 ahead of you" each time that changes.
func (v *LeaseVerb) ExecStreaming(ctx context.Context, c ConnInfo, line string, stderr io.Writer) Reply {
	start := time.Now()
	cmd, err := contract.ParseCommand(line, v.maxTTL())
	var r Reply
	login := c.Login
	switch {
	case err != nil:
		r = exitCode(err)
	case cmd.Verb == contract.VerbHelp:
		r = Reply{Stdout: []byte(contract.Usage), Outcome: "help"}
	case c.Unavailable:
		r = exitCode(errForgeUnavailable)
	case c.Crowded:
		r = exitCode(errTooManyConnections)
	default:
		v.logger().Debug("command started", "user", c.Login, "verb", string(cmd.Verb), "repo", cmd.Repo(), "issue", cmd.Issue)
		r, login = run(ctx, v.Leases, c, cmd, stderr, nil)
	}
	v.log(c, cmd, login, r, time.Since(start))
	if v.Observe != nil {
		v.Observe(cmd.Verb, r.Outcome, time.Since(start))
	}
	return r
}

// log logs one command of connection c, run as login, as one line.
func (v *LeaseVerb) log(c ConnInfo, cmd contract.Command, login string, r Reply, dur time.Duration) {
	attrs := []any{"user", login, "verb", string(cmd.Verb), "outcome", r.Outcome, "exit", r.Code,
		"duration_ms", float64(dur.Microseconds()) / 1000}
	if c.RemoteAddr != nil {
		attrs = append(attrs, "remote", c.RemoteAddr.String())
	}
	if cmd.Owner != "" {
		attrs = append(attrs, "repo", cmd.Repo())
	}
	if cmd.Issue != 0 {
		attrs = append(attrs, "issue", cmd.Issue)
	}
	if c.Unavailable {
		attrs = append(attrs, "fingerprint", c.Fingerprint)
	}
	if r.Err != nil {
		// The client sees only its error line; the detail is here.
		v.logger().Error("collab-lease", append(attrs, "err", r.Err.Error())...)
	} else {
		v.logger().Info("collab-lease", attrs...)
	}
}

// Greet answers an interactive login: who you are and how to use the
// verb, exit 1, since there is no shell.
func (v *LeaseVerb) Greet(c ConnInfo) Reply {
	msg := fmt.Sprintf("Hi %s! You've authenticated, but collab-lease offers no shell.\nUsage: ssh <host> <command>, where <command> is one of:\n%s", c.Login, contract.Usage)
	if c.Unavailable {
		msg = "Your key could not be checked right now: the forge is unavailable. Try again.\n"
	}
	return Reply{Stderr: msg, Code: contract.ExitError, Outcome: "greet"}
}
