package ssh

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	gossh "golang.org/x/crypto/ssh"
)

// LoadOrCreateHostKey returns the ed25519 host key stored at path, creating
// it (mode 0600, written atomically) on first use, so clients' known_hosts
// entries stay valid across restarts.
func LoadOrCreateHostKey(path string) (gossh.Signer, error) {
	pemBytes, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return createHostKey(path)
	}
	if err != nil {
		return nil, fmt.Errorf("read host key: %w", err)
	}
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("host key %s has mode %o: it must not be readable by others (chmod 600 %s)", path, st.Mode().Perm(), path)
	}
	signer, err := gossh.ParsePrivateKey(pemBytes)
	if err != nil {
		return nil, fmt.Errorf("parse host key %s: %w", path, err)
	}
	return signer, nil
}

func createHostKey(path string) (gossh.Signer, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate host key: %w", err)
	}
	block, err := gossh.MarshalPrivateKey(priv, "collab-lease host key")
	if err != nil {
		return nil, fmt.Errorf("encode host key: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".hostkey-*")
	if err != nil {
		return nil, fmt.Errorf("create host key: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("create host key: %w", err)
	}
	if _, err := tmp.Write(pem.EncodeToMemory(block)); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("write host key: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("write host key: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("write host key: %w", err)
	}
	// Link, not rename: if two servers start at once on a fresh data
	// directory, the second must not replace the key the first serves.
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return LoadOrCreateHostKey(path)
		}
		return nil, fmt.Errorf("install host key: %w", err)
	}
	return gossh.NewSignerFromKey(priv)
}
