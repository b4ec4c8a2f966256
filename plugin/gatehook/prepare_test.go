package gatehook

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/collab-lease/collab-lease/internal/osfile"
	"github.com/collab-lease/collab-lease/plugin/contract"
)

// program writes a stand-in for the hook program and returns its path.
func program(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), contract.GateProgram)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func options(t *testing.T, root string) Options {
	return Options{Root: root, Program: program(t, "exit 0"),
		Config: contract.GateConfig{URL: "http://127.0.0.1:8788", Unreachable: contract.GateRefuse, TimeoutMS: 1500}}
}

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode()
}

func stat(t *testing.T, path string) fs.FileInfo {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

// uid is the user ID that owns path.
func uid(t *testing.T, path string) int {
	t.Helper()
	id, ok := osfile.OwnerOf(stat(t, path))
	if !ok {
		t.Skip("no owners here")
	}
	return id
}

func TestPrepareWritesTheGatesFiles(t *testing.T) {
	root := t.TempDir()
	o := options(t, root)
	secret, err := Prepare(o)
	if err != nil {
		t.Fatal(err)
	}
	gate := filepath.Join(root, contract.GateDir)
	if m := mode(t, gate); !m.IsDir() || m.Perm() != 0o755 {
		t.Errorf("%s: %v", gate, m)
	}
	prog := filepath.Join(gate, contract.GateProgram)
	if got, _ := os.ReadFile(prog); !bytes.Equal(got, mustRead(t, o.Program)) || mode(t, prog).Perm() != 0o755 {
		t.Errorf("program: %q, %v", got, mode(t, prog))
	}
	var cfg contract.GateConfig
	if err := json.Unmarshal(mustRead(t, filepath.Join(gate, contract.GateConfigFile)), &cfg); err != nil || cfg != o.Config {
		t.Errorf("gate.json: %+v, %v", cfg, err)
	}
	secretPath := filepath.Join(gate, contract.GateSecretFile)
	if raw, err := hex.DecodeString(string(secret)); err != nil || len(raw) != 32 {
		t.Errorf("secret %q: %v", secret, err)
	}
	if got := mustRead(t, secretPath); strings.TrimSpace(string(got)) != string(secret) || mode(t, secretPath).Perm() != 0o600 {
		t.Errorf("gate.secret: %q, %v", got, mode(t, secretPath))
	}
	if read, err := ReadSecret(root); err != nil || !bytes.Equal(read, secret) {
		t.Errorf("ReadSecret: %q, %v", read, err)
	}

	// Again: the same secret, and nothing rewritten that is the same.
	before := stat(t, prog)
	again, err := Prepare(o)
	if err != nil || !bytes.Equal(again, secret) {
		t.Fatalf("again: %q, %v", again, err)
	}
	if !os.SameFile(stat(t, prog), before) {
		t.Error("the program was rewritten with the same bytes")
	}

	// A new program and a new configuration replace the old ones.
	o.Program = program(t, "exit 1")
	o.Config.Unreachable = contract.GateAllow
	if _, err := Prepare(o); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, prog); !bytes.Equal(got, mustRead(t, o.Program)) {
		t.Errorf("program not replaced: %q", got)
	}
	if err := json.Unmarshal(mustRead(t, filepath.Join(gate, contract.GateConfigFile)), &cfg); err != nil || cfg != o.Config {
		t.Errorf("gate.json: %+v, %v", cfg, err)
	}
	if left, _ := os.ReadDir(gate); len(left) != 3 {
		t.Errorf("files left in %s: %v", gate, left)
	}
}

// Of several processes preparing at once, all read the one secret.
func TestPrepareRacesToOneSecret(t *testing.T) {
	root := t.TempDir()
	o := options(t, root)
	secrets := make([][]byte, 8)
	var wg sync.WaitGroup
	for i := range secrets {
		wg.Go(func() {
			s, err := Prepare(o)
			if err != nil {
				t.Error(err)
			}
			secrets[i] = s
		})
	}
	wg.Wait()
	for _, s := range secrets[1:] {
		if !bytes.Equal(s, secrets[0]) {
			t.Fatalf("two secrets: %q and %q", secrets[0], s)
		}
	}
}

func TestPrepareRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, o *Options)
		want  string
	}{
		{"no URL", func(t *testing.T, o *Options) { o.Config.URL = "" }, `URL "" is not an http or https URL`},
		{"not http", func(t *testing.T, o *Options) { o.Config.URL = "unix:///run/x" }, "is not an http or https URL"},
		{"an unknown policy", func(t *testing.T, o *Options) { o.Config.Unreachable = "maybe" }, `is "maybe"`},
		{"a negative timeout", func(t *testing.T, o *Options) { o.Config.TimeoutMS = -1 }, "timeout is -1 ms"},
		{"no program", func(t *testing.T, o *Options) { o.Program = filepath.Join(t.TempDir(), "none") }, "its program"},
		{"no root", func(t *testing.T, o *Options) { o.Root = filepath.Join(o.Root, "none") }, "repository root"},
		{"a link where the gate's directory goes", func(t *testing.T, o *Options) {
			mustSymlink(t, t.TempDir(), filepath.Join(o.Root, contract.GateDir))
		}, "symbolic link"},
		{"a file where the gate's directory goes", func(t *testing.T, o *Options) {
			mustWrite(t, filepath.Join(o.Root, contract.GateDir), "x", 0o644)
		}, "is not a directory"},
		{"a link where the program goes", func(t *testing.T, o *Options) {
			mustMkdir(t, filepath.Join(o.Root, contract.GateDir))
			mustSymlink(t, o.Program, filepath.Join(o.Root, contract.GateDir, contract.GateProgram))
		}, "symbolic link"},
		{"a link where the secret goes", func(t *testing.T, o *Options) {
			mustMkdir(t, filepath.Join(o.Root, contract.GateDir))
			target := filepath.Join(t.TempDir(), "elsewhere")
			mustSymlink(t, target, filepath.Join(o.Root, contract.GateDir, contract.GateSecretFile))
		}, "symbolic link"},
		{"a secret others may read", func(t *testing.T, o *Options) {
			mustMkdir(t, filepath.Join(o.Root, contract.GateDir))
			mustWrite(t, filepath.Join(o.Root, contract.GateDir, contract.GateSecretFile), strings.Repeat("ab", 32), 0o644)
		}, "has mode 0644"},
		{"a secret that is not one", func(t *testing.T, o *Options) {
			mustMkdir(t, filepath.Join(o.Root, contract.GateDir))
			mustWrite(t, filepath.Join(o.Root, contract.GateDir, contract.GateSecretFile), "short", 0o600)
		}, "does not hold 32 hex-encoded bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := options(t, t.TempDir())
			tc.setup(t, &o)
			_, err := Prepare(o)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("got %v, want one line with %q", err, tc.want)
			}
			if strings.Contains(tc.want, "symbolic link") && !errors.Is(err, ErrSymlink) {
				t.Errorf("%v is not ErrSymlink", err)
			}
		})
	}
}

func TestReadSecretWithoutAGate(t *testing.T) {
	if _, err := ReadSecret(t.TempDir()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("got %v", err)
	}
	root := t.TempDir()
	mustMkdir(t, filepath.Join(root, contract.GateDir))
	if _, err := ReadSecret(root); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("got %v", err)
	}
}

// As root, what Prepare makes belongs to the root's owner, Gitea's
// account, and so does a secret a stopped run left root's.
func TestPrepareGivesGiteaItsFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	const gitea = 4321
	root := t.TempDir()
	if err := os.Chown(root, gitea, gitea); err != nil {
		t.Fatal(err)
	}
	mustMkdir(t, filepath.Join(root, contract.GateDir))
	if err := os.Chown(filepath.Join(root, contract.GateDir), gitea, gitea); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(root, contract.GateDir, contract.GateSecretFile), strings.Repeat("ab", 32)+"\n", 0o600)
	if _, err := Prepare(options(t, root)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{contract.GateProgram, contract.GateConfigFile, contract.GateSecretFile} {
		if id := uid(t, filepath.Join(root, contract.GateDir, name)); id != gitea {
			t.Errorf("%s belongs to %d", name, id)
		}
	}
	fresh := t.TempDir()
	if err := os.Chown(fresh, gitea, gitea); err != nil {
		t.Fatal(err)
	}
	if _, err := Prepare(options(t, fresh)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"", contract.GateProgram, contract.GateConfigFile, contract.GateSecretFile} {
		if id := uid(t, filepath.Join(fresh, contract.GateDir, name)); id != gitea {
			t.Errorf("%s belongs to %d", filepath.Join(contract.GateDir, name), id)
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustWrite(t *testing.T, path, data string, mode fs.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func mustMkdir(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, path string) {
	t.Helper()
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
}
