package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// These tests run git-collab's whole path (real git reading a real
// repository, sh running the ssh command string as git would) with a fake
// ssh that records its arguments and answers what the test says. The real
// sidecar and OpenSSH are in integration/gitcollab_e2e_test.go.

// fakeSSH is an executable in a directory whose name has a space, so the
// command string must be run by a shell to work at all. It appends each of
// its arguments as a line to $FAKE_LOG, then prints $FAKE_STDOUT and
// $FAKE_STDERR as they are and exits with $FAKE_CODE.
const fakeSSH = `#!/bin/sh
for a in "$@"; do printf '%s\n' "$a" >>"$FAKE_LOG"; done
printf '%s' "$FAKE_STDOUT"
printf '%s' "$FAKE_STDERR" >&2
exit "${FAKE_CODE:-0}"
`

type harness struct {
	t    *testing.T
	repo string // a git work tree
	ssh  string // the fake ssh's path
	log  string
	env  []string
}

// newHarness makes a repository whose origin is remoteURL, and an
// environment that knows nothing of the developer's git config or ssh.
func newHarness(t *testing.T, remoteURL string) *harness {
	t.Helper()
	dir := t.TempDir()
	h := &harness{t: t, repo: filepath.Join(dir, "work"), ssh: filepath.Join(dir, "fake ssh", "ssh"), log: filepath.Join(dir, "ssh.log")}
	if err := os.MkdirAll(filepath.Dir(h.ssh), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.ssh, []byte(fakeSSH), 0o755); err != nil {
		t.Fatal(err)
	}
	h.env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "LC_ALL=C",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=" + os.DevNull, "FAKE_LOG=" + h.log,
		"COLLAB_SSH_COMMAND=" + shellQuote(h.ssh) + " -o Fake=yes"}
	h.git("init", "-q", h.repo)
	if remoteURL != "" {
		h.git("-C", h.repo, "remote", "add", "origin", remoteURL)
	}
	return h
}

