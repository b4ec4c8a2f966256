package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzConfig feeds arbitrary TOML files and flag values through the whole
// settings path: it must never panic, and every refusal is one line.
func FuzzConfig(f *testing.F) {
	f.Add("gitea-url = \"http://g:3000\"\nmax-ttl = \"2h\"\n", "--ssh-listen", ":2222")
	f.Add("gitea_url = 'http://g'\nkey_cache_ttl = 10\n", "--max-ttl", "90s")
	f.Add("[section]\nx = 1\n", "--log-format", "json")
	f.Add("gitea-url = 5", "--http-listen", "127.0.0.1:0")
	f.Add("public-url = \"https://x/\"\nperm-cache-ttl = \"0\"", "--forge-timeout", "100ms")
	f.Add("", "--gitea-url", "http://[::1]:3000")
	f.Add("webhook-url = \"http://sidecar:8787/\"\n", "--webhook-url", "http://10.0.0.5:8787")
	dir := f.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("t0k"), 0o600); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, file, flag, value string) {
		path := filepath.Join(t.TempDir(), "c.toml")
		if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		args := []string{"--config", path, "--gitea-token-file", token, flag, value}
		cfg, err := loadConfig("serve", args, func(string) string { return "" }, io.Discard)
		if err != nil {
			if strings.Contains(err.Error(), "t0k") {
				t.Fatalf("error reveals the token: %v", err)
			}
			if msg := err.Error(); msg == "" || strings.ContainsAny(msg, "\r\n") {
				t.Fatalf("a refusal that is not one line: %q", msg)
			}
			return
		}
		if cfg.GiteaURL == "" || cfg.GiteaToken != "t0k" || cfg.MaxTTL < 1e9 || cfg.DB == "" || cfg.WebhookURL == "" || strings.HasSuffix(cfg.WebhookURL, "/") {
			t.Fatalf("accepted an incomplete config: %+v", cfg)
		}
	})
}
