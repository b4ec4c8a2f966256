package gatehook

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// The script finds the program four levels up from itself however
// Gitea's pre-receive runs it: with GIT_DIR "." in the repository (as git
// runs hooks), with GIT_DIR absolute from anywhere, or with no GIT_DIR.
// The program here is a stand-in that records its stdin and directory.
func TestTheScriptFindsTheProgram(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("Gitea's pre-receive needs bash")
	}
	root := t.TempDir()
	hooks := giteaRepo(t, root, "acme/widgets.git")
	repo := filepath.Dir(hooks)
	out := filepath.Join(t.TempDir(), "ran")
	o := options(t, root)
	o.Program = program(t, `cat > "$GATE_OUT"; echo "exit $GATE_EXIT" >> "$GATE_OUT"; exit $GATE_EXIT`)
	if _, err := Prepare(o); err != nil {
		t.Fatal(err)
	}
	if _, err := InstallRepo(root, "acme", "widgets"); err != nil {
		t.Fatal(err)
	}
	const line = "0000000000000000000000000000000000000000 1111111111111111111111111111111111111111 refs/heads/work/1"
	for _, tc := range []struct {
		name, dir, hook, gitDir string
	}{
		{"GIT_DIR . in the repository", repo, "hooks/pre-receive", "."},
		{"GIT_DIR absolute", t.TempDir(), filepath.Join(hooks, "pre-receive"), repo},
		{"no GIT_DIR, run by its absolute path", t.TempDir(), filepath.Join(hooks, "pre-receive"), ""},
		{"no GIT_DIR, run from the repository", repo, "./hooks/pre-receive", ""},
	} {
		for _, exit := range []string{"0", "1"} {
			t.Run(tc.name+"/exit "+exit, func(t *testing.T) {
				os.Remove(out)
				cmd := exec.Command(tc.hook)
				cmd.Dir = tc.dir
				cmd.Env = append(withoutGit(os.Environ()), "GATE_OUT="+out, "GATE_EXIT="+exit)
				if tc.gitDir != "" {
					cmd.Env = append(cmd.Env, "GIT_DIR="+tc.gitDir)
				}
				cmd.Stdin = strings.NewReader(line + "\n")
				b, err := cmd.CombinedOutput()
				if code := cmd.ProcessState.ExitCode(); code != map[string]int{"0": 0, "1": 1}[exit] {
					t.Fatalf("exit %d (%v): %s", code, err, b)
				}
				if got := string(mustRead(t, out)); got != line+"\nexit "+exit+"\n" {
					t.Errorf("the program read %q", got)
				}
			})
		}
	}

	// Without the program (a gate half removed), the push goes in, and
	// the pusher reads why it was not checked.
	if err := os.Remove(filepath.Join(root, contract.GateDir, contract.GateProgram)); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("hooks/pre-receive")
	cmd.Dir = repo
	cmd.Env = append(withoutGit(os.Environ()), "GIT_DIR=.")
	cmd.Stdin = strings.NewReader(line + "\n")
	b, err := cmd.CombinedOutput()
	if err != nil || string(b) != "collab-lease: the gate's program is missing; this push was not checked\n" {
		t.Errorf("%v: %q", err, b)
	}
}

// withoutGit is env without git's and Gitea's variables.
func withoutGit(env []string) []string {
	var kept []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "GIT_") && !strings.HasPrefix(kv, "GITEA_") {
			kept = append(kept, kv)
		}
	}
	return kept
}
