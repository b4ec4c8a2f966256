package gatehook

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// InstallRepo puts the gate's script in the repository owner/name below
// root (Gitea's <root>/<owner>/<name>.git, in lower case): it writes
// hooks/pre-receive.d/collab-lease (mode 0755) when it is missing or
// differs, making pre-receive.d only if it is missing. Running as root,
// what it makes takes the owner of the hooks directory. changed says
// whether it wrote anything.
func InstallRepo(root, owner, name string) (changed bool, err error) {
	hooks, err := hooksDir(root, owner, name)
	if err == nil {
		changed, err = install(hooks)
	}
	if err != nil {
		return changed, fmt.Errorf("install the gate in %s/%s: %w", owner, name, err)
	}
	return changed, nil
}

// hooksDir is the hooks directory of owner/name below root, as Gitea lays
// it out: <root>/<owner>/<name>.git/hooks, in lower case. The owner's and
// the repository's directories must not be links (see repositories).
func hooksDir(root, owner, name string) (string, error) {
	owner, name = strings.ToLower(owner), strings.ToLower(name)
	for _, s := range []string{owner, name} {
		if s == "" || strings.HasPrefix(s, ".") || strings.ContainsAny(s, `/\`) {
			return "", fmt.Errorf("%q is not a name Gitea gives an owner or a repository", s)
		}
	}
	if strings.HasSuffix(name, ".wiki") || strings.HasSuffix(name, ".git") {
		return "", fmt.Errorf("%q is not a repository's name (a wiki is not gated)", name)
	}
	for _, p := range []string{filepath.Join(root, owner), filepath.Join(root, owner, name+".git")} {
		if fi, err := os.Lstat(p); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return "", fmt.Errorf("%s %w", p, ErrSymlink)
		}
	}
	return filepath.Join(root, owner, name+".git", "hooks"), nil
}

// statHooks is what the hooks directory hooks is: a directory, not a link
// (from inside a link, the script's way up to the program leads
// elsewhere).
func statHooks(hooks string) (fs.FileInfo, error) {
	hi, err := os.Lstat(hooks)
	switch {
	case err != nil:
		return nil, err
	case hi.Mode()&fs.ModeSymlink != 0:
		return nil, fmt.Errorf("%s %w", hooks, ErrSymlink)
	case !hi.IsDir():
		return nil, fmt.Errorf("%s is not a directory", hooks)
	}
	return hi, nil
}

// install puts the script in the hooks directory hooks.
func install(hooks string) (changed bool, err error) {
	hi, err := statHooks(hooks)
	if err != nil {
		return false, err
	}
	owner := asRoot(hi)
	made := false
	if _, err := os.Lstat(filepath.Join(hooks, preReceiveD)); errors.Is(err, fs.ErrNotExist) {
		made = true
	}
	dir, err := openDir(hooks, preReceiveD, true, owner)
	if err != nil {
		return false, err
	}
	defer dir.Close()
	changed, err = keep(dir, contract.GateScript, script, 0o755, owner)
	return changed || made, err
}

// openPreReceive opens hooks/pre-receive.d, or returns nil and no error
// where there is none (or a link stands in place of it or of hooks).
func openPreReceive(hooks string) (*os.Root, error) {
	if _, err := statHooks(hooks); errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrSymlink) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	dir, err := openDir(hooks, preReceiveD, false, nil)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrSymlink) {
		return nil, nil
	}
	return dir, err
}

// current says whether the hooks directory hooks holds the script as the
// gate writes it. A link where the script or pre-receive.d should be is
// not the script.
func current(hooks string) (bool, error) {
	dir, err := openPreReceive(hooks)
	if dir == nil || err != nil {
		return false, err
	}
	defer dir.Close()
	data, fi, _, err := readIn(dir, contract.GateScript, int64(len(script)))
	if errors.Is(err, ErrSymlink) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return fi != nil && fi.Mode().Perm() == 0o755 && string(data) == string(script), nil
}

// uninstall removes the script from the hooks directory hooks, if the
// file there carries the marker; removed says whether it did. Anything
// else there, a link included, is not the gate's and is left as it is.
func uninstall(hooks string) (removed bool, err error) {
	dir, err := openPreReceive(hooks)
	if dir == nil || err != nil {
		return false, err
	}
	defer dir.Close()
	data, fi, big, err := readIn(dir, contract.GateScript, maxScript)
	switch {
	case errors.Is(err, ErrSymlink), err != nil && fi != nil && !fi.Mode().IsRegular():
		return false, nil
	case err != nil:
		return false, err
	case fi == nil, big, !ours(data):
		return false, nil
	}
	if err := dir.Remove(contract.GateScript); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	return true, nil
}
