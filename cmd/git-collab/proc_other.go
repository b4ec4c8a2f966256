//go:build !unix

package main

import (
	"os"
	"os/exec"
)

// detach has no sessions to make here: a cancelled context stops cmd
// itself, as exec.CommandContext does.
func detach(*exec.Cmd) {}

// noTerminal has no sessions to make here.
func noTerminal(*exec.Cmd) {}

// killGroup stops cmd itself: there are no process groups to stop.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		cmd.Process.Kill()
	}
}

// ownGroup has no process groups to make here.
func ownGroup(*exec.Cmd) {}

// signalGroup signals cmd itself; only a kill can be sent here.
func signalGroup(cmd *exec.Cmd, sig os.Signal) {
	if cmd.Process != nil {
		cmd.Process.Signal(sig)
	}
}

var forwardedSignals = []os.Signal{os.Interrupt}

var stopSignal, killSignal os.Signal = os.Kill, os.Kill

func exitStatus(ps *os.ProcessState) int { return ps.ExitCode() }

func signalStatus(os.Signal) int { return 130 }
