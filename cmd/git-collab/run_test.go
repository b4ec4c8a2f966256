//go:build unix

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// These tests run git collab run against the fake sidecar of sessions
// (fakesidecar_test.go), with sh scripts as the commands it runs.

// runAsync starts git collab run args in h and returns its result once it
// ends.
func (h *harness) runAsync(args ...string) <-chan result {
	return h.runAsyncWith(nil, args...)
}

func (h *harness) runAsyncWith(sigs <-chan os.Signal, args ...string) <-chan result {
	return h.runAsyncInto(sigs, &syncBuffer{}, args...)
}

// runAsyncTold is runAsync, and the run's stderr as it is written.
func (h *harness) runAsyncTold(args ...string) (<-chan result, *syncBuffer) {
	errb := &syncBuffer{}
	return h.runAsyncInto(nil, errb, args...), errb
}

func (h *harness) runAsyncInto(sigs <-chan os.Signal, errb *syncBuffer, args ...string) <-chan result {
	done := make(chan result, 1)
	go func() {
		var out syncBuffer
		a := h.app(nil, &out, errb)
		a.signals = sigs
		code := a.run(args)
		done <- result{out.String(), errb.String(), code}
	}()
	return done
}

// wait is the result of a run, within a deadline.
func wait(t *testing.T, done <-chan result) result {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("git collab run did not end")
	}
	return result{}
}

// waitFile waits for the command to create path.
func waitFile(t *testing.T, path string) {
	t.Helper()
	waitFor(t, filepath.Base(path), func() bool { _, err := os.Stat(path); return err == nil })
}

// syncBuffer is a bytes.Buffer the command and the test may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// When the command exits, its claim is released over the session, the
// session closes, and git collab run exits with the command's status, a
// signal's as 128+n. One ssh runs, for the session, as the default agent.
func TestRunPassesTheCommandsStatusAndReleases(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		script string
		code   int
	}{
		{"exit 0", 0},
		{"exit 3", 3},
		{"kill -USR1 $$", 128 + int(syscall.SIGUSR1)},
	} {
		t.Run(c.script, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, "git@forge.example:acme/widgets.git")
			f := newFakeSidecar(t, h)
			r := h.run("run", "42", "--", "sh", "-c", c.script)
			if r.code != c.code || r.stdout != "" || r.stderr != "git-collab: claimed acme/widgets#42 (token 1); running sh\n" {
				t.Fatalf("%+v", r)
			}
			if got, want := f.received(), []string{"acquire 'acme/widgets' '42'", "release 'acme/widgets' '42'"}; !reflect.DeepEqual(got, want) {
				t.Fatalf("the sidecar received %q, want %q", got, want)
			}
			if f.runs() != 1 || f.claimed(42) {
				t.Fatalf("%d ssh runs; still claimed: %v", f.runs(), f.claimed(42))
			}
			args := f.conn(1).args
			if got, want := args[len(args)-1], "collab-lease session --agent 'box-4242'"; got != want || args[0] != "-o" || args[len(args)-3] != "2222" || !slices.Contains(args, "ServerAliveCountMax=1") {
				t.Fatalf("ssh ran with %q, want the exec %q", args, want)
			}
		})
	}
}

// What the command needs to know of its claim is in its environment, and
// the options of the claim and the session travel where they belong.
func TestRunGivesTheCommandItsClaim(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	f := newFakeSidecar(t, h)
	f.set(func() { f.nextIssue = 7 })
	h.setenv("COLLAB_AGENT=agent-7")
	r := h.run("run", "--next", "--label", "ready", "--pulls", "--ttl", "2h", "--grace", "1m", "--",
		"sh", "-c", `echo "$COLLAB_REPO $COLLAB_ISSUE $COLLAB_TOKEN $COLLAB_HOLDER $COLLAB_AGENT $COLLAB_SESSION"`)
	if r.code != 0 || r.stdout != "acme/widgets 7 1 alice agent-7 s-1\n" {
		t.Fatalf("%+v", r)
	}
	args := f.conn(1).args
	if got, want := args[len(args)-1], "collab-lease session --agent 'agent-7' --grace '1m'"; got != want {
		t.Fatalf("the exec %q, want %q", got, want)
	}
	if got, want := f.received()[0], "next 'acme/widgets' --label 'ready' --pulls --ttl '2h'"; got != want {
		t.Fatalf("the claim %q, want %q", got, want)
	}

	h = newHarness(t, "git@forge.example:acme/widgets.git")
	f = newFakeSidecar(t, h)
	if r := h.run("run", "42", "--wait", "5m", "--agent", "a.1", "--", "true"); r.code != 0 {
		t.Fatalf("%+v", r)
	}
	if got, want := f.received()[0], "acquire 'acme/widgets' '42' --wait '5m'"; got != want {
		t.Fatalf("the claim %q, want %q", got, want)
	}
	if args := f.conn(1).args; args[len(args)-1] != "collab-lease session --agent 'a.1'" {
		t.Fatalf("ssh ran with %q", args)
	}
}

