package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/collab-lease/collab-lease/models/pgtest"
)

// replicaRounds is how many rounds BenchmarkReplicas runs: each runs one
// configuration and then the other, for benchDuration/replicaRounds each.
const replicaRounds = 4

// BenchmarkReplicas runs the load of BenchmarkSSHThroughput (64 agents,
// one persistent SSH connection each, cycling acquire, renew and release
// on an issue of their own) against sidecars on one fresh PostgreSQL
// database (COLLAB_TEST_POSTGRES; skipped without it), through one
// replica and through two, and reports, for each, the operations per
// second, the p50 and p99 latencies and the CPU the sidecars used, and
// the ratio of the two throughputs. The two replicas share the host key
// and the session key, as replicas behind a load balancer do; with two,
// agents 0–31 use the first and 32–63 the second.
//
// The configurations alternate, one then two in the first round, two then
// one in the next, and so on (replicaRounds rounds, benchDuration in all
// for each), so that a change of the machine's load weighs on both alike.
// Both replicas run throughout: in the one-replica slices the second
// serves no agent but still follows the database's change notifications,
// as an idle replica does; the sidecars' CPU counts both processes. The
// benchmark fails if the second replica used no more CPU in the
// two-replica slices than in the others: the agents did not reach it.
func BenchmarkReplicas(b *testing.B) {
	db := pgtest.NewDatabase(b)
	g, w, bin := sharedB(b)
	agents := agentsB(b, g, w, throughputClients)
	issues := openIssuesB(b, g, w, throughputClients, "Replicas")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	keys := b.TempDir()
	replicas := make([]*Sidecar, 2)
	for i := range replicas {
		// One after the other: the first creates the key files.
		replicas[i] = startBenchSidecarWith(b, ctx, SidecarOptions{Binary: bin, Gitea: g,
			DataDir: filepath.Join(b.TempDir(), fmt.Sprint("replica", i)), HostKey: filepath.Join(keys, "ssh_host_key"),
			Args: []string{"--db", db, "--session-key", filepath.Join(keys, "session.key")}})
	}
	// loads[0]: every agent on the first replica; loads[1]: the second
	// half of them on the second (the first half's connections are the
	// same in both).
	cmds := cycleCommands(w, issues)
	loads := [2]cycleLoad{{conns: make([]*ssh.Client, len(agents)), cmds: cmds}, {conns: make([]*ssh.Client, len(agents)), cmds: cmds}}
	for i, u := range agents {
		loads[0].conns[i] = dialB(b, replicas[0], u)
		loads[1].conns[i] = loads[0].conns[i]
		if i >= len(agents)/2 {
			loads[1].conns[i] = dialB(b, replicas[1], u)
		}
	}
	for _, l := range loads {
		if err := l.warm(); err != nil {
			b.Fatal(err)
		}
	}
	cpuOf := func() [2]time.Duration {
		return [2]time.Duration{cpuTime(b, replicas[0].PID()), cpuTime(b, replicas[1].PID())}
	}

	names := [2]string{"1-replica", "2-replicas"}
	slice := benchDuration(b) / replicaRounds
	var st [2]cycleStats
	var cpu [2][2]time.Duration // by configuration, by replica
	for b.Loop() {
		for r := range replicaRounds {
			for k := range 2 {
				m := k ^ r%2
				before := cpuOf()
				err := loads[m].run(slice, &st[m])
				after := cpuOf()
				for i := range cpu[m] {
					cpu[m][i] += after[i] - before[i]
				}
				if err != nil {
					b.Fatalf("%s: %v", names[m], err)
				}
			}
		}
	}
	// The second replica idles through the one-replica slices; if it
	// worked no harder in the others, the agents never reached it.
	if cpu[1][1] <= cpu[0][1] {
		b.Fatalf("the second replica used %s of CPU with half the agents, %s with none: the load did not reach it", cpu[1][1], cpu[0][1])
	}
	for m, name := range names {
		st[m].report(b, name+"-")
		b.ReportMetric(st[m].elapsed.Seconds(), name+"-seconds")
		b.ReportMetric((cpu[m][0]+cpu[m][1]).Seconds()/st[m].elapsed.Seconds(), name+"-sidecars-cores")
	}
	b.ReportMetric(float64(len(agents)), "agents")
	ratio := st[1].opsPerSec() / st[0].opsPerSec()
	b.ReportMetric(ratio, "2-replicas/1-replica")
	for m, name := range names {
		all := st[m].all()
		b.Logf("replicas on PostgreSQL, %d agents, %s: %d operations in %.1fs: %.0f ops/s, p50 %s, p99 %s",
			len(agents), name, len(all), st[m].elapsed.Seconds(), st[m].opsPerSec(),
			percentile(all, 50).Round(100*time.Microsecond), percentile(all, 99).Round(100*time.Microsecond))
	}
}
