package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func writeFile(t *testing.T, name, body string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigPrecedence(t *testing.T) {
	token := writeFile(t, "token", "s3cret\n", 0o600)
	file := writeFile(t, "c.toml", `
gitea_url = "http://from-file:3000"
ssh-listen = "127.0.0.1:2200"
http-listen = "127.0.0.1:8700"
max_ttl = "2h"
key-cache-ttl = 10
`, 0o600)
	env := map[string]string{
		"COLLAB_SSH_LISTEN":       "127.0.0.1:2300",
		"COLLAB_GITEA_TOKEN_FILE": token,
		"COLLAB_CONFIG":           file,
	}
	cfg, err := loadConfig("serve", []string{"--http-listen", "127.0.0.1:0"}, envOf(env), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct{ name, got, want string }{
		{"flag beats env and file", cfg.HTTPListen, "127.0.0.1:0"},
		{"env beats file", cfg.SSHListen, "127.0.0.1:2300"},
		{"file beats default", cfg.GiteaURL, "http://from-file:3000"},
		{"default", cfg.PublicURL, "http://localhost:8787"},
		{"webhook URL defaults to the public URL", cfg.WebhookURL, "http://localhost:8787"},
		{"db derives from data-dir", cfg.DB, filepath.Join("data", "collab.db")},
		{"token read from file", cfg.GiteaToken, "s3cret"},
		{"max-ttl from file", cfg.MaxTTL.String(), "2h0m0s"},
		{"whole seconds from file", cfg.KeyCacheTTL.String(), "10s"},
		{"default duration", cfg.PermCacheTTL.String(), (30 * time.Second).String()},
		{"default stream cap", fmt.Sprint(cfg.StreamsPerViewer, cfg.StreamsPerAddress), "10 50"},
		{"no balancer by default", fmt.Sprint(cfg.ProxyProtocolFrom), "[]"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, c.got, c.want)
		}
	}
	// The webhook URL, when set, is its own (without a trailing slash).
	cfg, err = loadConfig("serve", []string{"--gitea-url", "http://g", "--public-url", "https://git.example/collab/"},
		envOf(map[string]string{"COLLAB_GITEA_TOKEN": "t0k", "COLLAB_WEBHOOK_URL": "http://sidecar.internal:8787/"}), io.Discard)
	if err != nil || cfg.WebhookURL != "http://sidecar.internal:8787" || cfg.PublicURL != "https://git.example/collab" {
		t.Fatalf("webhook URL: %+v %v", cfg, err)
	}
	// The token may come from the environment itself.
	cfg, err = loadConfig("serve", []string{"--gitea-url", "http://g"}, envOf(map[string]string{"COLLAB_GITEA_TOKEN": "t0k"}), io.Discard)
	if err != nil || cfg.GiteaToken != "t0k" || cfg.TokenSource != "COLLAB_GITEA_TOKEN" {
		t.Fatalf("token from env: %+v %v", cfg, err)
	}
}

func TestConfigValidation(t *testing.T) {
	token := writeFile(t, "token", "s3cret", 0o600)
	open := writeFile(t, "open-token", "s3cret", 0o644)
	empty := writeFile(t, "empty-token", "\n", 0o600)
	badTOML := writeFile(t, "bad.toml", "gitea_url = ", 0o600)
	unknownKey := writeFile(t, "unknown.toml", `gitea_uri = "http://x"`, 0o600)
	base := []string{"--gitea-url", "http://g:3000", "--gitea-token-file", token}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"missing url", []string{"--gitea-token-file", token}, "gitea-url is required"},
		{"bad url", []string{"--gitea-url", "ftp://x", "--gitea-token-file", token}, "gitea-url \"ftp://x\" must be an http"},
		{"missing token", []string{"--gitea-url", "http://g"}, "gitea-token-file is required"},
		{"token file readable by others", []string{"--gitea-url", "http://g", "--gitea-token-file", open}, "chmod 600"},
		{"empty token file", []string{"--gitea-url", "http://g", "--gitea-token-file", empty}, "exactly one token"},
		{"missing token file", []string{"--gitea-url", "http://g", "--gitea-token-file", token + ".nope"}, "no such file"},
		{"bad listen", append(base, "--ssh-listen", "2222"), "ssh-listen \"2222\" is not host:port"},
		{"bad admin listen", append(base, "--admin-listen", "8788"), "admin-listen \"8788\" is not host:port (e.g. 127.0.0.1:8788), or off"},
		{"admin listen on the public address", append(base, "--http-listen", ":8787", "--admin-listen", ":8787"), "admin-listen \":8787\" is also http-listen"},
		{"admin listen on the ssh address", append(base, "--admin-listen", ":2222"), "admin-listen \":2222\" is also ssh-listen"},
		{"bad ttl", append(base, "--max-ttl", "soon"), "max-ttl \"soon\" must be a duration"},
		{"zero ttl", append(base, "--max-ttl", "0s"), "max-ttl"},
		{"negative claim cap", append(base, "--max-claims-per-holder", "-1"), "max-claims-per-holder \"-1\" must be a whole number from 0 to 1048576"},
		{"negative reservation cap", append(base, "--max-reservations-per-holder", "-1"), "max-reservations-per-holder \"-1\" must be a whole number from 0 to 1048576"},
		{"reservation cap not a number", append(base, "--max-reservations-per-holder", "many"), "max-reservations-per-holder \"many\" must be a whole number"},
		{"a priority label twice", append(base, "--priority-labels", "p/high, p/low,p/high"), "priority-labels names \"p/high\" twice"},
		{"an empty priority label", append(base, "--priority-labels", "p/high,,p/low"), "priority-labels \"p/high,,p/low\" has an empty label; name labels separated by commas, highest first"},
		{"lock-delay over 5m", append(base, "--lock-delay", "6m"), "lock-delay \"6m\" must be a duration between 0s and 5m0s"},
		{"fence-pushes not a switch", append(base, "--fence-pushes=sometimes"), "fence-pushes \"sometimes\" must be true or false"},
		{"no streams", append(base, "--event-streams-per-viewer", "0"), "event-streams-per-viewer \"0\" must be a whole number from 1 to 100000"},
		{"bad stream cap", append(base, "--event-streams-per-address", "lots"), "event-streams-per-address \"lots\" must be a whole number"},
		{"bad log format", append(base, "--log-format", "xml"), "log-format \"xml\" must be text or json"},
		{"bad balancer address", append(base, "--proxy-protocol-from", "10.0.0.5,10.0.0.300"), "proxy-protocol-from \"10.0.0.300\" is neither an IP address nor a CIDR range"},
		{"bad balancer range", append(base, "--proxy-protocol-from", "10.0.0.0/33"), "proxy-protocol-from \"10.0.0.0/33\" is neither"},
		{"balancer by name", append(base, "--proxy-protocol-from", "haproxy"), "give the balancers' addresses or CIDR ranges"},
		{"bad public url", append(base, "--public-url", "localhost:8787"), "public-url"},
		{"bad webhook url", append(base, "--webhook-url", "sidecar:8787"), "webhook-url \"sidecar:8787\" must be an http"},
		{"webhook url with a query", append(base, "--webhook-url", "http://sidecar:8787/?x=1"), "webhook-url"},
		{"webhook url with a user", append(base, "--webhook-url", "http://u:p@sidecar:8787"), "webhook-url"},
		{"unknown flag", append(base, "--gitea-urll", "x"), "flag provided but not defined"},
		{"stray argument", append(base, "extra"), "unexpected argument \"extra\""},
		{"bad toml", append(base, "--config", badTOML), "config file"},
		{"unknown toml key", append(base, "--config", unknownKey), "unknown setting \"gitea_uri\""},
	}
	for _, c := range cases {
		_, err := loadConfig("serve", c.args, envOf(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: err %v, want it to mention %q (and never the token)", c.name, err, c.want)
		}
	}
}

