package integration

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"
)

// BenchmarkSSHFreshConnection compares, in one run, the wall time of one
// `ssh … collab-lease acquire` (a fresh OpenSSH connection, key lookup and
// permission check with warm caches, one ledger transaction) with a no-op
// exec on the same server (`collab-lease help`), and reports the medians.
//
//	go test -run '^$' -bench SSHFresh -benchtime 50x ./integration/
func BenchmarkSSHFreshConnection(b *testing.B) {
	g, w, bin := sharedB(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s, err := StartSidecar(ctx, SidecarOptions{Binary: bin, Gitea: g, DataDir: b.TempDir() + "/data"})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Stop(20 * time.Second)
	acquire := fmt.Sprintf("collab-lease acquire acme/widgets %d --ttl 1h", w.OpenIssue)
	// Warm the key and permission caches.
	for _, cmd := range []string{"collab-lease help", acquire} {
		if r := s.SSH(ctx, w.Alice.Key.Path, cmd); r.Code != 0 {
			b.Fatalf("%s: %+v", cmd, r)
		}
	}
	var help, acq []time.Duration
	b.ResetTimer()
	for b.Loop() {
		for _, c := range []struct {
			cmd string
			out *[]time.Duration
		}{{"collab-lease help", &help}, {acquire, &acq}} {
			start := time.Now()
			if r := s.SSH(ctx, w.Alice.Key.Path, c.cmd); r.Code != 0 {
				b.Fatalf("%s: %+v", c.cmd, r)
			}
			*c.out = append(*c.out, time.Since(start))
		}
	}
	mh, ma := median(help), median(acq)
	b.ReportMetric(float64(mh.Microseconds())/1000, "help-median-ms")
	b.ReportMetric(float64(ma.Microseconds())/1000, "acquire-median-ms")
	b.ReportMetric(float64(ma)/float64(mh), "acquire/help")
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// sharedB is shared for benchmarks.
func sharedB(b *testing.B) (*Gitea, *World, string) {
	b.Helper()
	fixtureInit()
	if fixture.err != nil {
		b.Fatalf("shared fixture: %v", fixture.err)
	}
	return fixture.g, fixture.w, fixture.bin
}