// Not claimed: git collab run says why, exit 4, and the command never
// starts; nor does it after an error.
func TestRunNotClaimedRunsNothing(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args   []string
		reply  string
		code   int
		stderr string
	}{
		{[]string{"42"}, "", 4, "acme/widgets#42 is claimed by bob until 12:05 UTC\n"},
		{[]string{"--next"}, "", 4, "nothing to claim in acme/widgets\n"},
		{[]string{"42"}, `{"status":"limit","repo":"acme/widgets","issue":42,"holder":"alice","agent":"box-4242","scope":"holder","limit":3,"live":3,"exit":4}`, 4,
			"not claimed: you hold 3 live claims, the sidecar's cap of 3; unclaim one first\n"},
		{[]string{"42"}, `{"status":"error","exit":1,"error":"issue not found"}`, 1, "error: issue not found\n"},
		{[]string{"42"}, `{"status":"error","exit":75,"error":"forge unavailable, try again"}`, 75, "error: forge unavailable, try again\n"},
	} {
		h := newHarness(t, "git@forge.example:acme/widgets.git")
		f := newFakeSidecar(t, h)
		f.set(func() {
			f.held[42] = true
			if c.reply != "" {
				f.reply = func(string) (string, bool) { return c.reply, true }
			}
		})
		marker := filepath.Join(t.TempDir(), "ran")
		r := h.run(append(append([]string{"run"}, c.args...), "--", "touch", marker)...)
		if r.code != c.code || !strings.HasSuffix(r.stderr, c.stderr) {
			t.Errorf("%q: %+v, want exit %d and %q", c.args, r, c.code, c.stderr)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Errorf("%q: the command ran", c.args)
		}
	}
}

// A session the sidecar will not open ends git collab run as a command
// would end: the sidecar's error line and status, or ssh's and a hint.
func TestRunSessionThatDoesNotOpen(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		code   int
		said   string
		stderr string
	}{
		{75, "error: too many sessions for this account, try again", "error: too many sessions for this account, try again\n"},
		{1, "error: usage: unknown verb \"session\"", "error: usage: unknown verb \"session\"\n"},
		{255, "ssh: connect to host forge.example port 2222: Connection refused",
			"ssh: connect to host forge.example port 2222: Connection refused\ngit-collab: could not reach the sidecar at forge.example:2222 over ssh"},
	} {
		h := newHarness(t, "git@forge.example:acme/widgets.git")
		f := newFakeSidecar(t, h)
		f.set(func() { f.open = func(string) (int, string) { return c.code, c.said } })
		marker := filepath.Join(t.TempDir(), "ran")
		r := h.run("run", "42", "--", "touch", marker)
		if r.code != c.code || !strings.HasPrefix(r.stderr, c.stderr) {
			t.Errorf("exit %d: %+v", c.code, r)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Errorf("exit %d: the command ran", c.code)
		}
	}
}

// SIGINT, SIGTERM and SIGHUP to git collab run go to the command, which
// decides; its claim is released when it exits.
func TestRunPassesSignalsOn(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	f := newFakeSidecar(t, h)
	dir := t.TempDir()
	sigs := make(chan os.Signal, 1)
	done := h.runAsyncWith(sigs, "run", "42", "--", "sh", "-c",
		`trap 'echo got TERM; exit 7' TERM; touch "$1/started"; while :; do sleep 0.02; done`, "sh", dir)
	waitFile(t, filepath.Join(dir, "started"))
	sigs <- syscall.SIGTERM
	r := wait(t, done)
	if r.code != 7 || r.stdout != "got TERM\n" {
		t.Fatalf("%+v", r)
	}
	if f.claimed(42) {
		t.Fatal("still claimed")
	}
}

