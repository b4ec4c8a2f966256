package gitea

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The conflict test: Gitea answers a merge "try again later" both while
// it tests a pull request and after its test found a conflict, and says
// neither in its API (mergeable is false for both). So the sidecar tests
// the merge as Gitea does (services/pull/merge_tree.go and
// modules/gitrepo/merge_tree.go, v1.26, with git 2.40 or later; 2.38 here): the merge
// base of the base and head commits, then git merge-tree on the three,
// whose exit status is 1 for a conflict. It runs in Gitea's repository
// directory (on the same machine, or a shared disk, readable by the
// sidecar), and writes nothing there: the trees merge-tree makes go to a
// temporary object directory, which reads Gitea's objects as its
// alternate.

// maxConflictFiles bounds the conflicted files ConflictTest names.
const maxConflictFiles = 100

// ConflictTest reports whether merging headSHA into baseSHA conflicts,
// and in which files (at most maxConflictFiles; git may find a conflict
// without naming a file), in the bare repository repoDir (Gitea's
// <repository root>/<owner>/<name>.git, in lower case), with the git at
// git ("" is the git on PATH), which must be 2.38 or later: Gitea's test
// needs merge-tree's --merge-base (2.40), which this passes where git has
// it; 2.38 and 2.39 find the merge base themselves. As in Gitea's test,
// commits without a merge base, and a head already in the base, are not
// a conflict (Gitea finds such a pull request mergeable, with nothing to
// merge).
func ConflictTest(ctx context.Context, git, repoDir, baseSHA, headSHA string) (conflict bool, files []string, err error) {
	if git == "" {
		git = "git"
	}
	if !validSHA(baseSHA) || !validSHA(headSHA) {
		return false, nil, fmt.Errorf("conflict test: %q and %q are not both commit IDs", oneLine(baseSHA), oneLine(headSHA))
	}
	repoDir, err = filepath.Abs(repoDir)
	if err != nil {
		return false, nil, fmt.Errorf("conflict test: %w", err)
	}
	objects := filepath.Join(repoDir, "objects")
	if st, err := os.Stat(objects); err != nil || !st.IsDir() {
		return false, nil, fmt.Errorf("conflict test: %s is not a bare repository (no objects directory)", repoDir)
	}
	tmp, err := os.MkdirTemp("", "collab-lease-merge-tree-")
	if err != nil {
		return false, nil, fmt.Errorf("conflict test: %w", err)
	}
	defer os.RemoveAll(tmp)
	env := gitEnv(repoDir, tmp, objects)

	out, code, err := runGit(ctx, git, repoDir, env, "merge-base", baseSHA, headSHA)
	switch {
	case code == 1 && len(bytes.TrimSpace(out)) == 0:
		return false, nil, nil // no merge base
	case err != nil:
		return false, nil, fmt.Errorf("conflict test in %s: %w", repoDir, err)
	}
	base := strings.TrimSpace(string(out))
	if !validSHA(base) {
		return false, nil, fmt.Errorf("conflict test in %s: git merge-base answered %q", repoDir, oneLine(base))
	}
	if base == headSHA {
		return false, nil, nil // the head is in the base already
	}

	out, code, err = runGit(ctx, git, repoDir, env, "merge-tree", "--write-tree", "-z", "--name-only", "--no-messages",
		"--merge-base="+base, baseSHA, headSHA)
	if errors.Is(err, errOldGit) {
		// git 2.38 and 2.39 have --write-tree but not --merge-base: they
		// find the merge base themselves (the same one, but where two
		// commits have several, which they merge first).
		out, code, err = runGit(ctx, git, repoDir, env, "merge-tree", "--write-tree", "-z", "--name-only", "--no-messages", baseSHA, headSHA)
	}
	switch {
	case code == 0:
		return false, nil, nil
	case code == 1:
		return true, conflictedFiles(out), nil
	case errors.Is(err, errOldGit):
		return false, nil, fmt.Errorf("conflict test: %s needs git 2.38 or later (merge-tree --write-tree; Gitea's own test needs 2.40): %w", git, err)
	}
	return false, nil, fmt.Errorf("conflict test in %s: %w", repoDir, err)
}

// conflictedFiles parses merge-tree's output for a conflict with -z and
// --name-only: the tree's ID, then each conflicted file's name, each
// ended by a NUL.
func conflictedFiles(out []byte) []string {
	fields := strings.Split(string(out), "\x00")
	var files []string
	seen := map[string]bool{}
	for _, name := range fields[min(1, len(fields)):] {
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		files = append(files, name)
		if len(files) == maxConflictFiles {
			break
		}
	}
	return files
}

// gitEnv is the environment of the conflict test's git commands: the
// sidecar's, without anything of git's that could point them elsewhere,
// and with GIT_DIR naming the repository (so git does not go looking for
// one, and does not refuse, as its search does, a repository that belongs
// to Gitea's user and not the sidecar's), new objects going to objectDir,
// and the repository's objects read as its alternate.
func gitEnv(repoDir, objectDir, objects string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") && !strings.HasPrefix(kv, "LC_ALL=") && !strings.HasPrefix(kv, "LANGUAGE=") {
			env = append(env, kv)
		}
	}
	return append(env,
		"GIT_DIR="+repoDir,
		"GIT_OBJECT_DIRECTORY="+objectDir,
		"GIT_ALTERNATE_OBJECT_DIRECTORIES="+objects,
		"GIT_TERMINAL_PROMPT=0",
		"LC_ALL=C", // git's messages as this file reads them
	)
}

// errOldGit: git does not know an option the conflict test passes.
var errOldGit = errors.New("git does not know the option")

// runGit runs git args in dir with env, returning its stdout and exit
// status (-1 if it did not run to an exit); err is nil only for exit
// status 0, and says what git wrote to stderr.
func runGit(ctx context.Context, git, dir string, env []string, args ...string) ([]byte, int, error) {
	cmd := exec.CommandContext(ctx, git, args...)
	cmd.Dir, cmd.Env = dir, env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err == nil {
		return stdout.Bytes(), 0, nil
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || ctx.Err() != nil {
		return nil, -1, fmt.Errorf("git %s: %w", args[0], errors.Join(err, ctx.Err()))
	}
	said := oneLine(stderr.String())
	if exit.ExitCode() == 129 && strings.Contains(said, "unknown option") {
		return nil, exit.ExitCode(), fmt.Errorf("%w: %s", errOldGit, said)
	}
	return stdout.Bytes(), exit.ExitCode(), fmt.Errorf("git %s: %w: %s", args[0], err, said)
}
