package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// doctorRun runs `collab-sidecar doctor` with the given token and flags.
func doctorRun(t *testing.T, bin, token string, args ...string) (string, int) {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"doctor", "--gitea-token-file", tokenFile}, args...)...)
	cmd.Env = cleanEnv()
	r, err := RunCommand(cmd)
	if err != nil {
		t.Fatal(err)
	}
	return r.Stdout + r.Stderr, r.Code
}

func TestDoctorAgainstGitea(t *testing.T) {
	g, w, bin := shared(t)
	// A sidecar that ran once (data directory, ledger, host key) and is
	// installed into a custom directory of its own.
	s, _ := newSidecar(t)
	public := "http://127.0.0.1:18788"
	custom := t.TempDir()
	installSidecar(t, s.DataDir, public, custom)
	base := []string{"--gitea-url", g.URL, "--data-dir", s.DataDir, "--public-url", public, "--gitea-custom", custom}

	out, code := doctorRun(t, bin, g.AdminToken, base...)
	passed := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "ok   ") {
			passed++
		}
	}
	if code != 0 || strings.Contains(out, "FAIL") || passed != 9 {
		t.Fatalf("healthy: exit %d\n%s", code, out)
	}
	for _, want := range []string{"version 1.26.0", "site administrator", "key lookup", "footer", "oauth2", "live leases",
		"ok   webhook", public + "/hooks/gitea", "ok   fencing", "ok   pushes     off (serve --fence-pushes turns it on); the token may manage branch protection"} {
		if !strings.Contains(out, want) {
			t.Errorf("healthy report lacks %q:\n%s", want, out)
		}
	}

	// A token with what serve needs and nothing of install's.
	var serveTok struct {
		SHA1 string `json:"sha1"`
	}
	basic := &API{URL: g.URL, User: w.Admin.Login, Password: w.Admin.Password}
	if err := basic.Do(context.Background(), "POST", "/users/"+w.Admin.Login+"/tokens", map[string]any{
		"name": "doctor-serve-only", "scopes": []string{"read:user", "read:repository", "read:issue"},
	}, &serveTok); err != nil {
		t.Fatal(err)
	}

	faults := []struct {
		name  string
		token string
		args  []string
		line  string // the failing check
		fix   string // words of the fix
	}{
		{"wrong URL", g.AdminToken, replace(base, "--gitea-url", "http://127.0.0.1:1"), "FAIL gitea", "check --gitea-url"},
		{"bad token", "0123456789abcdef0123456789abcdef01234567", base, "FAIL token", "--gitea-token-file"},
		{"non-admin token", w.Alice.Token, base, "FAIL token", "not a site administrator"},
		{"footer missing", g.AdminToken, replace(base, "--gitea-custom", t.TempDir()), "FAIL footer", "run collab-sidecar install"},
		{"other public URL", g.AdminToken, replace(base, "--public-url", "http://127.0.0.1:18789"), "FAIL oauth2", "install again"},
		{"other webhook URL", g.AdminToken, append(base, "--webhook-url", "http://127.0.0.1:18789"), "FAIL webhook", "run collab-sidecar install"},
		{"token without the admin scope", serveTok.SHA1, base, "FAIL webhook", "read:admin"},
		{"fencing pushes with a token that may not", serveTok.SHA1, append(base, "--fence-pushes"), "FAIL pushes", "write:repository"},
	}
	for _, f := range faults {
		out, code := doctorRun(t, bin, f.token, f.args...)
		if code != 1 || !strings.Contains(out, f.line) || !strings.Contains(out, f.fix) {
			t.Errorf("%s: exit %d, want 1 with %q and %q:\n%s", f.name, code, f.line, f.fix, out)
		}
		if strings.Contains(out, f.token) {
			t.Errorf("%s: the token appears in the report", f.name)
		}
	}
}

// replace returns args with the value after flag set to v.
func replace(args []string, flag, v string) []string {
	out := append([]string(nil), args...)
	for i := range out {
		if out[i] == flag && i+1 < len(out) {
			out[i+1] = v
		}
	}
	return out
}
