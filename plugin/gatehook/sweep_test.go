package gatehook

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// giteaHook is what Gitea 1.26 writes as a repository's hooks/pre-receive.
const giteaHook = `#!/usr/bin/env bash
data=$(cat)
exitcodes=""
hookname=$(basename $0)
GIT_DIR=${GIT_DIR:-$(dirname $0)/..}
for hook in ${GIT_DIR}/hooks/${hookname}.d/*; do
  test -x "${hook}" && test -f "${hook}" || continue
  echo "${data}" | "${hook}"
  exitcodes="${exitcodes} $?"
done
for i in ${exitcodes}; do
  [ ${i} -eq 0 ] || exit ${i}
done
`

// giteaRepo lays out a repository's hooks as Gitea does (pre-receive and
// pre-receive.d/gitea, no git objects) and returns its hooks directory.
func giteaRepo(t *testing.T, root, dir string) string {
	t.Helper()
	hooks := filepath.Join(root, dir, "hooks")
	mustMkdir(t, filepath.Join(hooks, preReceiveD))
	mustWrite(t, filepath.Join(hooks, "pre-receive"), giteaHook, 0o755)
	mustWrite(t, filepath.Join(hooks, preReceiveD, "gitea"), "#!/usr/bin/env bash\nexit 0\n", 0o755)
	return hooks
}

// snapshot is every file below dir with its mode and bytes.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		files[rel] = fi.Mode().String()
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			files[rel] += " " + string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestInstallRepo(t *testing.T) {
	root := t.TempDir()
	hooks := giteaRepo(t, root, "acme/widgets.git")
	before := snapshot(t, hooks)
	changed, err := InstallRepo(root, "Acme", "Widgets")
	if err != nil || !changed {
		t.Fatalf("changed %v, %v", changed, err)
	}
	path := filepath.Join(hooks, preReceiveD, contract.GateScript)
	if got := mustRead(t, path); !bytes.Equal(got, Script()) || mode(t, path).Perm() != 0o755 {
		t.Errorf("script %v:\n%s", mode(t, path), got)
	}
	after := snapshot(t, hooks)
	delete(after, filepath.Join(preReceiveD, contract.GateScript))
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("other files changed:\n%v\n%v", before, after)
	}
	if changed, err := InstallRepo(root, "acme", "widgets"); err != nil || changed {
		t.Errorf("again: changed %v, %v", changed, err)
	}
	for name, spoil := range map[string]func(){
		"other bytes": func() { mustWrite(t, path, "#!/bin/sh\nexit 0\n", 0o755) },
		"not executable": func() {
			if err := os.Chmod(path, 0o644); err != nil {
				t.Fatal(err)
			}
		},
		"removed": func() { os.Remove(path) },
	} {
		spoil()
		if changed, err := InstallRepo(root, "acme", "widgets"); err != nil || !changed {
			t.Errorf("%s: changed %v, %v", name, changed, err)
		}
		if got := mustRead(t, path); !bytes.Equal(got, Script()) || mode(t, path).Perm() != 0o755 {
			t.Errorf("%s: script %v", name, mode(t, path))
		}
	}
}

// A repository whose pre-receive.d is missing gets one, mode 0755.
func TestInstallRepoMakesPreReceiveD(t *testing.T) {
	root := t.TempDir()
	mustMkdir(t, filepath.Join(root, "acme/widgets.git/hooks"))
	if changed, err := InstallRepo(root, "acme", "widgets"); err != nil || !changed {
		t.Fatalf("changed %v, %v", changed, err)
	}
	if m := mode(t, filepath.Join(root, "acme/widgets.git/hooks", preReceiveD)); !m.IsDir() || m.Perm() != 0o755 {
		t.Errorf("pre-receive.d: %v", m)
	}
}

