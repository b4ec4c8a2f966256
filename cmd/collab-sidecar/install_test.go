package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// fakeGitea answers the OAuth2 application API of one admin and the admin
// hooks API, and records what it was asked. (plugin/gitea's tests hold the
// faithful fakes; this one is for the command's flow.)
type fakeGitea struct {
	mu    sync.Mutex
	calls []string
	app   bool                                 // the application 7 exists
	hooks map[int64]struct{ url, name string } // system hooks
	next  int64
	// refuseHooks answers the admin hooks API as Gitea does a token
	// without the admin scope.
	refuseHooks bool
}

func (f *fakeGitea) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, r.Method+" "+r.URL.Path)
	if r.Header.Get("Authorization") != "token s3cret" {
		w.WriteHeader(401)
		return
	}
	if f.refuseHooks && strings.HasPrefix(r.URL.Path, "/api/v1/admin/") {
		w.WriteHeader(403)
		_, _ = w.Write([]byte(`{"message":"token does not have at least one of required scope(s), required=[read:admin]"}`))
		return
	}
	app := map[string]any{"id": 7, "name": "collab-lease", "client_id": "cid",
		"confidential_client": true, "redirect_uris": []string{"http://127.0.0.1:8787/oauth/callback"}}
	firstPage := r.URL.Query().Get("page") == "1"
	switch {
	case r.Method == "POST" && r.URL.Path == "/api/v1/user/applications/oauth2":
		f.app = true
		app["client_secret"] = "csecret"
		w.WriteHeader(201)
		_ = json.NewEncoder(w).Encode(app)
	case r.Method == "GET" && r.URL.Path == "/api/v1/user/applications/oauth2/7" && f.app:
		_ = json.NewEncoder(w).Encode(app)
	case r.Method == "GET" && r.URL.Path == "/api/v1/user/applications/oauth2":
		apps := []any{}
		if f.app && firstPage {
			apps = append(apps, app)
		}
		_ = json.NewEncoder(w).Encode(apps)
	case r.Method == "DELETE" && r.URL.Path == "/api/v1/user/applications/oauth2/7" && f.app:
		f.app = false
		w.WriteHeader(204)
	case r.Method == "GET" && r.URL.Path == "/api/v1/admin/hooks":
		hooks := []any{}
		if r.URL.Query().Get("type") == "system" && firstPage {
			for id, h := range f.hooks {
				hooks = append(hooks, map[string]any{"id": id, "name": h.name, "type": "gitea", "active": true,
					"config": map[string]string{"url": h.url, "content_type": "json"}, "events": []string{"issues", "pull_request", "repository"}})
			}
		}
		_ = json.NewEncoder(w).Encode(hooks)
	case r.Method == "POST" && r.URL.Path == "/api/v1/admin/hooks":
		var in struct {
			Name   string            `json:"name"`
			Config map[string]string `json:"config"`
		}
		_ = json.NewDecoder(r.Body).Decode(&in)
		f.next++
		f.hooks[f.next] = struct{ url, name string }{in.Config["url"], in.Name}
		w.WriteHeader(201)
		_ = json.NewEncoder(w).Encode(map[string]any{"id": f.next})
	case strings.HasPrefix(r.URL.Path, "/api/v1/admin/hooks/"):
		id, _ := strconv.ParseInt(strings.TrimPrefix(r.URL.Path, "/api/v1/admin/hooks/"), 10, 64)
		h, ok := f.hooks[id]
		switch {
		case !ok:
			w.WriteHeader(404)
		case r.Method == "PATCH":
			var in struct {
				Config map[string]string `json:"config"`
			}
			_ = json.NewDecoder(r.Body).Decode(&in)
			h.url = in.Config["url"]
			f.hooks[id] = h
			_ = json.NewEncoder(w).Encode(map[string]any{"id": id})
		case r.Method == "DELETE":
			delete(f.hooks, id)
			w.WriteHeader(204)
		}
	default:
		w.WriteHeader(404)
	}
}

