package integration

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat (USER_HZ, which
// Linux fixes at 100 for user space on every architecture it runs on).
const userHZ = 100

// CPUTime is the CPU time (user and system, all threads) process pid has
// used so far, from /proc/<pid>/stat; pid 0 means this process.
func CPUTime(pid int) (time.Duration, error) {
	path := "/proc/self/stat"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/stat", pid)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields after it are
	// numbered from 3. utime and stime are fields 14 and 15.
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("%s: too few fields", path)
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// Running says whether process pid exists and has not ended: a zombie
// (ended, not yet reaped) is not running.
func Running(pid int) (bool, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	// The state follows the command name, which is in parentheses.
	s := string(b)
	state := strings.TrimSpace(s[strings.LastIndexByte(s, ')')+1:])
	return !strings.HasPrefix(state, "Z") && !strings.HasPrefix(state, "X"), nil
}
