package osfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// A Secret is a file that holds a secret (a key, a shared secret): only
// its owner may read it, and it is made once, on first use, by whichever
// process gets there first. Its users name it and word its errors.
type Secret struct {
	Path string
	// Temp is the pattern (os.CreateTemp's) of the temporary file a new
	// secret is written to, in Path's directory.
	Temp string
	// Refuse is the error for a file at path whose mode lets its group or
	// others in; nil gives a plain one.
	Refuse func(path string, mode fs.FileMode) error
	// Wrap is the error for a failed step: op is "read" (the file),
	// "create" (the temporary file), "write" (it) or "install" (the
	// link into place); nil gives "op secret: err".
	Wrap func(op string, err error) error
}

// Read returns the bytes of the secret file, refusing one whose group or
// others have any permission on it. A missing file gives os.ReadFile's
// error, for errors.Is(err, fs.ErrNotExist).
func (s Secret) Read() ([]byte, error) {
	b, err := os.ReadFile(s.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err != nil {
		return nil, s.wrap("read", err)
	}
	if st, err := os.Stat(s.Path); err == nil && st.Mode().Perm()&0o077 != 0 {
		return nil, s.refuse(st.Mode().Perm())
	}
	return b, nil
}

// LoadOrCreate returns the secret file's bytes as Read does or, where
// there is no file, creates it with the bytes newSecret makes: mode 0600,
// written and synced in a temporary file, then linked into place. Link,
// not rename: of two processes creating it at once, the second reads the
// first one's secret instead of replacing it. created says whether this
// call made the file; newSecret's error is returned as it is.
func (s Secret) LoadOrCreate(newSecret func() ([]byte, error)) (data []byte, created bool, err error) {
	data, err = s.Read()
	if !errors.Is(err, fs.ErrNotExist) {
		return data, false, err
	}
	if data, err = newSecret(); err != nil {
		return nil, false, err
	}
	tmp, op, err := writeTemp(filepath.Dir(s.Path), s.Temp, data, 0o600)
	if err != nil {
		return nil, false, s.wrap(op, err)
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, s.Path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return s.LoadOrCreate(newSecret)
		}
		return nil, false, s.wrap("install", err)
	}
	return data, true, nil
}

func (s Secret) refuse(mode fs.FileMode) error {
	if s.Refuse != nil {
		return s.Refuse(s.Path, mode)
	}
	return fmt.Errorf("%s has mode %04o: others may read the secret; run chmod 600 %s", s.Path, mode, s.Path)
}

func (s Secret) wrap(op string, err error) error {
	if s.Wrap != nil {
		return s.Wrap(op, err)
	}
	return fmt.Errorf("%s secret: %w", op, err)
}
