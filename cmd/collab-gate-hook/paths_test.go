package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// The test binary stands in for git when fakeGitMode is set in its
// environment (fakeGit): as git that fails, or as git listing paths
// without end.
const fakeGitMode = "COLLAB_GATE_TEST_FAKE_GIT"

const (
	gitFail  = "fail"
	gitFlood = "flood"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeGitMode); mode != "" {
		os.Exit(actAsGit(mode))
	}
	os.Exit(m.Run())
}

func actAsGit(mode string) int {
	_, _ = io.Copy(io.Discard, os.Stdin)
	switch mode {
	case gitFlood:
		w := bufio.NewWriter(os.Stdout)
		for i := 0; ; i++ {
			if _, err := fmt.Fprintf(w, "d%d/f%d\x00", i%1000, i); err != nil {
				return 1
			}
		}
	default:
		fmt.Fprintln(os.Stderr, "fatal: bad object")
		return 128
	}
}

// fakeGit is a repository whose git is the test binary acting as mode says.
func fakeGit(t *testing.T, mode string) repository {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return repository{git: exe, env: append(os.Environ(), fakeGitMode+"="+mode), max: contract.MaxGatePaths}
}

// noGit is a repository without git.
var noGit = repository{git: "git-is-not-here", max: contract.MaxGatePaths}

// listed lists paths at once, as it was told to, and counts its calls.
type listed struct {
	paths []string
	dirs  bool
	err   error
	calls *int
}

func (l listed) changedPaths(context.Context, []contract.GateRef, int) ([]string, bool, error) {
	if l.calls != nil {
		*l.calls++
	}
	return l.paths, l.dirs, l.err
}

// workRepo is a repository of real git in a temporary directory. A test
// makes commits there as a pusher would, then takes every ref off them:
// so they are as a push's new commits are while the hook runs, readable
// and reached by no ref.
type workRepo struct {
	t   testing.TB
	dir string
	env []string
}

func newWorkRepo(t testing.TB) *workRepo {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	r := &workRepo{t: t, dir: t.TempDir()}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") && !strings.HasPrefix(kv, "GITEA_") {
			r.env = append(r.env, kv)
		}
	}
	r.env = append(r.env, "HOME="+t.TempDir(), "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=bot", "GIT_AUTHOR_EMAIL=bot@example.com", "GIT_COMMITTER_NAME=bot", "GIT_COMMITTER_EMAIL=bot@example.com")
	r.git("init", "-q")
	r.git("symbolic-ref", "HEAD", "refs/heads/main")
	return r
}

