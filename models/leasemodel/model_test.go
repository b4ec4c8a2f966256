package leasemodel

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

// The model itself, on histories small enough to check by hand: the
// window of an operation straddling an expiry allows either answer, and
// nothing else does.
func TestLinearizabilityModelOnHandWrittenHistories(t *testing.T) {
	k := Key{RepoID: 1, Issue: 1}
	acq := func(h string, ttl, lo, hi int64) Input {
		return Input{Kind: Acquire, Key: k, Holder: h, TTL: ttl, Lo: lo, Hi: hi}
	}
	got := func(h string, token, at, exp int64) Output {
		return Output{Result: OK, Holder: h, Token: token, AcquiredAt: at, ExpiresAt: exp}
	}
	held := func(h string, exp int64) Output {
		return Output{Result: Held, Holder: h, ExpiresAt: exp}
	}
	// ops are sequential unless their [call, return] overlap: op i is
	// [2i, 2i+1] unless concurrent says they all overlap.
	for _, tc := range []struct {
		name       string
		ops        []porcupine.Operation
		concurrent bool
		want       bool
	}{
		{"takeover at the exact expiry instant", []porcupine.Operation{
			{Input: acq("a", 5, 100, 100), Output: got("a", 1, 100, 105)},
			{Input: acq("b", 5, 105, 105), Output: got("b", 2, 105, 110)},
		}, false, true},
		{"takeover a second early", []porcupine.Operation{
			{Input: acq("a", 5, 100, 100), Output: got("a", 1, 100, 105)},
			{Input: acq("b", 5, 104, 104), Output: got("b", 2, 104, 109)},
		}, false, false},
		{"held at the exact expiry instant", []porcupine.Operation{
			{Input: acq("a", 5, 100, 100), Output: got("a", 1, 100, 105)},
			{Input: acq("b", 5, 105, 105), Output: held("a", 105)},
		}, false, false},
		{"held in a window that straddles the expiry", []porcupine.Operation{
			{Input: acq("a", 5, 100, 100), Output: got("a", 1, 100, 105)},
			{Input: acq("b", 5, 104, 105), Output: held("a", 105)},
		}, false, true},
		{"two holders at once", []porcupine.Operation{
			{Input: acq("a", 0, 100, 100), Output: got("a", 1, 100, 0)},
			{Input: acq("b", 0, 100, 100), Output: got("b", 2, 100, 0)},
		}, true, false},
		{"concurrent racers, one wins", []porcupine.Operation{
			{Input: acq("a", 0, 100, 100), Output: held("b", 0)},
			{Input: acq("b", 0, 100, 100), Output: got("b", 1, 100, 0)},
		}, true, true},
		{"re-acquire keeps the token", []porcupine.Operation{
			{Input: acq("a", 5, 100, 100), Output: got("a", 1, 100, 105)},
			{Input: acq("a", 9, 102, 102), Output: got("a", 1, 100, 111)},
		}, false, true},
		{"re-acquire bumps the token", []porcupine.Operation{
			{Input: acq("a", 5, 100, 100), Output: got("a", 1, 100, 105)},
			{Input: acq("a", 9, 102, 102), Output: got("a", 2, 102, 111)},
		}, false, false},
		{"token restarts after release", []porcupine.Operation{
			{Input: acq("a", 0, 100, 100), Output: got("a", 1, 100, 0)},
			{Input: Input{Kind: Release, Key: k, Holder: "a", Lo: 100, Hi: 100}, Output: Output{Result: OK, Freed: true}},
			{Input: acq("b", 0, 101, 101), Output: got("b", 1, 101, 0)},
		}, false, false},
		{"a write whose window reaches back before the previous write", []porcupine.Operation{
			{Input: acq("a", 5, 100, 100), Output: got("a", 1, 100, 105)},
			{Input: acq("b", 5, 105, 105), Output: got("b", 2, 105, 110)},
			{Input: acq("a", 5, 100, 106), Output: held("b", 110)}, // decided at 105 or later
		}, false, true},
		{"a write decided at a clock older than the previous write's", []porcupine.Operation{
			{Input: acq("a", 5, 100, 100), Output: got("a", 1, 100, 105)},
			{Input: Input{Kind: Renew, Key: k, Holder: "x", TTL: 5, Lo: 106, Hi: 106}, Output: Output{Result: NotHolder}},
			{Input: acq("b", 5, 104, 107), Output: held("a", 105)}, // only true at 104, before the renew's 106
		}, false, false},
	} {
		for i := range tc.ops {
			tc.ops[i].Call, tc.ops[i].Return = int64(2*i), int64(2*i+1)
			if tc.concurrent {
				tc.ops[i].Call, tc.ops[i].Return = 0, 1
			}
		}
		if ok := porcupine.CheckOperations(New(Options{}), tc.ops); ok != tc.want {
			t.Errorf("%s: linearizable = %v, want %v", tc.name, ok, tc.want)
		}
	}
}

