package gatehook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// buildHook builds the hook program as make build does, with
// CGO_ENABLED=0, and returns its path.
func buildHook(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), contract.GateProgram)
	cmd := exec.Command("go", "build", "-o", bin, "github.com/collab-lease/collab-lease/cmd/collab-gate-hook")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// fakeSidecar answers the gate's questions on 127.0.0.1 as its next
// answer says, and keeps the questions.
type fakeSidecar struct {
	*httptest.Server
	mu        sync.Mutex
	questions []contract.GateQuestion
	status    int
	answer    contract.GateAnswer
	secret    string
}

func newFakeSidecar(t *testing.T) *fakeSidecar {
	s := &fakeSidecar{status: http.StatusOK}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if r.URL.Path != contract.GatePath || r.Header.Get(contract.GateSecretHeader) != s.secret {
			t.Errorf("asked %s %s with secret %q", r.Method, r.URL.Path, r.Header.Get(contract.GateSecretHeader))
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var q contract.GateQuestion
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &q); err != nil {
			t.Errorf("question: %v: %s", err, body)
		}
		s.questions = append(s.questions, q)
		w.WriteHeader(s.status)
		_ = json.NewEncoder(w).Encode(s.answer)
	}))
	t.Cleanup(s.Close)
	return s
}

// next sets the next answers.
func (s *fakeSidecar) next(status int, a contract.GateAnswer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.answer = status, a
}

func (s *fakeSidecar) asked() []contract.GateQuestion {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]contract.GateQuestion(nil), s.questions...)
}

// remote is what git's output shows of the hook's stderr: its
// "remote: " lines, without the padding git adds to clear the line.
func remote(out string) []string {
	var lines []string
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "remote: "); ok {
			lines = append(lines, strings.TrimRight(rest, " "))
		}
	}
	return lines
}

