package models

import (
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/collab-lease/collab-lease/models/leasemodel"
	"github.com/collab-lease/collab-lease/plugin/pathglob"
)

// Linearizability of path reservations: agents of one account and
// another account reserve, unreserve and list reservations of a small
// universe of globs in one repository, anchored to their claims of two
// issues or to ttls of their own, while they claim and release those
// issues and the clock moves (claims lapse, ttls end), through two
// Stores of one ledger. porcupine checks the whole history against
// leasemodel's reservations model: exclusive reservations of different
// holders never overlap, a refused reserve reserved nothing and names
// exactly the live reservations in its way, and every reservation ends
// with its anchor, whichever way the claim ended.

// resLinGlobs is the universe. Every glob's literal prefix ("", src,
// src/auth) is above or below every other's, so a reserve reads them
// all, as the model assumes (TestReservationModelUniverse).
var resLinGlobs = []string{"src/**", "src/*.go", "src/auth/**", "src/auth/login.go", "**/login.go", "*.md", "README.md", "src/auth/*.md"}

// resLinIssues are the issues of repository 1 the clients claim.
const resLinIssues = 2

// resLinHolders: two agents of bot (distinct holders, each may release
// the other's claim) and an account of its own.
var resLinHolders = []struct{ login, agent string }{{"bot", "a1"}, {"bot", "a2"}, {"carol", ""}}

// resLinModel is the model over the universe, with the overlaps
// pathglob.Overlap finds.
var resLinModel = leasemodel.NewReservations(resLinGlobs, func(i, j int) bool {
	a, _ := pathglob.Parse(resLinGlobs[i])
	b, _ := pathglob.Parse(resLinGlobs[j])
	_, ok := pathglob.Overlap(a, b)
	return ok
}, resLinIssues)

// The universe is what the model assumes: globs that parse, each one's
// literal prefix above or below every other's; and it has overlapping
// pairs and pairs apart.
func TestReservationModelUniverse(t *testing.T) {
	overlaps, apart := 0, 0
	for i, x := range resLinGlobs {
		a := mustGlob(t, x)
		for _, y := range resLinGlobs[:i] {
			b := mustGlob(t, y)
			if !under(a.Prefix(), b.Prefix()) && !under(b.Prefix(), a.Prefix()) {
				t.Errorf("%s and %s: their prefixes part; a reserve of one would not read the other", x, y)
			}
			if _, ok := pathglob.Overlap(a, b); ok {
				overlaps++
			} else {
				apart++
			}
		}
	}
	if overlaps < 8 || apart < 8 {
		t.Fatalf("%d pairs overlap, %d are apart: too few of either to exercise the model", overlaps, apart)
	}
}

