package gitea

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/collab-lease/collab-lease/integration"
)

// Tests of ConflictTest against real git repositories made in the test's
// directory.

// conflictGit is a git ConflictTest can use: the one on PATH if it is
// 2.40 or later, else the one integration.BuildGit builds (a build of
// minutes the first time on a machine; skipped with -short).
func conflictGit(t *testing.T) string {
	t.Helper()
	if gitAtLeast(t, "git", 2, 40) {
		return "git"
	}
	if testing.Short() {
		t.Skip("the git on PATH is older than 2.40, and building one is not done with -short")
	}
	git, err := integration.BuildGit(context.Background())
	if err != nil {
		t.Fatalf("build git: %v", err)
	}
	return git
}

// gitAtLeast reports whether git's version is at least major.minor.
func gitAtLeast(t *testing.T, git string, major, minor int) bool {
	t.Helper()
	out, err := exec.Command(git, "version").Output()
	if err != nil {
		t.Fatalf("%s version: %v", git, err)
	}
	m := regexp.MustCompile(`git version (\d+)\.(\d+)`).FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("%s version: %q", git, out)
	}
	maj, _ := strconv.Atoi(m[1])
	mnr, _ := strconv.Atoi(m[2])
	return maj > major || maj == major && mnr >= minor
}

// gitRepo is a work tree with a bare clone, as Gitea keeps repositories.
type gitRepo struct {
	t          *testing.T
	work, bare string
}

func newGitRepo(t *testing.T) *gitRepo {
	t.Helper()
	dir := t.TempDir()
	r := &gitRepo{t: t, work: filepath.Join(dir, "work"), bare: filepath.Join(dir, "repo.git")}
	r.git("init", "-q", "-b", "main", r.work)
	return r
}

// git runs the git on PATH in the work tree, apart from the user's and
// the system's configuration.
func (r *gitRepo) git(args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=Test", "-c", "user.email=test@example.com"}, args...)...)
	if _, err := os.Stat(r.work); err == nil {
		cmd.Dir = r.work
	}
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+r.t.TempDir(), "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// commit writes files on the branch checked out and commits them.
func (r *gitRepo) commit(msg string, files map[string]string) string {
	r.t.Helper()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(r.work, name), []byte(content), 0o644); err != nil {
			r.t.Fatal(err)
		}
		r.git("add", name)
	}
	r.git("commit", "-q", "-m", msg)
	return r.git("rev-parse", "HEAD")
}

// publish makes (or refreshes) the bare clone.
func (r *gitRepo) publish() {
	r.t.Helper()
	if _, err := os.Stat(r.bare); err != nil {
		r.git("clone", "-q", "--bare", r.work, r.bare)
	}
	r.git("push", "-q", "--all", "--force", r.bare)
}

// history makes, from one root: main (a.txt changed on its first line),
// clean (b.txt changed), clash (a.txt's first line changed otherwise),
// and orphan, of its own root.
func history(t *testing.T) (r *gitRepo, root, main, clean, clash, orphan string) {
	r = newGitRepo(t)
	root = r.commit("root", map[string]string{"a.txt": "one\ntwo\nthree\n", "b.txt": "b\n"})
	r.git("checkout", "-q", "-b", "clean")
	clean = r.commit("change b", map[string]string{"b.txt": "b, changed\n"})
	r.git("checkout", "-q", "-b", "clash", root)
	clash = r.commit("change a one way", map[string]string{"a.txt": "ONE\ntwo\nthree\n"})
	r.git("checkout", "-q", "main")
	main = r.commit("change a another way", map[string]string{"a.txt": "uno\ntwo\nthree\n", "c.txt": "c\n"})
	r.git("checkout", "-q", "--orphan", "orphan")
	orphan = r.commit("another root", map[string]string{"a.txt": "other\n"})
	r.git("checkout", "-q", "main")
	r.publish()
	return r, root, main, clean, clash, orphan
}

