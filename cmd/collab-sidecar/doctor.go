package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin"
	"github.com/collab-lease/collab-lease/plugin/gitea"
)

// errDoctor is returned when a check failed; the checks said what to fix.
var errDoctor = errors.New("some checks failed")

// check is one line of doctor's report: what was checked, and either what
// was found or what to fix.
type check struct {
	name string
	err  error  // nil: passed
	ok   string // what was found, when passed
}

// doctor checks what serve and install depend on and prints one line per
// check; it changes nothing. It fails unless every check passes.
func doctor(ctx context.Context, cfg Config, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	client := &http.Client{Timeout: cfg.ForgeTimeout}
	var checks []check
	add := func(name string, ok string, err error) { checks = append(checks, check{name, err, ok}) }

	version, err := giteaVersion(ctx, client, cfg.GiteaURL)
	add("gitea", fmt.Sprintf("%s answers, version %s", cfg.GiteaURL, version), err)
	giteaUp := err == nil

	if giteaUp {
		forge, err := gitea.New(gitea.Options{URL: cfg.GiteaURL, Token: cfg.GiteaToken, Timeout: cfg.ForgeTimeout})
		if err == nil {
			var admin plugin.User
			admin, err = forge.Check(ctx)
			add("token", fmt.Sprintf("valid, site administrator %s (from %s)", admin.Login, cfg.TokenSource), tokenFix(err))
		} else {
			add("token", "", err)
		}
		if err == nil {
			// A fingerprint no key has: the lookup must answer (an empty
			// list), which needs the read:user scope.
			_, err = forge.UserByKey(ctx, "SHA256:"+strings.Repeat("A", 43))
			if errors.Is(err, plugin.ErrNotFound) {
				err = nil
			}
			add("key lookup", "GET /api/v1/user/keys?fingerprint= answers", tokenFix(err))
		}
	}

	if cfg.GiteaCustom == "" {
		add("footer", "", errors.New("not checked: pass --gitea-custom DIR (Gitea's custom directory) to check the badge footer"))
	} else {
		installed, err := plugin.FooterInstalled(cfg.GiteaCustom, cfg.PublicURL)
		if err == nil && !installed {
			err = fmt.Errorf("%s has no badge block for %s: run collab-sidecar install --gitea-custom %s, then restart Gitea",
				filepath.Join(cfg.GiteaCustom, plugin.FooterFile), cfg.PublicURL, cfg.GiteaCustom)
		}
		add("footer", "the badge script of "+cfg.PublicURL+" is in "+filepath.Join(cfg.GiteaCustom, plugin.FooterFile), err)
	}

	add("oauth2", "", nil)
	checks[len(checks)-1].ok, checks[len(checks)-1].err = checkOAuth(ctx, client, cfg, giteaUp)

	found, err := checkDataDir(ctx, cfg)
	add("data-dir", found, err)

	failed := 0
	for _, c := range checks {
		if c.err != nil {
			failed++
			fmt.Fprintf(out, "FAIL %-10s %v\n", c.name, c.err)
		} else {
			fmt.Fprintf(out, "ok   %-10s %s\n", c.name, c.ok)
		}
	}
	if failed > 0 {
		return fmt.Errorf("%w (%d of %d)", errDoctor, failed, len(checks))
	}
	return nil
}

// giteaVersion asks Gitea's unauthenticated version endpoint.
func giteaVersion(ctx context.Context, c *http.Client, base string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/api/v1/version", nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", fmt.Errorf("cannot reach %s: %v; check --gitea-url and that Gitea runs", base, err)
	}
	defer resp.Body.Close()
	var v struct {
		Version string `json:"version"`
	}
	if resp.StatusCode != 200 || json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&v) != nil || v.Version == "" {
		return "", fmt.Errorf("%s/api/v1/version answered %s, not Gitea's version: is --gitea-url Gitea's base URL?", base, resp.Status)
	}
	return v.Version, nil
}

// tokenFix adds the fix to a token problem the forge reports.
func tokenFix(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, plugin.ErrConfig):
		return err
	case errors.Is(err, plugin.ErrUnavailable):
		return fmt.Errorf("%v (Gitea did not answer properly)", err)
	}
	return err
}