func (h *harness) git(args ...string) {
	h.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Env = h.env
	if out, err := cmd.CombinedOutput(); err != nil {
		h.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func (h *harness) config(key, value string) { h.git("-C", h.repo, "config", key, value) }

// setenv adds or replaces one variable of the environment git-collab sees.
func (h *harness) setenv(kv ...string) {
	for _, x := range kv {
		k, _, _ := strings.Cut(x, "=")
		env := h.env[:0:0]
		for _, e := range h.env {
			if !strings.HasPrefix(e, k+"=") {
				env = append(env, e)
			}
		}
		h.env = append(env, x)
	}
}

// answer makes the fake ssh reply like the sidecar would.
func (h *harness) answer(code, stdout, stderr string) {
	h.setenv("FAKE_CODE="+code, "FAKE_STDOUT="+stdout, "FAKE_STDERR="+stderr)
}

type result struct {
	stdout, stderr string
	code           int
}

func (h *harness) run(args ...string) result {
	h.t.Helper()
	var out, errb bytes.Buffer
	code := h.app(nil, &out, &errb).run(args)
	return result{out.String(), errb.String(), code}
}

// app is git-collab in h's repository and environment, on the clock of
// the rendering tests.
func (h *harness) app(stdin io.Reader, stdout, stderr io.Writer) *app {
	return &app{stdin: stdin, stdout: stdout, stderr: stderr, env: h.env, now: func() time.Time { return now },
		git: execGit{dir: h.repo, env: h.env}, hostname: "box.example.org", pid: 4242}
}

// sshArgs is what the fake ssh was run with ("" if it was not run).
func (h *harness) sshArgs() []string {
	b, err := os.ReadFile(h.log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

const acquiredJSON = `{"status":"acquired","repo":"acme/widgets","issue":42,"holder":"alice","agent":null,"token":3,"acquired_at":"2026-09-05T11:35:00Z","expires_at":"2026-09-05T12:05:00Z"}` + "\n"

func TestClaimRunsOneQuotedCommandThroughTheUsersSSH(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	h.config("collab.sidecar", "side.example:2200")
	h.answer("0", acquiredJSON, "")
	r := h.run("claim", "#42", "--ttl", "30m")
	if r != (result{"claimed acme/widgets#42 (token 3, expires 12:05 UTC, in 30m)\npush option collab-lease=42:3 set in this checkout\n", "", 0}) {
		t.Fatalf("%+v", r)
	}
	want := []string{"-o", "Fake=yes", "-p", "2200", "git@side.example", "collab-lease acquire 'acme/widgets' '42' --ttl '30m'"}
	if got := h.sshArgs(); !reflect.DeepEqual(got, want) {
		t.Fatalf("ssh ran with %q, want %q", got, want)
	}
}

func TestEachVerbSendsItsCommand(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"claim", "7"}, "collab-lease acquire 'acme/widgets' '7'"},
		{[]string{"renew", "7", "--ttl=2h"}, "collab-lease renew 'acme/widgets' '7' --ttl '2h'"},
		{[]string{"unclaim", "7"}, "collab-lease release 'acme/widgets' '7'"},
		{[]string{"claims"}, "collab-lease list 'acme/widgets'"},
		{[]string{"next"}, "collab-lease next 'acme/widgets'"},
		{[]string{"next", "--label", "good first issue", "--pulls", "--label=it's", "--ttl", "30m"},
			`collab-lease next 'acme/widgets' --label 'good first issue' --pulls --label 'it'\''s' --ttl '30m'`},
		{[]string{"claim", "#7", "--wait", "5m"}, "collab-lease acquire 'acme/widgets' '7' --wait '5m'"},
		{[]string{"check", "7", "--token=3"}, "collab-lease check 'acme/widgets' '7' --token '3'"},
		{[]string{"history", "7"}, "collab-lease history 'acme/widgets' '7'"},
		{[]string{"history", "7", "--limit", "5"}, "collab-lease history 'acme/widgets' '7' --limit '5'"},
		{[]string{"unclaim", "7", "--force"}, "collab-lease release 'acme/widgets' '7' --force"},
		{[]string{"merge", "#7"}, "collab-lease merge 'acme/widgets' '7'"},
		{[]string{"merge", "7", "--token", "3", "--style", "squash", "--delete-branch", "--wait=5m"},
			"collab-lease merge 'acme/widgets' '7' --token '3' --style 'squash' --delete-branch --wait '5m'"},
		{[]string{"reserve", "src/auth/**", "--issue", "7", "docs/it's.md", "--shared"},
			`collab-lease reserve 'acme/widgets' 'src/auth/**' 'docs/it'\''s.md' --issue '7' --shared`},
		{[]string{"reserve", "./src/./a/../b/", "--ttl", "1h"}, "collab-lease reserve 'acme/widgets' 'src/b/' --ttl '1h'"},
		{[]string{"unreserve"}, "collab-lease unreserve 'acme/widgets'"},
		{[]string{"unreserve", "src/**", "--issue=7", "--force"}, "collab-lease unreserve 'acme/widgets' 'src/**' --issue '7' --force"},
		{[]string{"reservations"}, "collab-lease reservations 'acme/widgets'"},
		{[]string{"reservations", "--path", "src/a.go"}, "collab-lease reservations 'acme/widgets' --path 'src/a.go'"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, "ssh://alice@forge.example:22/gitea/acme/widgets.git")
			h.answer("0", "{}", "")
			h.run(append(c.args, "--json")...)
			// The sidecar is on the remote's host, port 2222, as the
			// URL's user.
			if got := h.sshArgs(); len(got) != 6 || got[3] != "2222" || got[4] != "alice@forge.example" || got[5] != c.want {
				t.Fatalf("ssh ran with %q", got)
			}
		})
	}
}

