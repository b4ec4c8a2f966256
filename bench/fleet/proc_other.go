//go:build !linux

package main

import "os/exec"

// The fleet runs on Linux only (it reads CPU times from /proc, and kills
// an agent's whole process group); run refuses elsewhere.

func agentProcess(cmd *exec.Cmd) {}

func killAgent(cmd *exec.Cmd) { _ = cmd.Process.Kill() }