func TestInstallRepoRefuses(t *testing.T) {
	for _, tc := range []struct {
		name        string
		owner, repo string
		setup       func(t *testing.T, hooks string)
		want        string
	}{
		{"a link where the script goes", "acme", "widgets", func(t *testing.T, hooks string) {
			mustSymlink(t, filepath.Join(hooks, preReceiveD, "gitea"), filepath.Join(hooks, preReceiveD, contract.GateScript))
		}, "symbolic link"},
		{"a link where pre-receive.d goes", "acme", "widgets", func(t *testing.T, hooks string) {
			os.RemoveAll(filepath.Join(hooks, preReceiveD))
			mustSymlink(t, t.TempDir(), filepath.Join(hooks, preReceiveD))
		}, "symbolic link"},
		{"a link where the repository goes", "acme", "gadgets", func(t *testing.T, hooks string) {
			repo := filepath.Dir(hooks)
			mustSymlink(t, repo, filepath.Join(filepath.Dir(repo), "gadgets.git"))
		}, "symbolic link"},
		{"a link where the owner goes", "bob", "widgets", func(t *testing.T, hooks string) {
			owner := filepath.Dir(filepath.Dir(hooks))
			mustSymlink(t, owner, filepath.Join(filepath.Dir(owner), "bob"))
		}, "symbolic link"},
		{"a link where hooks goes", "acme", "gadgets", func(t *testing.T, hooks string) {
			mustMkdir(t, filepath.Join(filepath.Dir(filepath.Dir(hooks)), "gadgets.git"))
			mustSymlink(t, hooks, filepath.Join(filepath.Dir(filepath.Dir(hooks)), "gadgets.git", "hooks"))
		}, "symbolic link"},
		{"a directory where the script goes", "acme", "widgets", func(t *testing.T, hooks string) {
			mustMkdir(t, filepath.Join(hooks, preReceiveD, contract.GateScript))
		}, "not a regular file"},
		{"no repository", "acme", "gadgets", func(*testing.T, string) {}, "no such file or directory"},
		{"a wiki", "acme", "widgets.wiki", func(*testing.T, string) {}, "a wiki is not gated"},
		{"a path", "acme", "../acme/widgets", func(*testing.T, string) {}, "is not a name"},
		{"a hidden owner", contract.GateDir, "widgets", func(*testing.T, string) {}, "is not a name"},
		{"no owner", "", "widgets", func(*testing.T, string) {}, "is not a name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			hooks := giteaRepo(t, root, "acme/widgets.git")
			tc.setup(t, hooks)
			before := snapshot(t, hooks)
			_, err := InstallRepo(root, tc.owner, tc.repo)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if tc.want == "symbolic link" && !errors.Is(err, ErrSymlink) {
				t.Errorf("%v is not ErrSymlink", err)
			}
			if after := snapshot(t, hooks); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("changed:\n%v\n%v", before, after)
			}
		})
	}
}

// As root, what InstallRepo makes belongs to the hooks directory's owner.
func TestInstallRepoKeepsTheOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	const gitea = 4321
	root := t.TempDir()
	hooks := filepath.Join(root, "acme/widgets.git/hooks")
	mustMkdir(t, hooks)
	if err := os.Chown(hooks, gitea, gitea); err != nil {
		t.Fatal(err)
	}
	if _, err := InstallRepo(root, "acme", "widgets"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{preReceiveD, filepath.Join(preReceiveD, contract.GateScript)} {
		if id := uid(t, filepath.Join(hooks, p)); id != gitea {
			t.Errorf("%s belongs to %d", p, id)
		}
	}
}

// layout is a root as Gitea keeps it, with what the gate must leave alone.
func layout(t *testing.T) (root string, hooks map[string]string) {
	root = t.TempDir()
	hooks = map[string]string{}
	for _, dir := range []string{"acme/widgets.git", "acme/gadgets.git", "bob/notes.git", "acme/widgets.wiki.git"} {
		hooks[dir] = giteaRepo(t, root, dir)
	}
	mustMkdir(t, filepath.Join(root, "acme", "not-a-repo"))
	mustWrite(t, filepath.Join(root, "README"), "a file of the root", 0o644)
	mustWrite(t, filepath.Join(root, "acme", "file.git"), "a file named like a repository", 0o644)
	// An admin's own hook beside Gitea's.
	mustWrite(t, filepath.Join(hooks["acme/widgets.git"], preReceiveD, "audit"), "#!/bin/sh\nexit 0\n", 0o755)
	return root, hooks
}

