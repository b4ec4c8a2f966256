package models

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// BenchmarkAcquireRelease measures one new tenure plus its release (two
// write transactions, each fsynced) on one file.
func BenchmarkAcquireRelease(b *testing.B) {
	s, _, _ := openTestStore(b)
	acquireRelease(b, s)
}

// acquireRelease is one goroutine's new tenure plus its release, over
// and over, reported in operations per second.
func acquireRelease(b *testing.B, s *Store) {
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		k := Key{RepoID: 1, Issue: int64(i%100 + 1)}
		if _, err := s.Acquire(bg, k, who("alice"), time.Minute, Observed{Kind: KindIssue}); err != nil {
			b.Fatal(err)
		}
		if _, err := s.Release(bg, k, who("alice")); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(2*b.N)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkAcquireParallel: many goroutines acquiring distinct issues.
func BenchmarkAcquireParallel(b *testing.B) {
	s, _, _ := openTestStore(b)
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			k := Key{RepoID: 1, Issue: n.Add(1)}
			if _, err := s.Acquire(bg, k, who("alice"), time.Minute, Observed{Kind: KindIssue}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkCycle64 is the ledger under the load of the end-to-end
// throughput benchmark: 64 goroutines, each cycling acquire, renew and
// release on an issue of its own. It runs twice, side by side: with one
// transaction (and one fsync) per write, as before group commit, and with
// group commit.
func BenchmarkCycle64(b *testing.B) {
	for _, c := range []struct {
		name     string
		maxBatch int
	}{{"commit-per-write", 1}, {"group-commit", defaultMaxBatch}} {
		b.Run(c.name, func(b *testing.B) {
			s, _, _ := openTestStore(b)
			s.maxBatch = c.maxBatch
			cycle64(b, s)
		})
	}
}

// BenchmarkEngines is the ledger alone on SQLite and on PostgreSQL
// (COLLAB_TEST_POSTGRES; skipped without it), side by side in one run,
// each as the sidecar opens it: both with group commit, PostgreSQL's
// batches deciding each write under the advisory locks of what it
// decides about, in two round trips (pgbatch.go). Each load runs on one
// engine and then right after on the other: single-threaded
// acquire+release (its ns/op is the latency of the pair), then
// BenchmarkCycle64's 64 goroutines. bench/run.sh divides PostgreSQL's
// ops/s by SQLite's.
func BenchmarkEngines(b *testing.B) {
	for _, load := range []struct {
		name string
		run  func(*testing.B, *Store)
	}{{"AcquireRelease", acquireRelease}, {"Cycle64", cycle64}} {
		for _, e := range engines {
			b.Run(load.name+"/"+e.name, func(b *testing.B) {
				s, _, _ := e.open(b)
				load.run(b, s)
			})
		}
	}
}

// BenchmarkList10k lists a repository with 10,000 live leases.
func BenchmarkList10k(b *testing.B) {
	s, _, _ := openTestStore(b)
	// Seed in one transaction: 10,000 separate fsynced acquires would
	// dominate the run without telling anything about List.
	err := s.db.Transaction(func(tx *gorm.DB) error {
		for i := 1; i <= 10000; i++ {
			h := fmt.Sprint("agent-", i%50)
			row := leaseRow{RepoID: 1, Issue: int64(i), Holder: &h, Token: 1, AcquiredAt: int64(i)}
			if err := tx.Create(&row).Error; err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		l, err := s.List(bg, 1)
		if err != nil || len(l) != 10000 {
			b.Fatal(len(l), err)
		}
	}
}

// BenchmarkPostgres is the ledger on PostgreSQL (COLLAB_TEST_POSTGRES;
// skipped without it), each load run twice where the two ways of keeping
// decisions apart could differ (postgres.go): row-locks, the ledger's
// (each write locks what it decides about, READ COMMITTED), and
// serializable (SERIALIZABLE transactions, retried on serialization
// failure). txns/op counts transactions begun per operation (below 1:
// batches; above 1: retries), trips/op the round trips to the server per
// operation (roundTrips).
func BenchmarkPostgres(b *testing.B) {
	modes := []struct {
		name         string
		serializable bool
	}{{"row-locks", false}, {"serializable", true}}
	var trips *roundTrips
	open := func(b *testing.B, serializable bool) *Store {
		s, _, _ := postgresEngine.open(b)
		s.serializable = serializable
		trips = traced(b, s)
		return s
	}
	report := func(b *testing.B, s *Store, before, tripsBefore int64) {
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		b.ReportMetric(float64(s.txns.Load()-before)/float64(b.N), "txns/op")
		b.ReportMetric(float64(trips.n.Load()-tripsBefore)/float64(b.N), "trips/op")
	}
	b.Run("AcquireRelease", func(b *testing.B) { acquireRelease(b, open(b, false)) })
	// As BenchmarkCycle64: 64 goroutines, each on an issue of its own.
	for _, m := range modes {
		b.Run("Cycle64/"+m.name, func(b *testing.B) {
			s := open(b, m.serializable)
			before, tripsBefore := s.txns.Load(), trips.n.Load()
			cycle64(b, s)
			report(b, s, before, tripsBefore)
		})
	}
	// Twenty agents race for one issue, over and over: whoever wins
	// releases it at once.
	for _, m := range modes {
		b.Run("Contended20/"+m.name, func(b *testing.B) {
			s := open(b, m.serializable)
			var n atomic.Int64
			b.SetParallelism((20 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			before, tripsBefore := s.txns.Load(), trips.n.Load()
			b.RunParallel(func(pb *testing.PB) {
				me := who(fmt.Sprint("agent-", n.Add(1)))
				for pb.Next() {
					_, err := s.Acquire(bg, k42, me, time.Minute, Observed{Kind: KindIssue})
					if err == nil {
						_, err = s.Release(bg, k42, me)
					}
					if err != nil && !errors.Is(err, ErrHeld) {
						b.Fatal(err)
					}
				}
			})
			report(b, s, before, tripsBefore)
		})
	}
	// Sixteen agents take the first free of fifty candidates with next
	// and release it, while the repository holds 40 other live leases.
	for _, m := range modes {
		b.Run("Next16/"+m.name, func(b *testing.B) {
			s := open(b, m.serializable)
			cands := make([]Candidate, 50)
			for i := range cands {
				cands[i] = Candidate{Issue: int64(i + 1), Observed: Observed{Kind: KindIssue}, Verified: true}
			}
			for i := int64(100); i < 140; i++ {
				mustAcquire(b, s, Key{RepoID: 1, Issue: i}, "owner", 0)
			}
			var n atomic.Int64
			b.SetParallelism((16 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			before, tripsBefore := s.txns.Load(), trips.n.Load()
			b.RunParallel(func(pb *testing.PB) {
				me := who(fmt.Sprint("agent-", n.Add(1)))
				for pb.Next() {
					l, err := s.AcquireFirst(bg, 1, cands, me, time.Minute)
					if err == nil {
						_, err = s.Release(bg, l.Key, me)
					}
					if err != nil && !errors.Is(err, ErrNoneFree) {
						b.Fatal(err)
					}
				}
			})
			report(b, s, before, tripsBefore)
		})
	}
}

// cycle64 is the load of the Cycle64 benchmarks: 64 goroutines, each
// cycling acquire, renew and release on an issue of its own, reported in
// operations per second. The timer starts here: the testing package calls
// a benchmark again for each b.N it tries, and opening a ledger (on
// PostgreSQL, creating its database) would otherwise count in the first
// short runs, from which it predicts the next b.N.
func cycle64(b *testing.B, s *Store) {
	var n atomic.Int64
	b.SetParallelism((64 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) { cycle(b, pb, s, Key{RepoID: 1, Issue: n.Add(1)}) })
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// cycle is one goroutine of the Cycle64 benchmarks: acquire, renew and
// release k, over and over.
func cycle(b *testing.B, pb *testing.PB, s *Store, k Key) {
	for i := 0; pb.Next(); i++ {
		var err error
		switch i % 3 {
		case 0:
			_, err = s.Acquire(bg, k, who("alice"), time.Minute, Observed{Kind: KindIssue})
		case 1:
			_, err = s.Renew(bg, k, who("alice"), time.Minute)
		case 2:
			_, err = s.Release(bg, k, who("alice"))
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCapped: acquire+release as BenchmarkAcquireRelease, on a
// ledger with claim caps (the holder's and the account's: each new
// tenure counts the account's live leases first) and on one without,
// one right after the other.
func BenchmarkCapped(b *testing.B) {
	for _, c := range []struct {
		name string
		opts []Option
	}{{"uncapped", nil}, {"capped", []Option{WithClaimCaps(100, 100)}}} {
		b.Run(c.name, func(b *testing.B) {
			s, _, _ := openTestStore(b, c.opts...)
			acquireRelease(b, s)
		})
	}
}

// BenchmarkGate is the gate's decision alone (Store.Gate, no HTTP, no
// hook): a push of one ref, carrying its claim's current token, to a
// fenced branch of a repository with 1,000 open pull requests, each
// fenced by a live claim of an agent (every other one the pull request's
// own claim, the others the claim of the issue it closes), on each
// engine. The pushes go round the 1,000 branches; each must be allowed.
func BenchmarkGate(b *testing.B) {
	const pulls = 1000
	for _, e := range engines {
		b.Run(e.name, func(b *testing.B) {
			s, _, _ := e.open(b)
			bot := who("bot")
			// Seeded from 32 goroutines, so that group commit batches
			// the 2,000 writes.
			var next atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, 32)
			for range 32 {
				wg.Go(func() {
					for i := next.Add(1); i <= pulls; i = next.Add(1) {
						pr := pulls + i // issue i is closed by pull request pulls+i
						p := Pull{RepoID: 1, Number: pr, Head: fmt.Sprintf("%040x", pr), Branch: fmt.Sprint("work/", i),
							Author: bot, Open: true, Version: 1, Links: []int64{i, pr}}
						claim, kind := i, KindIssue
						if i%2 == 0 {
							claim, kind = pr, KindPull
						}
						h := bot
						h.Agent = fmt.Sprint("agent-", i%64)
						_, err := s.RecordPull(bg, p, "")
						if err == nil {
							_, err = s.Acquire(bg, Key{RepoID: 1, Issue: claim}, h, time.Hour, Observed{Kind: kind})
						}
						if err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
			push := func(i int64) GatePush {
				claim := i
				if i%2 == 0 {
					claim = pulls + i
				}
				return GatePush{RepoID: 1, Repo: "acme/widgets", Pusher: bot,
					Options: []string{fmt.Sprintf("%s=%d:1", contract.GatePushOption, claim)},
					Refs:    []GateRef{{Old: strings.Repeat("1", 40), New: strings.Repeat("2", 40), Name: fmt.Sprint("refs/heads/work/", i)}}}
			}
			// A push without the token is refused: the branches are fenced.
			if v, err := s.Gate(bg, GatePush{RepoID: 1, Repo: "acme/widgets", Pusher: bot, Refs: push(7).Refs}); err != nil || v.Allow {
				b.Fatalf("an untokened push to a claimed branch: %+v %v", v, err)
			}
			pushes := make([]GatePush, pulls)
			for i := range pushes {
				pushes[i] = push(int64(i) + 1)
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if v, err := s.Gate(bg, pushes[i%pulls]); err != nil || !v.Allow {
					b.Fatalf("push %d: %+v %v", i%pulls+1, v, err)
				}
			}
			b.ReportMetric(pulls, "open-pulls")
		})
	}
}

// BenchmarkGateReservedPaths: the gate's check of a push changing 1,000
// paths against 1,000 live reservations of other holders (none of which
// the paths are under, so every path is looked at in full), the whole
// decision as the gate makes it.
func BenchmarkGateReservedPaths(b *testing.B) {
	const n = 1000
	for _, e := range engines {
		b.Run(e.name, func(b *testing.B) {
			s, _, _ := e.open(b)
			for i := range n {
				h := who("bot")
				h.Agent = fmt.Sprint("agent-", i)
				glob := fmt.Sprintf("pkg%d/**", i)
				switch i % 4 {
				case 1:
					glob = fmt.Sprintf("pkg%d/*.go", i)
				case 2:
					glob = fmt.Sprintf("docs/%d/*.md", i)
				case 3:
					glob = fmt.Sprintf("tools/%d/**/gen.go", i)
				}
				if _, err := s.Reserve(bg, Reserve{RepoID: 1, Holder: h, Globs: []string{glob}, TTL: time.Hour}); err != nil {
					b.Fatal(err)
				}
			}
			p := gatePush("carol", []string{"refs/heads/work"})
			for i := range n {
				p.Paths = append(p.Paths, fmt.Sprintf("src/module%d/file%d.go", i%50, i))
			}
			b.ResetTimer()
			for b.Loop() {
				v, err := s.Gate(bg, p)
				if err != nil || !v.Allow {
					b.Fatalf("%+v %v", v, err)
				}
			}
		})
	}
}

// BenchmarkReserve: a reserve of one glob in a repository with 1,000
// live reservations of other holders ÷ the same with none (interleaved;
// the ratio is reported as 1000/none). Each reserve replaces the
// holder's own reservation of the glob, so the count stays as it is.
func BenchmarkReserve(b *testing.B) {
	for _, e := range engines {
		b.Run(e.name, func(b *testing.B) {
			s, _, _ := e.open(b)
			for i := range 1000 {
				h := who("bot")
				h.Agent = fmt.Sprint("agent-", i)
				if _, err := s.Reserve(bg, Reserve{RepoID: 1, Holder: h, Globs: []string{fmt.Sprintf("pkg%d/**", i)}, TTL: time.Hour}); err != nil {
					b.Fatal(err)
				}
			}
			me := who("me")
			var full, empty time.Duration
			b.ResetTimer()
			for b.Loop() {
				for _, repo := range []int64{1, 2} {
					start := time.Now()
					if _, err := s.Reserve(bg, Reserve{RepoID: repo, Holder: me, Globs: []string{"src/auth/**"}, TTL: time.Hour}); err != nil {
						b.Fatal(err)
					}
					if repo == 1 {
						full += time.Since(start)
					} else {
						empty += time.Since(start)
					}
				}
			}
			b.ReportMetric(float64(full)/float64(empty), "1000/none")
		})
	}
}