// checkOAuth: the application install registered exists in Gitea and
// matches this configuration.
func checkOAuth(ctx context.Context, c *http.Client, cfg Config, giteaUp bool) (string, error) {
	path := filepath.Join(cfg.DataDir, oauthAppFile)
	app, err := gitea.LoadOAuthApp(path)
	switch {
	case err != nil:
		return "", err
	case app == nil:
		return "", fmt.Errorf("no %s: sign-in for private repositories is off; run collab-sidecar install", path)
	case strings.TrimRight(app.GiteaURL, "/") != cfg.GiteaURL || app.RedirectURI != cfg.PublicURL+"/oauth/callback":
		return "", fmt.Errorf("%s was registered for %s with redirect %s, not this configuration: run collab-sidecar install again", path, app.GiteaURL, app.RedirectURI)
	case !giteaUp:
		return "", errors.New("not checked: Gitea is unreachable")
	}
	req, err := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/api/v1/user/applications/oauth2/%d", cfg.GiteaURL, app.ID), nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "token "+cfg.GiteaToken)
	resp, err := c.Do(req)
	if err != nil {
		return "", fmt.Errorf("cannot ask Gitea about application %d: %v", app.ID, err)
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return fmt.Sprintf("application %s registered, redirect %s", app.ClientID, app.RedirectURI), nil
	case http.StatusNotFound:
		return "", fmt.Errorf("application %d is gone from Gitea: run collab-sidecar install to register it again", app.ID)
	default:
		return "", fmt.Errorf("Gitea answered %s about application %d: the token needs the read:user scope", resp.Status, app.ID)
	}
}

// checkDataDir: the directory exists, only its owner may enter it, its
// secrets are private, and the ledger (if any yet) opens.
func checkDataDir(ctx context.Context, cfg Config) (string, error) {
	st, err := os.Stat(cfg.DataDir)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%s does not exist: serve creates it on first start (mode 700)", cfg.DataDir)
	}
	if err != nil {
		return "", err
	}
	if !st.IsDir() {
		return "", fmt.Errorf("%s is not a directory", cfg.DataDir)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s has mode %04o: others may read the ledger and keys; run chmod 700 %s", cfg.DataDir, st.Mode().Perm(), cfg.DataDir)
	}
	probe, err := os.CreateTemp(cfg.DataDir, ".doctor-*")
	if err != nil {
		return "", fmt.Errorf("%s is not writable: %v", cfg.DataDir, err)
	}
	probe.Close()
	os.Remove(probe.Name())
	for _, name := range []string{"ssh_host_ed25519_key", sessionKeyFile, oauthAppFile, filepath.Base(tokenPathOrEmpty(cfg))} {
		if name == "" || name == "." {
			continue
		}
		p := filepath.Join(cfg.DataDir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().Perm()&0o077 != 0 {
			return "", fmt.Errorf("%s has mode %04o: run chmod 600 %s", p, st.Mode().Perm(), p)
		}
	}
	found := cfg.DataDir + " private and writable"
	if _, err := os.Stat(cfg.DB); err == nil {
		store, err := models.Open(cfg.DB)
		if err != nil {
			return "", fmt.Errorf("the ledger %s does not open: %v", cfg.DB, err)
		}
		defer store.Close()
		n, err := store.CountLive(ctx)
		if err != nil {
			return "", fmt.Errorf("the ledger %s does not answer: %v", cfg.DB, err)
		}
		found += fmt.Sprintf("; ledger %s opens, %d live leases", cfg.DB, n)
	} else {
		found += "; no ledger yet (serve creates " + cfg.DB + ")"
	}
	return found, nil
}

// tokenPathOrEmpty is the token file's path if it lies in the data dir.
func tokenPathOrEmpty(cfg Config) string {
	if cfg.TokenSource == "" || cfg.TokenSource == tokenEnv {
		return ""
	}
	if filepath.Dir(cfg.TokenSource) == filepath.Clean(cfg.DataDir) {
		return cfg.TokenSource
	}
	return ""
}
