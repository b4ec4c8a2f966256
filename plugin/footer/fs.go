package footer

import (
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

// The footer's side of the file system. install runs as root (it writes
// Gitea's files) in a directory that Gitea's account usually owns, and
// whoever controls that account (a git hook, a template, a stolen key)
// could plant a link there to steer a root write, a root delete or a root
// read into Gitea's pages. So, unless Footer.Force:
//
//   - Below the custom directory, templates/, templates/custom/ and
//     footer.tmpl are reached through os.Root, which opens each component
//     with O_NOFOLLOW and never leaves the custom directory, and a
//     symbolic link at any of them is refused. The custom directory
//     itself is the admin's own argument and may be a link.
//   - Each of them must be owned by the custom directory's owner (the
//     account Gitea runs as, in every layout Gitea documents) or by root:
//     a file or directory of a third account is refused.
//   - footer.tmpl must be a regular file with one link: a hard link could
//     be any file of the same file system, root's included.
//   - The owner, type and link count are those of the file actually
//     opened (fstat), so a swap after the check reads nothing else.
//
// Always: the footer is replaced by writing a temporary file beside it
// and renaming it over the name, so a reader sees the old bytes or the new
// ones, and a link is replaced rather than written through; removing the
// footer removes the name. An edit (install, uninstall) holds an exclusive
// lock on templates/custom itself (footerlock_*.go) from its read to its
// write, so concurrent installs are serialised and leave no lock file in
// Gitea's templates.
//
// With Force the old behaviour is back: links are followed (the footer's
// own link to its target, whose directory is then the one written), and
// owners and link counts are not checked.

// ErrUnsafe: something below Gitea's custom directory could steer
// the installer's write elsewhere; it touches nothing without --force.
var ErrUnsafe = errors.New("refused without --force")

// footerDir is the directory that holds the footer, opened for one run.
type footerDir struct {
	root  *os.Root // the directory
	dir   *os.File // the same directory, for its lock and fsync
	name  string   // the footer's name in it
	path  string   // the footer's path, for messages
	owner int      // the custom directory's owner (-1: not known)
	force bool
}

// open opens the footer's directory, creating what is missing if create
// is set; it returns nil (and no error) if the directory does not exist
// and create is not set.
func (f Footer) open(create bool) (*footerDir, error) {
	st, err := os.Stat(f.CustomDir)
	if err != nil || !st.IsDir() {
		return nil, fmt.Errorf("gitea-custom %s: not a directory (pass --gitea-custom, Gitea's $GITEA_CUSTOM)", f.CustomDir)
	}
	if f.Force {
		return f.openFollowing(create)
	}
	owner, _ := osfile.OwnerOf(st)
	root, err := os.OpenRoot(f.CustomDir)
	if err != nil {
		return nil, fmt.Errorf("gitea-custom %s: %w", f.CustomDir, err)
	}
	rel := f.CustomDir
	for _, name := range []string{"templates", "custom"} {
		rel = filepath.Join(rel, name)
		next, err := openSubdir(root, name, rel, owner, create)
		_ = root.Close()
		if err != nil || next == nil {
			return nil, err
		}
		root = next
	}
	return newFooterDir(root, "footer.tmpl", f.Path(), owner, false)
}

// openSubdir opens the directory name of parent, refusing a link or a
// foreign owner.
func openSubdir(parent *os.Root, name, path string, owner int, create bool) (*os.Root, error) {
	fi, err := parent.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		if !create {
			return nil, nil
		}
		if err := parent.Mkdir(name, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		fi, err = parent.Lstat(name)
	}
	if err != nil {
		return nil, err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil, symlinkError(path)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s: not a directory", path)
	}
	sub, err := parent.OpenRoot(name)
	if err != nil {
		return nil, err
	}
	st, err := sub.Stat(".")
	if err == nil {
		err = checkOwner(path, st, owner)
	}
	if err == nil && !os.SameFile(fi, st) {
		err = fmt.Errorf("%s: changed while being opened; run install again", path)
	}
	if err != nil {
		_ = sub.Close()
		return nil, err
	}
	return sub, nil
}

// openFollowing is open with Force: every link is followed.
func (f Footer) openFollowing(create bool) (*footerDir, error) {
	path := f.Path()
	if create {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, err
		}
	}
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	root, err := os.OpenRoot(filepath.Dir(path))
	if errors.Is(err, fs.ErrNotExist) && !create {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return newFooterDir(root, filepath.Base(path), path, -1, true)
}

func newFooterDir(root *os.Root, name, path string, owner int, force bool) (*footerDir, error) {
	dir, err := root.Open(".")
	if err != nil {
		_ = root.Close()
		return nil, err
	}
	return &footerDir{root: root, dir: dir, name: name, path: path, owner: owner, force: force}, nil
}

func (d *footerDir) close() {
	_ = d.dir.Close() // releases the lock too
	_ = d.root.Close()
}

func (d *footerDir) lock() error {
	if err := osfile.LockExclusive(d.dir); err != nil {
		return fmt.Errorf("lock %s: %w", filepath.Dir(d.path), err)
	}
	return nil
}

// read returns the footer's bytes (nil if it does not exist) and what it
// is, for write to keep its mode and owner.
func (d *footerDir) read() ([]byte, fs.FileInfo, error) {
	fi, err := d.root.Lstat(d.name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil, nil, symlinkError(d.path)
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%s: not a regular file", d.path)
	}
	f, err := d.root.Open(d.name)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !os.SameFile(fi, st) {
		return nil, nil, fmt.Errorf("%s: changed while being opened; run install again", d.path)
	}
	if !d.force {
		if n := osfile.LinkCount(st); n > 1 {
			return nil, nil, fmt.Errorf("%s has %d hard links, so its bytes may be another file's: %w", d.path, n, ErrUnsafe)
		}
		if err := checkOwner(d.path, st, d.owner); err != nil {
			return nil, nil, err
		}
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, nil, err
	}
	if b == nil {
		b = []byte{}
	}
	return b, st, nil
}

// write replaces the footer with data: a temporary file beside it, with
// the old file's mode and owner (0644 and ours for a new one), synced,
// then renamed over the name.
func (d *footerDir) write(data []byte, old fs.FileInfo) (err error) {
	mode := fs.FileMode(0o644)
	if old != nil {
		mode = old.Mode().Perm()
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := "." + d.name + ".tmp-" + hex.EncodeToString(rnd[:])
	f, err := d.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", d.path, err)
	}
	defer func() {
		if err != nil {
			_ = d.root.Remove(tmp)
		}
	}()
	if err = f.Chmod(mode); err == nil {
		_, err = f.Write(data)
	}
	if err == nil && old != nil {
		osfile.KeepOwnerOf(f, old) // best effort: Gitea must still own its file
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = d.root.Rename(tmp, d.name)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", d.path, err)
	}
	_ = d.dir.Sync() // the rename itself survives a crash
	return nil
}

// remove removes the footer's name.
func (d *footerDir) remove() error {
	if err := d.root.Remove(d.name); err != nil {
		return err
	}
	_ = d.dir.Sync()
	return nil
}

func symlinkError(path string) error {
	to := ""
	if t, err := os.Readlink(path); err == nil {
		to = " (to " + t + ")"
	}
	return fmt.Errorf("%s is a symbolic link%s, which could point the install anywhere: %w", path, to, ErrUnsafe)
}

// checkOwner refuses what is owned by neither the custom directory's
// owner nor root.
func checkOwner(path string, fi fs.FileInfo, owner int) error {
	uid, ok := osfile.OwnerOf(fi)
	if !ok || owner < 0 || uid == owner || uid == 0 {
		return nil
	}
	return fmt.Errorf("%s is owned by uid %d, neither root nor the custom directory's owner (uid %d): %w", path, uid, owner, ErrUnsafe)
}
