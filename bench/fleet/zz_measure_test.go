package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/integration"
)

func TestZZMeasure(t *testing.T) {
	if os.Getenv("ZZ_MEASURE") == "" {
		t.Skip()
	}
	ctx := context.Background()
	dir := t.TempDir()
	git, err := integration.BuildGit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g, err := integration.StartGitea(ctx, integration.Options{Dir: filepath.Join(dir, "gitea"), Git: git})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	f := &fleet{g: g, dir: dir, gitBin: filepath.Join(dir, "bin")}
	os.MkdirAll(f.gitBin, 0o755)
	if err := g.Admin().Do(ctx, "POST", "/orgs", map[string]any{"username": "fleet", "visibility": "public"}, nil); err != nil {
		t.Fatal(err)
	}
	bot, err := integration.NewUser(ctx, g, filepath.Join(dir), "bot")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		start := time.Now()
		sp, err := f.measureGitea(ctx, "fleet", bot, 3)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d (%.1fs): push %s create %s ready %s merge %s total %s", i, time.Since(start).Seconds(), sp.Push, sp.Create, sp.Ready, sp.Merge, sp.issueTime())
		// a fresh repository each time
		if err := g.Admin().Do(ctx, "DELETE", "/repos/fleet/"+warmupRepo, nil, nil); err != nil {
			t.Fatal(err)
		}
		os.RemoveAll(filepath.Join(dir, "warm-up"))
	}
}