func TestJSONIsTheSidecarsBytesAndExitStatus(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		code, stdout, stderr string
		exit                 int
	}{
		{"0", acquiredJSON, "", 0},
		{"4", `{"status":"held","repo":"acme/widgets","issue":42,"holder":"bob","agent":null,"expires_at":null}` + "\n", "", 4},
		{"0", "  {\"odd\":  1}\n\n", "", 0}, // not even valid for the verb: still unchanged
		{"1", "", "error: issue not found\n", 1},
		{"75", "", "error: forge unavailable, try again\n", 75},
	} {
		h := newHarness(t, "git@forge.example:acme/widgets.git")
		h.answer(c.code, c.stdout, c.stderr)
		r := h.run("claim", "42", "--json")
		if r != (result{c.stdout, c.stderr, c.exit}) {
			t.Errorf("exit %s: got %+v", c.code, r)
		}
	}
	// The agent verbs' replies too, exit 4 included.
	for _, c := range []struct {
		args         []string
		code, stdout string
		exit         int
	}{
		{[]string{"next", "--ttl", "30m"}, "0", acquiredJSON, 0},
		{[]string{"next"}, "4", `{"status":"none","repo":"acme/widgets"}` + "\n", 4},
		{[]string{"claim", "42", "--wait", "1m"}, "4", `{"status":"held","repo":"acme/widgets","issue":42,"holder":"bob","agent":null,"expires_at":null}` + "\n", 4},
		{[]string{"check", "42", "--token", "3"}, "0", strings.Replace(acquiredJSON, "acquired", "current", 1), 0},
		{[]string{"check", "42", "--token", "3"}, "4", `{"status":"stale","repo":"acme/widgets","issue":42,"token":null}` + "\n", 4},
		{[]string{"history", "42"}, "0", `{"repo":"acme/widgets","issue":42,"tenures":[]}` + "\n", 0},
		{[]string{"unclaim", "42", "--force"}, "0", `{"status":"released","repo":"acme/widgets","issue":42}` + "\n", 0},
		{[]string{"unclaim", "42", "--force"}, "1", "", 1},
		{[]string{"next"}, "75", "", 75},
		{[]string{"merge", "7"}, "0", `{"status":"merged","repo":"acme/widgets","pull":7,"sha":"6f1c0e2d","issue":7,"token":3}` + "\n", 0},
		{[]string{"merge", "7"}, "4", `{"status":"refused","repo":"acme/widgets","pull":7,"reason":"merge conflict"}` + "\n", 4},
		{[]string{"merge", "7"}, "4", `{"status":"busy","repo":"acme/widgets","pull":7,"ahead":3}` + "\n", 4},
		{[]string{"merge", "7", "--token", "2"}, "4", `{"status":"stale","repo":"acme/widgets","issue":42,"token":3}` + "\n", 4},
		{[]string{"merge", "7"}, "4", `{"status":"not_holder","repo":"acme/widgets","issue":7,"holder":null,"agent":null,"expires_at":null}` + "\n", 4},
		{[]string{"merge", "7"}, "75", "", 75},
		{[]string{"reserve", "src/**", "--issue", "7"}, "0", `{"status":"reserved","repo":"acme/widgets","reservations":[]}` + "\n", 0},
		{[]string{"reserve", "src/**", "--ttl", "1h"}, "4", `{"status":"conflict","repo":"acme/widgets","with":[]}` + "\n", 4},
		{[]string{"reserve", "src/**", "--issue", "7"}, "4", `{"status":"not_holder","repo":"acme/widgets","issue":7,"holder":null,"agent":null,"expires_at":null}` + "\n", 4},
		{[]string{"unreserve"}, "0", `{"status":"unreserved","repo":"acme/widgets","reservations":[]}` + "\n", 0},
		{[]string{"reservations"}, "0", `{"status":"reservations","repo":"acme/widgets","reservations":[]}` + "\n", 0},
		{[]string{"reservations"}, "75", "", 75},
	} {
		h := newHarness(t, "git@forge.example:acme/widgets.git")
		h.answer(c.code, c.stdout, "")
		if r := h.run(append(c.args, "--json")...); r != (result{c.stdout, "", c.exit}) {
			t.Errorf("%q exit %s: got %+v", c.args, c.code, r)
		}
	}
}