// A dropped connection is reopened with --resume; the command goes on
// as if nothing happened, and its claim is released over the new one.
func TestRunKeepsTheCommandAcrossAResumedConnection(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	f := newFakeSidecar(t, h)
	dir := t.TempDir()
	done, stderr := h.runAsyncTold("run", "42", "--", "sh", "-c",
		`touch "$1/started"; while [ ! -e "$1/go" ]; do sleep 0.02; done; exit 5`, "sh", dir)
	waitFile(t, filepath.Join(dir, "started"))
	f.conn(1).drop()
	c := f.conn(2)
	if got, want := c.args[len(c.args)-1], "collab-lease session --agent 'box-4242' --resume 's-1'"; got != want {
		t.Fatalf("the second exec %q, want %q", got, want)
	}
	// The resumed session is in place once its first line is out; the
	// command has not been told anything.
	waitFor(t, "the resume", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.sessions["s-1"].conn == c })
	// And git collab has read that line: only then does the command end
	// (otherwise its release may race the resume).
	waitFor(t, "git collab's word of the resume", func() bool { return strings.Contains(stderr.String(), "reconnected") })
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := wait(t, done)
	if r.code != 5 || !strings.Contains(r.stderr, "reconnected, and acme/widgets#42 is still claimed") || strings.Contains(r.stderr, "lost") {
		t.Fatalf("%+v", r)
	}
	if got := f.received(); len(got) != 2 || got[1] != "release 'acme/widgets' '42'" || f.claimed(42) {
		t.Fatalf("the sidecar received %q", got)
	}
}

// A dropped connection whose session the sidecar no longer has, or
// whose claim ended meanwhile, is a lost claim: the command is stopped.
func TestRunStopsTheCommandWhenTheSessionIsGone(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		set  func(*fakeSidecar)
		why  string
	}{
		{"session_gone", func(f *fakeSidecar) { f.refuseResume = true },
			"lost acme/widgets#42 (the connection to the sidecar dropped, and the sidecar no longer has the session); stopping the command"},
		{"claim ended meanwhile", func(f *fakeSidecar) { f.sessions["s-1"].claims = map[int64]int64{} },
			"lost acme/widgets#42 (it ended while the connection to the sidecar was down); stopping the command"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, "git@forge.example:acme/widgets.git")
			f := newFakeSidecar(t, h)
			dir := t.TempDir()
			done := h.runAsync("run", "42", "--", "sh", "-c", `touch "$1/started"; while :; do sleep 0.02; done`, "sh", dir)
			waitFile(t, filepath.Join(dir, "started"))
			f.set(func() { c.set(f) })
			f.conn(1).drop()
			r := wait(t, done)
			if r.code != 4 || !strings.Contains(r.stderr, "git-collab: "+c.why+"\n") {
				t.Fatalf("%+v", r)
			}
		})
	}
}

// A session resumed on another connection is no longer this run's: its
// command is stopped, and no resume is tried.
func TestRunStopsWhenTheSessionIsResumedElsewhere(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	f := newFakeSidecar(t, h)
	dir := t.TempDir()
	done := h.runAsync("run", "42", "--", "sh", "-c", `touch "$1/started"; while :; do sleep 0.02; done`, "sh", dir)
	waitFile(t, filepath.Join(dir, "started"))
	c := f.conn(1)
	c.send("2", "error: session resumed elsewhere")
	c.send("x", "75")
	r := wait(t, done)
	if r.code != 4 || !strings.Contains(r.stderr, "git-collab: lost acme/widgets#42 (the session was resumed on another connection); stopping the command\n") {
		t.Fatalf("%+v", r)
	}
	if f.runs() != 1 {
		t.Fatalf("%d ssh runs", f.runs())
	}
}

// A usage mistake sends nothing.
func TestRunUsageMistakes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "42"}, "run needs a command after --"},
		{[]string{"run", "--", "make"}, "run needs <issue> or --next"},
		{[]string{"run", "42", "--next", "--", "make"}, "run takes <issue> or --next, not both"},
		{[]string{"run", "42", "--label", "x", "--", "make"}, "--label goes with --next"},
		{[]string{"run", "--next", "--wait", "1.5s", "--", "make"}, `--wait "1.5s" must be a whole number of seconds`},
		{[]string{"run", "42", "--ttl", "1.5s", "--", "make"}, `--ttl "1.5s" must be a whole number of seconds`},
		{[]string{"run", "42", "--grace", "2s", "--", "make"}, `--grace "2s" is less than the minimum of 5s`},
		{[]string{"run", "42", "--json", "--", "make"}, "run takes no --json"},
		{[]string{"claim", "42", "--grace", "30s"}, "claim takes no --grace"},
		{[]string{"next", "--next"}, "next takes no --next"},
		{[]string{"run", "42", "--agent", "a b", "--", "make"}, "--agent must be"},
	} {
		h := newHarness(t, "git@forge.example:acme/widgets.git")
		f := newFakeSidecar(t, h)
		if r := h.run(c.args...); r.code != 1 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%q: %+v, want %q", c.args, r, c.want)
		}
		if f.runs() != 0 {
			t.Errorf("%q: ssh ran", c.args)
		}
	}
}

