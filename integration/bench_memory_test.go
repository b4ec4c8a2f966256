package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// openConns is how many idle SSH connections BenchmarkSidecarMemory holds
// open; below the sidecar's default connection cap (1024).
const openConns = 1000

// BenchmarkSidecarMemory reports the sidecar's resident memory (VmRSS)
// idle, after one command, and with 1,000 authenticated SSH connections
// open, each with an idle session, spread over 64 agents' keys. They all
// come from 127.0.0.1, so the per-address cap (--max-conns-per-addr) is
// raised to let them in, as for clients behind one NAT address.
func BenchmarkSidecarMemory(b *testing.B) {
	g, w, bin := sharedB(b)
	agents := agentsB(b, g, w, benchAgentCount)
	raiseFileLimit(b, 2*openConns+256)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for b.Loop() {
		s := startBenchSidecar(b, ctx, g, bin, b.TempDir(), "--max-conns-per-addr", fmt.Sprint(2*openConns))
		cfgs := make([]*ssh.ClientConfig, len(agents))
		for i, u := range agents {
			cfg, err := clientConfig(s, u)
			if err != nil {
				b.Fatal(err)
			}
			cfgs[i] = cfg
		}
		c := dialB(b, s, agents[0])
		if r, err := runOn(c, "collab-lease list "+w.Widgets.FullName()); err != nil || r.Code != 0 {
			b.Fatalf("list: %+v %v", r, err)
		}
		_ = c.Close()
		time.Sleep(time.Second)
		idle := vmRSS(b, s.PID())

		var (
			mu      sync.Mutex
			clients []*ssh.Client
		)
		defer func() {
			for _, c := range clients {
				_ = c.Close()
			}
		}()
		start := time.Now()
		err := inParallel(32, openConns, func(i int) error {
			c, err := ssh.Dial("tcp", s.SSHAddr, cfgs[i%len(cfgs)])
			if err != nil {
				return fmt.Errorf("connection %d: %w", i, err)
			}
			mu.Lock()
			clients = append(clients, c)
			mu.Unlock()
			if _, err := c.NewSession(); err != nil {
				return fmt.Errorf("session %d: %w", i, err)
			}
			return nil
		})
		opened := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		loaded := vmRSS(b, s.PID())
		// Every connection must still be served after the measurement.
		if r, err := runOn(clients[len(clients)-1], "collab-lease help"); err != nil || r.Code != 0 {
			b.Fatalf("help on connection %d: %+v %v", len(clients), r, err)
		}
		mib := func(kib int64) float64 { return float64(kib) / 1024 }
		b.ReportMetric(mib(idle), "idle-RSS-MiB")
		b.ReportMetric(mib(loaded), "loaded-RSS-MiB")
		b.ReportMetric(float64(loaded-idle)/openConns, "KiB/conn")
		b.ReportMetric(float64(loaded)/float64(idle), "loaded/idle")
		b.ReportMetric(openConns/opened.Seconds(), "handshakes/s")
		b.ReportMetric(openConns, "conns")
		b.Logf("sidecar RSS: %.1f MiB idle, %.1f MiB with %d open SSH connections (%.0f KiB each); opening them took %.1fs",
			mib(idle), mib(loaded), openConns, float64(loaded-idle)/openConns, opened.Seconds())
	}
}
