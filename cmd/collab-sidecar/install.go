package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/collab-lease/collab-lease/assets"
	"github.com/collab-lease/collab-lease/plugin/footer"
	"github.com/collab-lease/collab-lease/plugin/gitea"
	"github.com/collab-lease/collab-lease/routes"
)

// installFlags are the flags of install beyond the shared settings.
type installFlags struct{ uninstall, force bool }

func (f *installFlags) define(fs *flag.FlagSet) {
	fs.BoolVar(&f.uninstall, "uninstall", false, "remove from Gitea what install added: the footer block, the OAuth2 application and the webhook (and their files in the data directory)")
	fs.BoolVar(&f.force, "force", false, "edit the footer even through a symbolic link, a hard link or a file or directory of another owner below --gitea-custom (refused otherwise)")
}

// webhookDeliveryURL is where Gitea delivers the sidecar's webhook.
func webhookDeliveryURL(cfg Config) string { return cfg.WebhookURL + routes.WebhookPath }

// newFooter is the footer installer for this configuration, with the
// badge files this binary embeds (and so its sidecar serves).
func newFooter(cfg Config) (footer.Footer, error) {
	bundle, err := assets.Load()
	if err != nil {
		return footer.Footer{}, fmt.Errorf("badge assets: %w", err)
	}
	return footer.Footer{CustomDir: cfg.GiteaCustom, PublicURL: cfg.PublicURL, Assets: bundle}, nil
}

// install wires a Gitea to this sidecar: the OAuth2 application (for
// sign-in), the system webhook (so closes and deletions reach the ledger)
// and the badge tags in Gitea's custom footer. Every step is idempotent.
// The footer is checked before anything is registered, so a damaged footer
// leaves Gitea and the files as they were.
func install(ctx context.Context, cfg Config, f installFlags, out io.Writer) error {
	if cfg.GiteaCustom == "" {
		return errors.New("gitea-custom is required: pass --gitea-custom DIR, Gitea's custom directory ($GITEA_CUSTOM, e.g. /var/lib/gitea/custom), or set COLLAB_GITEA_CUSTOM")
	}
	ft, err := newFooter(cfg)
	if err != nil {
		return err
	}
	ft.Force = f.force
	if err := ft.Check(); err != nil {
		return err
	}
	if f.uninstall {
		return uninstall(ctx, cfg, ft, out)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data-dir: %w", err)
	}
	appFile := filepath.Join(cfg.DataDir, oauthAppFile)
	stored, err := gitea.LoadOAuthApp(appFile)
	if err != nil {
		return err
	}
	fg, err := newForge(cfg)
	if err != nil {
		return err
	}
	app, how, err := fg.RegisterOAuthApp(ctx, routes.RedirectURI(cfg.PublicURL), stored)
	if err != nil {
		return err
	}
	if how != gitea.Reused {
		if err := gitea.SaveOAuthApp(appFile, app); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "OAuth2 application %q (client ID %s): %s; credentials in %s\n", gitea.OAuthAppName, app.ClientID, how, appFile)

	secret, secretMade, err := loadOrCreateWebhookSecret(cfg.DataDir)
	if err != nil {
		return err
	}
	delivery := webhookDeliveryURL(cfg)
	hookID, hookHow, err := fg.RegisterWebhook(ctx, delivery, secret)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Webhook: system webhook %d to %s: %s; secret in %s\n", hookID, delivery, hookHow, filepath.Join(cfg.DataDir, webhookSecretFile))

	footerPath, changed, err := ft.Install()
	if err != nil {
		return err
	}
	if changed {
		fmt.Fprintf(out, "Footer: wrote the collab-lease block (script and style from %s/assets/) into %s\n", cfg.PublicURL, footerPath)
	} else {
		fmt.Fprintf(out, "Footer: %s already has the collab-lease block; left unchanged\n", footerPath)
	}
	restartServe := how != gitea.Reused || secretMade
	if changed || restartServe || hookHow != gitea.Reused {
		fmt.Fprintln(out, "\nNext:")
		if changed {
			fmt.Fprintln(out, "  - restart Gitea once: it reads custom templates when it starts")
		}
		if restartServe {
			fmt.Fprintln(out, "  - restart collab-sidecar serve if it is running: it reads the OAuth2 credentials and the webhook secret when it starts")
		}
		if hookHow != gitea.Reused {
			fmt.Fprintf(out, "  - Gitea delivers webhooks only to hosts its app.ini allows ([webhook] ALLOWED_HOST_LIST, by default external ones only): if %s is on a private or loopback address, add it there and restart Gitea\n", cfg.WebhookURL)
		}
	}
	printFencedPushes(out, cfg)
	installGate(cfg, out)
	return nil
}

