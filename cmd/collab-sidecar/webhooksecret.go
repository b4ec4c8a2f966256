package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/collab-lease/collab-lease/internal/osfile"
)

// The secret Gitea signs its webhook deliveries with (HMAC-SHA256 of the
// body): 32 random bytes, kept hex-encoded in webhookSecretFile. The hex
// text itself is the secret, on both sides: install gives it to Gitea as
// is, serve keys the HMAC with it. To rotate it, delete the file and run
// install again: it makes a new one and replaces the webhook (Gitea
// cannot change a webhook's secret in place).

// webhookSecretSize is the number of random bytes in the secret.
const webhookSecretSize = 32

// webhookSecretOf is the secret's file in dataDir, with its errors' words.
func webhookSecretOf(dataDir string) osfile.Secret {
	return osfile.Secret{Path: filepath.Join(dataDir, webhookSecretFile), Temp: ".webhook-secret-*",
		Refuse: func(path string, mode fs.FileMode) error {
			return fmt.Errorf("webhook secret %s has mode %04o: others could forge Gitea's deliveries; run chmod 600 %s", path, mode, path)
		},
		Wrap: func(_ string, err error) error { return fmt.Errorf("webhook secret: %w", err) },
	}
}

// loadWebhookSecret reads the secret from dataDir: "" and no error when
// there is none (install has not run).
func loadWebhookSecret(dataDir string) (string, error) {
	file := webhookSecretOf(dataDir)
	b, err := file.Read()
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return parseWebhookSecret(file.Path, b)
}

// parseWebhookSecret checks what the secret's file at path holds.
func parseWebhookSecret(path string, b []byte) (string, error) {
	secret := strings.TrimSpace(string(b))
	if raw, err := hex.DecodeString(secret); err != nil || len(raw) != webhookSecretSize {
		return "", fmt.Errorf("webhook secret %s does not hold %d hex-encoded bytes: delete it and run collab-sidecar install again", path, webhookSecretSize)
	}
	return secret, nil
}

// loadOrCreateWebhookSecret returns the secret in dataDir, making one
// (mode 0600) if there is none; created says which. Of two installs at
// once, the second uses the first one's secret instead of replacing it.
func loadOrCreateWebhookSecret(dataDir string) (secret string, created bool, err error) {
	file := webhookSecretOf(dataDir)
	b, created, err := file.LoadOrCreate(func() ([]byte, error) {
		raw := make([]byte, webhookSecretSize)
		if _, err := rand.Read(raw); err != nil {
			return nil, fmt.Errorf("webhook secret: %w", err)
		}
		return []byte(hex.EncodeToString(raw) + "\n"), nil
	})
	if err != nil {
		return "", false, err
	}
	secret, err = parseWebhookSecret(file.Path, b)
	return secret, created, err
}
