package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// fakeGiteaApps answers the OAuth2 application API of one admin and
// records what it was asked.
type fakeGiteaApps struct {
	mu    sync.Mutex
	calls []string
	apps  map[string]bool // "/api/v1/user/applications/oauth2/<id>" that exist
}

func (f *fakeGiteaApps) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, r.Method+" "+r.URL.Path)
	if r.Header.Get("Authorization") != "token s3cret" {
		w.WriteHeader(401)
		return
	}
	switch {
	case r.Method == "POST" && r.URL.Path == "/api/v1/user/applications/oauth2":
		f.apps["/api/v1/user/applications/oauth2/7"] = true
		w.WriteHeader(201)
		_ = json.NewEncoder(w).Encode(map[string]any{"id": 7, "client_id": "cid", "client_secret": "csecret",
			"confidential_client": true, "redirect_uris": []string{"http://127.0.0.1:8787/oauth/callback"}})
	case r.Method == "GET" && f.apps[r.URL.Path]:
		_ = json.NewEncoder(w).Encode(map[string]any{"id": 7, "client_id": "cid",
			"confidential_client": true, "redirect_uris": []string{"http://127.0.0.1:8787/oauth/callback"}})
	default:
		w.WriteHeader(404)
	}
}

func (f *fakeGiteaApps) posts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if strings.HasPrefix(c, "POST") {
			n++
		}
	}
	return n
}

type installEnv struct {
	gitea           *fakeGiteaApps
	args            []string
	custom, dataDir string
	footer, app     string
	stdout, stderr  strings.Builder
}

func newInstallEnv(t *testing.T) *installEnv {
	e := &installEnv{gitea: &fakeGiteaApps{apps: map[string]bool{}}}
	srv := httptest.NewServer(e.gitea)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	e.custom, e.dataDir = filepath.Join(dir, "custom"), filepath.Join(dir, "data")
	if err := os.MkdirAll(e.custom, 0o755); err != nil {
		t.Fatal(err)
	}
	e.footer = filepath.Join(e.custom, "templates", "custom", "footer.tmpl")
	e.app = filepath.Join(e.dataDir, "oauth2.json")
	token := writeFile(t, "token", "s3cret\n", 0o600)
	e.args = []string{"install", "--gitea-url", srv.URL, "--gitea-token-file", token, "--data-dir", e.dataDir,
		"--public-url", "http://127.0.0.1:8787/", "--gitea-custom", e.custom}
	return e
}

func (e *installEnv) run(extra ...string) int {
	e.stdout.Reset()
	e.stderr.Reset()
	return run(append(append([]string{}, e.args...), extra...), envOf(nil), &e.stdout, &e.stderr)
}

func TestInstallCommand(t *testing.T) {
	e := newInstallEnv(t)
	if code := e.run(); code != 0 {
		t.Fatalf("install: exit %d\n%s%s", code, e.stdout.String(), e.stderr.String())
	}
	out := e.stdout.String()
	for _, want := range []string{"registered", "restart Gitea once", "restart collab-sidecar serve", e.footer} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	st, err := os.Stat(e.app)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("oauth2.json: %v %v", st, err)
	}
	footer, _ := os.ReadFile(e.footer)
	if !strings.Contains(string(footer), `<script src="http://127.0.0.1:8787/assets/collab-lease.js"`) {
		t.Fatalf("footer: %s", footer)
	}

	// Second run: the stored application is reused, the footer is left
	// alone, nothing to restart.
	if code := e.run(); code != 0 || e.gitea.posts() != 1 {
		t.Fatalf("second install: exit %d, %d registrations\n%s", code, e.gitea.posts(), e.stderr.String())
	}
	if out := e.stdout.String(); !strings.Contains(out, "reused") || !strings.Contains(out, "left unchanged") || strings.Contains(out, "restart") {
		t.Fatalf("second install output:\n%s", out)
	}
	if again, _ := os.ReadFile(e.footer); string(again) != string(footer) {
		t.Fatal("second install changed the footer")
	}

	// Uninstall removes the block (the footer held nothing else).
	if code := e.run("--uninstall"); code != 0 || !strings.Contains(e.stdout.String(), "removed") {
		t.Fatalf("uninstall: exit %d\n%s%s", code, e.stdout.String(), e.stderr.String())
	}
	if _, err := os.Stat(e.footer); !os.IsNotExist(err) {
		t.Fatalf("footer after uninstall: %v", err)
	}
	if code := e.run("--uninstall"); code != 0 || !strings.Contains(e.stdout.String(), "nothing to do") {
		t.Fatalf("second uninstall: exit %d\n%s", code, e.stdout.String())
	}
}

// A damaged footer stops install before anything is registered in Gitea.
func TestInstallRefusesADamagedFooterBeforeRegistering(t *testing.T) {
	e := newInstallEnv(t)
	if err := os.MkdirAll(filepath.Dir(e.footer), 0o755); err != nil {
		t.Fatal(err)
	}
	damaged := "mine\n{{/* collab-lease:begin */}}\n<script></script>\n"
	if err := os.WriteFile(e.footer, []byte(damaged), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := e.run(); code != 1 || !strings.Contains(e.stderr.String(), "damaged") {
		t.Fatalf("exit %d: %s", code, e.stderr.String())
	}
	if got, _ := os.ReadFile(e.footer); string(got) != damaged {
		t.Fatalf("footer changed: %q", got)
	}
	if len(e.gitea.calls) != 0 {
		t.Fatalf("asked Gitea: %v", e.gitea.calls)
	}
	if _, err := os.Stat(e.app); !os.IsNotExist(err) {
		t.Fatalf("oauth2.json written: %v", err)
	}
}

func TestInstallNeedsTheCustomDirectory(t *testing.T) {
	e := newInstallEnv(t)
	e.args = e.args[:len(e.args)-2]
	if code := e.run(); code != 1 || !strings.Contains(e.stderr.String(), "gitea-custom is required") {
		t.Fatalf("exit %d: %s", code, e.stderr.String())
	}
}

func TestSessionKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), sessionKeyFile)
	k1, err := loadOrCreateSessionKey(path)
	if err != nil || len(k1) != 32 {
		t.Fatalf("create: %d bytes, %v", len(k1), err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %o", st.Mode().Perm())
	}
	k2, err := loadOrCreateSessionKey(path)
	if err != nil || string(k1) != string(k2) {
		t.Fatalf("reload gave another key: %v", err)
	}
	_ = os.Chmod(path, 0o644)
	if _, err := loadOrCreateSessionKey(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("readable key accepted: %v", err)
	}
	_ = os.WriteFile(path, []byte("short"), 0o600)
	_ = os.Chmod(path, 0o600)
	if _, err := loadOrCreateSessionKey(path); err == nil {
		t.Fatal("short key accepted")
	}
}
