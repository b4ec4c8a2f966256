package integration

import (
	"os/exec"
	"syscall"
)

// sysProcAttr puts Gitea in a process group of its own (so stopping it also
// stops the git processes it runs) and has the kernel kill it if the test
// process dies without cleaning up.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// signalGroup sends sig to the process group led by cmd's process.
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, sig)
	}
}
