package gatehook

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/collab-lease/collab-lease/internal/osfile"
)

// ErrSymlink: a symbolic link where the gate keeps a file or a directory.
// The gate writes through no link: whoever may write Gitea's directories
// could otherwise steer the sidecar's writes (root's, perhaps) elsewhere.
var ErrSymlink = errors.New("is a symbolic link, which the gate does not follow; remove it")

// asRoot is owner when this process runs as root, and nil otherwise: the
// file whose owner what the gate makes takes (see chown).
func asRoot(owner fs.FileInfo) fs.FileInfo {
	if os.Geteuid() == 0 {
		return owner
	}
	return nil
}

// openDir opens the directory name of the directory parent, refusing a
// symbolic link there. With create, a missing one is made, mode 0755, and
// given owner's owner (when owner is not nil); without, a missing one
// gives nil and no error.
func openDir(parent, name string, create bool, owner fs.FileInfo) (*os.Root, error) {
	path := filepath.Join(parent, name)
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		if !create {
			return nil, nil
		}
		if err = os.Mkdir(path, 0o755); err == nil {
			err = os.Chmod(path, 0o755) // whatever the umask
			chown(path, owner)
		}
		if err == nil || errors.Is(err, fs.ErrExist) {
			fi, err = os.Lstat(path)
		}
	}
	if err != nil {
		return nil, err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil, fmt.Errorf("%s %w", path, ErrSymlink)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", path)
	}
	dir, err := os.OpenRoot(path)
	if err != nil {
		return nil, err
	}
	st, err := dir.Stat(".")
	if err == nil && !os.SameFile(fi, st) {
		err = fmt.Errorf("%s changed while it was being opened; try again", path)
	}
	if err != nil {
		_ = dir.Close()
		return nil, err
	}
	return dir, nil
}

// chown gives path owner's owner and group, when owner is not nil.
func chown(path string, owner fs.FileInfo) {
	if owner != nil {
		osfile.KeepOwner(path, owner)
	}
}

// errChanged: a file was replaced between its look and its read.
var errChanged = errors.New("changed while it was being read")

// readIn reads the regular file name of dir, at most max bytes: nil, nil
// and no error when there is none; ErrSymlink for a link; an error for
// anything but a regular file. big says it is larger than max (data is
// then nil).
func readIn(dir *os.Root, name string, max int64) (data []byte, fi fs.FileInfo, big bool, err error) {
	where := filepath.Join(dir.Name(), name)
	fi, err = dir.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil, fi, false, fmt.Errorf("%s %w", where, ErrSymlink)
	}
	if !fi.Mode().IsRegular() {
		return nil, fi, false, fmt.Errorf("%s is not a regular file", where)
	}
	if fi.Size() > max {
		return nil, fi, true, nil
	}
	f, err := dir.Open(name)
	if err != nil {
		return nil, fi, false, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !os.SameFile(fi, st) {
		return nil, fi, false, fmt.Errorf("%s %w; try again", where, errChanged)
	}
	data, err = io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fi, false, err
	}
	if int64(len(data)) > max {
		return nil, fi, true, nil
	}
	return data, fi, false, nil
}

// keep makes the file name of dir hold data with mode, writing it only
// when it holds other bytes or has another mode; changed says whether it
// wrote. A file it writes gets owner's owner (when owner is not nil).
func keep(dir *os.Root, name string, data []byte, mode fs.FileMode, owner fs.FileInfo) (changed bool, err error) {
	old, fi, _, err := readIn(dir, name, int64(len(data)))
	// Another process (a replica starting at the same moment) replaced
	// the file between the look and the read: look again.
	for try := 0; try < 5 && errors.Is(err, errChanged); try++ {
		old, fi, _, err = readIn(dir, name, int64(len(data)))
	}
	if err != nil {
		return false, err
	}
	if fi != nil && fi.Mode().Perm() == mode && bytes.Equal(old, data) {
		return false, nil
	}
	return true, writeIn(dir, name, data, mode, owner)
}

// writeIn replaces the file name of dir with data: written to a new
// temporary file in dir, given mode (and owner's owner when owner is not
// nil) and synced, then renamed over name. A reader sees the old file or
// the new one, never part of one; a link at name is replaced, not
// written through.
func writeIn(dir *os.Root, name string, data []byte, mode fs.FileMode, owner fs.FileInfo) (err error) {
	where := filepath.Join(dir.Name(), name)
	suffix := make([]byte, 8)
	_, _ = rand.Read(suffix)
	tmp := "." + name + ".tmp-" + hex.EncodeToString(suffix)
	f, err := dir.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", where, err)
	}
	defer func() {
		if err != nil {
			_ = dir.Remove(tmp)
		}
	}()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil && owner != nil {
		osfile.KeepOwnerOf(f, owner)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = dir.Rename(tmp, name)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", where, err)
	}
	if d, derr := dir.Open("."); derr == nil {
		_ = d.Sync() // the rename itself survives a crash
		_ = d.Close()
	}
	return nil
}
