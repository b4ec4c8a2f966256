package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/collab-lease/collab-lease/integration"
	"github.com/collab-lease/collab-lease/plugin/contract"
)

// The gate for the runs that have it (docs/operating.md, The gate): the
// sidecar, started again with `serve --gate`, keeps its pre-receive hook
// in every repository of the fleet's Gitea, which then asks it about
// every push. Once in, the hook stays in every repository for the rest
// of the fleet's life, so the gated runs come last.

// sidecarFlags are the flags of `serve` every mode's sidecar runs with.
var sidecarFlags = []string{"--fence-pushes"}

// repoRoot is Gitea's repository root ([repository] ROOT of the app.ini
// integration.StartGitea writes).
func repoRoot(g *integration.Gitea) string { return filepath.Join(g.Dir, "repos") }

// buildGateHook builds the gate's hook program, static (it runs in
// Gitea's environment), into dir: beside collab-sidecar, where the
// sidecar looks for it.
func buildGateHook(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("build the gate's hook: not inside the collab-lease module")
	}
	bin := filepath.Join(dir, contract.GateProgram)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/"+contract.GateProgram)
	cmd.Dir = filepath.Dir(mod)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %v\n%s", contract.GateProgram, err, b)
	}
	return bin, nil
}

// gateOn stops the sidecar and starts it again on the same ledger and
// addresses with the gate on, the hook program being hook, and waits
// until the hook is in every repository of repos.
func (f *fleet) gateOn(ctx context.Context, bin, hook string, repos []integration.Repo) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	start := time.Now()
	old := f.sidecar
	cpu, err := integration.CPUTime(old.PID())
	if err != nil {
		return err
	}
	if err := old.Stop(20 * time.Second); err != nil {
		return fmt.Errorf("stop the sidecar: %w", err)
	}
	f.retiredCPU += cpu
	root := repoRoot(f.g)
	args := append(append([]string(nil), sidecarFlags...), "--public-url", "http://"+old.HTTPAddr,
		"--gate", "--gitea-repo-root", root, "--gate-program", hook)
	s, err := integration.StartSidecar(ctx, integration.SidecarOptions{
		Binary: bin, Gitea: f.g, GiteaURL: f.proxy.urls[srcSidecar], DataDir: old.DataDir,
		SSHAddr: old.SSHAddr, HTTPAddr: old.HTTPAddr, AdminAddr: strings.TrimPrefix(old.AdminURL, "http://"),
		Args: args,
	})
	if err != nil {
		return fmt.Errorf("start the sidecar with the gate: %w", err)
	}
	f.sidecar = s
	for _, r := range repos {
		if err := waitHook(ctx, root, r); err != nil {
			return err
		}
	}
	fmt.Fprintf(f.log, "fleet: sidecar started again with the gate on (hook in %s) in %.1fs\n", root, time.Since(start).Seconds())
	return nil
}

// hookPoll is how often waitHook looks for the hook.
const hookPoll = 50 * time.Millisecond

// waitHook waits until repository r has the gate's script (the sidecar
// puts it into every repository as it starts), as long as ctx lets it.
func waitHook(ctx context.Context, root string, r integration.Repo) error {
	path := filepath.Join(root, strings.ToLower(r.Owner), strings.ToLower(r.Name)+".git", "hooks", "pre-receive.d", contract.GateScript)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the gate's hook never appeared in %s: %w", r.FullName(), ctx.Err())
		case <-time.After(hookPoll):
		}
	}
}