// --fence-pushes is a switch: alone on the command line, or true in the
// environment or the file; off by default.
func TestConfigFencePushes(t *testing.T) {
	token := writeFile(t, "token", "s3cret", 0o600)
	on := writeFile(t, "on.toml", "fence-pushes = true\n", 0o600)
	notSwitch := writeFile(t, "bad.toml", "max-ttl = true\n", 0o600)
	base := []string{"--gitea-url", "http://g:3000", "--gitea-token-file", token}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want bool
	}{
		{"off by default", base, nil, false},
		{"the flag alone", append(base, "--fence-pushes"), nil, true},
		{"the flag off", append(base, "--fence-pushes=false"), map[string]string{"COLLAB_FENCE_PUSHES": "true"}, false},
		{"the environment", base, map[string]string{"COLLAB_FENCE_PUSHES": "1"}, true},
		{"the file", append(base, "--config", on), nil, true},
	} {
		cfg, err := loadConfig("serve", tc.args, envOf(tc.env), io.Discard)
		if err != nil || cfg.FencePushes != tc.want {
			t.Errorf("%s: fence-pushes %v (%v), want %v", tc.name, cfg.FencePushes, err, tc.want)
		}
	}
	if _, err := loadConfig("serve", append(base, "--config", notSwitch), envOf(nil), io.Discard); err == nil || !strings.Contains(err.Error(), "max-ttl must be a string") {
		t.Errorf("true for a setting that is no switch: %v", err)
	}
}