// Globs and --path given in a subdirectory of the checkout are read from
// there, as git reads a pathspec: relative to it, or from the root after
// ":/"; one above the root is refused, and nothing is sent.
func TestPathsAreReadFromWhereGitCollabRuns(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	sub := filepath.Join(h.repo, "src", "auth")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	h.answer("0", `{"status":"reservations","repo":"acme/widgets","reservations":[]}`+"\n", "")
	in := func(dir string, args ...string) result {
		t.Helper()
		var out, errb bytes.Buffer
		a := h.app(nil, &out, &errb)
		a.git = execGit{dir: dir, env: h.env}
		code := a.run(args)
		return result{out.String(), errb.String(), code}
	}
	for _, c := range []struct {
		dir  string
		args []string
		want string
	}{
		{sub, []string{"reserve", "login.go", "*.md", ".", "../", ":/docs/", "../../lib/**", "--ttl", "1h"},
			"collab-lease reserve 'acme/widgets' 'src/auth/login.go' 'src/auth/*.md' 'src/auth/' 'src/' 'docs/' 'lib/**' --ttl '1h'"},
		{sub, []string{"unreserve", "**"}, "collab-lease unreserve 'acme/widgets' 'src/auth/**'"},
		{sub, []string{"reservations", "--path", "../a.go"}, "collab-lease reservations 'acme/widgets' --path 'src/a.go'"},
		{sub, []string{"reservations", "--path", ":/README.md"}, "collab-lease reservations 'acme/widgets' --path 'README.md'"},
		{h.repo, []string{"reserve", ".", "--ttl", "1h"}, "collab-lease reserve 'acme/widgets' '**' --ttl '1h'"},
		{sub, []string{"reserve", ":/", "--ttl", "1h"}, "collab-lease reserve 'acme/widgets' '**' --ttl '1h'"},
	} {
		os.Remove(h.log)
		in(c.dir, c.args...)
		if got := h.sshArgs(); len(got) != 6 || got[5] != c.want {
			t.Errorf("%q in %s: ssh ran with %q, want %q", c.args, c.dir, got, c.want)
		}
	}
	os.Remove(h.log)
	for _, args := range [][]string{
		{"reserve", "../../../x", "--ttl", "1h"},
		{"reservations", "--path", "../../.."},
	} {
		r := in(sub, args...)
		if r.code != 1 || r.stdout != "" || !strings.HasPrefix(r.stderr, "git-collab: ") || !strings.Contains(r.stderr, "is above the repository's root") ||
			strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%q: %+v", args, r)
		}
	}
	for _, c := range []struct {
		dir  string
		path string
	}{{h.repo, "."}, {sub, "../.."}, {sub, ":/"}} {
		r := in(c.dir, "reservations", "--path", c.path)
		if r.code != 1 || r.stdout != "" || !strings.HasPrefix(r.stderr, "git-collab: ") || !strings.Contains(r.stderr, "names the repository's root") ||
			strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("--path %q in %s: %+v", c.path, c.dir, r)
		}
	}
	if got := h.sshArgs(); got != nil {
		t.Fatalf("ssh ran with %q", got)
	}
}

