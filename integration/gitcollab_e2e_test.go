package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// End-to-end tests of the git-collab client: real git runs `git collab`
// (the built cmd/git-collab on PATH), which runs the real OpenSSH client
// against a real sidecar serving the shared Gitea.

var gitCollabBuild struct {
	once sync.Once
	bin  string // <dir>/bin/git-collab
	err  error
}

// buildGitCollab builds cmd/git-collab once per run, into a bin/ directory
// of the shared fixture's directory (removed by TestMain).
func buildGitCollab(t *testing.T) string {
	t.Helper()
	shared(t)
	gitCollabBuild.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		bin, err := BuildGitCollab(ctx, filepath.Join(fixture.dir, "git-collab", "bin"))
		if err != nil {
			gitCollabBuild.err = err
			return
		}
		gitCollabBuild.bin = bin
	})
	if gitCollabBuild.err != nil {
		t.Fatal(gitCollabBuild.err)
	}
	return gitCollabBuild.bin
}

// checkout is a git repository whose user runs `git collab` as one seeded
// user, with ssh set up the way a user would: a key, a known_hosts file.
type checkout struct {
	t   *testing.T
	dir string
	env []string
}

// How a checkout tells git-collab which ssh to run.
const (
	viaCoreSSHCommand = "core.sshCommand"
	viaEnv            = "COLLAB_SSH_COMMAND"
)

// newCheckout makes a repository whose origin is remoteURL and whose
// collab.sidecar is s, for user u (sshVia says where the ssh command
// string goes).
func newCheckout(t *testing.T, s *Sidecar, u *User, remoteURL, sshVia string) *checkout {
	t.Helper()
	bin := buildGitCollab(t)
	home := t.TempDir()
	c := &checkout{t: t, dir: filepath.Join(home, "widgets"), env: CheckoutEnv(home, filepath.Dir(bin))}
	c.git("init", "-q", c.dir)
	c.git("remote", "add", "origin", remoteURL)
	if s != nil {
		c.git("config", "collab.sidecar", s.SSHAddr)
	}
	if u != nil {
		ssh := s.SSHCommand(u.Key.Path)
		switch sshVia {
		case viaCoreSSHCommand:
			c.git("config", "core.sshCommand", ssh)
		case viaEnv:
			c.env = append(c.env, "COLLAB_SSH_COMMAND="+ssh)
		default:
			t.Fatalf("sshVia %q", sshVia)
		}
	}
	return c
}

func (c *checkout) git(args ...string) {
	c.t.Helper()
	if r := c.run("git", args...); r.Code != 0 {
		c.t.Fatalf("git %s: %+v", strings.Join(args, " "), r)
	}
}

func (c *checkout) run(name string, args ...string) SSHResult {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = c.dir, c.env
	if _, err := os.Stat(c.dir); err != nil {
		cmd.Dir = "" // git init has not made it yet
	}
	r, err := RunCommand(cmd)
	if err != nil {
		c.t.Fatalf("%s: %v", name, err)
	}
	return r
}

// collab runs `git collab args...` through git.
func (c *checkout) collab(args ...string) SSHResult {
	c.t.Helper()
	return c.run("git", append([]string{"collab"}, args...)...)
}

// leases is what `git collab claims --json` says.
func (c *checkout) leases() contract.List {
	c.t.Helper()
	r := c.collab("claims", "--json")
	expect(c.t, r, 0, "claims --json")
	var l contract.List
	if err := json.Unmarshal([]byte(r.Stdout), &l); err != nil {
		c.t.Fatalf("claims --json: %v: %q", err, r.Stdout)
	}
	return l
}

// hhmm renders an expiry the way git-collab does for today ("12:05 UTC"),
// with the date when it is not today.
func hhmm(t contract.Time) string {
	tt := time.Time(t).UTC()
	if now := time.Now().UTC(); tt.YearDay() != now.YearDay() || tt.Year() != now.Year() {
		return tt.Format("2006-01-02 15:04 UTC")
	}
	return tt.Format("15:04 UTC")
}

