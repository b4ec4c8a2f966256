package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/collab-lease/collab-lease/assets"
	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/gitea"
	"github.com/collab-lease/collab-lease/routes"
	"github.com/collab-lease/collab-lease/ssh"
)

var _ routes.SignIn = (*gitea.OAuthClient)(nil)

func newLogger(cfg Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// serve wires the ledger, the forge, the SSH server and the HTTP server,
// and runs until ctx ends (SIGINT, SIGTERM); then it stops accepting, lets
// running commands and requests finish within shutdownGrace, and closes
// the database.
func serve(ctx context.Context, cfg Config, logw io.Writer) error {
	log := newLogger(cfg, logw)
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data-dir: %w", err)
	}
	store, err := models.Open(cfg.DB, models.WithMaxTTL(cfg.MaxTTL))
	if err != nil {
		return err
	}
	defer store.Close()
	met := newMetrics(store)
	forge, err := newForge(cfg, func(o *gitea.Options) { o.WrapTransport = met.wrapGitea })
	if err != nil {
		return err
	}
	hostKey, err := ssh.LoadOrCreateHostKey(filepath.Join(cfg.DataDir, hostKeyFile))
	if err != nil {
		return err
	}
	web, err := newHTTPHandler(cfg, store, forge, met.handler(), log)
	if err != nil {
		return err
	}

	sshL, err := net.Listen("tcp", cfg.SSHListen)
	if err != nil {
		return fmt.Errorf("ssh-listen: %w", err)
	}
	httpL, err := net.Listen("tcp", cfg.HTTPListen)
	if err != nil {
		sshL.Close()
		return fmt.Errorf("http-listen: %w", err)
	}
	srv := &ssh.Server{HostKey: hostKey, Forge: forge, Ledger: store, Logger: log, MaxTTL: cfg.MaxTTL,
		CommandTimeout: operationTimeout(cfg), Observe: met.observe, ConnDelta: met.connDelta}
	hs := &http.Server{
		Handler:           web,
		ReadHeaderTimeout: httpReadHeaderTimeout,
		ReadTimeout:       httpReadTimeout,
		WriteTimeout:      httpWriteTimeout(cfg),
		IdleTimeout:       httpIdleTimeout,
		MaxHeaderBytes:    httpMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	log.Info("ssh listening", "addr", sshL.Addr().String(), "gitea", cfg.GiteaURL, "db", cfg.DB)
	log.Info("http listening", "addr", httpL.Addr().String(), "public_url", cfg.PublicURL)

	sshErr, httpErr := make(chan error, 1), make(chan error, 1)
	go func() { sshErr <- srv.Serve(sshL) }()
	go func() { httpErr <- hs.Serve(httpL) }()
	var failed error
	select {
	case err := <-sshErr:
		failed = fmt.Errorf("ssh server: %w", err)
		sshErr <- nil
	case err := <-httpErr:
		failed = fmt.Errorf("http server: %w", err)
		httpErr <- nil
	case <-ctx.Done():
	}
	log.Info("shutting down", "grace", shutdownGrace.String())
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := srv.Shutdown(sctx); err != nil {
			log.Warn("shutdown cut running commands short", "err", err)
		}
	})
	wg.Go(func() {
		if err := hs.Shutdown(sctx); err != nil {
			log.Warn("shutdown cut running requests short", "err", err)
			_ = hs.Close()
		}
	})
	wg.Wait()
	if err := <-sshErr; err != nil && !errors.Is(err, ssh.ErrServerClosed) && failed == nil {
		failed = fmt.Errorf("ssh server: %w", err)
	}
	if err := <-httpErr; err != nil && !errors.Is(err, http.ErrServerClosed) && failed == nil {
		failed = fmt.Errorf("http server: %w", err)
	}
	if failed != nil {
		return failed
	}
	log.Info("stopped")
	return nil
}

// newHTTPHandler wires the HTTP API: the badge assets, the session key and,
// if `collab-sidecar install` registered one, the OAuth2 application.
func newHTTPHandler(cfg Config, store *models.Store, forge *gitea.Forge, metrics http.Handler, log *slog.Logger) (http.Handler, error) {
	bundle, err := assets.Load()
	if err != nil {
		return nil, fmt.Errorf("badge assets: %w", err)
	}
	key, err := loadOrCreateSessionKey(filepath.Join(cfg.DataDir, sessionKeyFile))
	if err != nil {
		return nil, err
	}
	app, err := loadOAuth(cfg, log)
	if err != nil {
		return nil, err
	}
	var signIn routes.SignIn
	if app != nil {
		signIn = forge.OAuthClient(*app)
	}
	return routes.New(routes.Options{
		Ledger: store, Forge: forge, GiteaURL: cfg.GiteaURL, PublicURL: cfg.PublicURL,
		SignIn: signIn, SessionKey: key, Assets: bundle, Logger: log,
		RequestTimeout: operationTimeout(cfg),
		Metrics:        metrics,
		Ready: func(ctx context.Context) error {
			_, err := forge.Check(ctx)
			return err
		},
	})
}

// loadOAuth reads the OAuth2 application that install registered. Without
// one (or with one registered for another Gitea or public URL) sign-in is
// disabled, and the log says once how to enable it.
func loadOAuth(cfg Config, log *slog.Logger) (*gitea.OAuthApp, error) {
	path := filepath.Join(cfg.DataDir, oauthAppFile)
	app, err := gitea.LoadOAuthApp(path)
	if err != nil {
		return nil, err
	}
	redirect := routes.RedirectURI(cfg.PublicURL)
	switch {
	case app == nil:
		log.Info("sign-in disabled: no OAuth2 application registered; run collab-sidecar install to enable it", "file", path)
		return nil, nil
	case strings.TrimRight(app.GiteaURL, "/") != cfg.GiteaURL || app.RedirectURI != redirect:
		log.Warn("sign-in disabled: the OAuth2 application was registered for another Gitea or public URL; run collab-sidecar install again",
			"file", path, "registered_gitea", app.GiteaURL, "registered_redirect", app.RedirectURI, "want_redirect", redirect)
		return nil, nil
	}
	log.Info("sign-in enabled", "client_id", app.ClientID)
	return app, nil
}

// orDisabled maps a configured 0 ("do not cache") to the forge's "disabled".
func orDisabled(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// newForge is the Gitea client of every subcommand, from the settings;
// mod adjusts its options (serve counts its requests).
func newForge(cfg Config, mod ...func(*gitea.Options)) (*gitea.Forge, error) {
	o := gitea.Options{URL: cfg.GiteaURL, Token: cfg.GiteaToken, Timeout: cfg.ForgeTimeout,
		KeyCacheTTL: orDisabled(cfg.KeyCacheTTL), PermCacheTTL: orDisabled(cfg.PermCacheTTL)}
	for _, m := range mod {
		m(&o)
	}
	return gitea.New(o)
}
