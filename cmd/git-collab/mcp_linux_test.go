package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// waitingSSH stands for an ssh that has not opened its session yet (a
// slow login): it writes its own pid and its child's to $FAKE_PIDS, then
// waits for the child.
const waitingSSH = `#!/bin/sh
sleep 60 &
printf '%s\n%s\n' "$$" "$!" >"$FAKE_PIDS.tmp"
mv "$FAKE_PIDS.tmp" "$FAKE_PIDS"
wait
`

// A client that cancels the call that opens the session stops its ssh,
// and whatever that ssh started, at once. ssh runs behind sh -c, as
// COLLAB_SSH_COMMAND makes it.
func TestMCPCancelledOpeningStopsItsSSH(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	dir := t.TempDir()
	fake, pids := filepath.Join(dir, "ssh"), filepath.Join(dir, "pids")
	if err := os.WriteFile(fake, []byte(waitingSSH), 0o755); err != nil {
		t.Fatal(err)
	}
	h.setenv("COLLAB_SSH_COMMAND="+shellQuote(fake)+" -o Fake=yes", "FAKE_PIDS="+pids)
	cs := h.mcpClient()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "claim", Arguments: map[string]any{"issue": 42, "wait": "1m"}})
		done <- err
	}()
	var procs []int
	for deadline := time.Now().Add(10 * time.Second); procs == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the fake ssh did not start")
		}
		if b, err := os.ReadFile(pids); err == nil {
			for _, f := range strings.Fields(string(b)) {
				pid, err := strconv.Atoi(f)
				if err != nil {
					t.Fatal(err)
				}
				procs = append(procs, pid)
			}
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled call returned %v", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		alive := 0
		for _, pid := range procs {
			if running(pid) {
				alive++
			}
		}
		if alive == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the processes %v still run after the call was cancelled", alive, procs)
		}
	}
}

// running reports whether pid is a process that has not exited (a zombie
// waiting for a parent to reap it has).
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z") && !strings.HasPrefix(rest, "X")
}
