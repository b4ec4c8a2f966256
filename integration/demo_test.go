package integration

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// The demo's whole setup path, non-interactively: build, start Gitea, seed,
// start the sidecar, claim once through it, clean up.
func TestDemoClaimsOnce(t *testing.T) {
	root, err := moduleRoot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "demo")
	cmd := exec.CommandContext(ctx, "go", "run", "./integration/demo", "-once", "-dir", dir, "-ssh-listen", "127.0.0.1:0")
	cmd.Dir = root
	cmd.Env = cleanEnv()
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("demo -once: %v\n%s%s", err, out, stderr)
	}
	var v struct {
		Status, Holder string
		Token          int64
	}
	if err := json.Unmarshal(out, &v); err != nil || v.Status != "acquired" || v.Holder != "alice" || v.Token != 1 {
		t.Fatalf("demo claim: %s (%v)", out, err)
	}
	if _, err := filepath.Glob(dir); err == nil {
		if m, _ := filepath.Glob(filepath.Join(dir, "*")); len(m) != 0 {
			t.Fatalf("demo left files behind: %v", m)
		}
	}
}
