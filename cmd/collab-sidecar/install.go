package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/collab-lease/collab-lease/plugin"
	"github.com/collab-lease/collab-lease/plugin/gitea"
	"github.com/collab-lease/collab-lease/routes"
)

// installFlags are the flags of install beyond the shared settings.
type installFlags struct{ uninstall bool }

func (f *installFlags) define(fs *flag.FlagSet) {
	fs.BoolVar(&f.uninstall, "uninstall", false, "remove the collab-lease block from Gitea's footer template (and nothing else)")
}

// install wires a Gitea to this sidecar: the OAuth2 application (for
// sign-in) and the badge tags in Gitea's custom footer. Both steps are
// idempotent. The footer is checked before anything is registered, so a
// damaged footer leaves Gitea and the files as they were.
func install(ctx context.Context, cfg Config, f installFlags, out io.Writer) error {
	if cfg.GiteaCustom == "" {
		return errors.New("gitea-custom is required: pass --gitea-custom DIR, Gitea's custom directory ($GITEA_CUSTOM, e.g. /var/lib/gitea/custom), or set COLLAB_GITEA_CUSTOM")
	}
	if f.uninstall {
		return uninstall(cfg, out)
	}
	if err := plugin.CheckFooter(cfg.GiteaCustom, cfg.PublicURL); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data-dir: %w", err)
	}
	appFile := filepath.Join(cfg.DataDir, oauthAppFile)
	stored, err := gitea.LoadOAuthApp(appFile)
	if err != nil {
		return err
	}
	forge, err := newForge(cfg)
	if err != nil {
		return err
	}
	app, how, err := forge.RegisterOAuthApp(ctx, routes.RedirectURI(cfg.PublicURL), stored)
	if err != nil {
		return err
	}
	if how != gitea.Reused {
		if err := gitea.SaveOAuthApp(appFile, app); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "OAuth2 application %q (client ID %s): %s; credentials in %s\n", gitea.OAuthAppName, app.ClientID, how, appFile)

	footer, changed, err := plugin.InstallFooter(cfg.GiteaCustom, cfg.PublicURL)
	if err != nil {
		return err
	}
	if changed {
		fmt.Fprintf(out, "Footer: wrote the collab-lease block (script and style from %s/assets/) into %s\n", cfg.PublicURL, footer)
	} else {
		fmt.Fprintf(out, "Footer: %s already has the collab-lease block; left unchanged\n", footer)
	}
	if changed || how != gitea.Reused {
		fmt.Fprintln(out, "\nNext:")
		if changed {
			fmt.Fprintln(out, "  - restart Gitea once: it reads custom templates when it starts")
		}
		if how != gitea.Reused {
			fmt.Fprintln(out, "  - restart collab-sidecar serve if it is running: it reads the OAuth2 credentials when it starts")
		}
	}
	return nil
}

func uninstall(cfg Config, out io.Writer) error {
	footer, changed, err := plugin.UninstallFooter(cfg.GiteaCustom)
	if err != nil {
		return err
	}
	if !changed {
		fmt.Fprintf(out, "Footer: no collab-lease block in %s; nothing to do\n", footer)
		return nil
	}
	fmt.Fprintf(out, "Footer: removed the collab-lease block from %s\n", footer)
	fmt.Fprintln(out, "\nNext:")
	fmt.Fprintln(out, "  - restart Gitea once so its pages stop including the badge script")
	fmt.Fprintf(out, "  - the OAuth2 application %q stays registered in Gitea (delete it in the administrator's Settings > Applications if it is no longer wanted)\n", gitea.OAuthAppName)
	return nil
}