// resLinRun has clients clients make opsPerClient calls each, on
// stores[i%len(stores)], and returns the history.
func resLinRun(t *testing.T, clock *linClock, stores []*Store, clients, opsPerClient int, seed int64) linRun {
	t.Helper()
	return goClients(t, clients, opsPerClient, seed, func(cs *linClients, c int, rng *rand.Rand, lc *linClient) {
		st := stores[c%len(stores)]
		p := resLinHolders[c%len(resLinHolders)]
		h := whoIn(leasemodel.Input{Holder: p.login, Agent: p.agent})
		claimed := int64(0) // the issue this client last claimed (0: none), which it reserves for mostly
		cs.start()
		for range opsPerClient {
			in := leasemodel.ResInput{Holder: h.Login, Agent: h.Agent, Issue: 1 + rng.Int63n(resLinIssues)}
			switch r := rng.Intn(20); {
			case r < 4:
				in.Kind = leasemodel.Acquire
				if rng.Intn(6) > 0 {
					in.TTL = 1 + rng.Int63n(4)
				}
			case r < 6:
				in.Kind = leasemodel.Release
			case r < 12:
				in.Kind = leasemodel.Reserve
				in.Globs = 1<<rng.Intn(len(resLinGlobs)) | 1<<rng.Intn(len(resLinGlobs))
				in.Shared = rng.Intn(4) == 0
				switch q := rng.Intn(8); {
				case q < 3:
					in.Issue, in.TTL = 0, 1+rng.Int63n(4)
				case q < 7 && claimed != 0:
					in.Issue = claimed
				}
			case r < 16:
				in.Kind = leasemodel.Unreserve
				if rng.Intn(2) == 0 {
					in.Globs = 1 << rng.Intn(len(resLinGlobs))
				}
				in.Issue = 0
				if rng.Intn(3) == 0 {
					in.Issue = claimed
				}
			default:
				in.Kind, in.Issue = leasemodel.Reservations, 0
			}
			in.Lo = clock.sec.Load()
			call := cs.seq.Add(1)
			out, ok, err := resLinCall(st, h, in)
			ret := cs.seq.Add(1)
			in.Hi = clock.sec.Load()
			switch {
			case err != nil:
				cs.fail("client %d: %s by %+v: %v", c, in.Kind, h, err)
				return
			case out.Result == leasemodel.Unavailable:
				lc.busy++
			case in.Kind == leasemodel.Acquire && out.Result == leasemodel.OK:
				claimed = in.Issue
			}
			if ok {
				lc.local = append(lc.local, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
			}
			if rng.Intn(10) == 0 {
				clock.sec.Add(1 + rng.Int63n(2))
			}
		}
	})
}

// resLinCall makes one call of the reservations model as h, and
// translates its answer; not ok: nothing is to be recorded (a read that
// failed says nothing). An error is an answer the contract does not
// allow.
func resLinCall(st *Store, h Holder, in leasemodel.ResInput) (leasemodel.ResOutput, bool, error) {
	var globs []string
	for i, g := range resLinGlobs {
		if in.Globs&(1<<i) != 0 {
			globs = append(globs, g)
		}
	}
	list := func(rs []Reservation) string {
		texts := make([]string, len(rs))
		for i, r := range rs {
			texts[i] = leasemodel.ResText(r.Holder.Login, r.Holder.Agent, r.Glob, r.Shared, r.Issue, unixOr0(r.ExpiresAt))
		}
		return strings.Join(texts, "; ")
	}
	switch in.Kind {
	case leasemodel.Acquire, leasemodel.Release:
		outs, err := linCall(st, leasemodel.Input{Kind: in.Kind, Key: leasemodel.Key{RepoID: 1, Issue: in.Issue}, Holder: in.Holder, Agent: in.Agent, TTL: in.TTL})
		if err != nil || len(outs) != 1 {
			return leasemodel.ResOutput{}, false, fmt.Errorf("%v (%d answers)", err, len(outs))
		}
		return leasemodel.ResOutput{Result: outs[0].out.Result, Claim: outs[0].out}, true, nil
	case leasemodel.Reserve:
		rs, err := st.Reserve(bg, Reserve{RepoID: 1, Holder: h, Globs: globs, Shared: in.Shared, Issue: in.Issue, TTL: time.Duration(in.TTL) * time.Second})
		var conflict *ReservedError
		var nh *NotHolderError
		switch {
		case err == nil:
			return leasemodel.ResOutput{Result: leasemodel.OK, List: list(rs)}, true, nil
		case errors.As(err, &conflict):
			return leasemodel.ResOutput{Result: leasemodel.Conflict, List: list(conflict.With)}, true, nil
		case errors.As(err, &nh):
			return leasemodel.ResOutput{Result: leasemodel.NotHolder, Claim: leasemodel.Output{Result: leasemodel.NotHolder, Holder: nh.Holder, Agent: nh.Agent,
				ExpiresAt: unixOr0(nh.ExpiresAt)}}, true, nil
		case errors.Is(err, ErrBusy):
			return leasemodel.ResOutput{Result: leasemodel.Unavailable}, true, nil
		}
		return leasemodel.ResOutput{}, false, err
	case leasemodel.Unreserve:
		rs, err := st.Unreserve(bg, 1, h, globs, in.Issue, false)
		switch {
		case err == nil:
			return leasemodel.ResOutput{Result: leasemodel.OK, List: list(rs)}, true, nil
		case errors.Is(err, ErrBusy):
			return leasemodel.ResOutput{Result: leasemodel.Unavailable}, true, nil
		}
		return leasemodel.ResOutput{}, false, err
	case leasemodel.Reservations:
		rs, err := st.Reservations(bg, 1, "")
		switch {
		case err == nil:
			return leasemodel.ResOutput{Result: leasemodel.OK, List: list(rs)}, true, nil
		case errors.Is(err, ErrBusy):
			return leasemodel.ResOutput{}, false, nil
		}
		return leasemodel.ResOutput{}, false, err
	}
	return leasemodel.ResOutput{}, false, errors.New("unknown operation kind")
}

// Six clients (two per holder), 600 calls, two Stores of one ledger, short ttls
// and a moving clock: the history must be linearizable, and must have
// exercised what the model is about.
func TestLinearizabilityOfReservations(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		scale := leasemodel.Scale(t)
		seed := linSeed(t)
		t.Logf("seed %d (COLLAB_LIN_SEED), scale %d (COLLAB_STRESS_SCALE)", seed, scale)
		clock, _, stores := openLinLedgers(t, e)
		run := resLinRun(t, clock, stores, 6, 100*scale, seed)
		if t.Failed() {
			return
		}
		mustExerciseReservations(t, run.history)
		if res := leasemodel.Check(t, resLinModel, run.history, time.Duration(scale)*2*time.Minute, true); res != porcupine.Ok {
			t.Fatalf("the reservations' history is %s, want Ok", res)
		}
	})
}

