package main

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/gatehook"
)

func TestConfigGate(t *testing.T) {
	token := writeFile(t, "token", "s3cret", 0o600)
	base := []string{"--gitea-url", "http://g:3000", "--gitea-token-file", token}
	custom := t.TempDir()
	if err := os.MkdirAll(filepath.Join(custom, "conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(custom, "conf", "app.ini"), []byte("WORK_PATH = /var/lib/gitea\n[repository]\nROOT = \"/srv/git\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig("serve", base, envOf(nil), io.Discard)
	if err != nil || cfg.Gate || cfg.GateUnreachable != "allow" {
		t.Fatalf("defaults: gate %v, unreachable %q (%v); want off, allow", cfg.Gate, cfg.GateUnreachable, err)
	}
	cfg, err = loadConfig("serve", append(base, "--gate", "--gitea-repo-root", "/data/repos", "--gate-unreachable", "refuse", "--renew-on-push"), envOf(nil), io.Discard)
	if err != nil || !cfg.Gate || cfg.RepoRoot != "/data/repos" || cfg.GateUnreachable != "refuse" || !cfg.RenewOnPush {
		t.Fatalf("gate on: %+v %v", cfg, err)
	}
	cfg, err = loadConfig("serve", append(base, "--gitea-custom", custom), envOf(map[string]string{"COLLAB_GATE": "true"}), io.Discard)
	if err != nil || cfg.RepoRoot != "/srv/git" {
		t.Fatalf("the root from app.ini: %q %v, want /srv/git", cfg.RepoRoot, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--gate"}, "gate needs Gitea's repository root"},
		{[]string{"--gate", "--gitea-repo-root", "/r", "--admin-listen", "off"}, "gate needs the admin listener"},
		{[]string{"--gate", "--gitea-repo-root", "/r", "--gate-unreachable", "maybe"}, "gate-unreachable \"maybe\" must be allow or refuse"},
		{[]string{"--gate", "--gitea-repo-root", "/r", "--gate-url", "ftp://x"}, "gate-url"},
		{[]string{"--renew-on-push"}, "renew-on-push needs the gate"},
		{[]string{"--gate", "--gitea-custom", t.TempDir()}, "gitea-custom"},
	} {
		if _, err := loadConfig("serve", append(base, tc.args...), envOf(nil), io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}

// The repository root is read from app.ini as Gitea reads it.
func TestRepoRootOfAppIni(t *testing.T) {
	for _, tc := range []struct{ ini, want, err string }{
		{"[repository]\nROOT = /srv/git\n", "/srv/git", ""},
		{"WORK_PATH = /w\n[repository]\nROOT = repos\n", "/w/repos", ""},
		{"WORK_PATH = /w\n[server]\nAPP_DATA_PATH = /d\n", "/d/gitea-repositories", ""},
		{"WORK_PATH = /w\n; a comment\n[Server]\n", "/w/data/gitea-repositories", ""},
		{"[repository]\nROOT = repos\n", "", "no WORK_PATH"},
	} {
		custom := t.TempDir()
		if err := os.MkdirAll(filepath.Join(custom, "conf"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(custom, "conf", "app.ini"), []byte(tc.ini), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := repoRootOf(custom)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %q %v, want an error saying %q", tc.ini, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %q %v, want %q", tc.ini, got, err, tc.want)
		}
	}
}

func TestGateURLFor(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		addr string
		want string
	}{
		{Config{}, "127.0.0.1:8788", "http://127.0.0.1:8788"},
		{Config{}, "0.0.0.0:8788", "http://127.0.0.1:8788"},
		{Config{}, "[::]:8788", "http://127.0.0.1:8788"},
		{Config{}, "10.0.0.5:9000", "http://10.0.0.5:9000"},
		{Config{GateURL: "http://sidecar:8788"}, "127.0.0.1:1", "http://sidecar:8788"},
	} {
		addr, err := net.ResolveTCPAddr("tcp", tc.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := gateURLFor(tc.cfg, addr); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.addr, got, tc.want)
		}
	}
}

// doctor --gate names the repositories without the hook, what the hook's
// ping said, and a secret others may read.
func TestCheckGate(t *testing.T) {
	root := t.TempDir()
	for _, repo := range []string{"acme/widgets.git/hooks", "acme/gadgets.git/hooks"} {
		if err := os.MkdirAll(filepath.Join(root, repo), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A stand-in for the hook program, whose ping answers as the real one does.
	program := writeFile(t, "collab-gate-hook", "#!/bin/sh\necho \"ok: http://127.0.0.1:1 answered\"\n", 0o755)
	if _, err := gatehook.Prepare(gatehook.Options{Root: root, Program: program,
		Config: contract.GateConfig{URL: "http://127.0.0.1:1", Unreachable: contract.GateAllow, TimeoutMS: gateTimeoutMS}}); err != nil {
		t.Fatal(err)
	}
	if _, err := gatehook.InstallRepo(root, "acme", "widgets"); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Gate: true, RepoRoot: root}
	got := map[string]check{}
	for _, c := range checkGate(context.Background(), cfg) {
		got[c.name] = c
	}
	if c := got["gate hooks"]; c.err == nil || !strings.Contains(c.err.Error(), "1 repositories lack the hook (acme/gadgets)") {
		t.Errorf("hooks: %+v", c)
	}
	if c := got["gate asks"]; c.err != nil || c.ok != "ok: http://127.0.0.1:1 answered" {
		t.Errorf("asks: %+v", c)
	}
	if c := got["gate secret"]; c.err != nil {
		t.Errorf("secret: %+v", c)
	}
	secret := filepath.Join(root, contract.GateDir, contract.GateSecretFile)
	if err := os.Chmod(secret, 0o644); err != nil {
		t.Fatal(err)
	}
	if c := checkGateSecret(root, secret); c.err == nil || !strings.Contains(c.err.Error(), "chmod 600") {
		t.Errorf("a secret others may read: %+v", c)
	}
	if err := os.WriteFile(filepath.Join(root, contract.GateDir, contract.GateProgram), []byte("#!/bin/sh\necho 'collab-gate-hook: ping: connection refused' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range checkGate(context.Background(), cfg) {
		if c.name == "gate asks" && (c.err == nil || !strings.Contains(c.err.Error(), "connection refused")) {
			t.Errorf("a ping that failed: %+v", c)
		}
	}
}
