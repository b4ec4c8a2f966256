package integration

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/models/pgtest"
)

// The sidecar on a PostgreSQL ledger (--db postgres://…, a database of the
// test's own), against the real Gitea over real OpenSSH: acquire, held,
// release; twenty racers, exactly one winner; and the ledger is the
// database's, not the data directory's: another sidecar, with a data
// directory of its own, sees the same leases and tokens.
func TestPostgresLedgerAgainstGitea(t *testing.T) {
	db := pgtest.NewDatabase(t)
	s, w := newSidecar(t, "--db", db)
	n := w.OpenIssue

	r := run(t, s, w.Alice, lease("acquire", w.Widgets, n, "--ttl", "10m"))
	expect(t, r, 0, "acquire")
	if v := parse(t, r); v.Status != "acquired" || deref(v.Holder) != "alice" || v.Token != 1 {
		t.Fatalf("acquire: %+v", v)
	}
	r = run(t, s, w.Bob, lease("acquire", w.Widgets, n))
	expect(t, r, 4, "held")
	if v := parse(t, r); v.Status != "held" || deref(v.Holder) != "alice" || v.ExpiresAt == nil {
		t.Fatalf("held: %+v", v)
	}
	expect(t, run(t, s, w.Alice, lease("release", w.Widgets, n)), 0, "release")
	r = run(t, s, w.Bob, lease("acquire", w.Widgets, n))
	expect(t, r, 0, "acquire after release")
	if v := parse(t, r); deref(v.Holder) != "bob" || v.Token != 2 {
		t.Fatalf("acquire after release: %+v", v)
	}

	g, _, _ := shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	racers := racerUsers(t, ctx, g, w, 50)[:20] // the 50-agent race makes the same users
	results := make([]SSHResult, len(racers))
	var wg sync.WaitGroup
	for i, u := range racers {
		wg.Go(func() {
			results[i] = s.SSH(ctx, u.Key.Path, lease("acquire", w.Widgets, w.PullRequest, "--ttl", "10m"))
		})
	}
	wg.Wait()
	oneWinner(t, racers, results, func(int) string { return "" })

	if _, err := os.Stat(s.DB); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a ledger file beside the PostgreSQL one: %v", err)
	}
	_, _, bin := shared(t)
	other, err := StartSidecar(ctx, SidecarOptions{Binary: bin, Gitea: g, DataDir: filepath.Join(t.TempDir(), "other"), Args: []string{"--db", db}})
	if err != nil {
		t.Fatal(err)
	}
	stopAtEnd(t, other)
	r = run(t, other, w.Alice, lease("acquire", w.Widgets, n))
	expect(t, r, 4, "another sidecar on the same database")
	if v := parse(t, r); deref(v.Holder) != "bob" {
		t.Fatalf("another sidecar on the same database: %+v", v)
	}
	expect(t, run(t, other, w.Bob, lease("release", w.Widgets, n)), 0, "release through the other sidecar")
	r = run(t, s, w.Alice, lease("acquire", w.Widgets, n))
	expect(t, r, 0, "acquire through the first sidecar after a release through the other")
	if v := parse(t, r); v.Token != 3 {
		t.Fatalf("token after a release through the other sidecar: %+v", v)
	}
}
