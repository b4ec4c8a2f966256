package main

import (
	"os/exec"
	"syscall"
)

// agentProcess puts an agent in a process group of its own, so that a
// kill takes its git collab children too, and has the kernel kill it if
// this program dies.
func agentProcess(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killAgent SIGKILLs an agent's process group.
func killAgent(cmd *exec.Cmd) { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
