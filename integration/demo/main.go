// Command demo runs `make demo`: a real Gitea (built from its Go module)
// seeded with demo users, keys, repositories and issues, and collab-sidecar
// serving it on its embedded SQLite ledger, with a backlog of labelled
// issues in acme/widgets, one blocked by another (backlog.go), and git
// collab with its manual page on a PATH of its own. It prints what to
// try and runs until Ctrl-C, then stops both and removes what it
// created.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/collab-lease/collab-lease/integration"
)

func main() {
	dir := flag.String("dir", ".demo", "working directory of the demo (removed at exit)")
	sshAddr := flag.String("ssh-listen", "127.0.0.1:2222", "SSH address of the sidecar")
	once := flag.Bool("once", false, "set everything up, claim one issue through it, and exit (for tests)")
	flag.Parse()
	if err := run(*dir, *sshAddr, *once); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(dir, sshAddr string, once bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	_ = os.RemoveAll(abs) // a previous run killed without cleanup
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return err
	}
	defer os.RemoveAll(abs)

	step := func(msg string) func() {
		start := time.Now()
		fmt.Fprintf(os.Stderr, "demo: %s…\n", msg)
		return func() { fmt.Fprintf(os.Stderr, "demo: %s: done in %.1fs\n", msg, time.Since(start).Seconds()) }
	}
	setup, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()

	done := step("building collab-sidecar")
	bin, err := integration.BuildSidecar(setup, abs)
	if err != nil {
		return err
	}
	done()
	done = step("starting Gitea 1.26 (the first run builds it from source: a few minutes)")
	g, err := integration.StartGitea(setup, integration.Options{Dir: filepath.Join(abs, "gitea")})
	if err != nil {
		return err
	}
	defer g.Close()
	done()
	done = step("seeding demo users, keys, repositories and issues")
	w, err := integration.Seed(setup, g)
	if err != nil {
		return err
	}
	bl, err := seedBacklog(setup, g, w.Widgets)
	if err != nil {
		return err
	}
	done()
	done = step("starting collab-sidecar and installing its badges into Gitea")
	s, err := startSidecar(setup, bin, g, filepath.Join(abs, "sidecar"), sshAddr)
	if err != nil {
		return err
	}
	defer func() { s.Stop(20 * time.Second) }()
	done()
	// An ssh config with one Host per demo user keeps the printed
	// commands short: `ssh -F .demo/ssh_config alice collab-lease …`.
	cfgPath := filepath.Join(abs, "ssh_config")
	var cfg strings.Builder
	for _, u := range []*integration.User{w.Alice, w.Bob, w.Carol} {
		fmt.Fprintf(&cfg, "Host %s\n  HostName 127.0.0.1\n  Port %s\n  User git\n  IdentityFile %s\n  IdentitiesOnly yes\n  IdentityAgent none\n  UserKnownHostsFile %s\n  StrictHostKeyChecking yes\n\n",
			u.Login, port(s.SSHAddr), u.Key.Path, s.KnownHosts)
	}
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o600); err != nil {
		return err
	}
	sshCmd := "ssh -F " + rel(cfgPath) + " alice"
	bobCmd := "ssh -F " + rel(cfgPath) + " bob"
	// A checkout of acme/widgets whose `git collab` talks to this sidecar
	// as alice: the agent's view of the demo.
	checkout := filepath.Join(abs, "widgets")
	gitCollab, err := integration.BuildGitCollab(setup, filepath.Join(abs, "bin"))
	if err != nil {
		return err
	}
	// Its manual beside it, where man looks for the pages of what is on
	// PATH (<dir>/../share/man), so `git collab --help` shows it.
	if err := installManual(setup, gitCollab, filepath.Join(abs, "share", "man", "man1")); err != nil {
		return err
	}
	path := filepath.Dir(gitCollab) + string(os.PathListSeparator) + os.Getenv("PATH")
	for _, args := range [][]string{
		{"init", "-q", checkout},
		{"-C", checkout, "remote", "add", "origin", "git@127.0.0.1:acme/widgets.git"},
		{"-C", checkout, "config", "collab.sidecar", s.SSHAddr},
		{"-C", checkout, "config", "core.sshCommand", s.SSHCommand(w.Alice.Key.Path)},
	} {
		if out, err := exec.CommandContext(setup, "git", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("git %v: %v: %s", args, err, out)
		}
	}
	if once {
		r := s.SSH(setup, w.Alice.Key.Path, fmt.Sprintf("collab-lease acquire acme/widgets %d --ttl 30m", w.OpenIssue))
		fmt.Print(r.Stdout)
		if r.Code != 0 {
			return fmt.Errorf("claim through the demo failed (exit %d): %s", r.Code, r.Stderr)
		}
		// Gitea's pages load the badge script from this sidecar.
		page, err := fetch(setup, g.URL+"/acme/widgets/issues")
		if err != nil {
			return err
		}
		if !strings.Contains(page, `<script src="`+s.HTTPURL+"/assets/collab-lease.") {
			return fmt.Errorf("the issue list of Gitea does not load the badge script from %s/assets/", s.HTTPURL)
		}
		out, err := gitCollabIn(setup, checkout, path, "claims")
		fmt.Fprint(os.Stderr, out)
		if err != nil {
			return fmt.Errorf("git collab claims in the demo checkout: %v", err)
		}
		// next takes a ready issue, never the blocked one; the manual
		// is there.
		out, err = gitCollabIn(setup, checkout, path, "next", "--label", "ready", "--ttl", "5m", "--json")
		fmt.Fprint(os.Stderr, out)
		if err != nil || !strings.Contains(out, `"status":"acquired"`) || strings.Contains(out, fmt.Sprintf(`"issue":%d,`, bl.blocked)) {
			return fmt.Errorf("git collab next --label ready in the demo checkout: %v", err)
		}
		out, err = gitCollabIn(setup, checkout, path, "--help")
		if err != nil || !strings.Contains(out, "git-collab") || strings.Contains(out, "No manual entry") {
			return fmt.Errorf("git collab --help in the demo's PATH shows no manual (%v): %.300s", err, out)
		}
		fmt.Fprintln(os.Stderr, "demo: git collab --help shows the manual")
		board, err := fetch(setup, s.HTTPURL+"/acme/widgets/claims")
		if err != nil || !strings.Contains(board, fmt.Sprintf("#%d", w.OpenIssue)) {
			return fmt.Errorf("the board of acme/widgets at %s/acme/widgets/claims does not show the claim of #%d (%v)", s.HTTPURL, w.OpenIssue, err)
		}
		fmt.Fprintf(os.Stderr, "demo: the board at %s/acme/widgets/claims shows the claim\n", s.HTTPURL)
		return nil
	}
	fmt.Printf(`
collab-lease demo is running. Gitea: %[1]s (sign in as alice / %[2]s)

Each demo user (alice, bob: writers; carol: reader) has a key and a Host
entry in %[6]s.

Claim issue #%[3]d of acme/widgets as alice, for 30 minutes:
  %[4]s collab-lease acquire acme/widgets %[3]d --ttl 30m

Bob tries the same issue and is told who holds it (exit 4):
  %[5]s collab-lease acquire acme/widgets %[3]d

See every live claim, renew, release:
  %[4]s collab-lease list acme/widgets
  %[4]s collab-lease renew acme/widgets %[3]d --ttl 1h
  %[4]s collab-lease release acme/widgets %[3]d

The same through git collab, from a checkout of acme/widgets:
  cd %[7]s && export PATH="%[8]s:$PATH"
  git collab claims
  git collab claim %[3]d --ttl 30m
  git collab next --label ready --ttl 30m    (#%[10]d waits for #%[11]d: next skips it)
  git collab --help

The issue list, with its claim badges: %[1]s/acme/widgets/issues
(sign in as alice, open an issue: Claim and Release are in its sidebar)
The board of who holds what, live: %[12]s/acme/widgets/claims
(acme/secret is private: sign in to Gitea as carol / %[9]s, open
%[1]s/acme/secret/issues and follow "sign in to see claims")

Ctrl-C stops everything.
`, g.URL, w.Alice.Password, w.OpenIssue, sshCmd, bobCmd, rel(cfgPath), rel(checkout), filepath.Dir(gitCollab), w.Carol.Password,
		bl.blocked, bl.issues[blockedBy], s.HTTPURL)
	<-ctx.Done()
	fmt.Fprintln(os.Stderr, "\ndemo: stopping")
	return nil
}