func TestHumanOutputAndExitStatus(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args                 []string
		code, stdout, stderr string
		want                 result
	}{
		{[]string{"claim", "42"}, "4", `{"status":"held","repo":"acme/widgets","issue":42,"holder":"bob","agent":null,"expires_at":"2026-09-05T12:05:00Z"}` + "\n", "",
			result{"", "acme/widgets#42 is claimed by bob until 12:05 UTC\n", 4}},
		{[]string{"unclaim", "42"}, "0", `{"status":"released","repo":"acme/widgets","issue":42}` + "\n", "",
			result{"released acme/widgets#42\n", "", 0}},
		{[]string{"claims"}, "0", `{"repo":"acme/widgets","leases":[]}` + "\n", "",
			result{"no claims on acme/widgets\n", "", 0}},
		// The agent verbs: exit 0 on stdout, exit 4 (an answer) on stderr.
		{[]string{"next", "--ttl", "30m"}, "0", strings.Replace(acquiredJSON, `"issue":42`, `"issue":7`, 1), "",
			result{"claimed acme/widgets#7 (token 3, expires 12:05 UTC, in 30m)\npush option collab-lease=7:3 set in this checkout\n", "", 0}},
		{[]string{"next", "--label", "bug"}, "4", `{"status":"none","repo":"acme/widgets"}` + "\n", "",
			result{"", "nothing to claim in acme/widgets\n", 4}},
		{[]string{"check", "7", "--token", "3"}, "0", `{"status":"current","repo":"acme/widgets","issue":7,"holder":"alice","agent":null,"token":3,"acquired_at":"2026-09-05T11:35:00Z","expires_at":null}` + "\n", "",
			result{"token 3 is current: acme/widgets#7 held by alice (open-ended)\n", "", 0}},
		{[]string{"check", "7", "--token", "3"}, "4", `{"status":"stale","repo":"acme/widgets","issue":7,"token":5}` + "\n", "",
			result{"", "token 3 is stale: acme/widgets#7 is now at token 5\n", 4}},
		{[]string{"history", "7"}, "0", `{"repo":"acme/widgets","issue":7,"tenures":[{"token":1,"holder":"alice","agent":null,"acquired_at":"2026-09-05T11:00:00Z","ended_at":null,"ended_by":null}]}` + "\n", "",
			result{"TOKEN  HOLDER  ACQUIRED   ENDED  HOW\n1      alice   11:00 UTC  live\n", "", 0}},
		{[]string{"unclaim", "7", "--force"}, "1", "", "error: admin access to acme/widgets is required\n",
			result{"", "error: admin access to acme/widgets is required\n", 1}},
		{[]string{"merge", "7"}, "0", `{"status":"merged","repo":"acme/widgets","pull":7,"sha":"6f1c0e2d","issue":7,"token":3}` + "\n", "waiting: 1 ahead of you\nwaiting: 0 ahead of you\n",
			result{"merged acme/widgets!7 under token 3: 6f1c0e2d\n", "waiting: 1 ahead of you\nwaiting: 0 ahead of you\n", 0}},
		{[]string{"merge", "7", "--wait", "10m"}, "4", `{"status":"busy","repo":"acme/widgets","pull":7,"ahead":1}` + "\n", "",
			result{"", "not merged: acme/widgets!7 did not get its turn within 10m (1 merge ahead); merge again later, or with a longer --wait\n", 4}},
		{[]string{"merge", "7"}, "75", "", "error: forge unavailable, try again\n", result{"", "error: forge unavailable, try again\n", 75}},
		{[]string{"reserve", "src/**", "--ttl", "1h"}, "4", `{"status":"conflict","repo":"acme/widgets","with":[{"glob":"src/auth/**","shared":false,"holder":"bot","agent":"agent-3","issue":12,"expires_at":"2026-09-05T12:05:00Z"}]}` + "\n", "",
			result{"", "not reserved: src/auth/** is reserved by bot · agent-3 for acme/widgets#12 until 12:05 UTC\n", 4}},
		{[]string{"reserve", "src/**", "--issue", "12"}, "0", `{"status":"reserved","repo":"acme/widgets","reservations":[{"glob":"src/**","shared":false,"holder":"bot","agent":null,"issue":12,"expires_at":null}]}` + "\n", "",
			result{"reserved src/** · bot · #12 · no expiry\n", "", 0}},
		// Server errors pass through as they are.
		{[]string{"claim", "99999"}, "1", "", "error: issue not found\n", result{"", "error: issue not found\n", 1}},
		{[]string{"claim", "42"}, "75", "", "error: forge unavailable, try again\n", result{"", "error: forge unavailable, try again\n", 75}},
		// A reply git-collab cannot read is shown as it is, under the
		// sidecar's exit status.
		{[]string{"claim", "42"}, "0", "hello\n", "", result{"hello\n",
			"git-collab: could not read the reply of the sidecar at forge.example:2222: not the JSON reply expected: invalid character 'h' looking for beginning of value\n", 0}},
	} {
		h := newHarness(t, "git@forge.example:acme/widgets.git")
		h.answer(c.code, c.stdout, c.stderr)
		if r := h.run(c.args...); r != c.want {
			t.Errorf("%q: got %+v, want %+v", c.args, r, c.want)
		}
	}
}