// mustExerciseReservations fails t unless history holds enough of what
// the model is about: reserves granted, of claims and of ttls, and
// refused for conflicts and for claims not held; unreserves that
// removed something; listings that showed reservations; claims freed.
func mustExerciseReservations(t *testing.T, history []porcupine.Operation) {
	t.Helper()
	seen := map[string]int{}
	for _, op := range history {
		in, out := op.Input.(leasemodel.ResInput), op.Output.(leasemodel.ResOutput)
		switch {
		case in.Kind == leasemodel.Reserve && out.Result == leasemodel.OK && in.Issue != 0:
			seen["reserved for a claim"]++
		case in.Kind == leasemodel.Reserve && out.Result == leasemodel.OK:
			seen["reserved for a ttl"]++
		case in.Kind == leasemodel.Reserve && out.Result == leasemodel.Conflict:
			seen["conflict"]++
		case in.Kind == leasemodel.Reserve && out.Result == leasemodel.NotHolder:
			seen["not holder"]++
		case in.Kind == leasemodel.Unreserve && out.List != "":
			seen["unreserved"]++
		case in.Kind == leasemodel.Reservations && out.List != "":
			seen["listed"]++
		case in.Kind == leasemodel.Release && out.Claim.Freed:
			seen["freed"]++
		}
	}
	t.Logf("%d operations recorded: %v", len(history), seen)
	for _, what := range []string{"reserved for a claim", "reserved for a ttl", "conflict", "not holder", "unreserved", "listed", "freed"} {
		if seen[what] < 3 {
			t.Errorf("only %d answers %q: the workload does not exercise the model", seen[what], what)
		}
	}
}

// The checker catches a ledger that lets exclusive reservations of
// different holders overlap (Store.letExclusivesOverlap): its history
// is illegal.
func TestLinearizabilityCheckerCatchesOverlappingReservations(t *testing.T) {
	mustCatchUnder(t, resLinModel, nil, func(clock *linClock, s *Store, seed int64) linRun {
		s.letExclusivesOverlap = true
		return resLinRun(t, clock, []*Store{s}, 6, 60, seed)
	})
}