// IgnoreFreed is the only difference between the models the checks use:
// a release that says it freed nothing, right after a grant, is a lie to
// the store's model and nothing to the one that does not ask.
func TestLinearizabilityModelWithIgnoreFreed(t *testing.T) {
	k := Key{RepoID: 1, Issue: 1}
	ops := []porcupine.Operation{
		{Input: Input{Kind: Acquire, Key: k, Holder: "a", Lo: 100, Hi: 100}, Output: Output{Result: OK, Holder: "a", Token: 1, AcquiredAt: 100}, Call: 0, Return: 1},
		{Input: Input{Kind: Release, Key: k, Holder: "a", Lo: 100, Hi: 100}, Output: Output{Result: OK}, Call: 2, Return: 3},
		{Input: Input{Kind: Acquire, Key: k, Holder: "b", Lo: 101, Hi: 101}, Output: Output{Result: OK, Holder: "b", Token: 2, AcquiredAt: 101}, Call: 4, Return: 5},
	}
	if porcupine.CheckOperations(New(Options{}), ops) {
		t.Error("the store's model accepts a release that hides that it freed a live lease")
	}
	if !porcupine.CheckOperations(New(Options{IgnoreFreed: true}), ops) {
		t.Error("the model with IgnoreFreed refuses a release for not saying it freed a lease")
	}
	ops[2].Output = Output{Result: OK, Holder: "b", Token: 1, AcquiredAt: 101}
	if porcupine.CheckOperations(New(Options{IgnoreFreed: true}), ops) {
		t.Error("the model with IgnoreFreed accepts a token that restarts after release")
	}
}

// Under a lock-delay, a lapsed claim cools: nobody but its holder claims
// it until the delay is over, and no release ends that, the holder's own
// account's included.
func TestLinearizabilityModelWithALockDelay(t *testing.T) {
	k := Key{RepoID: 1, Issue: 1}
	z1 := Output{Result: OK, Holder: "bot", Agent: "z1", Token: 1, AcquiredAt: 100, ExpiresAt: 101}
	acquire := func(agent string, at int64) Input {
		return Input{Kind: Acquire, Key: k, Holder: "bot", Agent: agent, TTL: 5, Lo: at, Hi: at}
	}
	release := Input{Kind: Release, Key: k, Holder: "bot", Agent: "z2", Lo: 102, Hi: 102}
	for _, tc := range []struct {
		name string
		ops  []porcupine.Operation
		want bool
	}{
		{"another agent cools, and its release changes nothing", []porcupine.Operation{
			{Input: Input{Kind: Acquire, Key: k, Holder: "bot", Agent: "z1", TTL: 1, Lo: 100, Hi: 100}, Output: z1},
			{Input: acquire("z2", 102), Output: Output{Result: Cooling, ExpiresAt: 111}},
			{Input: release, Output: Output{Result: OK}},
			{Input: acquire("z2", 103), Output: Output{Result: Cooling, ExpiresAt: 111}},
			{Input: acquire("z1", 104), Output: Output{Result: OK, Holder: "bot", Agent: "z1", Token: 2, AcquiredAt: 104, ExpiresAt: 109}},
		}, true},
		{"a release that ends the delay", []porcupine.Operation{
			{Input: Input{Kind: Acquire, Key: k, Holder: "bot", Agent: "z1", TTL: 1, Lo: 100, Hi: 100}, Output: z1},
			{Input: release, Output: Output{Result: OK}},
			{Input: acquire("z2", 103), Output: Output{Result: OK, Holder: "bot", Agent: "z2", Token: 2, AcquiredAt: 103, ExpiresAt: 108}},
		}, false},
		{"the delay over, to the second", []porcupine.Operation{
			{Input: Input{Kind: Acquire, Key: k, Holder: "bot", Agent: "z1", TTL: 1, Lo: 100, Hi: 100}, Output: z1},
			{Input: acquire("z2", 110), Output: Output{Result: Cooling, ExpiresAt: 111}},
			{Input: acquire("z2", 111), Output: Output{Result: OK, Holder: "bot", Agent: "z2", Token: 2, AcquiredAt: 111, ExpiresAt: 116}},
		}, true},
	} {
		for i := range tc.ops {
			tc.ops[i].Call, tc.ops[i].Return = int64(2*i), int64(2*i+1)
		}
		if ok := porcupine.CheckOperations(New(Options{LockDelay: 10}), tc.ops); ok != tc.want {
			t.Errorf("%s: linearizable = %v, want %v", tc.name, ok, tc.want)
		}
	}
}
