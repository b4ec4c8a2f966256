package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/fence"
	"github.com/collab-lease/collab-lease/plugin/footer"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/gitea"
	"github.com/collab-lease/collab-lease/routes"
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
// check; it changes nothing. It fails unless every check passes. What is
// asked of Gitea is plugin/gitea's; this file says what each answer means
// for the operator.
func doctor(ctx context.Context, cfg Config, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	var checks []check
	add := func(name string, ok string, err error) { checks = append(checks, check{name, err, ok}) }

	fg, err := newForge(cfg)
	if err != nil {
		return err
	}
	version, err := fg.Version(ctx)
	add("gitea", fmt.Sprintf("%s answers, version %s", cfg.GiteaURL, version), giteaFix(cfg, err))
	giteaUp := err == nil

	if giteaUp {
		admin, err := fg.Check(ctx)
		add("token", fmt.Sprintf("valid, site administrator %s (from %s)", admin.Login, cfg.TokenSource), tokenFix(err))
		if err == nil {
			add("key lookup", "GET /api/v1/user/keys?fingerprint= answers", tokenFix(fg.CheckKeySearch(ctx)))
		}
	}

	if cfg.GiteaCustom == "" {
		add("footer", "", errors.New("not checked: pass --gitea-custom DIR (Gitea's custom directory) to check the badge footer"))
	} else {
		ft, err := newFooter(cfg)
		installed := false
		if err == nil {
			installed, err = ft.Installed()
		}
		if err == nil && !installed {
			err = fmt.Errorf("%s has no current badge block for %s (none, another sidecar's, or this one's before its badge files changed): run collab-sidecar install --gitea-custom %s, then restart Gitea",
				ft.Path(), cfg.PublicURL, cfg.GiteaCustom)
		}
		add("footer", "the badge script of "+cfg.PublicURL+" is in "+filepath.Join(cfg.GiteaCustom, footer.File), err)
	}

	found, err := checkOAuth(ctx, fg, cfg, giteaUp)
	add("oauth2", found, err)

	found, err = checkWebhook(ctx, fg, cfg, giteaUp)
	add("webhook", found, err)

	found, err = checkDataDir(ctx, cfg)
	add("data-dir", found, err)

	if giteaUp {
		found, err = checkFencing(ctx, fg)
		add("fencing", found, err)
		found, err = checkPushFence(ctx, fg, cfg)
		add("pushes", found, err)
	}

	if cfg.Gate {
		checks = append(checks, checkGate(ctx, cfg)...)
	}

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

// giteaFix says what to do when Gitea's version cannot be read.
func giteaFix(cfg Config, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, forge.ErrUnavailable):
		return fmt.Errorf("cannot reach %s: %v; check --gitea-url and that Gitea runs", cfg.GiteaURL, err)
	}
	return fmt.Errorf("%s does not answer like Gitea: %v; is --gitea-url Gitea's base URL?", cfg.GiteaURL, err)
}

// tokenFix adds the fix to a token problem the forge reports (an
// ErrConfig names its own fix).
func tokenFix(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, forge.ErrConfig):
		return err
	case errors.Is(err, forge.ErrUnavailable):
		return fmt.Errorf("%v (Gitea did not answer properly)", err)
	}
	return err
}

// checkOAuth: the application install registered exists in Gitea and
// matches this configuration.
func checkOAuth(ctx context.Context, fg *gitea.Forge, cfg Config, giteaUp bool) (string, error) {
	path := filepath.Join(cfg.DataDir, oauthAppFile)
	app, err := gitea.LoadOAuthApp(path)
	switch {
	case err != nil:
		return "", err
	case app == nil:
		return "", fmt.Errorf("no %s: sign-in for private repositories is off; run collab-sidecar install", path)
	case strings.TrimRight(app.GiteaURL, "/") != cfg.GiteaURL || app.RedirectURI != routes.RedirectURI(cfg.PublicURL):
		return "", fmt.Errorf("%s was registered for %s with redirect %s, not this configuration: run collab-sidecar install again", path, app.GiteaURL, app.RedirectURI)
	case !giteaUp:
		return "", errors.New("not checked: Gitea is unreachable")
	}
	switch err := fg.CheckOAuthApp(ctx, *app); {
	case err == nil:
		return fmt.Sprintf("application %s registered, redirect %s", app.ClientID, app.RedirectURI), nil
	case errors.Is(err, forge.ErrNotFound):
		return "", fmt.Errorf("application %d is gone from Gitea or changed (%v): run collab-sidecar install to register it again", app.ID, err)
	default:
		return "", fmt.Errorf("cannot ask Gitea about application %d: %v", app.ID, err)
	}
}

// checkWebhook: Gitea has the system webhook install registered, as
// install left it, signed with the data directory's secret. Gitea's API
// has no delivery history, so whether deliveries succeed is not checked:
// the webhook's page in Gitea's Site Administration shows them.
func checkWebhook(ctx context.Context, fg *gitea.Forge, cfg Config, giteaUp bool) (string, error) {
	secret, err := loadWebhookSecret(cfg.DataDir)
	delivery := webhookDeliveryURL(cfg)
	switch {
	case err != nil:
		return "", err
	case secret == "":
		return "", fmt.Errorf("no %s: Gitea does not tell the sidecar of closed and deleted issues; run collab-sidecar install",
			filepath.Join(cfg.DataDir, webhookSecretFile))
	case !giteaUp:
		return "", errors.New("not checked: Gitea is unreachable")
	}
	switch id, err := fg.CheckWebhook(ctx, delivery, secret); {
	case err == nil:
		return fmt.Sprintf("system webhook %d to %s, active, signed with %s (deliveries: Site Administration > Webhooks in Gitea)", id, delivery, webhookSecretFile), nil
	case errors.Is(err, forge.ErrNotFound):
		return "", fmt.Errorf("%v: run collab-sidecar install (with the same --webhook-url)", err)
	case errors.Is(err, forge.ErrConfig):
		return "", err
	default:
		return "", fmt.Errorf("cannot ask Gitea about the webhook: %v", err)
	}
}

