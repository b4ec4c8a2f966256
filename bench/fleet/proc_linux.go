package main

import (
	"errors"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// agentProcess puts an agent in a process group of its own, so that a
// kill takes its git collab children too, and has the kernel kill it if
// this program dies.
func agentProcess(cmd *exec.Cmd) { ownGroup(cmd) }

// killAgent SIGKILLs an agent's process group.
func killAgent(cmd *exec.Cmd) { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }

// mergeProcess starts a work's git collab merge, or its git collab
// unclaim of the merge lock, in a process group of its own, out of reach
// of git collab run's signals to its command's group (the merge's end of
// the claim makes run stop the work while the reply, or the letting go
// after it, is under way: the work waits for it first), and has the
// kernel kill it if the work dies.
func mergeProcess(cmd *exec.Cmd) { ownGroup(cmd) }

// killGroup SIGKILLs the process group whose leader is pid.
func killGroup(pid int) { signalGroup(syscall.SIGKILL, pid) }

// commandProcess starts a chained agent's work as git collab run starts
// its command: in a process group of its own, which the agent stops with
// signalGroup (its git collab merge, in a group of its own, is out of
// reach), and has the kernel kill it if the agent dies.
func commandProcess(cmd *exec.Cmd) { ownGroup(cmd) }

// ownGroup starts cmd in a process group of its own, and has the kernel
// kill it if this process dies.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// signalGroup sends sig to the process group whose leader is pid.
func signalGroup(sig syscall.Signal, pid int) { _ = syscall.Kill(-pid, sig) }

// signalTree sends sig to every process of the trees rooted at roots:
// the roots and all their descendants, whatever session or group they
// made for themselves (git collab's ssh runs in a session of its own), as
// a paused container stops everything in it. It goes over the trees
// twice, for a child forked while the first pass ran.
func signalTree(sig syscall.Signal, roots ...int) {
	for range 2 {
		for _, pid := range descendants(roots) {
			_ = syscall.Kill(pid, sig)
		}
	}
}

// descendants lists roots and every process below them, from /proc.
func descendants(roots []int) []int {
	parent := map[int]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The fields after the command, which is in parentheses and may
		// hold anything: state, then the parent's PID.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			parent[pid] = ppid
		}
	}
	in := map[int]bool{}
	for _, r := range roots {
		if r > 0 {
			in[r] = true
		}
	}
	for grew := true; grew; {
		grew = false
		for pid, ppid := range parent {
			if in[ppid] && !in[pid] {
				in[pid], grew = true, true
			}
		}
	}
	return slices.Collect(maps.Keys(in))
}

// selfCPU is the CPU time of this process and its waited-for children.
func selfCPU() time.Duration {
	var cpu time.Duration
	var ru syscall.Rusage
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		if syscall.Getrusage(who, &ru) == nil {
			cpu += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	return cpu
}

// killedBy says whether err is a process's end by signal sig.
func killedBy(err error, sig syscall.Signal) bool {
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return false
	}
	ws, ok := exit.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// detachedProcess starts a bare work in a process group of its own,
// which git collab run's signals to its command's group do not reach,
// and with no parent-death signal: it outlives the launcher run kills.
func detachedProcess(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}
