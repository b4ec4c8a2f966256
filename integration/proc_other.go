//go:build !linux

package integration

import (
	"errors"
	"time"
)

// CPUTime reads /proc, which only Linux has.
func CPUTime(pid int) (time.Duration, error) {
	return 0, errors.New("CPU time of a process: reads /proc, Linux only")
}

// Running reads /proc, which only Linux has.
func Running(pid int) (bool, error) {
	return false, errors.New("whether a process runs: reads /proc, Linux only")
}
