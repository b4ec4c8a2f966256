package main

import (
	"crypto/rand"
	"fmt"
	"io/fs"

	"github.com/collab-lease/collab-lease/internal/osfile"
)

// sessionKeySize is the length of the key in sessionKeyFile. Keeping the
// key across restarts keeps browsers signed in.
const sessionKeySize = 32

// loadOrCreateSessionKey returns the key stored at path, creating it (32
// random bytes, mode 0600) on first start. Of two servers starting at once
// on a fresh data directory, the second reads the first one's key.
func loadOrCreateSessionKey(path string) ([]byte, error) {
	key, created, err := osfile.Secret{Path: path, Temp: ".session-key-*",
		Refuse: func(path string, mode fs.FileMode) error {
			return fmt.Errorf("session key %s has mode %04o: others could forge sign-ins; run chmod 600 %s", path, mode, path)
		},
		Wrap: func(_ string, err error) error { return fmt.Errorf("session key: %w", err) },
	}.LoadOrCreate(func() ([]byte, error) {
		key := make([]byte, sessionKeySize)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("session key: %w", err)
		}
		return key, nil
	})
	if err != nil {
		return nil, err
	}
	if !created && len(key) != sessionKeySize {
		return nil, fmt.Errorf("session key %s holds %d bytes, want %d: delete it to make a new one (everyone signs in again)", path, len(key), sessionKeySize)
	}
	return key, nil
}
