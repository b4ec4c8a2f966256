package models

import (
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/collab-lease/collab-lease/models/leasemodel"
)

// capsOps runs clients agents of one account acquiring (open-ended) and
// releasing at random among issues under an account cap, and records the
// history for leasemodel's caps model.
func capsOps(t *testing.T, stores []*Store, issues, clients, ops int, seed int64) []porcupine.Operation {
	t.Helper()
	var (
		seq      atomic.Int64
		mu       sync.Mutex
		recorded []porcupine.Operation
		wg       sync.WaitGroup
		start    = make(chan struct{})
	)
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewSource(seed + int64(c)))
			s := stores[c%len(stores)]
			agent := fmt.Sprintf("a%d", c%4)
			h := Holder{ID: 9, Login: "bot", Agent: agent}
			<-start
			for range ops {
				in := leasemodel.CapsInput{Kind: leasemodel.Acquire, Issue: rng.Intn(issues), Agent: agent}
				if rng.Intn(3) == 0 {
					in.Kind = leasemodel.Release
				}
				k := Key{RepoID: 1 + int64(in.Issue%2), Issue: 1 + int64(in.Issue)}
				call := seq.Add(1)
				var out leasemodel.CapsOutput
				if in.Kind == leasemodel.Acquire {
					l, err := s.Acquire(bg, k, h, 0, Observed{Kind: KindIssue})
					switch {
					case err == nil:
						out = leasemodel.CapsOutput{Result: leasemodel.OK, Token: l.Token}
					case errors.Is(err, ErrHeld):
						out.Result = leasemodel.Held
					case errors.Is(err, ErrLimit):
						out.Result = leasemodel.Limit
					case errors.Is(err, ErrBusy):
						out.Result = leasemodel.Unavailable
					default:
						t.Errorf("acquire: %v", err)
						return
					}
				} else {
					_, err := s.Release(bg, k, h)
					switch {
					case err == nil:
						out.Result = leasemodel.OK
					case errors.Is(err, ErrBusy):
						out.Result = leasemodel.Unavailable
					default:
						t.Errorf("release: %v", err)
						return
					}
				}
				ret := seq.Add(1)
				mu.Lock()
				recorded = append(recorded, porcupine.Operation{ClientId: c, Input: in, Output: out, Call: call, Return: ret})
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	return recorded
}

// The claim caps are linearizable: agents of one account racing to claim
// and release four issues under a cap of two, through two stores on one
// database, give a history the caps model accepts; and a store that
// counts outside the claim's decision is caught.
func TestClaimCapsAreLinearizable(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		s1, clock, db := e.open(t, WithClaimCaps(0, 2), WithBusyTimeout(30*time.Second))
		s2, err := Open(db, WithClock(clock), WithClaimCaps(0, 2), WithBusyTimeout(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Close()
		history := capsOps(t, []*Store{s1, s2}, 4, 8, 40, linSeed(t))
		if res := leasemodel.Check(t, leasemodel.NewCaps(4, 2), history, 2*time.Minute, true); res != porcupine.Ok {
			t.Fatalf("the caps history is %s", res)
		}
	})
}

// The caps model is no rubber stamp: the history of a store whose cap is
// three, checked against a cap of two, is illegal as soon as three claims
// were live at once.
func TestCapsModelCatchesAWrongCap(t *testing.T) {
	for attempt := 1; ; attempt++ {
		s, _, _ := sqliteEngine.open(t, WithClaimCaps(0, 3)) // a fresh ledger: the model starts empty
		history := capsOps(t, []*Store{s}, 4, 8, 40, linSeed(t)+int64(attempt))
		if leasemodel.Check(t, leasemodel.NewCaps(4, 2), history, 2*time.Minute, false) == porcupine.Illegal {
			return
		}
		if attempt == 3 {
			t.Fatal("three runs of a store capped at three passed as capped at two")
		}
	}
}
