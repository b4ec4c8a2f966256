package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/gitea"
	"github.com/collab-lease/collab-lease/ssh"
)

// shutdownGrace bounds how long in-flight commands may run after SIGTERM.
const shutdownGrace = 20 * time.Second

func newLogger(cfg Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// serve wires the ledger, the forge and the SSH server, and runs until ctx
// ends (SIGINT, SIGTERM); then it stops accepting, lets running commands
// finish within shutdownGrace, and closes the database.
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
	forge, err := gitea.New(gitea.Options{URL: cfg.GiteaURL, Token: cfg.GiteaToken, Timeout: cfg.ForgeTimeout,
		KeyCacheTTL: orDisabled(cfg.KeyCacheTTL), PermCacheTTL: orDisabled(cfg.PermCacheTTL)})
	if err != nil {
		return err
	}
	hostKey, err := ssh.LoadOrCreateHostKey(filepath.Join(cfg.DataDir, "ssh_host_ed25519_key"))
	if err != nil {
		return err
	}
	sshL, err := net.Listen("tcp", cfg.SSHListen)
	if err != nil {
		return fmt.Errorf("ssh-listen: %w", err)
	}
	srv := &ssh.Server{HostKey: hostKey, Forge: forge, Ledger: store, Logger: log, MaxTTL: cfg.MaxTTL,
		CommandTimeout: 3 * cfg.ForgeTimeout}
	log.Info("ssh listening", "addr", sshL.Addr().String(), "gitea", cfg.GiteaURL, "db", cfg.DB)

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(sshL) }()
	select {
	case err := <-errc:
		return fmt.Errorf("ssh server: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down", "grace", shutdownGrace.String())
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("shutdown cut running commands short", "err", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, ssh.ErrServerClosed) {
		return err
	}
	log.Info("stopped")
	return nil
}

// orDisabled maps a configured 0 ("do not cache") to the forge's "disabled".
func orDisabled(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
