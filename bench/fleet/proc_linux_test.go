package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// A work that git collab run stops (SIGTERM, as when the merge's close
// ends its claim) still reports its CPU as its last event: what it does
// not report, the report counts as claiming.
func TestStoppedWorkReportsItsCPU(t *testing.T) {
	if os.Getenv("FLEET_TEST_WORK") != "" {
		os.Exit(workMain(os.Stdout))
	}
	// A Gitea that never answers: the work waits in its first request.
	asked := make(chan struct{}, 1)
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked <- struct{}{}
		<-r.Context().Done()
	}))
	defer hang.Close()
	cfg, err := json.Marshal(workConfig{Repo: "o/r", API: hang.URL, Issue: 7})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestStoppedWorkReportsItsCPU$")
	cmd.Env = append(os.Environ(), "FLEET_TEST_WORK=1", workEnv+"="+string(cfg))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-asked:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("the work never asked Gitea")
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	var last Event
	dec := json.NewDecoder(out)
	for {
		var e Event
		if err := dec.Decode(&e); err != nil {
			break
		}
		kinds = append(kinds, e.Kind)
		last = e
	}
	if err := cmd.Wait(); !killedBy(err, syscall.SIGTERM) && (cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 143) {
		t.Fatalf("the work ended with %v, want exit status 143", err)
	}
	if want := []string{evClaimed, evTerminated, evWorkCPU}; !slices.Equal(kinds, want) {
		t.Fatalf("events %q, want %q", kinds, want)
	}
	if last.Issue != 7 || last.Took <= 0 {
		t.Fatalf("the CPU event %+v: want issue 7 and a CPU time", last)
	}
}

// A bare work goes on when git collab run stops it: run's SIGTERM to
// its command's process group goes by (the launcher waits on, and ends
// with the work's status), and its SIGKILL ends only the launcher, while
// the work, in a group of its own, finishes what it began and reports it.
func TestBareWorkOutlivesRunsStop(t *testing.T) {
	if os.Getenv("FLEET_TEST_WORK") != "" {
		os.Exit(workMain(os.Stdout))
	}
	for _, c := range []struct {
		name string
		stop []syscall.Signal
		// ended says whether the launcher ended as it should.
		ended func(error) bool
	}{
		{"SIGTERM", []syscall.Signal{syscall.SIGTERM}, func(err error) bool { return err == nil }},
		{"SIGKILL", []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}, func(err error) bool { return killedBy(err, syscall.SIGKILL) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			// A Gitea whose first answer waits for the test: the work
			// asks whether the issue is open, and hears "closed" once
			// run has stopped it.
			asked, answer := make(chan struct{}, 1), make(chan struct{})
			gitea := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				select {
				case asked <- struct{}{}:
				default:
				}
				<-answer
				_ = json.NewEncoder(w).Encode(map[string]any{"number": 7, "state": "closed"})
			}))
			var once sync.Once
			answered := func() { once.Do(func() { close(answer) }) }
			defer gitea.Close()
			defer answered()
			cfg, err := json.Marshal(workConfig{Repo: "o/r", API: gitea.URL, Issue: 7, Bare: true})
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestBareWorkOutlivesRunsStop$")
			cmd.Env = append(os.Environ(), "FLEET_TEST_WORK=1", workEnv+"="+string(cfg))
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // as git collab run starts its command
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			dec := json.NewDecoder(out)
			var first Event
			if err := dec.Decode(&first); err != nil || first.Kind != evClaimed {
				t.Fatalf("the work's first event: %+v, %v", first, err)
			}
			pid, _ := strconv.Atoi(first.Detail) // the work's own process
			t.Cleanup(func() { signalTree(syscall.SIGKILL, pid, cmd.Process.Pid) })
			if pid == cmd.Process.Pid {
				t.Fatal("the work runs in the process run started: it is not detached")
			}
			select {
			case <-asked:
			case <-time.After(time.Minute):
				t.Fatal("the work never asked Gitea")
			}
			for _, sig := range c.stop {
				if err := syscall.Kill(-cmd.Process.Pid, sig); err != nil {
					t.Fatal(err)
				}
			}
			answered()
			kinds := []string{first.Kind}
			for {
				var e Event
				if err := dec.Decode(&e); err != nil {
					break // the work, which holds stdout too, has ended
				}
				kinds = append(kinds, e.Kind)
			}
			if err := cmd.Wait(); !c.ended(err) {
				t.Errorf("the launcher ended with %v", err)
			}
			if want := []string{evClaimed, evSkipped, evWorkCPU}; !slices.Equal(kinds, want) {
				t.Fatalf("events %q, want %q: the work did not go on", kinds, want)
			}
		})
	}
}
