package main

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWebhookSecret(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, webhookSecretFile)
	if s, err := loadWebhookSecret(dir); s != "" || err != nil {
		t.Fatalf("none yet: %q %v", s, err)
	}
	s1, created, err := loadOrCreateWebhookSecret(dir)
	if raw, herr := hex.DecodeString(s1); err != nil || !created || herr != nil || len(raw) != 32 {
		t.Fatalf("create: %q %v %v", s1, created, err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %o", st.Mode().Perm())
	}
	s2, created, err := loadOrCreateWebhookSecret(dir)
	if err != nil || created || s2 != s1 {
		t.Fatalf("again: %q %v %v", s2, created, err)
	}
	if s, err := loadWebhookSecret(dir); s != s1 || err != nil {
		t.Fatalf("load: %q %v", s, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("left temporary files: %v", entries)
	}

	_ = os.Chmod(path, 0o640)
	if _, err := loadWebhookSecret(dir); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("group-readable secret accepted: %v", err)
	}
	if _, _, err := loadOrCreateWebhookSecret(dir); err == nil {
		t.Fatal("install went on past a group-readable secret")
	}
	_ = os.Chmod(path, 0o600)
	for _, bad := range []string{"", "not hex", "abcd\n", s1 + "00"} {
		_ = os.WriteFile(path, []byte(bad), 0o600)
		if _, err := loadWebhookSecret(dir); err == nil || !strings.Contains(err.Error(), "install again") {
			t.Errorf("%q accepted: %v", bad, err)
		}
	}
}
