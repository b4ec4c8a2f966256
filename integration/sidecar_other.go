//go:build !linux

package integration

import "syscall"

func sidecarProcAttr() *syscall.SysProcAttr { return nil }