// The gate end to end with real git: the program built as make builds
// it, Gitea's pre-receive and its own pre-receive.d/gitea, Prepare and
// InstallRepo, and pushes over git's local transport. receive-pack runs
// its hooks in the pushing git's environment (minus git's own
// variables), so the GITEA_* variables set on git push reach the hook as
// Gitea's would.
func TestGateEndToEndWithGit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the hook program and runs git")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("Gitea's pre-receive needs bash")
	}
	bin := buildHook(t)
	sidecar := newFakeSidecar(t)
	home := t.TempDir()
	env := append(withoutGit(os.Environ()), "HOME="+home, "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=bot", "GIT_AUTHOR_EMAIL=bot@example.com", "GIT_COMMITTER_NAME=bot", "GIT_COMMITTER_EMAIL=bot@example.com")
	git := func(dir string, extra []string, args ...string) (string, error) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(env, extra...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	must := func(dir string, args ...string) string {
		t.Helper()
		out, err := git(dir, nil, args...)
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(out)
	}

	root := t.TempDir()
	repo := filepath.Join(root, "acme", "widgets.git")
	mustMkdir(t, repo)
	must(repo, "init", "--bare", "-q")
	must(repo, "config", "receive.advertisePushOptions", "true")
	hooks := filepath.Join(repo, "hooks")
	mustMkdir(t, filepath.Join(hooks, preReceiveD))
	mustWrite(t, filepath.Join(hooks, "pre-receive"), giteaHook, 0o755)
	mustWrite(t, filepath.Join(hooks, preReceiveD, "gitea"), "#!/usr/bin/env bash\nexit 0\n", 0o755)
	before := snapshot(t, hooks)

	secret, err := Prepare(Options{Root: root, Program: bin,
		Config: contract.GateConfig{URL: sidecar.URL, Unreachable: contract.GateAllow, TimeoutMS: 10000}})
	if err != nil {
		t.Fatal(err)
	}
	sidecar.mu.Lock()
	sidecar.secret = string(secret)
	sidecar.mu.Unlock()
	if changed, err := InstallRepo(root, "acme", "widgets"); err != nil || !changed {
		t.Fatalf("install: %v, %v", changed, err)
	}

	work := t.TempDir()
	must(work, "init", "-q")
	must(work, "commit", "-q", "--allow-empty", "-m", "work on #1")
	head := must(work, "rev-parse", "HEAD")
	asGitea := []string{"GITEA_REPO_ID=3", "GITEA_REPO_USER_NAME=acme", "GITEA_REPO_NAME=widgets",
		"GITEA_PUSHER_ID=7", "GITEA_PUSHER_NAME=bot", "GITEA_PR_INDEX=0"}
	push := func(extra []string, args ...string) (string, error) {
		t.Helper()
		return git(work, append(asGitea, extra...), append([]string{"push", "--porcelain", repo}, args...)...)
	}
	at := func(ref string) string {
		out, err := git(repo, nil, "rev-parse", "--verify", "-q", ref)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(out)
	}
	const zero = "0000000000000000000000000000000000000000"

	// Refused: the pusher reads the sidecar's line, and the ref does not move.
	refusal := "collab-lease: work/1 is claimed: acme/widgets#1 by bot · agent-8 (token 8); this push carries no token: push with -o collab-lease=1:8 (git collab run does it for you)"
	sidecar.next(http.StatusOK, contract.GateAnswer{Lines: []string{refusal}})
	out, err := push(nil, "HEAD:refs/heads/work/1")
	if err == nil || !slices.Equal(remote(out), []string{refusal}) || !strings.Contains(out, "pre-receive hook declined") {
		t.Fatalf("refused push: %v\n%s", err, out)
	}
	if got := at("refs/heads/work/1"); got != "" {
		t.Fatalf("work/1 moved to %s", got)
	}
	want := contract.GateQuestion{RepoID: 3, Owner: "acme", Repo: "widgets", PusherID: 7, Pusher: "bot",
		Options: []string{}, Refs: []contract.GateRef{{Old: zero, New: head, Name: "refs/heads/work/1"}}}
	if q := sidecar.asked(); len(q) != 1 || !reflect.DeepEqual(q[0], want) {
		t.Fatalf("questions %+v\nwant %+v", q, want)
	}

	// Allowed, with the token as a push option: the ref moves, and the
	// options reach the question in order.
	sidecar.next(http.StatusOK, contract.GateAnswer{Allow: true, Lines: []string{"collab-lease: renewed acme/widgets#1"}})
	out, err = push(nil, "-o", "collab-lease=1:7", "-o", "second=x", "HEAD:refs/heads/work/1")
	if err != nil || !slices.Equal(remote(out), []string{"collab-lease: renewed acme/widgets#1"}) {
		t.Fatalf("allowed push: %v\n%s", err, out)
	}
	if got := at("refs/heads/work/1"); got != head {
		t.Fatalf("work/1 at %q, want %s", got, head)
	}
	want.Options = []string{"collab-lease=1:7", "second=x"}
	if q := sidecar.asked(); len(q) != 2 || !reflect.DeepEqual(q[1], want) {
		t.Fatalf("questions %+v\nwant %+v", q, want)
	}

	// Gitea's internal pushes go in unasked.
	sidecar.next(http.StatusOK, contract.GateAnswer{})
	if out, err := push([]string{"GITEA_INTERNAL_PUSH=true"}, "HEAD:refs/pull/1/head"); err != nil {
		t.Fatalf("internal push: %v\n%s", err, out)
	}
	if n := len(sidecar.asked()); n != 2 {
		t.Fatalf("an internal push was asked about (%d questions)", n)
	}

	// The question carries the paths the push's new commits change,
	// which the hook lists from the pushed objects before Gitea takes
	// them in: two commits, with an add, an edit and a rename.
	sidecar.next(http.StatusOK, contract.GateAnswer{Allow: true})
	mustMkdir(t, filepath.Join(work, "src"))
	mustWrite(t, filepath.Join(work, "a.txt"), "a\n", 0o644)
	mustWrite(t, filepath.Join(work, "src", "b.go"), "package b\n", 0o644)
	must(work, "add", "-A")
	must(work, "commit", "-q", "-m", "add a and b")
	mustWrite(t, filepath.Join(work, "a.txt"), "a, edited\n", 0o644)
	must(work, "mv", "src/b.go", "src/c.go")
	must(work, "commit", "-q", "-a", "-m", "edit a, rename b")
	last := func() contract.GateQuestion {
		t.Helper()
		q := sidecar.asked()
		return q[len(q)-1]
	}
	if out, err := push(nil, "HEAD:refs/heads/work/3"); err != nil {
		t.Fatalf("push of two commits: %v\n%s", err, out)
	}
	if q := last(); !slices.Equal(q.Paths, []string{"a.txt", "src/b.go", "src/c.go"}) || q.PathsAreDirs {
		t.Fatalf("paths %q (dirs %v)", q.Paths, q.PathsAreDirs)
	}
	// The same commits on another branch bring none: a ref reached them.
	if out, err := push(nil, "HEAD:refs/heads/work/4"); err != nil {
		t.Fatalf("push of a new branch: %v\n%s", err, out)
	}
	if q := last(); q.Paths != nil || len(q.Refs) != 1 || q.Refs[0].Name != "refs/heads/work/4" {
		t.Fatalf("a new branch at a pushed commit: %+v", q)
	}
	// A merge's question carries none.
	mustWrite(t, filepath.Join(work, "m.txt"), "m\n", 0o644)
	must(work, "add", "-A")
	must(work, "commit", "-q", "-m", "as merged")
	if out, err := push([]string{"GITEA_PUSH_TRIGGER=pr-merge-to-base", "GITEA_PR_INDEX=1"}, "HEAD:refs/heads/work/3"); err != nil {
		t.Fatalf("merge: %v\n%s", err, out)
	}
	if q := last(); q.Paths != nil || q.Trigger != "pr-merge-to-base" {
		t.Fatalf("a merge: %+v", q)
	}
	head = must(work, "rev-parse", "HEAD")

	// No answer (a 503), with the policy refuse: refused, in the contract's words.
	if _, err := Prepare(Options{Root: root, Program: bin,
		Config: contract.GateConfig{URL: sidecar.URL, Unreachable: contract.GateRefuse, TimeoutMS: 10000}}); err != nil {
		t.Fatal(err)
	}
	sidecar.next(http.StatusServiceUnavailable, contract.GateAnswer{Allow: true})
	out, err = push(nil, "HEAD:refs/heads/work/2")
	if err == nil || !slices.Equal(remote(out), []string{contract.GateUnansweredRefused}) || at("refs/heads/work/2") != "" {
		t.Fatalf("unanswered push: %v\n%s", err, out)
	}

	// Removed: Gitea's files are as they were, the gate's directory is
	// gone, and pushes are not asked about.
	if n, err := Remove(root); err != nil || n != 1 {
		t.Fatalf("remove: %d, %v", n, err)
	}
	if after := snapshot(t, hooks); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("hooks after remove:\n%v\nwant\n%v", after, before)
	}
	if _, err := os.Lstat(filepath.Join(root, contract.GateDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the gate's directory: %v", err)
	}
	asked := len(sidecar.asked())
	if out, err := push(nil, "HEAD:refs/heads/work/2"); err != nil || at("refs/heads/work/2") != head {
		t.Fatalf("push after remove: %v\n%s", err, out)
	}
	if n := len(sidecar.asked()); n != asked {
		t.Errorf("asked after remove")
	}
}