// count is how many requests began with prefix ("POST /api/v1/admin/hooks").
func (f *fakeGitea) count(prefix string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

type installEnv struct {
	gitea           *fakeGitea
	args            []string
	custom, dataDir string
	footer, app     string
	stdout, stderr  strings.Builder
}

func newInstallEnv(t *testing.T) *installEnv {
	e := &installEnv{gitea: &fakeGitea{hooks: map[int64]struct{ url, name string }{}}}
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
	for _, want := range []string{"registered", "restart Gitea once", "restart collab-sidecar serve", e.footer,
		"system webhook 1 to http://127.0.0.1:8787/hooks/gitea: registered", "ALLOWED_HOST_LIST",
		"Fenced pushes: off", "run collab-sidecar serve with --fence-pushes"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, name := range []string{"oauth2.json", "webhook.secret"} {
		st, err := os.Stat(filepath.Join(e.dataDir, name))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", name, st, err)
		}
	}
	secret, err := loadWebhookSecret(e.dataDir)
	if err != nil || secret == "" {
		t.Fatalf("webhook secret: %q %v", secret, err)
	}
	footer, _ := os.ReadFile(e.footer)
	if !strings.Contains(string(footer), `<script src="http://127.0.0.1:8787/assets/collab-lease.`) || !strings.Contains(string(footer), `integrity="sha384-`) {
		t.Fatalf("footer: %s", footer)
	}
	// Again, for a sidecar that fences pushes: it says so.
	e.stdout.Reset()
	if code := e.run("--fence-pushes"); code != 0 || !strings.Contains(e.stdout.String(), "Fenced pushes: on.") {
		t.Fatalf("install --fence-pushes: exit %d\n%s%s", code, e.stdout.String(), e.stderr.String())
	}

	// Second run: the stored application, the secret and the webhook are
	// reused, the footer is left alone, nothing to restart.
	if code := e.run(); code != 0 || e.gitea.count("POST /api/v1/user/applications") != 1 || e.gitea.count("POST /api/v1/admin/hooks") != 1 {
		t.Fatalf("second install: exit %d\n%s%v", code, e.stderr.String(), e.gitea.calls)
	}
	if out := e.stdout.String(); strings.Count(out, "reused") != 2 || !strings.Contains(out, "left unchanged") || strings.Contains(out, "restart") {
		t.Fatalf("second install output:\n%s", out)
	}
	if again, _ := os.ReadFile(e.footer); string(again) != string(footer) {
		t.Fatal("second install changed the footer")
	}
	if again, _ := loadWebhookSecret(e.dataDir); again != secret {
		t.Fatal("second install changed the webhook secret")
	}

	// Another base for Gitea's deliveries: the webhook follows it, with the
	// same secret.
	if code := e.run("--webhook-url", "http://sidecar.internal:8787"); code != 0 || !strings.Contains(e.stdout.String(), "system webhook 1 to http://sidecar.internal:8787/hooks/gitea: updated") {
		t.Fatalf("webhook URL: exit %d\n%s%s", code, e.stdout.String(), e.stderr.String())
	}
	e.args = append(e.args, "--webhook-url", "http://sidecar.internal:8787")

	// Uninstall removes the webhook, the application, their files and the
	// block (the footer held nothing else).
	if code := e.run("--uninstall"); code != 0 || !strings.Contains(e.stdout.String(), "Footer: removed") {
		t.Fatalf("uninstall: exit %d\n%s%s", code, e.stdout.String(), e.stderr.String())
	}
	out = e.stdout.String()
	for _, want := range []string{"Webhook: removed 1", "OAuth2 application \"collab-lease\": removed", "webhook.secret", "oauth2.json"} {
		if !strings.Contains(out, want) {
			t.Errorf("uninstall output lacks %q:\n%s", want, out)
		}
	}
	if e.gitea.app || len(e.gitea.hooks) != 0 {
		t.Fatalf("left in Gitea: app %v, hooks %v", e.gitea.app, e.gitea.hooks)
	}
	for _, p := range []string{e.footer, e.app, filepath.Join(e.dataDir, "webhook.secret")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s after uninstall: %v", p, err)
		}
	}
	if code := e.run("--uninstall"); code != 0 || strings.Count(e.stdout.String(), "nothing to do") != 3 {
		t.Fatalf("second uninstall: exit %d\n%s%s", code, e.stdout.String(), e.stderr.String())
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
	for _, p := range []string{e.app, filepath.Join(e.dataDir, "webhook.secret")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s written: %v", p, err)
		}
	}
}