// startSidecar starts the sidecar installed into Gitea (footer tags
// pointing at its HTTP address, OAuth2 application), on the preferred
// addresses if they are free.
func startSidecar(ctx context.Context, bin string, g *integration.Gitea, dataDir, sshAddr string) (*integration.Sidecar, error) {
	opts := integration.SidecarOptions{Binary: bin, Gitea: g, DataDir: dataDir, SSHAddr: sshAddr, HTTPAddr: "127.0.0.1:8787"}
	s, err := integration.StartInstalled(ctx, opts, g.Custom)
	if err != nil {
		// The demo ports may be taken; any free ones will do.
		opts.SSHAddr, opts.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
		s, err = integration.StartInstalled(ctx, opts, g.Custom)
	}
	return s, err
}

// installManual writes git collab's manual page into dir.
func installManual(ctx context.Context, gitCollab, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	page, err := exec.CommandContext(ctx, gitCollab, "help", "--man").Output()
	if err != nil {
		return fmt.Errorf("git collab help --man: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, "git-collab.1"), page, 0o644)
}

// gitCollabIn runs git collab with args in checkout, with path as PATH,
// and returns what it printed.
func gitCollabIn(ctx context.Context, checkout, path string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"collab"}, args...)...)
	cmd.Dir = checkout
	cmd.Env = append(os.Environ(), "PATH="+path, "MANPAGER=cat", "PAGER=cat")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func fetch(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), err
}

func rel(p string) string {
	wd, err := os.Getwd()
	if err != nil {
		return p
	}
	if r, err := filepath.Rel(wd, p); err == nil {
		return r
	}
	return p
}

func port(addr string) string {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[i+1:]
		}
	}
	return addr
}