// The default agent is "<short host name>-<pid>", made a valid name.
func TestDefaultAgent(t *testing.T) {
	for _, c := range []struct {
		host string
		want string
	}{
		{"box.example.org", "box-4242"},
		{"box", "box-4242"},
		{"", "host-4242"},
		{"-weird host!", "weird-host--4242"},
		{strings.Repeat("a", 50) + ".x", strings.Repeat("a", 35) + "-4242"},
	} {
		if got := defaultAgent(c.host, 4242); got != c.want {
			t.Errorf("%q: %q, want %q", c.host, got, c.want)
		}
	}
}

// ssh asks after a third of the grace without a word from the sidecar
// (rounded, at least a second) and gives up a third later: about two
// thirds of the grace from the last sign of life to a resume.
func TestAliveOptionsAskEveryThirdOfTheGrace(t *testing.T) {
	for _, c := range []struct {
		grace string
		every string
	}{
		{"", "10"}, {"30s", "10"}, {"5s", "2"}, {"7s", "2"}, {"8s", "3"}, {"2s", "1"}, {"1h", "1200"}, {"bad", "10"},
	} {
		got := sessionArgs{grace: c.grace}.aliveOptions()
		want := []string{"-o", "ServerAliveInterval=" + c.every, "-o", "ServerAliveCountMax=1"}
		if !slices.Equal(got, want) {
			t.Errorf("grace %q: %q, want %q", c.grace, got, want)
		}
	}
}

// gitCollabInRun readies h for commands of git collab run that call git
// collab: "$BIN" is git collab (this test binary), "$REPO" the checkout.
func (h *harness) gitCollabInRun() {
	h.t.Helper()
	bin, err := os.Executable()
	if err != nil {
		h.t.Fatal(err)
	}
	h.setenv(asGitCollabEnv+"=1", "GORACE=atexit_sleep_ms=0", "REPO="+h.repo, "BIN="+bin)
}

// The command's own git collab calls that read ride run's session: no
// ssh of their own, and the same answer as over ssh (--json: the exec's
// line, without the session's "exit"). A stale token is exit 4 as ever.
// Another agent's call, and one that writes, go over ssh.
func TestRunsCommandReadsOverItsSession(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	f := newFakeSidecar(t, h)
	h.gitCollabInRun()
	script := `cd "$REPO" || exit 9
"$BIN" check --json; echo "json: $?"
"$BIN" check 42 --token 7; echo "stale: $?"
"$BIN" claims --json; echo "claims: $?"
"$BIN" check --agent other 2>/dev/null; echo "other agent: $?"
"$BIN" renew 42 --ttl 1m 2>/dev/null; echo "renew: $?"
cd / && "$BIN" check --json; echo "own claim, outside the checkout: $?"
COLLAB_ISSUE=43 "$BIN" check --json 2>/dev/null; echo "not the run's claim, outside the checkout: $?"`
	r := h.run("run", "42", "--agent", "a1", "--", "sh", "-c", script)
	want := `{"status":"current","repo":"acme/widgets","issue":42,"holder":"alice","agent":"a1","token":1,"acquired_at":"2026-09-05T11:35:00Z","expires_at":null,"reservations":[]}
json: 0
stale: 4
{"repo":"acme/widgets","leases":[{"issue":42,"holder":"alice","agent":"a1","token":1,"acquired_at":"2026-09-05T11:35:00Z","expires_at":null}]}
claims: 0
other agent: 1
renew: 1
{"status":"current","repo":"acme/widgets","issue":42,"holder":"alice","agent":"a1","token":1,"acquired_at":"2026-09-05T11:35:00Z","expires_at":null,"reservations":[]}
own claim, outside the checkout: 0
not the run's claim, outside the checkout: 1
`
	if r.code != 0 || r.stdout != want {
		t.Fatalf("exit %d, stdout:\n%s\nwant:\n%s\nstderr: %s", r.code, r.stdout, want, r.stderr)
	}
	if got, want := f.received(), []string{"acquire 'acme/widgets' '42'", "check 'acme/widgets' '42' --token '1'",
		"check 'acme/widgets' '42' --token '7'", "list 'acme/widgets'", "check 'acme/widgets' '42' --token '1'", "release 'acme/widgets' '42'"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("the session received %q, want %q", got, want)
	}
	// The session's ssh, and one each for the other agent's check and the
	// renew (which the fake sidecar, a sidecar of sessions only, refuses);
	// the check of another issue outside the checkout has no remote to
	// reach a sidecar by.
	if f.runs() != 3 {
		t.Fatalf("%d ssh runs, want 3", f.runs())
	}
}