func TestSweepMissingRemove(t *testing.T) {
	root, hooks := layout(t)
	o := options(t, root)
	if _, err := Prepare(o); err != nil {
		t.Fatal(err)
	}
	wiki := snapshot(t, hooks["acme/widgets.wiki.git"])
	before := map[string]map[string]string{}
	for dir, h := range hooks {
		before[dir] = snapshot(t, h)
	}

	missing, err := Missing(root)
	if want := []string{"acme/gadgets", "acme/widgets", "bob/notes"}; err != nil || !slices.Equal(missing, want) {
		t.Fatalf("missing before: %v, %v", missing, err)
	}
	if n, err := Sweep(root); err != nil || n != 3 {
		t.Fatalf("sweep: %d, %v", n, err)
	}
	if n, err := Sweep(root); err != nil || n != 0 {
		t.Fatalf("sweep again: %d, %v", n, err)
	}
	if missing, err := Missing(root); err != nil || len(missing) != 0 {
		t.Fatalf("missing after: %v, %v", missing, err)
	}
	if got := snapshot(t, hooks["acme/widgets.wiki.git"]); fmt.Sprint(got) != fmt.Sprint(wiki) {
		t.Errorf("the wiki was touched")
	}

	// One changed, one not executable, one removed: Missing names them,
	// and Sweep mends them.
	mustWrite(t, filepath.Join(hooks["acme/widgets.git"], preReceiveD, contract.GateScript), "#!/bin/sh\n"+marker+"\nexit 0\n", 0o755)
	if err := os.Chmod(filepath.Join(hooks["acme/gadgets.git"], preReceiveD, contract.GateScript), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(hooks["bob/notes.git"], preReceiveD, contract.GateScript))
	if missing, err := Missing(root); err != nil || !slices.Equal(missing, []string{"acme/gadgets", "acme/widgets", "bob/notes"}) {
		t.Fatalf("missing when spoilt: %v, %v", missing, err)
	}
	if n, err := Sweep(root); err != nil || n != 3 {
		t.Fatalf("sweep when spoilt: %d, %v", n, err)
	}

	n, err := Remove(root)
	if err != nil || n != 3 {
		t.Fatalf("remove: %d, %v", n, err)
	}
	for dir, h := range hooks {
		if got := snapshot(t, h); fmt.Sprint(got) != fmt.Sprint(before[dir]) {
			t.Errorf("%s after remove:\n%v\nwant\n%v", dir, got, before[dir])
		}
	}
	if _, err := os.Lstat(filepath.Join(root, contract.GateDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the gate's directory is still there: %v", err)
	}
	if n, err := Remove(root); err != nil || n != 0 {
		t.Errorf("remove again: %d, %v", n, err)
	}
}

// A sweep goes on past a repository it cannot install in, and says how
// many it could not; a link is refused, not followed.
func TestSweepGoesOnPastABadRepository(t *testing.T) {
	root, hooks := layout(t)
	elsewhere := t.TempDir()
	os.RemoveAll(filepath.Join(hooks["acme/gadgets.git"], preReceiveD))
	mustSymlink(t, elsewhere, filepath.Join(hooks["acme/gadgets.git"], preReceiveD))
	mustSymlink(t, filepath.Join(root, "bob/notes.git"), filepath.Join(root, "bob/linked.git"))
	mustSymlink(t, filepath.Join(root, "bob"), filepath.Join(root, "carol"))
	n, err := Sweep(root)
	if n != 2 || !errors.Is(err, ErrSymlink) || !strings.Contains(err.Error(), "3 failed") {
		t.Fatalf("sweep: %d, %v", n, err)
	}
	if left, _ := os.ReadDir(elsewhere); len(left) != 0 {
		t.Errorf("wrote through the link: %v", left)
	}
	missing, err := Missing(root)
	if !slices.Equal(missing, []string{"acme/gadgets"}) || !errors.Is(err, ErrSymlink) {
		t.Errorf("missing: %v, %v", missing, err)
	}
	// The links hold no script of the gate's: Remove removes the others
	// and the gate's directory.
	if _, err := Prepare(options(t, root)); err != nil {
		t.Fatal(err)
	}
	if n, err := Remove(root); n != 2 || err != nil {
		t.Errorf("remove: %d, %v", n, err)
	}
}

// Remove takes out only a file that carries the marker, and keeps the
// gate's directory while a script of the gate's could not be removed.
func TestRemoveTakesOnlyTheGatesOwn(t *testing.T) {
	root, hooks := layout(t)
	if _, err := Prepare(options(t, root)); err != nil {
		t.Fatal(err)
	}
	if _, err := Sweep(root); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(hooks["acme/gadgets.git"], preReceiveD, contract.GateScript)
	mustWrite(t, foreign, "#!/bin/sh\n# an admin's own, by the same name\nexit 0\n", 0o755)
	big := filepath.Join(hooks["bob/notes.git"], preReceiveD, contract.GateScript)
	mustWrite(t, big, marker+"\n"+strings.Repeat("#\n", maxScript), 0o755)
	n, err := Remove(root)
	if err != nil || n != 1 {
		t.Fatalf("remove: %d, %v", n, err)
	}
	for _, p := range []string{foreign, big} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("removed a file not the gate's: %v", err)
		}
	}

	// A pre-receive.d that is a file cannot be looked in: the gate's
	// directory stays, so that nothing the gate left loses its program.
	root, hooks = layout(t)
	if _, err := Prepare(options(t, root)); err != nil {
		t.Fatal(err)
	}
	if _, err := Sweep(root); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(hooks["bob/notes.git"], preReceiveD)
	os.RemoveAll(bad)
	mustWrite(t, bad, "not a directory", 0o644)
	n, err = Remove(root)
	if n != 2 || err == nil || !strings.Contains(err.Error(), "kept") {
		t.Fatalf("remove: %d, %v", n, err)
	}
	if _, err := os.Stat(filepath.Join(root, contract.GateDir, contract.GateProgram)); err != nil {
		t.Errorf("the gate's directory went: %v", err)
	}
}

