package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// repository is how the hook runs git on the repository pushed to, to
// list the paths the push changes (contract.GateQuestion.Paths).
type repository struct {
	// git is the git program. Gitea cannot work without one, so its
	// hooks find one in PATH.
	git string
	// dir is where git runs: "" for the hook's working directory, which
	// is the repository (git runs hooks there).
	dir string
	// env is git's environment: nil for the hook's own, which makes the
	// pushed objects readable before they are in the repository
	// (GIT_QUARANTINE_PATH, GIT_OBJECT_DIRECTORY,
	// GIT_ALTERNATE_OBJECT_DIRECTORIES).
	env []string
	// max bounds the paths, or the directories, of a question:
	// contract.MaxGatePaths.
	max int
}

// pushedTo is the repository pushed to, as Gitea runs the hook in it.
func pushedTo() repository {
	return repository{git: "git", max: contract.MaxGatePaths}
}

// unlisted is the line the pusher reads when the paths could not be
// listed: the question goes without them, and the sidecar checks no
// reservations.
const unlisted = "collab-lease: could not list the paths this push changes; reservations were not checked"

// gitWaitDelay bounds how long git's output is waited for once git was
// stopped at its deadline.
const gitWaitDelay = 100 * time.Millisecond

// changedPaths lists the paths the new commits of refs change, sorted,
// without repeats: the commits reachable from the refs' new object names
// that no ref reached before the push. Gitea runs the hook before it
// updates any ref, so "--not --all" leaves out exactly the commits the
// repository had; a deleted ref, and a ref moved to a commit the
// repository had, bring none. A merge commit brings the paths whose
// content differs from that of every parent (-c): a conflict's
// resolution, or a change of its own. A path it takes from one parent
// is that parent's, and that parent is either in the repository already
// or a new commit whose own paths are listed: so merging a branch the
// repository has lists none of that branch's paths.
//
// The answer fits in a question: at most r.max entries whose JSON takes
// at most budget bytes. Past either bound, the answer is directories
// (dirs): see pathSet.
func (r repository) changedPaths(ctx context.Context, refs []contract.GateRef, budget int) (paths []string, dirs bool, err error) {
	var revs strings.Builder
	seen := make(map[string]bool)
	for _, ref := range refs {
		if deleted(ref.New) || seen[ref.New] {
			continue
		}
		seen[ref.New] = true
		revs.WriteString(ref.New + "\n")
	}
	if revs.Len() == 0 {
		return nil, false, nil
	}
	set, err := newPathSet(r.max, budget)
	if err != nil {
		return nil, false, err
	}
	out := &nulSplitter{add: set.add}
	// The revisions go on stdin (a push may name 10,000 of them), read
	// before --not: the commits to list, not those to leave out. The
	// options are as old as git 2.0 (log's -c is
	// --diff-merges=combined, which is younger); the -c before log keeps
	// the repository's configuration from changing what git prints.
	cmd := exec.CommandContext(ctx, r.git, "-c", "log.showSignature=false", "-c", "diff.relative=false",
		"log", "--format=", "--name-only", "-z", "--no-renames", "-c", "--root", "--no-color",
		"--stdin", "--not", "--all")
	cmd.Dir, cmd.Env = r.dir, r.env
	cmd.Stdin = strings.NewReader(revs.String())
	cmd.Stdout = out
	cmd.WaitDelay = gitWaitDelay
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, false, fmt.Errorf("git log: %w", err)
	}
	out.flush()
	return set.sorted(), set.dirs, nil
}

// deleted says whether an object name is git's zero name, the new name
// of a deleted ref.
func deleted(name string) bool {
	return strings.Trim(name, "0") == ""
}

// nulSplitter is git's stdout: the paths it lists, each ended by a NUL
// (-z: no quoting, so any byte but NUL may be in a path).
type nulSplitter struct {
	add     func(path string)
	partial []byte
}

// maxPath bounds one path of git's output; git's are far shorter.
const maxPath = 64 << 10