func TestExecStdout(t *testing.T) {
	for in, want := range map[string]string{
		`{"status":"current","token":3,"exit":0}`:         `{"status":"current","token":3}` + "\n",
		`{"status":"stale","token":null,"exit":4}` + "\n": `{"status":"stale","token":null}` + "\n",
		`{"exit":0}`:                    `{}` + "\n",
		`{"note":"\"exit\":1 x","a":1}`: `{"note":"\"exit\":1 x","a":1}` + "\n",
		`not json`:                      "not json\n",
	} {
		if got := string(execStdout([]byte(in))); got != want {
			t.Errorf("execStdout(%s) = %q, want %q", in, got, want)
		}
	}
}

// run --reserve reserves its globs with the claim, from where it runs,
// before the command starts: the command's own reservations and check
// ride the session and show them, and they end with the claim.
func TestRunReservesWithItsClaim(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	f := newFakeSidecar(t, h)
	h.gitCollabInRun()
	script := `cd "$REPO" || exit 9
"$BIN" reservations; echo "reservations: $?"
"$BIN" check; echo "check: $?"`
	r := h.run("run", "42", "--reserve", "src/auth/**", "--agent", "a1", "--reserve=:/docs/", "--", "sh", "-c", script)
	want := `src/auth/** · alice · a1 · #42 · no expiry
docs/ · alice · a1 · #42 · no expiry
reservations: 0
token 1 is current: acme/widgets#42 held by alice/a1 (open-ended)
  reserved: src/auth/** · alice · a1 · #42 · no expiry
  reserved: docs/ · alice · a1 · #42 · no expiry
check: 0
`
	wantErr := "git-collab: reserved src/auth/** · alice · a1 · #42 · no expiry\ngit-collab: reserved docs/ · alice · a1 · #42 · no expiry\n" +
		"git-collab: claimed acme/widgets#42 (token 1); running sh\n"
	if r.code != 0 || r.stdout != want || r.stderr != wantErr {
		t.Fatalf("exit %d, stdout:\n%s\nwant:\n%s\nstderr:\n%s\nwant:\n%s", r.code, r.stdout, want, r.stderr, wantErr)
	}
	if got, want := f.received(), []string{"acquire 'acme/widgets' '42'", "reserve 'acme/widgets' 'src/auth/**' 'docs/' --issue '42'",
		"reservations 'acme/widgets'", "check 'acme/widgets' '42' --token '1'", "release 'acme/widgets' '42'"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("the session received %q, want %q", got, want)
	}
	if f.runs() != 1 {
		t.Fatalf("%d ssh runs, want the session's alone", f.runs())
	}
}

// A reserve that is refused undoes the claim run just made: run names the
// reservation in the way, releases the claim and exits 4, and the command
// never starts.
func TestRunReleasesItsClaimWhenTheReserveIsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	f := newFakeSidecar(t, h)
	f.set(func() { f.bobs["src/auth/**"] = true })
	marker := filepath.Join(t.TempDir(), "ran")
	r := h.run("run", "42", "--reserve", "src/auth/**", "--reserve", "docs/", "--", "touch", marker)
	want := result{"", "not reserved: src/auth/** is reserved by bob · b1 for acme/widgets#12 until 12:05 UTC\n" +
		"git-collab: released acme/widgets#42; the command did not start\n", 4}
	if r != want {
		t.Fatalf("%+v, want %+v", r, want)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran")
	}
	if got, want := f.received(), []string{"acquire 'acme/widgets' '42'", "reserve 'acme/widgets' 'src/auth/**' 'docs/' --issue '42'",
		"release 'acme/widgets' '42'"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("the session received %q, want %q", got, want)
	}
	if f.claimed(42) {
		t.Fatal("still claimed")
	}
	// A glob above the root is refused before anything is claimed.
	r = h.run("run", "42", "--reserve", "../x", "--", "touch", marker)
	if r.code != 1 || !strings.Contains(r.stderr, `"../x" is above the repository's root`) || f.runs() != 1 {
		t.Fatalf("%+v, %d ssh runs", r, f.runs())
	}
}