func TestSSHFailureKeepsItsStatusAndAddsAHint(t *testing.T) {
	t.Parallel()
	refused := "ssh: connect to host side.example port 2200: Connection refused\n"
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	h.config("collab.sidecar", "side.example:2200")
	h.answer("255", "", refused)
	for _, json := range []bool{false, true} {
		args := []string{"claim", "42"}
		if json {
			args = append(args, "--json")
		}
		r := h.run(args...)
		want := refused + "git-collab: could not reach the sidecar at side.example:2200 over ssh (address from git config collab.sidecar); " +
			"check git config collab.sidecar (host:port)\n"
		if r != (result{"", want, 255}) {
			t.Errorf("json %v: %+v", json, r)
		}
	}

	h = newHarness(t, "git@forge.example:acme/widgets.git")
	h.answer("255", "", refused)
	r := h.run("claims")
	if r.code != 255 || !strings.HasSuffix(r.stderr, `git-collab: could not reach the sidecar at forge.example:2222 over ssh (address from the host of remote "origin"); `+
		"set git config collab.sidecar host:port or COLLAB_SIDECAR\n") {
		t.Errorf("%+v", r)
	}

	h = newHarness(t, "git@forge.example:acme/widgets.git")
	h.setenv("COLLAB_SIDECAR=10.1.2.3")
	h.answer("255", "", refused)
	r = h.run("claims")
	if r.code != 255 || !strings.HasSuffix(r.stderr, "git-collab: could not reach the sidecar at 10.1.2.3:2222 over ssh (address from COLLAB_SIDECAR); "+
		"check COLLAB_SIDECAR (host:port)\n") {
		t.Errorf("%+v", r)
	}

	h = newHarness(t, "git@forge.example:acme/widgets.git")
	h.setenv("COLLAB_SSH_COMMAND=no-such-ssh-command-here")
	r = h.run("claims")
	if r.code != 127 || !strings.Contains(r.stderr, "git-collab: could not run the ssh command from COLLAB_SSH_COMMAND (exit status 127)") {
		t.Errorf("%+v", r)
	}
}

func TestTheSSHCommandIsChosenAsGitWould(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		env     []string
		core    string
		tagWant string
	}{
		{"COLLAB_SSH_COMMAND", []string{"GIT_SSH_COMMAND=F -o Tag=git-ssh-command"}, "F -o Tag=core", "Fake=yes"},
		{"GIT_SSH_COMMAND", []string{"COLLAB_SSH_COMMAND=", "GIT_SSH_COMMAND=F -o Tag=git-ssh-command"}, "F -o Tag=core", "Tag=git-ssh-command"},
		{"core.sshCommand", []string{"COLLAB_SSH_COMMAND="}, "F -o Tag=core", "Tag=core"},
		{"GIT_SSH", []string{"COLLAB_SSH_COMMAND=", "GIT_SSH=F"}, "", "-p"}, // a program: no options of its own
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, "git@forge.example:acme/widgets.git")
			q := shellQuote(h.ssh)
			for _, kv := range c.env {
				if strings.HasPrefix(kv, "GIT_SSH=") {
					h.setenv("GIT_SSH=" + h.ssh)
				} else {
					h.setenv(strings.Replace(kv, "=F ", "="+q+" ", 1))
				}
			}
			if c.core != "" {
				h.config("core.sshCommand", strings.Replace(c.core, "F ", q+" ", 1))
			}
			h.answer("0", `{"repo":"acme/widgets","leases":[]}`, "")
			if r := h.run("claims"); r.code != 0 {
				t.Fatalf("%+v", r)
			}
			if got := h.sshArgs(); len(got) < 2 || (got[1] != c.tagWant && got[0] != c.tagWant) {
				t.Fatalf("ssh ran with %q, want %s", got, c.tagWant)
			}
		})
	}
}

func TestRepositoryAndSidecarFromGitAndEnvironment(t *testing.T) {
	t.Parallel()
	// --remote picks another remote; a sub-path https URL names owner/repo
	// by its last two segments; COLLAB_SIDECAR is used without git config.
	h := newHarness(t, "git@forge.example:acme/widgets.git")
	h.git("-C", h.repo, "remote", "add", "upstream", "https://forge.example/gitea/acme/gadgets")
	h.setenv("COLLAB_SIDECAR=127.0.0.1:40022")
	h.answer("0", `{"repo":"acme/gadgets","leases":[]}`, "")
	r := h.run("claims", "--remote", "upstream")
	if r != (result{"no claims on acme/gadgets\n", "", 0}) {
		t.Fatalf("%+v", r)
	}
	if got := h.sshArgs(); !reflect.DeepEqual(got[2:], []string{"-p", "40022", "git@127.0.0.1", "collab-lease list 'acme/gadgets'"}) {
		t.Fatalf("ssh ran with %q", got)
	}

	// git's url.<base>.insteadOf rewriting applies.
	h = newHarness(t, "forge:acme/widgets")
	h.config("url.ssh://git@forge.example:22/.insteadOf", "forge:")
	h.answer("0", `{"repo":"acme/widgets","leases":[]}`, "")
	if r := h.run("claims"); r.code != 0 {
		t.Fatalf("%+v", r)
	}
	if got := h.sshArgs(); got[4] != "git@forge.example" {
		t.Fatalf("ssh ran with %q", got)
	}
}

