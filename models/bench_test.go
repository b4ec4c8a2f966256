package models

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"
)

// BenchmarkAcquireRelease measures one new tenure plus its release (two
// write transactions, each fsynced) on one file.
func BenchmarkAcquireRelease(b *testing.B) {
	s, _, _ := openTestStore(b)
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
			var n atomic.Int64
			b.SetParallelism((64 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			b.RunParallel(func(pb *testing.PB) {
				k := Key{RepoID: 1, Issue: n.Add(1)}
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
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
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
