//go:build !linux

package main

import (
	"os/exec"
	"syscall"
	"time"
)

// The fleet runs on Linux only (it reads CPU times from /proc, and kills
// an agent's whole process group); run refuses elsewhere.

func agentProcess(cmd *exec.Cmd) {}

func detachedProcess(cmd *exec.Cmd) {}

func killAgent(cmd *exec.Cmd) { _ = cmd.Process.Kill() }

func mergeProcess(cmd *exec.Cmd) {}

func killGroup(pid int) {}

func commandProcess(cmd *exec.Cmd) {}

func signalGroup(sig syscall.Signal, pid int) {}

func signalTree(sig syscall.Signal, roots ...int) {}

func selfCPU() time.Duration { return 0 }

func killedBy(err error, sig syscall.Signal) bool { return false }
