package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// sessionKeySize is the length of the key in sessionKeyFile. Keeping the
// key across restarts keeps browsers signed in.
const sessionKeySize = 32

// loadOrCreateSessionKey returns the key stored at path, creating it (32
// random bytes, mode 0600) on first start.
func loadOrCreateSessionKey(path string) ([]byte, error) {
	key, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return createSessionKey(path)
	}
	if err != nil {
		return nil, fmt.Errorf("session key: %w", err)
	}
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("session key %s has mode %04o: others could forge sign-ins; run chmod 600 %s", path, st.Mode().Perm(), path)
	}
	if len(key) != sessionKeySize {
		return nil, fmt.Errorf("session key %s holds %d bytes, want %d: delete it to make a new one (everyone signs in again)", path, len(key), sessionKeySize)
	}
	return key, nil
}

func createSessionKey(path string) ([]byte, error) {
	key := make([]byte, sessionKeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("session key: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".session-key-*")
	if err != nil {
		return nil, fmt.Errorf("session key: %w", err)
	}
	defer os.Remove(tmp.Name())
	err = tmp.Chmod(0o600)
	if err == nil {
		_, err = tmp.Write(key)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("session key: %w", err)
	}
	// Link, not rename: of two servers starting at once on a fresh data
	// directory, the second reads the first one's key instead of
	// replacing it.
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return loadOrCreateSessionKey(path)
		}
		return nil, fmt.Errorf("session key: %w", err)
	}
	return key, nil
}