// printFencedPushes tells how to turn the push fence on, or that it is.
func printFencedPushes(out io.Writer, cfg Config) {
	if cfg.FencePushes {
		fmt.Fprintln(out, "\nFenced pushes: on. While a pull request, or an issue it closes, is claimed, Gitea takes pushes to its branch only from the holder's account; collab-sidecar doctor checks that the token may manage branch protection (write:repository).")
		return
	}
	fmt.Fprintln(out, "\nFenced pushes: off. To have Gitea refuse pushes to a claimed pull request's branch from anyone but the holder's account,")
	fmt.Fprintln(out, "  - make sure the sidecar's Gitea token has the write:repository scope (the fenced-merge statuses need it too),")
	fmt.Fprintln(out, "  - run collab-sidecar serve with --fence-pushes (or COLLAB_FENCE_PUSHES=true, or fence-pushes = true in the config file),")
	fmt.Fprintln(out, "  - and check with collab-sidecar doctor --fence-pushes (docs/operating.md: Fenced pushes).")
}

// uninstall removes what install added, Gitea's side first: a failure
// there leaves the data directory's files, which say what to remove when
// it is run again. What is gone already is no error. The footer was
// checked before (install), so one it would refuse stops everything.
func uninstall(ctx context.Context, cfg Config, ft footer.Footer, out io.Writer) error {
	fg, err := newForge(cfg)
	if err != nil {
		return err
	}
	delivery := webhookDeliveryURL(cfg)
	n, err := fg.RemoveWebhook(ctx, delivery)
	if err != nil {
		return err
	}
	if n == 0 {
		fmt.Fprintf(out, "Webhook: Gitea has none to %s; nothing to do\n", delivery)
	} else {
		fmt.Fprintf(out, "Webhook: removed %d from Gitea\n", n)
	}

	appFile := filepath.Join(cfg.DataDir, oauthAppFile)
	// A damaged or readable file still names the application to delete;
	// without it, the application is found by its name and redirect URI.
	stored, _ := gitea.LoadOAuthApp(appFile)
	n, err = fg.RemoveOAuthApp(ctx, routes.RedirectURI(cfg.PublicURL), stored)
	if err != nil {
		return err
	}
	if n == 0 {
		fmt.Fprintf(out, "OAuth2 application %q: none in Gitea; nothing to do\n", gitea.OAuthAppName)
	} else {
		fmt.Fprintf(out, "OAuth2 application %q: removed from Gitea\n", gitea.OAuthAppName)
	}
	for _, name := range []string{webhookSecretFile, oauthAppFile} {
		p := filepath.Join(cfg.DataDir, name)
		switch err := os.Remove(p); {
		case err == nil:
			fmt.Fprintf(out, "Removed %s\n", p)
		case !errors.Is(err, fs.ErrNotExist):
			return err
		}
	}

	footerPath, changed, err := ft.Uninstall()
	if err != nil {
		return err
	}
	if !changed {
		fmt.Fprintf(out, "Footer: no collab-lease block in %s; nothing to do\n", footerPath)
		return nil
	}
	fmt.Fprintf(out, "Footer: removed the collab-lease block from %s\n", footerPath)
	fmt.Fprintln(out, "\nNext:")
	fmt.Fprintln(out, "  - restart Gitea once so its pages stop including the badge script")
	return nil
}