// The marker is one whole line of the script, and only a whole line
// counts.
func TestMarker(t *testing.T) {
	if !ours(Script()) {
		t.Fatal("the script does not carry the marker")
	}
	for _, s := range []string{"", "# collab-lease", "x" + marker, marker + " x", "#!/bin/sh\nexit 0\n"} {
		if ours([]byte(s)) {
			t.Errorf("%q taken for the gate's", s)
		}
	}
	if !ours([]byte("#!/bin/sh\r\n" + marker + "\r\n")) {
		t.Error("a marker line ending in CRLF not recognised")
	}
	if !strings.Contains(marker, "collab-sidecar gate remove") || !strings.Contains(marker, "installed by collab-sidecar") {
		t.Errorf("the marker does not say who installs and removes it: %s", marker)
	}
}

// A reconcile's sweep over 2,000 repositories that have the script
// already reads and compares, and writes nothing: some tens of microseconds a repository.
func BenchmarkSweep(b *testing.B) {
	root := b.TempDir()
	for i := range 2000 {
		if err := os.MkdirAll(filepath.Join(root, fmt.Sprintf("owner%d/repo%d.git/hooks", i%50, i)), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	if n, err := Sweep(root); err != nil || n != 2000 {
		b.Fatalf("%d, %v", n, err)
	}
	for b.Loop() {
		if n, err := Sweep(root); err != nil || n != 0 {
			b.Fatalf("%d, %v", n, err)
		}
	}
}
