//go:build !linux

package integration

import (
	"testing"
	"time"
)

// The benchmarks that read /proc measure Linux only.

func vmRSS(b *testing.B, pid int) int64 {
	b.Skip("reads /proc")
	return 0
}

func cpuTime(b *testing.B, pid int) time.Duration {
	b.Skip("reads /proc")
	return 0
}

func raiseFileLimit(b *testing.B, n uint64) {}
