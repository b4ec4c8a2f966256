//go:build unix

package main

import (
	"os"
	"os/exec"
	"syscall"
)

// detach makes cmd the leader of a new session: no controlling terminal
// (ssh then fails rather than prompt on one), and a process group of its
// own that a cancelled context stops whole, wrappers and all.
func detach(cmd *exec.Cmd) {
	noTerminal(cmd)
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
}

// noTerminal makes cmd the leader of a new session, with no controlling
// terminal and a process group of its own that killGroup stops.
func noTerminal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	dieWithParent(cmd.SysProcAttr)
}

// killGroup stops the whole process group noTerminal made for cmd.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

// ownGroup starts cmd in a process group of its own, which signalGroup
// signals whole: the command of git collab run and whatever it starts.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(cmd.SysProcAttr)
}

// signalGroup sends sig to the process group ownGroup made for cmd.
func signalGroup(cmd *exec.Cmd, sig os.Signal) {
	if s, ok := sig.(syscall.Signal); ok && cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, s)
	}
}

// forwardedSignals are the signals git collab run passes on to its
// command's process group: those a terminal or a supervisor sends to ask
// it to stop.
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// stopSignal and killSignal end a command whose claim was lost: first
// politely, then for good.
var stopSignal, killSignal os.Signal = syscall.SIGTERM, syscall.SIGKILL

// exitStatus is a command's exit status as a shell reports it: a signal
// as 128+n.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// signalStatus is the exit status of a process that sig ended.
func signalStatus(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 128
}