func (w *nulSplitter) Write(p []byte) (int, error) {
	n := len(p)
	for {
		i := bytes.IndexByte(p, 0)
		if i < 0 {
			break
		}
		if len(w.partial) > 0 {
			w.partial = append(w.partial, p[:i]...)
			w.emit(w.partial)
			w.partial = w.partial[:0]
		} else {
			w.emit(p[:i])
		}
		p = p[i+1:]
	}
	if len(w.partial)+len(p) > maxPath {
		return 0, errors.New("a path longer than 64 KiB")
	}
	w.partial = append(w.partial, p...)
	return n, nil
}

// flush takes what followed the last NUL as one more path.
func (w *nulSplitter) flush() {
	w.emit(w.partial)
	w.partial = nil
}

func (w *nulSplitter) emit(path []byte) {
	if len(path) > 0 {
		w.add(string(path))
	}
}

// pathSet gathers the paths git lists, without repeats, within a
// question's bounds: at most max entries, whose JSON takes at most
// budget bytes. Past either bound it holds directories instead (dirs),
// coarser as needed: first each path's directory, then those
// directories cut to fewer segments, as few as it takes, down to the
// root, "", which stands for the whole tree. A path at the top has the
// root as its directory.
type pathSet struct {
	max, budget int
	dirs        bool
	depth       int // when dirs, the most segments a directory keeps; -1 for all
	set         map[string]struct{}
	size        int // the JSON of set's entries, a comma each
}

// rootSize is the JSON of the coarsest answer, [""]: the least room a
// question must have for paths.
const rootSize = len(`"",`)

func newPathSet(max, budget int) (*pathSet, error) {
	if max < 1 || budget < rootSize {
		return nil, errors.New("no room in the question for paths")
	}
	return &pathSet{max: max, budget: budget, depth: -1, set: make(map[string]struct{})}, nil
}

func (s *pathSet) add(path string) {
	if s.dirs {
		path = cut(parent(path), s.depth)
	}
	s.put(path)
	for len(s.set) > s.max || s.size > s.budget {
		s.coarsen()
	}
}

func (s *pathSet) put(entry string) {
	if _, ok := s.set[entry]; !ok {
		s.set[entry] = struct{}{}
		s.size += jsonLen(entry) + 1
	}
}

// coarsen makes paths directories, or cuts directories by one segment
// below the deepest it holds.
func (s *pathSet) coarsen() {
	held := s.set
	to := func(entry string) string { return cut(entry, s.depth) }
	if !s.dirs {
		s.dirs = true
		to = parent
	} else {
		deepest := 0
		for d := range held {
			deepest = max(deepest, segments(d))
		}
		s.depth = max(deepest-1, 0)
	}
	s.set, s.size = make(map[string]struct{}, len(held)), 0
	for entry := range held {
		s.put(to(entry))
	}
}

func (s *pathSet) sorted() []string {
	if len(s.set) == 0 {
		return nil
	}
	entries := make([]string, 0, len(s.set))
	for entry := range s.set {
		entries = append(entries, entry)
	}
	slices.Sort(entries)
	return entries
}

// parent is a path's directory: "" for a path at the top.
func parent(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[:i]
	}
	return ""
}

// cut keeps the first depth segments of a directory (all when depth < 0).
func cut(dir string, depth int) string {
	if depth < 0 {
		return dir
	}
	at := 0
	for range depth {
		i := strings.IndexByte(dir[at:], '/')
		if i < 0 {
			return dir
		}
		at += i + 1
	}
	if at == 0 {
		return ""
	}
	return dir[:at-1]
}

// segments counts a directory's segments: 0 for the root.
func segments(dir string) int {
	if dir == "" {
		return 0
	}
	return strings.Count(dir, "/") + 1
}

// jsonLen is the length of s encoded as a JSON string, as json.Marshal
// writes it: quotes, and escapes for control characters, quotes,
// backslashes, <, > and &, and for bytes that are not UTF-8.
func jsonLen(s string) int {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s)
			return len(b)
		}
	}
	return len(s) + 2
}
