package main

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// One collab-lease command, from the checkout to the sidecar's answer:
// the command line (app.call) and the MCP server (mcp.go) both send
// every command through resolve and send, so they reach the same sidecar
// with the same ssh, and read its replies the same way.

// target is where a checkout's commands go.
type target struct {
	repo    string // owner/name, from the remote's URL
	sidecar Sidecar
	ssh     SSHCommand
}

// resolve works out the target from the named remote's URL, git config
// and the environment, as ResolveSidecar and ResolveSSH say.
func (a *app) resolve(remoteName string) (target, error) {
	rawURL, err := a.git.RemoteURL(remoteName)
	if err != nil {
		return target{}, err
	}
	remote, err := ParseRemoteURL(rawURL)
	if err != nil {
		return target{}, fmt.Errorf("remote %s: %w", quote(remoteName), err)
	}
	configured, err := a.git.Config("collab.sidecar")
	if err != nil {
		return target{}, err
	}
	sc, err := ResolveSidecar(configured, a.getenv("COLLAB_SIDECAR"), remoteName, remote)
	if err != nil {
		return target{}, err
	}
	var configErr error
	sshCmd := ResolveSSH(a.getenv, func() string {
		v, err := a.git.Config("core.sshCommand")
		configErr = err
		return v
	})
	if configErr != nil {
		return target{}, configErr
	}
	return target{repo: remote.FullName(), sidecar: sc, ssh: sshCmd}, nil
}

// exchange is one command sent to the sidecar and what came back.
type exchange struct {
	req    contract.Command // the command as the sidecar's grammar reads it
	code   int              // the sidecar's exit status, or ssh's own
	stdout []byte
	// reply is the decoded reply (see decodeReply) when code is 0 or 4
	// and it could be read; replyErr says why it could not.
	reply    any
	replyErr error
}

// withAgent is flags with --agent from COLLAB_AGENT when they name none:
// every command of an agent that sets it acts as that agent.
func (a *app) withAgent(flags []Flag) []Flag {
	for _, f := range flags {
		if f.Name == "--agent" {
			return flags
		}
	}
	if agent := a.getenv("COLLAB_AGENT"); agent != "" {
		return append(slices.Clone(flags), Flag{Name: "--agent", Value: agent})
	}
	return flags
}

// send runs the collab-lease command v (on issue, with flags and globs) on t's
// sidecar. The line is checked with the sidecar's own grammar first
// (RemoteCommand), so a mistake sends nothing and is a *usageError. Under
// git collab run, a command that reads rides run's session (ride.go). ssh's
// stderr, where the sidecar's error line comes, goes to stderr as it
// comes; detached is runSSH's. An error means ssh did not run.
func (a *app) send(ctx context.Context, t target, v contract.Verb, issue int64, flags []Flag, globs []string, stderr io.Writer, detached bool) (exchange, error) {
	if x, ok := a.rideRun(ctx, t, v, issue, flags, stderr); ok {
		return x, nil
	}
	line, req, err := RemoteCommand(v, t.repo, issue, a.withAgent(flags), globs...)
	if err != nil {
		return exchange{}, err
	}
	res, err := runSSH(ctx, t.ssh.Args("-p", t.sidecar.Port, t.sidecar.Destination(), line), a.env, stderr, detached)
	if err != nil {
		return exchange{}, fmt.Errorf("run the ssh command (from %s): %w", t.ssh.Source, err)
	}
	x := exchange{req: req, code: res.Code, stdout: res.Stdout}
	if x.code == contract.ExitOK || x.code == contract.ExitConflict {
		x.reply, x.replyErr = decodeReply(req, x.code, x.stdout)
	}
	return x, nil
}