func TestLocalMistakesSendNothing(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		remote string
		args   []string
		stderr string
	}{
		{"a local path remote", "/srv/git/acme/widgets.git", []string{"claim", "42"},
			`git-collab: cannot tell where the collab-lease sidecar is: remote "origin" is a local path, not a forge; set git config collab.sidecar host:port or COLLAB_SIDECAR` + "\n"},
		{"no such remote", "git@forge.example:acme/widgets.git", []string{"claim", "42", "--remote", "nope"},
			`git-collab: no remote "nope" in this repository; name one with --remote <name>` + "\n"},
		{"a URL without owner/repo", "git@forge.example:widgets.git", []string{"claims"},
			`git-collab: remote "origin": remote URL "git@forge.example:widgets.git": path "widgets.git" does not end in <owner>/<repo>` + "\n"},
		{"a bad issue", "git@forge.example:acme/widgets.git", []string{"claim", "4'2"},
			`git-collab: issue must be a positive number like 42 or #42, got "4'2"` + "\n"},
		{"a bad token", "git@forge.example:acme/widgets.git", []string{"check", "7", "--token", "3x"},
			`git-collab: --token must be a positive number, got "3x"` + "\n"},
		{"a bad limit", "git@forge.example:acme/widgets.git", []string{"history", "7", "--limit", "1000"},
			`git-collab: --limit "1000" is more than the maximum of 200` + "\n"},
		{"a bad label", "git@forge.example:acme/widgets.git", []string{"next", "--label", "a,b"},
			`git-collab: --label "a,b" may not contain a comma; give --label once per label` + "\n"},
		{"a bad wait", "git@forge.example:acme/widgets.git", []string{"claim", "7", "--wait", "1.5s"},
			`git-collab: --wait "1.5s" must be a whole number of seconds` + "\n"},
		{"a bad sidecar setting", "git@forge.example:acme/widgets.git", []string{"claims"},
			`git-collab: git config collab.sidecar "side example": host "side example" is not a host name; expected host:port` + "\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, c.remote)
			if c.name == "a bad sidecar setting" {
				h.config("collab.sidecar", "side example")
			}
			if r := h.run(c.args...); r != (result{"", c.stderr, 1}) {
				t.Fatalf("got %+v\nwant stderr %q", r, c.stderr)
			}
			if h.sshArgs() != nil {
				t.Fatal("ssh ran")
			}
		})
	}

	h := newHarness(t, "")
	h.repo = t.TempDir() // not a repository
	r := h.run("claims")
	if r.code != 1 || r.stderr != "git-collab: not inside a git repository; run git collab in a checkout of the repository\n" {
		t.Fatalf("%+v", r)
	}
}

func TestHelpNeedsNoRepository(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.repo = t.TempDir()
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}} {
		if r := h.run(args...); r.code != 0 || r.stdout != mainHelp() || r.stderr != "" {
			t.Errorf("%q: %+v", args, r)
		}
	}
	for _, v := range verbs {
		for _, args := range [][]string{{v.name, "--help"}, {v.name, "-h"}, {"help", v.name}} {
			if r := h.run(args...); r.code != 0 || r.stdout != verbHelp(findVerb(v.name)) {
				t.Errorf("%q: %+v", args, r)
			}
		}
	}
	if r := h.run("help", "--man"); r.code != 0 || !strings.HasPrefix(r.stdout, ".TH GIT-COLLAB 1") {
		t.Errorf("man: %+v", r)
	}
	if r := h.run(); r.code != 1 || !strings.Contains(r.stderr, "missing command; see git collab -h") {
		t.Errorf("no arguments: %+v", r)
	}
}

