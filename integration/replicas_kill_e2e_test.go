package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/models/pgtest"
)

// victim is the replica the kill tests SIGKILL.
const victim = 1

// startReplicasToKill starts n replicas on db, of which replicas[kill] is
// the one a test will SIGKILL: the others stop at the end of the test,
// it is killed then if it still runs, and its log is shown if the test
// failed or it found a data race.
func startReplicasToKill(t *testing.T, ctx context.Context, db string, n, kill int) ([]*Sidecar, *Sidecar) {
	t.Helper()
	replicas := startReplicas(t, ctx, db, n)
	killed := replicas[kill]
	for i, s := range replicas {
		if i != kill {
			stopAtEnd(t, s)
		}
	}
	t.Cleanup(func() {
		killed.Kill() // a no-op once it is dead
		if strings.Contains(killed.Logs(), "WARNING: DATA RACE") {
			t.Errorf("the killed replica found a data race:\n%s", tail(killed.Logs(), 80))
		}
		if t.Failed() {
			t.Logf("log of the killed replica:\n%s", tail(killed.Logs(), 40))
		}
	})
	return replicas, killed
}

// A replica killed under load (docs/operating.md, High availability): twelve clients, each a Gitea
// user of its own, four on each of three replicas on one PostgreSQL
// database, acquire (ttls of 1–3 s), renew and release three issues when
// one replica is killed with SIGKILL. The two others keep serving: each
// acknowledges more acquires after the kill. Commands through the killed
// one fail, each well within a deadline of its own (none hangs), and so
// does the real OpenSSH client. Started again on the same flags, it
// rejoins: acquires through it are acknowledged again. Afterwards the
// ledger, read straight from the database, holds every acknowledged
// acquire, renew and release, hands out tokens 1, 2, 3, … per issue, and
// no client saw a token repeated for another tenure or lower than one
// handed out before it asked (acks.check, as for a single sidecar's
// crashes).
func TestReplicasSurviveOneKilledUnderLoad(t *testing.T) {
	db := pgtest.NewDatabase(t)
	g, w, _ := shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	users := racerUsers(t, ctx, g, w, 50)[:12]
	issues := newIssues(t, g, w, 3, "Replica kill")
	replicas, killed := startReplicasToKill(t, ctx, db, 3, victim)

	// Client i is user i on replica i%3: the killed replica's clients
	// keep dialing its address (a restart listens there again).
	var clients []*loadClient
	seed := time.Now().UnixNano()
	for i, u := range users {
		a, err := newAgent(replicas[i%len(replicas)], u)
		if err != nil {
			t.Fatal(err)
		}
		defer a.close()
		clients = append(clients, newLoadClient(a, seed+int64(i)))
	}
	t.Logf("seed %d", seed)

	const deadline = 10 * time.Second // of each command
	start := time.Now()
	var (
		stop       atomic.Bool
		wg         sync.WaitGroup
		ack        acks
		acked      [3]atomic.Int64 // acquires acknowledged, by replica
		ops        atomic.Int64
		cut        atomic.Int64 // commands on the victim whose connection died before the answer
		refused    atomic.Int64 // dials of the victim while it was down
		slowest    atomic.Int64 // the longest a failed command on the victim took, ns
		unexpected = make(chan error, len(clients))
	)
	for i, c := range clients {
		r := i % len(replicas)
		wg.Go(func() {
			for !stop.Load() {
				began := time.Now()
				acquired, err := c.step(ctx, &ack, w.Widgets, issues, start, deadline)
				ops.Add(1)
				switch {
				case errors.Is(err, errTransport) && r == victim:
					// Killed mid-command, or down: the fate of this
					// command is unknown. Try again shortly.
					if strings.Contains(err.Error(), "dial:") {
						refused.Add(1)
					} else {
						cut.Add(1)
					}
					for took, old := int64(time.Since(began)), slowest.Load(); took > old && !slowest.CompareAndSwap(old, took); old = slowest.Load() {
					}
					time.Sleep(10 * time.Millisecond) // pacing of the retry, not a wait for time to pass
				case err != nil:
					unexpected <- fmt.Errorf("replica %d: %w", r, err)
					return
				case acquired:
					acked[r].Add(1)
				}
			}
		})
	}
	finish := func() {
		stop.Store(true)
		wg.Wait()
	}
	defer finish()
	// until polls, with a deadline, until ok holds; a client's unexpected
	// error ends the test.
	until := func(what string, ok func() bool) {
		t.Helper()
		for limit := time.Now().Add(30 * time.Second); !ok(); {
			if time.Now().After(limit) {
				t.Fatalf("%s: not within 30 s (acquires acknowledged by replica: %d, %d, %d; %d dials of the killed replica refused)",
					what, acked[0].Load(), acked[1].Load(), acked[2].Load(), refused.Load())
			}
			select {
			case err := <-unexpected:
				t.Fatal(err)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	snapshot := func() (n [3]int64) {
		for i := range acked {
			n[i] = acked[i].Load()
		}
		return n
	}

	until("load on every replica", func() bool {
		return acked[0].Load() >= 5 && acked[1].Load() >= 5 && acked[2].Load() >= 5
	})
	time.Sleep(time.Duration(rand.New(rand.NewSource(seed)).Intn(150)) * time.Millisecond) // a random moment within the load
	killed.Kill()
	killedAt := time.Now()
	before := snapshot()
	refusedBefore := refused.Load()

	// The others keep serving, while the victim's clients are turned away.
	until("the surviving replicas acknowledge acquires after the kill", func() bool {
		n := snapshot()
		for i := range n {
			if i != victim && n[i] < before[i]+10 {
				return false
			}
		}
		return refused.Load() >= refusedBefore+3
	})
	afterKill := snapshot()
	if afterKill[victim] != before[victim] {
		t.Errorf("the killed replica acknowledged %d acquires after its kill", afterKill[victim]-before[victim])
	}
	t.Logf("within %s of the kill: acquires acknowledged by replica %v → %v; %d dials of the killed replica refused",
		time.Since(killedAt).Round(time.Millisecond), before, afterKill, refused.Load()-refusedBefore)
	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	began := time.Now()
	r := killed.SSH(sctx, users[victim].Key.Path, lease("acquire", w.Widgets, issues[0]))
	failedIn := time.Since(began)
	hung := sctx.Err() != nil
	scancel()
	if hung || r.Code != 255 {
		t.Errorf("OpenSSH against the killed replica: %s after %s, want exit 255 at once", show(r), failedIn)
	}

	// Started again on the same flags and address, it rejoins.
	next, err := killed.Restart(ctx)
	if err != nil {
		t.Fatalf("restart the killed replica: %v", err)
	}
	stopAtEnd(t, next)
	rejoined := snapshot()
	until("the restarted replica acknowledges acquires", func() bool { return acked[victim].Load() >= rejoined[victim]+5 })
	finish()
	close(unexpected)
	for err := range unexpected {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	t.Logf("%d commands in %s over 3 replicas, one SIGKILLed and started again (%d acquires, %d renews and releases acknowledged; %d commands cut off by the kill, %d dials refused while down; the slowest failure on it took %s)",
		ops.Load(), elapsed.Round(time.Millisecond), len(ack.seen), len(ack.writes), cut.Load(), refused.Load(), time.Duration(slowest.Load()).Round(time.Millisecond))
	for i, s := range append(slices.Clone(replicas), next) {
		if logs := s.Logs(); s != killed && (strings.Contains(logs, "panic") || strings.Contains(logs, "level=ERROR")) {
			t.Errorf("replica process %d logged an error or a panic:\n%s", i, tail(logs, 40))
		}
	}

	// The ledger, read from the database with the replicas still serving
	// (nothing writes to these issues any more).
	store, err := models.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ack.check(t, ctx, store, w.Widgets.ID, issues)
}
