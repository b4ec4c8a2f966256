package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The secret Gitea signs its webhook deliveries with (HMAC-SHA256 of the
// body): 32 random bytes, kept hex-encoded in webhookSecretFile. The hex
// text itself is the secret, on both sides: install gives it to Gitea as
// is, serve keys the HMAC with it. To rotate it, delete the file and run
// install again: it makes a new one and replaces the webhook (Gitea
// cannot change a webhook's secret in place).

// webhookSecretSize is the number of random bytes in the secret.
const webhookSecretSize = 32

// loadWebhookSecret reads the secret from dataDir: "" and no error when
// there is none (install has not run).
func loadWebhookSecret(dataDir string) (string, error) {
	path := filepath.Join(dataDir, webhookSecretFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("webhook secret: %w", err)
	}
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("webhook secret %s has mode %04o: others could forge Gitea's deliveries; run chmod 600 %s", path, st.Mode().Perm(), path)
	}
	secret := strings.TrimSpace(string(b))
	if raw, err := hex.DecodeString(secret); err != nil || len(raw) != webhookSecretSize {
		return "", fmt.Errorf("webhook secret %s does not hold %d hex-encoded bytes: delete it and run collab-sidecar install again", path, webhookSecretSize)
	}
	return secret, nil
}

// loadOrCreateWebhookSecret returns the secret in dataDir, making one
// (mode 0600) if there is none; created says which.
func loadOrCreateWebhookSecret(dataDir string) (secret string, created bool, err error) {
	secret, err = loadWebhookSecret(dataDir)
	if err != nil || secret != "" {
		return secret, false, err
	}
	raw := make([]byte, webhookSecretSize)
	if _, err := rand.Read(raw); err != nil {
		return "", false, fmt.Errorf("webhook secret: %w", err)
	}
	secret = hex.EncodeToString(raw)
	tmp, err := os.CreateTemp(dataDir, ".webhook-secret-*")
	if err != nil {
		return "", false, fmt.Errorf("webhook secret: %w", err)
	}
	defer os.Remove(tmp.Name())
	err = tmp.Chmod(0o600)
	if err == nil {
		_, err = tmp.WriteString(secret + "\n")
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", false, fmt.Errorf("webhook secret: %w", err)
	}
	// Link, not rename: of two installs at once, the second uses the
	// first one's secret instead of replacing it.
	if err := os.Link(tmp.Name(), filepath.Join(dataDir, webhookSecretFile)); err != nil {
		if errors.Is(err, fs.ErrExist) {
			secret, err := loadWebhookSecret(dataDir)
			return secret, false, err
		}
		return "", false, fmt.Errorf("webhook secret: %w", err)
	}
	return secret, true, nil
}
