package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/models/pgtest"
)

// Three sidecar replicas on one fresh PostgreSQL database, started at
// once and sharing one host key and one session key file (which the first
// to get there creates), behave as one sidecar against the real Gitea:
// each serves the shared host key (the known_hosts of OpenSSH names it);
// twenty racers spread over the three → exactly one winner, the others
// held naming the winner; and an acquire --wait on one replica gets the
// issue soon after a release through another.
func TestReplicasAgainstGitea(t *testing.T) {
	db := pgtest.NewDatabase(t)
	g, w, _ := shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	replicas := startReplicas(t, ctx, db, 3)
	for _, s := range replicas {
		stopAtEnd(t, s)
	}
	var wg sync.WaitGroup
	n := w.PullRequest
	racers := racerUsers(t, ctx, g, w, 50)[:20] // the 50-agent race makes the same users
	results := make([]SSHResult, len(racers))
	for i, u := range racers {
		wg.Go(func() {
			results[i] = replicas[i%len(replicas)].SSH(ctx, u.Key.Path, lease("acquire", w.Widgets, n, "--ttl", "10m"))
		})
	}
	wg.Wait()
	winner := oneWinner(t, racers, results, func(i int) string { return fmt.Sprintf(" on replica %d", i%len(replicas)) })

	// A loser waits on replica 0; the winner releases through replica 1.
	waiter := racers[(winner+1)%len(racers)]
	waitThenRelease(t, ctx, replicas[0], replicas[1], racers[winner], waiter, w.Widgets, n, 2*time.Second)
	expect(t, run(t, replicas[2], waiter, lease("release", w.Widgets, n)), 0, "release through replica 2")
}

// startReplicas starts n sidecars at once on the PostgreSQL database db,
// sharing one host key and one session key file (which the first to get
// there creates). Stopping them is the caller's business.
func startReplicas(t *testing.T, ctx context.Context, db string, n int) []*Sidecar {
	t.Helper()
	g, _, bin := shared(t)
	keys := t.TempDir()
	replicas := make([]*Sidecar, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Go(func() {
			replicas[i], errs[i] = StartSidecar(ctx, SidecarOptions{Binary: bin, Gitea: g,
				DataDir: filepath.Join(t.TempDir(), fmt.Sprint("replica", i)), HostKey: filepath.Join(keys, "ssh_host_key"),
				Args: []string{"--db", db, "--session-key", filepath.Join(keys, "session.key")}})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			for _, s := range replicas {
				if s != nil {
					s.Kill()
				}
			}
			t.Fatalf("replica %d: %v", i, err)
		}
	}
	return replicas
}