// The reservation cap is 256 unless set, by a flag, the environment or
// the file; 0 turns it off.
func TestConfigReservationCap(t *testing.T) {
	file := writeFile(t, "c.toml", "max_reservations_per_holder = 12\n", 0o600)
	for _, c := range []struct {
		args []string
		env  map[string]string
		want int
	}{
		{nil, nil, 256},
		{[]string{"--max-reservations-per-holder", "0"}, nil, 0},
		{nil, map[string]string{"COLLAB_MAX_RESERVATIONS_PER_HOLDER": "64"}, 64},
		{[]string{"--config", file}, nil, 12},
		{[]string{"--config", file, "--max-reservations-per-holder", "3"}, map[string]string{"COLLAB_MAX_RESERVATIONS_PER_HOLDER": "64"}, 3},
	} {
		env := map[string]string{"COLLAB_GITEA_TOKEN": "t0k"}
		for k, v := range c.env {
			env[k] = v
		}
		cfg, err := loadConfig("serve", append([]string{"--gitea-url", "http://g"}, c.args...), envOf(env), io.Discard)
		if err != nil || cfg.MaxReservationsPerHolder != c.want {
			t.Errorf("%v %v: max-reservations-per-holder %d, %v; want %d", c.args, c.env, cfg.MaxReservationsPerHolder, err, c.want)
		}
	}
}

// The operators' endpoints listen on loopback unless told otherwise, and
// can be turned off.
func TestConfigAdminListen(t *testing.T) {
	env := envOf(map[string]string{"COLLAB_GITEA_TOKEN": "t0k"})
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, nil, "127.0.0.1:8788"},
		{[]string{"--admin-listen", "10.0.0.7:9100"}, nil, "10.0.0.7:9100"},
		{[]string{"--admin-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"}, nil, "127.0.0.1:0"},
		{nil, map[string]string{"COLLAB_ADMIN_LISTEN": "[::1]:8788"}, "[::1]:8788"},
		{[]string{"--admin-listen", "off"}, nil, ""},
		{[]string{"--admin-listen", ""}, nil, ""},
		{nil, map[string]string{"COLLAB_ADMIN_LISTEN": "off"}, ""},
	} {
		e := env
		if c.env != nil {
			c.env["COLLAB_GITEA_TOKEN"] = "t0k"
			e = envOf(c.env)
		}
		cfg, err := loadConfig("serve", append([]string{"--gitea-url", "http://g"}, c.args...), e, io.Discard)
		if err != nil || cfg.AdminListen != c.want {
			t.Errorf("%v %v: admin-listen %q, %v; want %q", c.args, c.env, cfg.AdminListen, err, c.want)
		}
	}
}

func TestServeHelpListsEverySetting(t *testing.T) {
	var out strings.Builder
	_, err := loadConfig("serve", []string{"--help"}, envOf(nil), &out)
	if !errors.Is(err, errHelp) {
		t.Fatalf("--help: %v", err)
	}
	for _, s := range settings {
		if !strings.Contains(out.String(), "--"+s.name) || !strings.Contains(out.String(), s.env) {
			t.Errorf("help lacks %s / %s", s.name, s.env)
		}
	}
}

func TestHealthcheckNeedsOnlyTheHTTPAddress(t *testing.T) {
	cfg, err := loadConfig("healthcheck", []string{"--http-listen", ":9999"}, probeEnv(envOf(nil)), io.Discard)
	if err != nil || cfg.HTTPListen != ":9999" {
		t.Fatalf("healthcheck config: %+v %v", cfg, err)
	}
	cfg, err = loadConfig("healthcheck", nil, probeEnv(envOf(map[string]string{"COLLAB_HTTP_LISTEN": "127.0.0.1:8000", "COLLAB_GITEA_URL": "http://g"})), io.Discard)
	if err != nil || cfg.HTTPListen != "127.0.0.1:8000" || cfg.GiteaURL != "http://g" {
		t.Fatalf("healthcheck config from env: %+v %v", cfg, err)
	}
}

// The balancers that must send PROXY headers come as addresses and CIDR
// ranges, comma-separated, from a flag or the environment.
func TestConfigProxyProtocolFrom(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"--proxy-protocol-from", "10.0.0.5"}, "", "[10.0.0.5/32]"},
		{nil, "10.0.0.5, 172.18.0.0/16,fd00::/64", "[10.0.0.5/32 172.18.0.0/16 fd00::/64]"},
		{[]string{"--proxy-protocol-from", ""}, "10.0.0.5", "[]"},
	} {
		env := map[string]string{"COLLAB_GITEA_TOKEN": "t0k"}
		if c.env != "" {
			env["COLLAB_PROXY_PROTOCOL_FROM"] = c.env
		}
		cfg, err := loadConfig("serve", append([]string{"--gitea-url", "http://g"}, c.args...), envOf(env), io.Discard)
		if err != nil || fmt.Sprint(cfg.ProxyProtocolFrom) != c.want {
			t.Errorf("%v %q: %v, %v; want %s", c.args, c.env, cfg.ProxyProtocolFrom, err, c.want)
		}
	}
}
