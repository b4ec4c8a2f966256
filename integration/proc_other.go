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
