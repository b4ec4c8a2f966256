package osfile

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteFileAtomic replaces path with data: written to a temporary file in
// the same directory, synced, given mode (and the old file's owner, where
// permitted), then renamed over path, so a reader sees the old bytes or the
// new ones and never a torn file.
func WriteFileAtomic(path string, data []byte, mode fs.FileMode) (err error) {
	dir := filepath.Dir(path)
	tmp, _, err := writeTemp(dir, "."+filepath.Base(path)+".tmp-*", data, mode)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if st, serr := os.Stat(path); serr == nil {
		KeepOwner(tmp, st) // best effort: Gitea must still own its file
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync() // the rename itself survives a crash
		_ = d.Close()
	}
	return nil
}

// writeTemp writes data to a new file in dir, named by pattern (as
// os.CreateTemp), given mode and synced, and returns its name. When it
// fails it leaves no file, and op says at which step: "create" (the file
// or its mode) or "write".
func writeTemp(dir, pattern string, data []byte, mode fs.FileMode) (name, op string, err error) {
	tmp, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return "", "create", err
	}
	op = "create"
	if err = tmp.Chmod(mode); err == nil {
		op = "write"
		_, err = tmp.Write(data)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return "", op, err
	}
	return tmp.Name(), "", nil
}
