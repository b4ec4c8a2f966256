package main

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// state is the state letter /proc gives pid ("S", "T", …), "" if gone.
func state(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0]
}

// A zombie's freeze reaches a grandchild in a session of its own (as git
// collab's ssh is), and its thaw wakes it again.
func TestSignalTreeFreezesEveryDescendant(t *testing.T) {
	cmd := exec.Command("sh", "-c", "setsid sleep 60 & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		signalTree(syscall.SIGKILL, cmd.Process.Pid)
		_ = cmd.Wait()
	})
	var tree []int
	for deadline := time.Now().Add(10 * time.Second); len(tree) < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("the child never showed up under %d: %v", cmd.Process.Pid, tree)
		}
		tree = descendants([]int{cmd.Process.Pid})
		time.Sleep(10 * time.Millisecond)
	}
	if !slices.Contains(tree, cmd.Process.Pid) {
		t.Fatalf("the root is not in its own tree: %v", tree)
	}
	waitState := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; {
			all := true
			for _, pid := range tree {
				all = all && (state(pid) == want) == (want == "T")
			}
			if all {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("not every process of %v is %s", tree, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	signalTree(syscall.SIGSTOP, cmd.Process.Pid)
	waitState("T")
	signalTree(syscall.SIGCONT, cmd.Process.Pid)
	waitState("running again")
}
