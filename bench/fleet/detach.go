package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// A work with its agent's own defenses off goes on when its claim is
// lost. `git collab run` stops its command when the claim is lost by
// signalling the command's process group: SIGTERM, then SIGKILL 10 s
// later. A bare work is out of that group's reach: the process run
// starts (the launcher) starts the work again in a process group of its
// own and waits for it, passing its exit status on; run's signals reach
// only the launcher, which lets SIGTERM go by and dies of the SIGKILL,
// while the work, woken, goes on to its push and merge.
//
// It is what a zombie agent does whose work outlives its wrapper (a
// container runtime that delivers no signal, a tool server or background
// job of the agent's, an agent that shrugs off SIGTERM): the work keeps
// the environment run gave it when its tenure began, COLLAB_TOKEN and the
// push option collab-lease=<issue>:<token> (GIT_CONFIG_COUNT), so its late
// push carries its old token, over the same HTTP path to Gitea as every
// other push, and what stops it, if anything, is Gitea. A work that only
// ignored SIGTERM would race run's SIGKILL instead: what the zombie
// landed would depend on a timer, not on the forge. A work started
// outside run would push with no token at all, which the gate refuses
// for another reason than the one to show: a stale token.
//
// The launcher waits for the work, so that run (which releases the
// claim when its command exits) keeps the claim while the work runs, and
// the work's CPU is counted as its agent's; a work whose launcher run
// has killed is counted only by its own last event (evWorkCPU).

// detachedEnv marks the work the launcher started: it works.
const detachedEnv = "FLEET_WORK_DETACHED"

// runDetached is the launcher: it runs this program again with the same
// arguments, environment, stdin, stdout and stderr, in a process group of
// its own, and returns its exit status.
func runDetached() int {
	// Caught and never read: run's SIGTERM goes by. (Ignoring it would
	// pass SIG_IGN on to the work through exec.)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet work: find this program:", err)
		return 1
	}
	cmd := exec.Command(self, os.Args[1:]...)
	cmd.Env = append(os.Environ(), detachedEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	detachedProcess(cmd)
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return exit.ExitCode()
	}
	fmt.Fprintln(os.Stderr, "fleet work: the detached work:", err)
	return 1
}