func TestGitCollabClaimCycleAgainstGitea(t *testing.T) {
	s, w := newSidecar(t)
	n := fmt.Sprint(w.OpenIssue)
	name := "acme/widgets#" + n
	alice := newCheckout(t, s, w.Alice, "git@127.0.0.1:acme/widgets.git", viaCoreSSHCommand)
	// Bob's clone is over https from a sub-path install; his ssh comes
	// from the environment.
	bob := newCheckout(t, s, w.Bob, "https://127.0.0.1/gitea/acme/widgets", viaEnv)

	r := alice.collab("claim", n, "--ttl", "30m")
	expect(t, r, 0, "alice claims")
	l := alice.leases()
	if len(l.Leases) != 1 || l.Leases[0].Holder != "alice" || l.Leases[0].Token != 1 || l.Leases[0].ExpiresAt == nil {
		t.Fatalf("claims after the claim: %+v", l)
	}
	exp := *l.Leases[0].ExpiresAt
	// The claim also puts its token into the checkout's push options,
	// so that a plain git push carries it (the gate).
	if want := fmt.Sprintf("claimed %s (token 1, expires %s, in 30m)\npush option collab-lease=%s:1 set in this checkout\n", name, hhmm(exp), n); r.Stdout != want || r.Stderr != "" {
		t.Fatalf("claim said %q %q, want %q", r.Stdout, r.Stderr, want)
	}

	r = alice.collab("claims")
	expect(t, r, 0, "claims")
	lines := strings.Split(strings.TrimSuffix(r.Stdout, "\n"), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "ISSUE HOLDER TOKEN EXPIRES" ||
		strings.Join(strings.Fields(lines[1]), " ") != fmt.Sprintf("#%s alice 1 %s (in 30m)", n, hhmm(exp)) {
		t.Fatalf("claims:\n%s", r.Stdout)
	}

	r = bob.collab("claim", "#"+n)
	if r.Code != 4 || r.Stdout != "" || r.Stderr != fmt.Sprintf("%s is claimed by alice until %s\n", name, hhmm(exp)) {
		t.Fatalf("bob's claim: %+v", r)
	}
	r = bob.collab("renew", n, "--ttl", "1h")
	if r.Code != 4 || r.Stderr != fmt.Sprintf("not renewed: %s is claimed by alice until %s\n", name, hhmm(exp)) {
		t.Fatalf("bob's renew: %+v", r)
	}
	r = bob.collab("unclaim", n)
	if r.Code != 4 || r.Stderr != fmt.Sprintf("not released: %s is claimed by alice until %s\n", name, hhmm(exp)) {
		t.Fatalf("bob's unclaim: %+v", r)
	}

	r = alice.collab("renew", n, "--ttl", "2h")
	expect(t, r, 0, "alice renews")
	l = alice.leases()
	moved := time.Time(*l.Leases[0].ExpiresAt).Sub(time.Time(exp))
	if l.Leases[0].Token != 1 || moved < 89*time.Minute || moved > 91*time.Minute {
		t.Fatalf("renew moved the expiry by %s: %+v", moved, l)
	}
	if want := fmt.Sprintf("renewed %s (token 1, expires %s, in 2h)\n", name, hhmm(*l.Leases[0].ExpiresAt)); r.Stdout != want {
		t.Fatalf("renew said %q, want %q", r.Stdout, want)
	}

	r = alice.collab("unclaim", n)
	if r.Code != 0 || r.Stdout != "released "+name+"\npush option collab-lease="+n+":1 removed from this checkout\n" || r.Stderr != "" {
		t.Fatalf("alice's unclaim: %+v", r)
	}
	r = bob.collab("claims")
	if r.Code != 0 || r.Stdout != "no claims on acme/widgets\n" {
		t.Fatalf("claims after the unclaim: %+v", r)
	}
	r = bob.collab("claim", n)
	if r.Code != 0 || r.Stdout != fmt.Sprintf("claimed %s (token 2, open-ended)\npush option collab-lease=%s:2 set in this checkout\n", name, n) {
		t.Fatalf("bob claims the freed issue: %+v", r)
	}
	r = alice.collab("renew", n, "--ttl", "1h")
	if r.Code != 4 || r.Stderr != fmt.Sprintf("not renewed: %s is claimed by bob (open-ended)\n", name) {
		t.Fatalf("alice renews bob's claim: %+v", r)
	}
}

// With --json, git-collab's stdout, stderr and exit status are exactly
// those of the plain ssh command.
func TestGitCollabJSONIsTheServersBytesAgainstGitea(t *testing.T) {
	s, w := newSidecar(t)
	alice := newCheckout(t, s, w.Alice, "ssh://git@127.0.0.1:22/acme/widgets.git", viaCoreSSHCommand)
	bob := newCheckout(t, s, w.Bob, "git@127.0.0.1:acme/widgets", viaEnv)
	n := w.OpenIssue
	same := func(what string, c *checkout, u *User, args []string, sshCmd string) {
		t.Helper()
		got := c.collab(append(args, "--json")...)
		want := run(t, s, u, sshCmd)
		if got != want {
			t.Fatalf("%s:\ngit collab %+v\nssh        %+v", what, got, want)
		}
	}
	// An open-ended claim and its idempotent repeat reply with the same
	// bytes (same token, same acquired_at, no expiry), in either order.
	same("claim", alice, w.Alice, []string{"claim", fmt.Sprint(n)}, lease("acquire", w.Widgets, n))
	same("claim again", alice, w.Alice, []string{"claim", fmt.Sprint(n)}, lease("acquire", w.Widgets, n))
	same("held", bob, w.Bob, []string{"claim", fmt.Sprint(n)}, lease("acquire", w.Widgets, n))
	same("renew by another", bob, w.Bob, []string{"renew", fmt.Sprint(n), "--ttl", "5m"}, lease("renew", w.Widgets, n, "--ttl", "5m"))
	same("unclaim by another", bob, w.Bob, []string{"unclaim", fmt.Sprint(n)}, lease("release", w.Widgets, n))
	same("claims", bob, w.Bob, []string{"claims"}, "collab-lease list acme/widgets")
	same("unclaim", alice, w.Alice, []string{"unclaim", fmt.Sprint(n)}, lease("release", w.Widgets, n))
	same("claims of none", alice, w.Alice, []string{"claims"}, "collab-lease list acme/widgets")
	same("unknown issue", alice, w.Alice, []string{"claim", "99999"}, lease("acquire", w.Widgets, 99999))
	same("renew of nothing", alice, w.Alice, []string{"renew", fmt.Sprint(n), "--ttl", "5m"}, lease("renew", w.Widgets, n, "--ttl", "5m"))
}

func TestGitCollabServerErrorsAgainstGitea(t *testing.T) {
	s, w := newSidecar(t)
	alice := newCheckout(t, s, w.Alice, "git@127.0.0.1:acme/widgets.git", viaCoreSSHCommand)
	for _, c := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"claim", "99999"}, "error: issue not found\n"},
		{[]string{"claim", fmt.Sprint(w.ClosedIssue)}, "error: issue is closed\n"},
		{[]string{"claim", "1", "--ttl", "1000h"}, "error: usage: --ttl \"1000h\" is more than the maximum of 168h\n"},
	} {
		r := alice.collab(c.args...)
		if r != (SSHResult{Stderr: c.stderr, Code: 1}) {
			t.Errorf("%q: %+v", c.args, r)
		}
	}

	// A repository that does not exist, and one Erin may not see, get the
	// same answer.
	nowhere := newCheckout(t, s, w.Alice, "git@127.0.0.1:acme/no-such-repo.git", viaCoreSSHCommand)
	secret := newCheckout(t, s, w.Erin, "git@127.0.0.1:acme/secret.git", viaEnv)
	for _, c := range []*checkout{nowhere, secret} {
		if r := c.collab("claim", "1"); r != (SSHResult{Stderr: "error: repository not found\n", Code: 1}) {
			t.Errorf("%+v", r)
		}
	}
	carol := newCheckout(t, s, w.Carol, "git@127.0.0.1:acme/widgets.git", viaEnv)
	if r := carol.collab("claim", fmt.Sprint(w.OpenIssue)); r != (SSHResult{Stderr: "error: write access to acme/widgets issues is required\n", Code: 1}) {
		t.Errorf("carol: %+v", r)
	}
}

