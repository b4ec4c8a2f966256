package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startedPIDs waits for the command to write its processes' ids to path.
func startedPIDs(t *testing.T, path string) []int {
	t.Helper()
	waitFile(t, path)
	var pids []int
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	return pids
}

// A lost line for the claim stops the command within a second: one line
// on stderr says why, its whole process group gets SIGTERM, and git
// collab run exits 4.
func TestRunStopsTheCommandWhenItsClaimIsLost(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	f := newFakeSidecar(t, h)
	dir := t.TempDir()
	done := h.runAsync("run", "42", "--", "sh", "-c", `sleep 60 & echo "$$ $!" >"$1/pids.tmp"; mv "$1/pids.tmp" "$1/pids"; wait`, "sh", dir)
	pids := startedPIDs(t, filepath.Join(dir, "pids"))
	f.lose(7, "closed") // another issue's: nothing happens
	start := time.Now()
	f.lose(42, "force_released")
	r := wait(t, done)
	if took := time.Since(start); took > time.Second {
		t.Errorf("stopping took %s", took)
	}
	if r.code != 4 || r.stderr != "git-collab: claimed acme/widgets#42 (token 1); running sh\n"+
		"git-collab: lost acme/widgets#42 (force_released); stopping the command\n" {
		t.Fatalf("%+v", r)
	}
	waitFor(t, "the command's processes to end", func() bool { return !running(pids[0]) && !running(pids[1]) })
}

// A command that ignores SIGTERM gets SIGKILL, killDelay later.
func TestRunKillsACommandThatIgnoresSIGTERM(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	f := newFakeSidecar(t, h)
	dir := t.TempDir()
	done := h.runAsync("run", "42", "--", "sh", "-c",
		`trap '' TERM; sleep 60 & echo "$$ $!" >"$1/pids.tmp"; mv "$1/pids.tmp" "$1/pids"; while :; do sleep 0.02; done`, "sh", dir)
	pids := startedPIDs(t, filepath.Join(dir, "pids"))
	start := time.Now()
	f.lose(42, "handed_off")
	r := wait(t, done)
	if took := time.Since(start); took < killDelay {
		t.Errorf("killed after %s, before the delay of %s", took, killDelay)
	}
	if r.code != 4 || !strings.HasSuffix(r.stderr, "git-collab: lost acme/widgets#42 (handed_off); stopping the command\n") {
		t.Fatalf("%+v", r)
	}
	waitFor(t, "the command's processes to end", func() bool { return !running(pids[0]) && !running(pids[1]) })
}