// A footer.tmpl that links elsewhere stops install and uninstall before
// anything is asked of Gitea, and the link's target stays as it was;
// --force follows the link.
func TestInstallRefusesASymlinkedFooterBeforeRegistering(t *testing.T) {
	e := newInstallEnv(t)
	if err := os.MkdirAll(filepath.Dir(e.footer), 0o755); err != nil {
		t.Fatal(err)
	}
	target := writeFile(t, "passwd", "root:x:0:0::/root:/bin/sh\n", 0o644)
	if err := os.Symlink(target, e.footer); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{nil, {"--uninstall"}} {
		if code := e.run(args...); code != 1 || !strings.Contains(e.stderr.String(), "symbolic link") ||
			!strings.Contains(e.stderr.String(), "--force") || strings.Count(e.stderr.String(), "\n") != 1 {
			t.Fatalf("install %v: exit %d: %s", args, code, e.stderr.String())
		}
	}
	if len(e.gitea.calls) != 0 {
		t.Fatalf("asked Gitea: %v", e.gitea.calls)
	}
	if got, _ := os.ReadFile(target); string(got) != "root:x:0:0::/root:/bin/sh\n" {
		t.Fatalf("the link's target changed: %q", got)
	}
	if code := e.run("--force"); code != 0 {
		t.Fatalf("install --force: exit %d: %s", code, e.stderr.String())
	}
	if got, _ := os.ReadFile(target); !strings.Contains(string(got), "collab-lease:begin") {
		t.Fatalf("install --force did not follow the link: %q", got)
	}
}

// A token without the admin scope: install says which scope, and uninstall
// leaves the files that name what to remove.
func TestInstallNeedsTheAdminScope(t *testing.T) {
	e := newInstallEnv(t)
	e.gitea.refuseHooks = true
	if code := e.run(); code != 1 || !strings.Contains(e.stderr.String(), "write:admin") {
		t.Fatalf("install: exit %d\n%s", code, e.stderr.String())
	}
	if code := e.run("--uninstall"); code != 1 || !strings.Contains(e.stderr.String(), "write:admin") {
		t.Fatalf("uninstall: exit %d\n%s", code, e.stderr.String())
	}
	if _, err := os.Stat(filepath.Join(e.dataDir, "webhook.secret")); err != nil {
		t.Fatalf("uninstall removed the secret though Gitea still has the webhook: %v", err)
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

func TestDoctorChecksTheWebhook(t *testing.T) {
	e := newInstallEnv(t)
	cfg, err := loadConfig("doctor", e.args[1:], envOf(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	forge, err := newForge(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	check := func() (string, error) { return checkWebhook(ctx, forge, cfg, true) }
	if _, err := check(); err == nil || !strings.Contains(err.Error(), "run collab-sidecar install") || !strings.Contains(err.Error(), "webhook.secret") {
		t.Fatalf("before install: %v", err)
	}
	if code := e.run(); code != 0 {
		t.Fatalf("install: %s", e.stderr.String())
	}
	if found, err := check(); err != nil || !strings.Contains(found, "system webhook 1 to http://127.0.0.1:8787/hooks/gitea") {
		t.Fatalf("installed: %q %v", found, err)
	}
	if _, err := checkWebhook(ctx, forge, cfg, false); err == nil || !strings.Contains(err.Error(), "not checked") {
		t.Fatalf("Gitea down: %v", err)
	}
	e.gitea.mu.Lock()
	e.gitea.hooks = map[int64]struct{ url, name string }{}
	e.gitea.mu.Unlock()
	if _, err := check(); err == nil || !strings.Contains(err.Error(), "no system webhook") || !strings.Contains(err.Error(), "run collab-sidecar install") {
		t.Fatalf("deleted in Gitea: %v", err)
	}
	e.gitea.mu.Lock()
	e.gitea.refuseHooks = true
	e.gitea.mu.Unlock()
	if _, err := check(); err == nil || !strings.Contains(err.Error(), "read:admin") {
		t.Fatalf("token without the scope: %v", err)
	}
}