// When ssh cannot get through, the exit status is ssh's 255 and one line
// says where git-collab looked and what to set.
func TestGitCollabUnreachableSidecarAgainstGitea(t *testing.T) {
	s, w := newSidecar(t)
	// A listener that hangs up on every connection: ssh fails in its
	// handshake, deterministically and on loopback.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	c := newCheckout(t, s, w.Alice, "git@127.0.0.1:acme/widgets.git", viaCoreSSHCommand)
	c.git("config", "collab.sidecar", ln.Addr().String())
	for _, json := range []bool{false, true} {
		args := []string{"claim", fmt.Sprint(w.OpenIssue)}
		if json {
			args = append(args, "--json")
		}
		r := c.collab(args...)
		hint := fmt.Sprintf("git-collab: could not reach the sidecar at %s over ssh (address from git config collab.sidecar); "+
			"check git config collab.sidecar (host:port)\n", ln.Addr())
		if r.Code != 255 || r.Stdout != "" || !strings.HasSuffix(r.Stderr, hint) || strings.Count(r.Stderr, "\n") < 2 {
			t.Fatalf("json %v: %+v", json, r) // ssh's own complaint comes first
		}
	}

	// A checkout whose remote is a local path must be told where the
	// sidecar is.
	local := newCheckout(t, nil, nil, filepath.Join(t.TempDir(), "acme", "widgets.git"), "")
	r := local.collab("claims")
	if r.Code != 1 || !strings.Contains(r.Stderr, "is a local path, not a forge; set git config collab.sidecar host:port or COLLAB_SIDECAR") {
		t.Fatalf("local remote: %+v", r)
	}
}