// Every command acts as COLLAB_AGENT, unless --agent names another; a bad
// name sends nothing.
func TestCommandsActAsTheAgent(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  string
		args []string
		want string
	}{
		{"COLLAB_AGENT=agent-7", []string{"claim", "7"}, "collab-lease acquire 'acme/widgets' '7' --agent 'agent-7'"},
		{"COLLAB_AGENT=agent-7", []string{"claims"}, "collab-lease list 'acme/widgets' --agent 'agent-7'"},
		{"COLLAB_AGENT=agent-7", []string{"next", "--agent", "other"}, "collab-lease next 'acme/widgets' --agent 'other'"},
		{"COLLAB_AGENT=", []string{"unclaim", "7", "--agent=a.1"}, "collab-lease release 'acme/widgets' '7' --agent 'a.1'"},
		{"COLLAB_AGENT=", []string{"claim", "7"}, "collab-lease acquire 'acme/widgets' '7'"},
		{"COLLAB_AGENT=agent-7", []string{"merge", "7", "--style", "rebase"}, "collab-lease merge 'acme/widgets' '7' --style 'rebase' --agent 'agent-7'"},
	} {
		t.Run(c.env+" "+strings.Join(c.args, " "), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, "ssh://alice@forge.example:22/gitea/acme/widgets.git")
			h.setenv(c.env)
			h.answer("0", "{}", "")
			h.run(append(c.args, "--json")...)
			if got := h.sshArgs(); len(got) != 6 || got[5] != c.want {
				t.Fatalf("ssh ran with %q, want %q", got, c.want)
			}
		})
	}
	h := newHarness(t, "ssh://alice@forge.example:22/gitea/acme/widgets.git")
	h.setenv("COLLAB_AGENT=no spaces")
	r := h.run("claim", "7")
	if r.code != 1 || !strings.Contains(r.stderr, "--agent must be") || h.sshArgs() != nil {
		t.Fatalf("a bad COLLAB_AGENT: %+v, ssh %q", r, h.sshArgs())
	}
}

// Under git collab run, check with no arguments checks the run's claim:
// COLLAB_TOKEN on COLLAB_ISSUE of COLLAB_REPO, as COLLAB_AGENT.
func TestCheckWithNoArgumentsChecksTheRunsClaim(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "git@forge.example:acme/other.git")
	h.setenv("COLLAB_REPO=acme/widgets", "COLLAB_ISSUE=42", "COLLAB_TOKEN=3", "COLLAB_AGENT=box-4242")
	h.answer("0", strings.Replace(acquiredJSON, "acquired", "current", 1), "")
	r := h.run("check")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "token 3 is current: acme/widgets#42") {
		t.Fatalf("%+v", r)
	}
	if got := h.sshArgs(); got[len(got)-1] != "collab-lease check 'acme/widgets' '42' --token '3' --agent 'box-4242'" {
		t.Fatalf("ssh ran with %q", got)
	}

	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"COLLAB_ISSUE="}, "check needs <issue> and --token <n>, or COLLAB_ISSUE and COLLAB_TOKEN (git collab run sets them)"},
		{[]string{"COLLAB_TOKEN="}, "check needs <issue> and --token <n>, or COLLAB_ISSUE and COLLAB_TOKEN"},
		{[]string{"COLLAB_ISSUE=x"}, "COLLAB_ISSUE: issue must be a positive number"},
		{[]string{"COLLAB_TOKEN=0"}, "--token must be a positive number"},
		{[]string{"COLLAB_REPO=nope"}, "COLLAB_REPO: "},
	} {
		h := newHarness(t, "git@forge.example:acme/widgets.git")
		h.setenv("COLLAB_ISSUE=42", "COLLAB_TOKEN=3")
		h.setenv(c.env...)
		if r := h.run("check"); r.code != 1 || !strings.Contains(r.stderr, c.want) || h.sshArgs() != nil {
			t.Errorf("%q: %+v, want %q", c.env, r, c.want)
		}
	}
}