func TestConflictTest(t *testing.T) {
	git := conflictGit(t)
	r, root, main, clean, clash, orphan := history(t)
	// What the sidecar's environment says of git is not the test's.
	t.Setenv("GIT_DIR", t.TempDir())
	t.Setenv("GIT_OBJECT_DIRECTORY", t.TempDir())
	t.Setenv("GIT_INDEX_FILE", filepath.Join(t.TempDir(), "index"))
	ctx := context.Background()
	tests := []struct {
		name       string
		base, head string
		conflict   bool
		files      []string
	}{
		{"a clean merge", main, clean, false, nil},
		{"the same line changed both ways", main, clash, true, []string{"a.txt"}},
		{"the head already in the base", main, root, false, nil},
		{"the base behind the head", root, main, false, nil},
		{"no merge base", main, orphan, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conflict, files, err := ConflictTest(ctx, git, r.bare, tt.base, tt.head)
			if err != nil || conflict != tt.conflict || !slices.Equal(files, tt.files) {
				t.Errorf("ConflictTest = %v, %q, %v; want %v, %q", conflict, files, err, tt.conflict, tt.files)
			}
		})
	}
	t.Run("failures", func(t *testing.T) {
		for _, c := range []struct{ name, dir, base, head string }{
			{"a commit the repository lacks", r.bare, main, strings.Repeat("e", 40)},
			{"not a commit ID", r.bare, main, "main"},
			{"not a repository", t.TempDir(), main, clean},
			{"no such directory", filepath.Join(t.TempDir(), "none.git"), main, clean},
		} {
			if conflict, _, err := ConflictTest(ctx, git, c.dir, c.base, c.head); err == nil || conflict {
				t.Errorf("%s: %v, %v; want an error", c.name, conflict, err)
			}
		}
		if _, _, err := ConflictTest(ctx, filepath.Join(t.TempDir(), "no-git"), r.bare, main, clean); err == nil {
			t.Error("a git that is not there: no error")
		}
	})
}

// snapshot is every file under dir: its path, mode and a hash of its
// contents.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		sum := ""
		if info.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum = fmt.Sprintf("%x", sha256.Sum256(b))
		}
		files[p[len(dir):]] = fmt.Sprintf("%v %s", info.Mode(), sum)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func changed(before, after map[string]string) []string {
	var diff []string
	for p, v := range after {
		if before[p] != v {
			diff = append(diff, p)
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			diff = append(diff, p)
		}
	}
	slices.Sort(diff)
	return diff
}

// ConflictTest writes nothing into the repository, though merge-tree
// writes the trees it makes: a plain merge-tree in the same repository
// does (which shows that the snapshot would see it).
func TestConflictTestWritesNothing(t *testing.T) {
	git := conflictGit(t)
	r, _, main, clean, clash, _ := history(t)
	before := snapshot(t, r.bare)
	for _, head := range []string{clean, clash} {
		if _, _, err := ConflictTest(context.Background(), git, r.bare, main, head); err != nil {
			t.Fatal(err)
		}
	}
	if diff := changed(before, snapshot(t, r.bare)); len(diff) != 0 {
		t.Errorf("ConflictTest changed the repository: %v", diff)
	}

	cmd := exec.Command(git, "merge-tree", "--write-tree", main, clean)
	cmd.Env = append(os.Environ(), "GIT_DIR="+r.bare)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("plain merge-tree: %v\n%s", err, out)
	}
	diff := changed(before, snapshot(t, r.bare))
	if !slices.ContainsFunc(diff, func(p string) bool { return strings.HasPrefix(p, string(filepath.Separator)+"objects") }) {
		t.Errorf("a plain merge-tree wrote no object (changed: %v): the check above proves nothing", diff)
	}
}

// git 2.38 and 2.39, which have merge-tree --write-tree but not
// --merge-base, test as well (the base found by git itself); a git
// without either is named for what it lacks.
func TestConflictTestWithAnOlderGit(t *testing.T) {
	r, _, main, clean, clash, _ := history(t)
	sysGit, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	fake := func(refuse string) string {
		git := filepath.Join(t.TempDir(), "git")
		script := "#!/bin/sh\nfor a in \"$@\"; do case \"$a\" in " + refuse + ") echo \"error: unknown option \\`${a#--}'\" >&2; exit 129;; esac; done\nexec " + sysGit + " \"$@\"\n"
		if err := os.WriteFile(git, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		return git
	}
	if !gitAtLeast(t, "git", 2, 38) {
		t.Skip("the git on PATH is older than 2.38")
	}
	// As 2.39: no --merge-base.
	for _, git := range []string{fake("--merge-base=*"), "git"} {
		if conflict, _, err := ConflictTest(context.Background(), git, r.bare, main, clean); err != nil || conflict {
			t.Errorf("%s, a clean merge: %v %v, want no conflict", git, conflict, err)
		}
		if conflict, files, err := ConflictTest(context.Background(), git, r.bare, main, clash); err != nil || !conflict || !slices.Equal(files, []string{"a.txt"}) {
			t.Errorf("%s, a clash: %v %v %v, want a conflict in a.txt", git, conflict, files, err)
		}
	}
	// As 2.37: no --write-tree either.
	if _, _, err := ConflictTest(context.Background(), fake("--merge-base=*|--write-tree"), r.bare, main, clean); err == nil || !strings.Contains(err.Error(), "needs git 2.38 or later") {
		t.Errorf("a git without merge-tree --write-tree: %v, want it to say it needs git 2.38", err)
	}
}
