package ssh

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"io/fs"

	gossh "golang.org/x/crypto/ssh"

	"github.com/collab-lease/collab-lease/internal/osfile"
)

// LoadOrCreateHostKey returns the ed25519 host key stored at path, creating
// it (mode 0600, written atomically) on first use, so clients' known_hosts
// entries stay valid across restarts. If two servers start at once on a
// fresh data directory, the second serves the key the first one made.
func LoadOrCreateHostKey(path string) (gossh.Signer, error) {
	var priv ed25519.PrivateKey
	pemBytes, created, err := hostKeyFile(path).LoadOrCreate(func() ([]byte, error) {
		var err error
		if _, priv, err = ed25519.GenerateKey(rand.Reader); err != nil {
			return nil, fmt.Errorf("generate host key: %w", err)
		}
		block, err := gossh.MarshalPrivateKey(priv, "collab-lease host key")
		if err != nil {
			return nil, fmt.Errorf("encode host key: %w", err)
		}
		return pem.EncodeToMemory(block), nil
	})
	if err != nil {
		return nil, err
	}
	if created {
		return gossh.NewSignerFromKey(priv)
	}
	signer, err := gossh.ParsePrivateKey(pemBytes)
	if err != nil {
		return nil, fmt.Errorf("parse host key %s: %w", path, err)
	}
	return signer, nil
}

// hostKeyFile is the host key's file at path, with its errors' words.
func hostKeyFile(path string) osfile.Secret {
	return osfile.Secret{Path: path, Temp: ".hostkey-*",
		Refuse: func(path string, mode fs.FileMode) error {
			return fmt.Errorf("host key %s has mode %o: it must not be readable by others (chmod 600 %s)", path, mode, path)
		},
		Wrap: func(op string, err error) error { return fmt.Errorf("%s host key: %w", op, err) },
	}
}
