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

// repository is one repository below the root.
type repository struct {
	owner, name string // name without .git
	hooks       string // its hooks directory
}

func (r repository) String() string { return r.owner + "/" + r.name }

// repositories lists the repositories below root as Gitea lays them out,
// <root>/<owner>/<name>.git, leaving out wikis (<name>.wiki.git), hidden
// names (contract.GateDir among them) and anything that is not a
// directory. An owner or a repository that is a symbolic link is not
// listed but returned among skipped, wrapping ErrSymlink: the script finds
// the program by going up from its own directory, which inside a link
// leads elsewhere. So is an owner's directory that cannot be read. err is
// for the root itself.
func repositories(root string) (repos []repository, skipped []error, err error) {
	owners, err := os.ReadDir(root)
	if err != nil {
		return nil, nil, err
	}
	for _, o := range owners {
		if strings.HasPrefix(o.Name(), ".") {
			continue
		}
		opath := filepath.Join(root, o.Name())
		if o.Type()&fs.ModeSymlink != 0 {
			skipped = append(skipped, fmt.Errorf("%s %w", opath, ErrSymlink))
			continue
		}
		if !o.IsDir() {
			continue
		}
		entries, err := os.ReadDir(opath)
		if err != nil {
			skipped = append(skipped, err)
			continue
		}
		for _, e := range entries {
			name, isGit := strings.CutSuffix(e.Name(), ".git")
			if !isGit || name == "" || strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".wiki") {
				continue
			}
			rpath := filepath.Join(opath, e.Name())
			if e.Type()&fs.ModeSymlink != 0 {
				skipped = append(skipped, fmt.Errorf("%s %w", rpath, ErrSymlink))
				continue
			}
			if e.IsDir() {
				repos = append(repos, repository{owner: o.Name(), name: name, hooks: filepath.Join(rpath, "hooks")})
			}
		}
	}
	return repos, skipped, nil
}

// Sweep puts the script in every repository below root (InstallRepo's
// work for each), writing only where it is missing or differs: reading a
// directory and comparing a few hundred bytes per repository, so that it
// can run at every reconcile over thousands of them. installed counts the
// repositories it wrote to. A repository it cannot install in does not
// stop it: its error is the first such one, with how many there were.
func Sweep(root string) (installed int, err error) {
	repos, errs, err := repositories(root)
	if err != nil {
		return 0, fmt.Errorf("install the gate below %s: %w", root, err)
	}
	for _, r := range repos {
		changed, err := install(r.hooks)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r, err))
			continue
		}
		if changed {
			installed++
		}
	}
	return installed, first("install the gate", errs)
}

// Missing lists, as "owner/name", the repositories below root that lack
// the script or hold other bytes than Script (or another mode than
// 0755), for doctor. Those that could not be looked at are in err.
func Missing(root string) ([]string, error) {
	repos, errs, err := repositories(root)
	if err != nil {
		return nil, fmt.Errorf("look for the gate below %s: %w", root, err)
	}
	var missing []string
	for _, r := range repos {
		ok, err := current(r.hooks)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r, err))
			continue
		}
		if !ok {
			missing = append(missing, r.String())
		}
	}
	return missing, first("look for the gate", errs)
}

// Remove takes the gate out: the script from every repository below
// root (only a file that carries the marker; never another file of a
// hooks directory), then <root>/.collab-lease. If a repository's script
// could not be removed, the directory is kept, so that the script there
// still finds its program: run it again once the error is fixed. removed
// counts the scripts it removed.
func Remove(root string) (removed int, err error) {
	repos, skipped, err := repositories(root)
	if err != nil {
		return 0, fmt.Errorf("remove the gate below %s: %w", root, err)
	}
	var errs []error
	for _, err := range skipped {
		if !errors.Is(err, ErrSymlink) { // the gate is in no link
			errs = append(errs, err)
		}
	}
	for _, r := range repos {
		ok, err := uninstall(r.hooks)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r, err))
			continue
		}
		if ok {
			removed++
		}
	}
	if err := first("remove the gate", errs); err != nil {
		return removed, fmt.Errorf("%w (%s kept)", err, filepath.Join(root, contract.GateDir))
	}
	gate := filepath.Join(root, contract.GateDir)
	fi, err := os.Lstat(gate)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return removed, nil
	case err != nil:
		return removed, fmt.Errorf("remove the gate: %w", err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return removed, fmt.Errorf("remove the gate: %s %w", gate, ErrSymlink)
	}
	if err := os.RemoveAll(gate); err != nil {
		return removed, fmt.Errorf("remove the gate: %w", err)
	}
	return removed, nil
}

// first is nil for no errors, else the first, saying how many there were.
func first(op string, errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%s: %w", op, errs[0])
	}
	return fmt.Errorf("%s: %d failed, the first: %w", op, len(errs), errs[0])
}
