package integration

import "syscall"

// sidecarProcAttr has the kernel kill the sidecar if the process that
// started it (a test, the demo) dies without stopping it.
func sidecarProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