// checkFencing lists the repositories whose protected branches require
// the fenced-merge status. Requiring none is no failure: it is the admin's
// choice.
func checkFencing(ctx context.Context, fg *gitea.Forge) (string, error) {
	fenced, truncated, err := fg.FencedRepos(ctx, fence.StatusContext)
	if err != nil {
		return "", fmt.Errorf("cannot list the branch protections: %v", err)
	}
	more := ""
	if truncated {
		more = " (only the first repositories were looked at)"
	}
	if len(fenced) == 0 {
		return "no protected branch requires " + fence.StatusContext + more + " (docs/operating.md: Fenced merges)", nil
	}
	return fmt.Sprintf("%d protected branch(es) require %s%s: %s", len(fenced), fence.StatusContext, more, strings.Join(fenced, ", ")), nil
}

// checkPushFence says whether the token may manage branch protection,
// which serve --fence-pushes needs (a failure only when it is on), and
// names the branches the push fence leaves alone because an admin's rule
// has the name the sidecar gives its own.
func checkPushFence(ctx context.Context, fg *gitea.Forge, cfg Config) (string, error) {
	state := "off (serve --fence-pushes turns it on)"
	if cfg.FencePushes {
		state = "on"
	}
	repo, err := fg.CheckBranchRules(ctx)
	switch {
	case errors.Is(err, forge.ErrNotFound):
		state += "; not checked whether the token may manage branch protection: Gitea has no repository yet"
	case err != nil && cfg.FencePushes:
		return "", fmt.Errorf("the token may not manage branch protection, which fencing pushes needs: %v; give the sidecar a site administrator's token with the write:repository scope", err)
	case err != nil:
		state += "; the token may not manage branch protection (fencing pushes would need write:repository): " + err.Error()
	default:
		state += "; the token may manage branch protection (asked on " + repo + ")"
	}
	found, err := fencedBranches(ctx, fg, cfg)
	if err != nil {
		return "", err
	}
	return state + found, nil
}

// fencedBranches says, from the ledger (if serve made one), how many
// branches carry the sidecar's rule now and which it leaves alone.
func fencedBranches(ctx context.Context, fg *gitea.Forge, cfg Config) (string, error) {
	store, err := openLedger(cfg)
	if store == nil || err != nil {
		return "", err // no ledger yet: checkDataDir says so
	}
	defer store.Close()
	rules, err := store.FenceRules(ctx)
	if err != nil {
		return "", fmt.Errorf("the ledger %s does not answer: %v", models.Redact(cfg.DB), err)
	}
	made := 0
	var alone []string
	for _, r := range rules {
		if !r.Admin {
			made++
			continue
		}
		name, err := fg.RepoName(ctx, r.RepoID)
		if err != nil {
			name = fmt.Sprintf("repository %d", r.RepoID)
		}
		alone = append(alone, fmt.Sprintf("%s (%s)", name, r.Branch))
	}
	out := fmt.Sprintf("; %d branch(es) fenced now", made)
	if len(alone) > 0 {
		out += fmt.Sprintf("; %d claimed branch(es) left alone, because an admin's rule has the name the sidecar gives its own: %s", len(alone), strings.Join(alone, ", "))
	}
	return out, nil
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
	var secrets []string
	for _, name := range append(secretFiles, filepath.Base(tokenPathOrEmpty(cfg))) {
		if name != "" && name != "." {
			secrets = append(secrets, filepath.Join(cfg.DataDir, name))
		}
	}
	// The key files may be elsewhere (shared by replicas).
	for _, p := range append(secrets, cfg.HostKey, cfg.SessionKey) {
		if st, err := os.Stat(p); err == nil && st.Mode().Perm()&0o077 != 0 {
			return "", fmt.Errorf("%s has mode %04o: run chmod 600 %s", p, st.Mode().Perm(), p)
		}
	}
	found := cfg.DataDir + " private and writable"
	db := models.Redact(cfg.DB)
	store, err := openLedger(cfg)
	if err != nil {
		return "", err
	}
	if store != nil {
		defer store.Close()
		n, err := store.CountLive(ctx)
		if err != nil {
			return "", fmt.Errorf("the ledger %s does not answer: %v", db, err)
		}
		found += fmt.Sprintf("; ledger %s opens, %d live leases", db, n)
	} else {
		found += "; no ledger yet (serve creates " + db + ")"
	}
	return found, nil
}

// openLedger opens the ledger as serve does, or returns nil if there is
// none yet. A PostgreSQL ledger is opened as serve opens it (which
// creates its tables in an empty database); a file only if serve created
// it.
func openLedger(cfg Config) (*models.Store, error) {
	if _, err := os.Stat(cfg.DB); err != nil && !models.IsPostgres(cfg.DB) {
		return nil, nil
	}
	store, err := models.Open(cfg.DB)
	if err != nil {
		return nil, fmt.Errorf("the ledger does not open: %v", err)
	}
	return store, nil
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