// Help works through git: `git collab -h`, `git collab <verb> --help`, and
// `git collab --help`, which git turns into `man git-collab`: the manual
// page installed beside the binary (<prefix>/share/man/man1) is found
// through PATH.
func TestGitCollabHelpThroughGitAgainstGitea(t *testing.T) {
	c := newCheckout(t, nil, nil, "git@127.0.0.1:acme/widgets.git", "")
	r := c.collab("-h")
	if r.Code != 0 || !strings.HasPrefix(r.Stdout, "usage: git collab <command>") {
		t.Fatalf("-h: %+v", r)
	}
	for _, verb := range []string{"claim", "renew", "unclaim", "claims"} {
		r := c.collab(verb, "--help")
		if r.Code != 0 || !strings.HasPrefix(r.Stdout, "usage: git collab "+verb+" ") {
			t.Fatalf("%s --help: %+v", verb, r)
		}
	}

	// make install, as the README says, puts the page where man finds it
	// from git-collab's place on PATH.
	if _, err := exec.LookPath("man"); err != nil {
		t.Fatal("man is required (apt-get install man-db): git collab --help shows the manual page")
	}
	prefix := t.TempDir()
	root, err := moduleRoot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	install := exec.Command("make", "install", "PREFIX="+prefix, "BIN="+filepath.Join(prefix, "build"))
	install.Dir = root
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	for _, f := range []string{"bin/git-collab", "bin/collab-sidecar", "share/man/man1/git-collab.1"} {
		if _, err := os.Stat(filepath.Join(prefix, f)); err != nil {
			t.Fatalf("make install: %v", err)
		}
	}
	c.env = CheckoutEnv(filepath.Dir(c.dir), filepath.Join(prefix, "bin"))
	r = c.collab("--help")
	if r.Code != 0 || !regexp.MustCompile(`(?s)NAME\s+git-collab.*git collab claim <issue>`).MatchString(r.Stdout) {
		t.Fatalf("--help: %+v", r)
	}
}
