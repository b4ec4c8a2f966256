package integration

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// metricValue returns the value of the series line that starts with
// series (name and labels exactly as exposed), or -1.
func metricValue(t *testing.T, body, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, series+" ") {
			v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, series)), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v
		}
	}
	return -1
}

func TestMetricsAfterRealTrafficAgainstGitea(t *testing.T) {
	s, w := newSidecar(t)
	expect(t, run(t, s, w.Alice, lease("acquire", w.Widgets, w.OpenIssue, "--ttl", "10m")), 0, "acquire")
	expect(t, run(t, s, w.Bob, lease("acquire", w.Widgets, w.OpenIssue)), 4, "held")
	expect(t, run(t, s, w.Bob, "collab-lease", "help"), 0, "help")
	expect(t, run(t, s, w.Bob, "collab-lease", "frob"), 1, "usage")
	resp, err := http.Get(s.HTTPURL + "/api/v1/repos/acme/widgets/leases")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	// The command's metrics are recorded just after its reply: poll.
	var body string
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(s.AdminURL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
			t.Fatalf("/metrics: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if metricValue(t, body, `collab_lease_operations_total{outcome="usage",verb="invalid"}`) == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for series, want := range map[string]float64{
		`collab_lease_operations_total{outcome="acquired",verb="acquire"}`: 1,
		`collab_lease_operations_total{outcome="held",verb="acquire"}`:     1,
		`collab_lease_operations_total{outcome="help",verb="help"}`:        1,
		`collab_lease_operations_total{outcome="usage",verb="invalid"}`:    1,
		`collab_lease_operation_duration_seconds_count{verb="acquire"}`:    2,
		`collab_lease_live_leases`:                                         1,
	} {
		if got := metricValue(t, body, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	for _, series := range []string{
		`collab_lease_gitea_requests_total{code="200",method="GET"}`,
		`collab_lease_gitea_request_duration_seconds_count{method="GET"}`,
	} {
		if got := metricValue(t, body, series); got < 1 {
			t.Errorf("%s = %v, want at least 1", series, got)
		}
	}
	for _, name := range []string{"collab_lease_ssh_connections", "collab_lease_gitea_request_errors_total", "go_goroutines", "process_resident_memory_bytes"} {
		if !regexp.MustCompile(`(?m)^` + name + ` `).MatchString(body) {
			t.Errorf("series %s missing", name)
		}
	}
}

// SIGTERM while an acquire is running: the acquire finishes and answers,
// and the process exits 0 within the shutdown bound. The acquire is held
// in flight by another process holding the ledger's write lock.
func TestSIGTERMLetsARunningAcquireFinishAgainstGitea(t *testing.T) {
	if _, err := exec.LookPath("sqlite3"); err != nil {
		t.Fatal("the sqlite3 command-line shell is required (apt-get install sqlite3)")
	}
	s, w := newSidecar(t, "--log-level", "debug")
	expect(t, run(t, s, w.Alice, lease("acquire", w.Widgets, w.OpenIssue)), 0, "a first acquire creates the ledger")

	locker := exec.Command("sqlite3", s.DB)
	stdin, err := locker.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := locker.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := locker.Start(); err != nil {
		t.Fatal(err)
	}
	defer locker.Process.Kill()
	fmt.Fprintln(stdin, ".timeout 5000\nBEGIN IMMEDIATE;\nSELECT 'locked';")
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "locked\n" {
		t.Fatalf("sqlite3: %q %v", line, err)
	}

	done := make(chan SSHResult, 1)
	go func() { done <- run(t, s, w.Bob, lease("acquire", w.Widgets, w.PullRequest, "--ttl", "5m")) }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(s.Logs(), `msg="command started" user=bob`) {
		if time.Now().After(deadline) {
			t.Fatalf("bob's acquire never started:\n%s", s.Logs())
		}
		time.Sleep(10 * time.Millisecond)
	}
	stopped := make(chan error, 1)
	start := time.Now()
	go func() { stopped <- s.Stop(25 * time.Second) }()
	for !strings.Contains(s.Logs(), `msg="shutting down"`) {
		if time.Now().After(deadline) {
			t.Fatal("the sidecar did not begin to shut down on SIGTERM")
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Fprintln(stdin, "ROLLBACK;")
	stdin.Close()

	r := <-done
	if r.Code != 0 || !strings.Contains(r.Stdout, `"status":"acquired"`) {
		t.Fatalf("the in-flight acquire did not finish: %+v", r)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("shutdown took %s", took)
	}
	if !strings.Contains(s.Logs(), `msg=stopped`) {
		t.Fatalf("no clean stop in the log:\n%s", s.Logs())
	}
}

// The container's health probe: exit 0 against a running sidecar, 1 when
// nothing answers.
func TestHealthcheckCommandAgainstGitea(t *testing.T) {
	s, _ := newSidecar(t)
	_, _, bin := shared(t)
	probe := func(addr string) (string, int) {
		cmd := exec.Command(bin, "healthcheck", "--http-listen", addr)
		cmd.Env = cleanEnv()
		r, err := RunCommand(cmd)
		if err != nil {
			t.Fatal(err)
		}
		return r.Stdout + r.Stderr, r.Code
	}
	if out, code := probe(s.HTTPAddr); code != 0 {
		t.Fatalf("healthcheck of a running sidecar: exit %d: %s", code, out)
	}
	if out, code := probe("127.0.0.1:1"); code != 1 || !strings.Contains(out, "not healthy") {
		t.Fatalf("healthcheck of nothing: exit %d: %s", code, out)
	}
}
