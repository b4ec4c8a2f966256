package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/collab-lease/collab-lease/ssh"
)

// The host key and session key default to the data directory, and
// --host-key / --session-key (or their environment names) put them
// elsewhere, so replicas can share one pair of files.
func TestKeyFilesFollowTheirSettings(t *testing.T) {
	env := map[string]string{"COLLAB_GITEA_TOKEN": "t0k"}
	cfg, err := loadConfig("serve", []string{"--gitea-url", "http://g", "--data-dir", "d"}, envOf(env), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HostKey != filepath.Join("d", hostKeyFile) || cfg.SessionKey != filepath.Join("d", sessionKeyFile) {
		t.Fatalf("defaults: host key %q, session key %q", cfg.HostKey, cfg.SessionKey)
	}
	env["COLLAB_SESSION_KEY"] = "/shared/session.key"
	cfg, err = loadConfig("serve", []string{"--gitea-url", "http://g", "--host-key", "/shared/host_key"}, envOf(env), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HostKey != "/shared/host_key" || cfg.SessionKey != "/shared/session.key" {
		t.Fatalf("set: host key %q, session key %q", cfg.HostKey, cfg.SessionKey)
	}
}

// Replicas starting at once on a fresh shared directory each create a key
// and link it into place; exactly one wins and every replica reads the
// winner's, so all serve one host key and accept one another's cookies.
func TestKeysCreatedOnceWhenReplicasStartAtOnce(t *testing.T) {
	dir := t.TempDir()
	hostPath, sessionPath := filepath.Join(dir, "host_key"), filepath.Join(dir, "session.key")
	const replicas = 16
	hostKeys := make([][]byte, replicas)
	sessionKeys := make([][]byte, replicas)
	errs := make(chan error, 2*replicas)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Go(func() {
			<-start
			signer, err := ssh.LoadOrCreateHostKey(hostPath)
			if err != nil {
				errs <- err
				return
			}
			hostKeys[i] = signer.PublicKey().Marshal()
		})
		wg.Go(func() {
			<-start
			key, err := loadOrCreateSessionKey(sessionPath)
			if err != nil {
				errs <- err
				return
			}
			sessionKeys[i] = key
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := 1; i < replicas; i++ {
		if !bytes.Equal(hostKeys[i], hostKeys[0]) {
			t.Fatalf("replica %d serves another host key than replica 0", i)
		}
		if !bytes.Equal(sessionKeys[i], sessionKeys[0]) {
			t.Fatalf("replica %d signs with another session key than replica 0", i)
		}
	}
	onDisk, err := os.ReadFile(sessionPath)
	if err != nil || !bytes.Equal(onDisk, sessionKeys[0]) {
		t.Fatalf("session key on disk is not the one served: %v", err)
	}
	for _, p := range []string{hostPath, sessionPath} {
		st, err := os.Stat(p)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, mode %v", p, err, st.Mode())
		}
	}
	left, _ := os.ReadDir(dir)
	if len(left) != 2 {
		t.Fatalf("temporary files left behind: %v", left)
	}
}

// doctor checks the key files where the settings put them, not only in
// the data directory: one others may read is named.
func TestDoctorChecksKeyFilesOutsideTheDataDir(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	hostKey := writeFile(t, "host_key", "k", 0o600)
	sessionKey := writeFile(t, "session.key", "k", 0o644)
	cfg, err := loadConfig("doctor", []string{"--gitea-url", "http://127.0.0.1:1", "--data-dir", dataDir,
		"--host-key", hostKey, "--session-key", sessionKey}, envOf(map[string]string{"COLLAB_GITEA_TOKEN": "t0k"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := checkDataDir(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), sessionKey) {
		t.Fatalf("doctor with a session key others may read: %v", err)
	}
	if err := os.Chmod(sessionKey, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := checkDataDir(context.Background(), cfg); err != nil {
		t.Fatalf("doctor with private key files: %v", err)
	}
}
