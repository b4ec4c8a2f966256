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

// userHZ is the unit of the CPU times in /proc/<pid>/stat (USER_HZ, which
// Linux fixes at 100 for user space on every architecture it runs on).
const userHZ = 100

// cpuTime is the CPU time (user and system, all threads) process pid has
// used so far; pid 0 means this process.
func cpuTime(b *testing.B, pid int) time.Duration {
	b.Helper()
	path := "/proc/self/stat"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/stat", pid)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	// The command name (field 2) may hold spaces; fields after it are
	// numbered from 3. utime and stime are fields 14 and 15.
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		b.Fatalf("%s: too few fields", path)
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			b.Fatalf("%s: %v", path, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ
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
