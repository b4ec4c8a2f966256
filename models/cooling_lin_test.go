package models

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"gorm.io/gorm"

	"github.com/collab-lease/collab-lease/models/leasemodel"
)

// The lock-delay under the linearizability check: the workload of
// TestLinearizabilityOfTheLedger (ttls of 1 to 4 s, a clock the clients
// move 1 or 2 s at a time) on a ledger with a 2-second lock-delay,
// checked against the model that knows it: nobody but the lapsed holder
// claims a cooling issue, by acquire or by next, and no release ends the
// delay. The run must have met cooling issues.
const linLockDelay = 2

var linCoolingModel = leasemodel.New(leasemodel.Options{LockDelay: linLockDelay})

func TestLinearizabilityUnderALockDelay(t *testing.T) {
	forEachEngine(t, testLinearizabilityUnderALockDelay)
}

func testLinearizabilityUnderALockDelay(t *testing.T, e engine) {
	scale := leasemodel.Scale(t)
	seed := linSeed(t)
	t.Logf("seed %d (COLLAB_LIN_SEED), scale %d (COLLAB_STRESS_SCALE)", seed, scale)
	clock, ledgers, _ := openLinLedgers(t, e, WithLockDelay(linLockDelay*time.Second))
	run := runLinearizability(t, clock, ledgers, 16, 400*scale, seed)
	if t.Failed() {
		return
	}
	cooling, releases := 0, 0
	for _, op := range run.history {
		switch {
		case op.Output.(leasemodel.Output).Result == leasemodel.Cooling:
			cooling++
		case op.Input.(leasemodel.Input).Kind == leasemodel.Release:
			releases++
		}
	}
	t.Logf("%d operations recorded, %d answered cooling, %d releases", len(run.history), cooling, releases)
	if cooling < 20 {
		t.Fatalf("only %d acquires answered cooling: the workload does not exercise the lock-delay", cooling)
	}
	if res := leasemodel.Check(t, linCoolingModel, run.history, time.Duration(scale)*2*time.Minute, true); res != porcupine.Ok {
		t.Fatalf("the ledger's history under a lock-delay is %s, want Ok", res)
	}
}

// The checker catches a store whose release of a lapsed claim by the
// holder's account (another agent, the account itself) frees it, ending
// its lock-delay: the fault the lock-delay once had.
func TestLinearizabilityCheckerCatchesAReleaseThatEndsTheLockDelay(t *testing.T) {
	mustCatchUnder(t, linCoolingModel, []Option{WithLockDelay(linLockDelay * time.Second)}, func(clock *linClock, s *Store, seed int64) linRun {
		return runLinearizability(t, clock, []linLedger{releaseEndsTheDelay{s}}, 16, 200, seed)
	})
}

// releaseEndsTheDelay frees a lapsed claim of the caller's account, in
// its lock-delay or not.
type releaseEndsTheDelay struct{ *Store }

var errNotLapsedOurs = errors.New("not a lapsed claim of the caller's account")

func (r releaseEndsTheDelay) Release(ctx context.Context, k Key, h Holder) (*Lease, error) {
	err := r.write(ctx, issueScope(k), func(tx *gorm.DB, now int64) error {
		row, found, err := load(tx, k)
		switch {
		case err != nil:
			return err
		case !found || row.Holder == nil || row.live(now) || !row.ofAccount(h):
			return errNotLapsedOurs
		}
		if err := lapse(tx, row, now); err != nil {
			return err
		}
		previous := *row.Holder
		row.free()
		return storeRecord(tx, row, true, Event{RepoID: k.RepoID, Issue: k.Issue, Action: ActionRelease, Holder: h.Login, HolderID: h.ID, Agent: h.Agent,
			Previous: previous, Token: row.Token, At: now, AcquiredAt: row.AcquiredAt})
	})
	if errors.Is(err, errNotLapsedOurs) {
		return r.Store.Release(ctx, k, h)
	}
	return nil, err
}
