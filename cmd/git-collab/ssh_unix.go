//go:build unix

package main

import (
	"os/exec"
	"syscall"
)

// detach makes cmd the leader of a new session: no controlling terminal
// (ssh then fails rather than prompt on one), and a process group of its
// own that a cancelled context stops whole, wrappers and all.
func detach(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
}