func (r *workRepo) run(args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir, cmd.Env = r.dir, r.env
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func (r *workRepo) git(args ...string) string {
	r.t.Helper()
	out, err := r.run(args...)
	if err != nil {
		r.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (r *workRepo) write(name, content string) {
	r.t.Helper()
	path := filepath.Join(r.dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// commit commits every change and returns the commit's name.
func (r *workRepo) commit(msg string) string {
	r.t.Helper()
	r.git("add", "-A")
	r.git("commit", "-q", "--allow-empty", "-m", msg)
	return r.git("rev-parse", "HEAD")
}

func (r *workRepo) repository() repository {
	return repository{git: "git", dir: r.dir, env: r.env, max: contract.MaxGatePaths}
}

func (r *workRepo) paths(refs ...contract.GateRef) ([]string, bool) {
	r.t.Helper()
	paths, dirs, err := r.repository().changedPaths(context.Background(), refs, contract.MaxGateQuestion)
	if err != nil {
		r.t.Fatal(err)
	}
	return paths, dirs
}

// The paths of a push are those its new commits change, and only those:
// adds, edits, deletes, renames (a delete and an add), in commits no ref
// reached before the push.
func TestPathsOfNewCommits(t *testing.T) {
	r := newWorkRepo(t)
	r.write("a.txt", "a\n")
	r.write("b.txt", "b\n")
	r.write("c.txt", "c\n")
	r.write("keep/k.txt", "k\n")
	base := r.commit("base")
	r.git("checkout", "-q", "-b", "feature")
	r.write("f.txt", "f\n")
	feature := r.commit("feature")
	r.git("checkout", "-q", "--detach")
	r.write("g.txt", "g\n")
	onFeature := r.commit("on feature")
	r.git("checkout", "-q", "--detach", "main")
	r.write("a.txt", "a2\n")
	r.git("rm", "-q", "b.txt")
	r.write("d/.keep", "")
	r.git("mv", "c.txt", "d/c.txt")
	r.write("new/n.txt", "n\n")
	r.commit("first")
	r.write("new/n.txt", "n2\n")
	r.write(`docs/ü ber "q".md`, "x\n")
	head := r.commit("second")
	r.git("tag", "-a", "-m", "v1", "v1", head)
	tag := r.git("rev-parse", "v1")
	r.git("tag", "-d", "v1")
	r.git("checkout", "-q", "main")

	two := []string{"a.txt", "b.txt", "c.txt", "d/.keep", "d/c.txt", `docs/ü ber "q".md`, "new/n.txt"}
	for _, tc := range []struct {
		name string
		refs []contract.GateRef
		want []string
	}{
		{"two new commits on a new branch", []contract.GateRef{ref(zero, head, "refs/heads/work")}, two},
		{"two new commits on a branch", []contract.GateRef{ref(base, head, "refs/heads/main")}, two},
		{"the same commits under two refs", []contract.GateRef{ref(zero, head, "refs/heads/a"), ref(zero, head, "refs/heads/b")}, two},
		{"an annotated tag of new commits", []contract.GateRef{ref(zero, tag, "refs/tags/v1")}, two},
		{"a new commit on commits another ref reaches", []contract.GateRef{ref(zero, onFeature, "refs/heads/more")}, []string{"g.txt"}},
		{"commits another ref reaches", []contract.GateRef{ref(zero, feature, "refs/heads/copy")}, nil},
		{"a new branch at an existing commit", []contract.GateRef{ref(zero, base, "refs/heads/copy")}, nil},
		{"a ref moved back", []contract.GateRef{ref(feature, base, "refs/heads/feature")}, nil},
		{"a deleted ref", []contract.GateRef{ref(base, zero, "refs/heads/main")}, nil},
		{"a deleted ref beside new commits", []contract.GateRef{ref(base, zero, "refs/heads/main"), ref(zero, onFeature, "refs/heads/more")}, []string{"g.txt"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, dirs := r.paths(tc.refs...)
			if !reflect.DeepEqual(got, tc.want) || dirs {
				t.Errorf("paths %q (dirs %v), want %q", got, dirs, tc.want)
			}
		})
	}
}

// A merge commit brings the paths whose content differs from that of
// every parent: a conflict's resolution and a change of its own, but not
// what it takes from a branch the repository has.
func TestPathsOfAMerge(t *testing.T) {
	r := newWorkRepo(t)
	r.write("a.txt", "1\n")
	r.write("b.txt", "1\n")
	r.write("c.txt", "1\n")
	r.commit("base")
	r.git("checkout", "-q", "-b", "side")
	r.write("a.txt", "side\n")
	r.write("c.txt", "side\n")
	r.commit("side")
	r.git("checkout", "-q", "main")
	r.write("a.txt", "main\n")
	r.write("b.txt", "2\n")
	r.commit("main")

	r.git("checkout", "-q", "--detach", "main")
	if out, err := r.run("merge", "-q", "side"); err == nil {
		t.Fatalf("the merge did not conflict: %s", out)
	}
	r.write("a.txt", "resolved\n")
	resolved := r.commit("merge, resolved")
	r.git("checkout", "-q", "--detach", "main")
	r.git("merge", "-q", "--no-edit", "-X", "theirs", "side")
	theirs := r.git("rev-parse", "HEAD")
	r.git("checkout", "-q", "--detach", "side")
	r.git("merge", "-q", "--no-commit", "-X", "ours", "main")
	r.write("e.txt", "of its own\n")
	own := r.commit("merge main into side, with a change of its own")
	r.git("checkout", "-q", "main")

	for _, tc := range []struct {
		name string
		new  string
		want []string
	}{
		{"a conflict resolved", resolved, []string{"a.txt"}},
		{"a conflict resolved to one side", theirs, nil},
		{"a merge with a change of its own", own, []string{"e.txt"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := r.paths(ref(zero, tc.new, "refs/heads/work"))
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("paths %q, want %q", got, tc.want)
			}
		})
	}
}

// Past the bound on paths, the question carries their directories.
func TestPathsPastTheBoundAreDirectories(t *testing.T) {
	r := newWorkRepo(t)
	r.commit("base")
	r.git("checkout", "-q", "--detach")
	for _, p := range []string{"x/1", "x/2", "y/z/3", "y/z/4", "y/w/5"} {
		r.write(p, p)
	}
	head := r.commit("five paths")
	r.git("checkout", "-q", "main")
	for _, tc := range []struct {
		max  int
		want []string
		dirs bool
	}{
		{5, []string{"x/1", "x/2", "y/w/5", "y/z/3", "y/z/4"}, false},
		{3, []string{"x", "y/w", "y/z"}, true},
		{2, []string{"x", "y"}, true},
		{1, []string{""}, true},
	} {
		repo := r.repository()
		repo.max = tc.max
		got, dirs, err := repo.changedPaths(context.Background(), []contract.GateRef{ref(zero, head, "refs/heads/work")}, contract.MaxGateQuestion)
		if err != nil || !reflect.DeepEqual(got, tc.want) || dirs != tc.dirs {
			t.Errorf("at most %d: %q (dirs %v), %v; want %q (dirs %v)", tc.max, got, dirs, err, tc.want, tc.dirs)
		}
	}
}

func TestPathSet(t *testing.T) {
	for _, tc := range []struct {
		name        string
		add         []string
		max, budget int
		want        []string
		dirs        bool
	}{
		{"within the bounds", []string{"b", "a/x", "a/x", "a/y"}, 3, 100, []string{"a/x", "a/y", "b"}, false},
		{"at the bound", []string{"a", "b"}, 2, len(`"a","b",`), []string{"a", "b"}, false},
		{"a path at the top has the root as its directory", []string{"README", "a/b", "a/c"}, 2, 100, []string{"", "a"}, true},
		{"directories cut below the deepest", []string{"a/b/c/1", "a/b/d/2", "a/e/3", "f/4"}, 2, 100, []string{"a", "f"}, true},
		{"paths added later are cut alike", []string{"a/b/c/1", "a/b/d/2", "a/e/3", "a/f/4", "a/b/x/y/5"}, 3, 100, []string{"a/b", "a/e", "a/f"}, true},
		{"down to the root", []string{"a/1", "b/2", "c/3"}, 2, 100, []string{""}, true},
		{"past the budget", []string{"aaaa", "bbbb/c"}, 10, len(`"aaaa","bbbb/c",`) - 1, []string{"", "bbbb"}, true},
		{"the budget counts escapes", []string{"<", "a/b"}, 10, len(`"\u003c","a/b",`) - 1, []string{"", "a"}, true},
		{"nothing", nil, 1, rootSize, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := newPathSet(tc.max, tc.budget)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range tc.add {
				s.add(p)
			}
			if got := s.sorted(); !reflect.DeepEqual(got, tc.want) || s.dirs != tc.dirs {
				t.Errorf("%q (dirs %v), want %q (dirs %v)", got, s.dirs, tc.want, tc.dirs)
			}
		})
	}
	if _, err := newPathSet(1, rootSize-1); err == nil {
		t.Errorf("a budget too small for the root was taken")
	}
}

// Whatever the paths and bounds, the set keeps to the bounds and covers
// every path: as itself, or by a directory it is under.
func FuzzPathSet(f *testing.F) {
	f.Add("a/b/c\x00a/b/d\x00e\x00f/g/h/i", 2, 20)
	f.Add("x\x00y\x00z", 1, 3)
	f.Add("<>&\x00\xff/\u2028\x00\"/\\", 2, 12)
	f.Fuzz(func(t *testing.T, list string, max, budget int) {
		s, err := newPathSet(max, budget)
		if err != nil {
			return
		}
		paths := strings.Split(list, "\x00")
		for _, p := range paths {
			s.add(p)
		}
		entries := s.sorted()
		b, _ := json.Marshal(entries)
		if len(entries) > max || len(b)-2 > budget {
			t.Fatalf("%d entries, %d bytes: beyond %d, %d", len(entries), len(b), max, budget)
		}
		for _, p := range paths {
			covered := false
			for _, e := range entries {
				covered = covered || (!s.dirs && p == e) || (s.dirs && (e == "" || strings.HasPrefix(p, e+"/")))
			}
			if !covered {
				t.Fatalf("%q is not covered by %q (dirs %v)", p, entries, s.dirs)
			}
		}
	})
}

func FuzzJSONLen(f *testing.F) {
	for _, s := range []string{"", "a/b", "<&>", "\"\\", "\x00\b\f\n\r\t\x1f", "\xff\xfe", "ü\u2028\u2029", "\x7f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := json.Marshal(s)
		if err != nil || jsonLen(s) != len(b) {
			t.Fatalf("jsonLen(%q) = %d, json.Marshal writes %d bytes (%v)", s, jsonLen(s), len(b), err)
		}
	})
}

// git's output is split at each NUL, wherever its writes end.
func TestNulSplitter(t *testing.T) {
	const out = "a\x00bc\x00\x00d/e f\n\x00g"
	want := []string{"a", "bc", "d/e f\n", "g"}
	for at := range len(out) + 1 {
		var got []string
		w := &nulSplitter{add: func(p string) { got = append(got, p) }}
		for _, part := range []string{out[:at], out[at:]} {
			if n, err := w.Write([]byte(part)); n != len(part) || err != nil {
				t.Fatalf("Write: %d, %v", n, err)
			}
		}
		w.flush()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("split at %d: %q", at, got)
		}
	}
	w := &nulSplitter{add: func(string) {}}
	if _, err := w.Write(bytes.Repeat([]byte("x"), maxPath+1)); err == nil {
		t.Errorf("a path longer than %d bytes was taken", maxPath)
	}
}

// When git fails, is missing or runs out of time, there are no paths,
// and an error says so.
func TestPathsUnlisted(t *testing.T) {
	refs := []contract.GateRef{ref(zero, sha1, "refs/heads/work")}
	for name, repo := range map[string]repository{"git fails": fakeGit(t, gitFail), "no git": noGit} {
		paths, dirs, err := repo.changedPaths(context.Background(), refs, contract.MaxGateQuestion)
		if err == nil || paths != nil || dirs {
			t.Errorf("%s: %q, %v, %v", name, paths, dirs, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	paths, _, err := fakeGit(t, gitFlood).changedPaths(ctx, refs, contract.MaxGateQuestion)
	if !errors.Is(err, context.DeadlineExceeded) || paths != nil {
		t.Errorf("git without end: %d paths, %v", len(paths), err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("gave up after %v", took)
	}
	// Deleted refs name no commits: git is not run.
	if paths, _, err := noGit.changedPaths(context.Background(), []contract.GateRef{ref(sha1, zero, "refs/heads/work")}, 0); paths != nil || err != nil {
		t.Errorf("a deleted ref: %q, %v", paths, err)
	}
}

// The hook sends the paths with the question; a merge's question, and a
// question whose paths could not be listed, go without them.
func TestTheQuestionCarriesThePaths(t *testing.T) {
	r := newWorkRepo(t)
	base := r.commit("base")
	r.git("checkout", "-q", "--detach")
	r.write("src/a.go", "package a\n")
	r.write("README", "read me\n")
	head := r.commit("work")
	r.git("checkout", "-q", "main")

	calls := 0
	for _, tc := range []struct {
		name   string
		repo   lister
		env    environ
		paths  []string
		dirs   bool
		stderr string
	}{
		{"a push", r.repository(), gitea(), []string{"README", "src/a.go"}, false, "collab-lease: ok\n"},
		{"directories", listed{paths: []string{"", "src"}, dirs: true}, gitea(), []string{"", "src"}, true, "collab-lease: ok\n"},
		{"a merge", listed{paths: []string{"x"}, calls: &calls}, gitea(envTrigger+"=pr-merge-to-base", envPullIndex+"=4"), nil, false, "collab-lease: ok\n"},
		{"git fails", listed{err: errors.New("exit status 128")}, gitea(), nil, false, unlisted + "\ncollab-lease: ok\n"},
		{"no git", noGit, gitea(), nil, false, unlisted + "\ncollab-lease: ok\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSidecar(t, answering(contract.GateAnswer{Allow: true, Lines: []string{"collab-lease: ok"}}))
			dir := writeGate(t, contract.GateConfig{URL: s.URL, Unreachable: contract.GateRefuse, TimeoutMS: 20000})
			var stdout, stderr bytes.Buffer
			stdin := strings.NewReader(base + " " + head + " refs/heads/main\n")
			code := run([]string{"--dir", dir}, tc.env.get, tc.repo, stdin, &stdout, &stderr)
			if code != exitAllow || stderr.String() != tc.stderr || stdout.Len() > 0 {
				t.Errorf("exit %d, stderr %q, stdout %q; want stderr %q", code, stderr.String(), stdout.String(), tc.stderr)
			}
			reqs := s.requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests", len(reqs))
			}
			if q := reqs[0].question; !reflect.DeepEqual(q.Paths, tc.paths) || q.PathsAreDirs != tc.dirs ||
				!reflect.DeepEqual(q.Refs, []contract.GateRef{ref(base, head, "refs/heads/main")}) {
				t.Errorf("question: paths %q (dirs %v), refs %+v", q.Paths, q.PathsAreDirs, q.Refs)
			}
		})
	}
	if calls != 0 {
		t.Errorf("the paths of a merge were listed")
	}
}

// The paths take only the room the rest of the question leaves: past
// it, they are directories.
func TestThePathsFitTheQuestion(t *testing.T) {
	q := base()
	name := "refs/heads/" + strings.Repeat("n", 400)
	one := len(mustJSON(t, ref(zero, sha1, name))) + 1
	for range (contract.MaxGateQuestion - 500_000) / one {
		q.Refs = append(q.Refs, ref(zero, sha1, name))
	}
	var paths []string
	for i := range contract.MaxGatePaths {
		paths = append(paths, fmt.Sprintf("dir%d/%s%d", i%100, strings.Repeat("p", 100), i))
	}
	if err := addPaths(&q, filling(paths), time.Second); err != nil {
		t.Fatal(err)
	}
	if n := len(mustJSON(t, q)); n > contract.MaxGateQuestion || !q.PathsAreDirs || len(q.Paths) != 100 {
		t.Errorf("%d bytes, %d paths (dirs %v)", n, len(q.Paths), q.PathsAreDirs)
	}
}

// filling lists its paths within the budget it is given.
type filling []string

func (f filling) changedPaths(_ context.Context, _ []contract.GateRef, budget int) ([]string, bool, error) {
	s, err := newPathSet(contract.MaxGatePaths, budget)
	if err != nil {
		return nil, false, err
	}
	for _, p := range f {
		s.add(p)
	}
	return s.sorted(), s.dirs, nil
}

// BenchmarkPaths lists the paths of a push of one commit that changes
// 1,000 files in 100 directories, and of one that changes 20,000, past
// the bound, whose question carries the 100 directories:
//
//	go test -run '^$' -bench Paths ./cmd/collab-gate-hook/
func BenchmarkPaths(b *testing.B) {
	for _, n := range []int{1000, 20000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			r := newWorkRepo(b)
			r.commit("base")
			r.git("checkout", "-q", "--detach")
			for i := range n {
				r.write(fmt.Sprintf("dir%02d/file%05d.txt", i%100, i), fmt.Sprintln(i))
			}
			head := r.commit("many files")
			r.git("checkout", "-q", "main")
			refs := []contract.GateRef{ref(zero, head, "refs/heads/work")}
			repo := r.repository()
			want := n
			if n > contract.MaxGatePaths {
				want = 100
			}
			for b.Loop() {
				paths, _, err := repo.changedPaths(context.Background(), refs, contract.MaxGateQuestion)
				if err != nil || len(paths) != want {
					b.Fatalf("%d paths, %v", len(paths), err)
				}
			}
		})
	}
}
