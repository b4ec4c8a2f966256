package integration

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// What the benchmarks read about processes from /proc.

// vmRSS reads the resident set size of process pid, in KiB.
func vmRSS(b *testing.B, pid int) int64 {
	b.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatalf("VmRSS %q: %v", v, err)
			}
			return n
		}
	}
	b.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// cpuTime is CPUTime(pid), failing the benchmark when it cannot be read.
func cpuTime(b *testing.B, pid int) time.Duration {
	b.Helper()
	d, err := CPUTime(pid)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// raiseFileLimit lifts this process's open-file limit to at least n (as far
// as the hard limit allows): every client connection is a descriptor here.
func raiseFileLimit(b *testing.B, n uint64) {
	b.Helper()
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		b.Fatal(err)
	}
	if l.Cur >= n {
		return
	}
	l.Cur = min(n, l.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil || l.Cur < n {
		b.Fatalf("open-file limit %d (hard %d) is below the %d this benchmark needs: %v", l.Cur, l.Max, n, err)
	}
}
