package leasemodel

import (
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

// The reservations model itself, on histories small enough to check by
// hand, one call after another: exclusive globs of two holders never
// overlap, shared ones may; a refused reserve reserved nothing; a
// reservation of a claim ends with its tenure (a release, a lapse to the
// second, a new tenure of its own holder) and not before.
func TestReservationsModelOnHandWrittenHistories(t *testing.T) {
	globs := []string{"src/**", "src/a.go", "docs/**"}
	m := NewReservations(globs, func(i, j int) bool { return i == j || i+j == 1 }, 1)
	const src, srcA, docs = 1 << 0, 1 << 1, 1 << 2
	reserve := func(agent string, set uint64, shared bool, issue, ttl, at int64) ResInput {
		return ResInput{Kind: Reserve, Holder: "bot", Agent: agent, Globs: set, Shared: shared, Issue: issue, TTL: ttl, Lo: at, Hi: at}
	}
	list := func(at int64) ResInput { return ResInput{Kind: Reservations, Lo: at, Hi: at} }
	claim := func(kind Kind, ttl, at int64) ResInput {
		return ResInput{Kind: kind, Holder: "bot", Agent: "a1", Issue: 1, TTL: ttl, Lo: at, Hi: at}
	}
	res := func(r Result, texts ...string) ResOutput {
		return ResOutput{Result: r, List: strings.Join(texts, "; ")}
	}
	a1src := func(issue, exp int64) string { return ResText("bot", "a1", "src/**", false, issue, exp) }
	a2srcA := ResText("bot", "a2", "src/a.go", false, 0, 106)
	granted := func(token, at, exp int64) ResOutput {
		o := Output{Result: OK, Holder: "bot", Agent: "a1", Token: token, AcquiredAt: at, ExpiresAt: exp}
		return ResOutput{Result: OK, Claim: o}
	}
	for _, tc := range []struct {
		name string
		ops  []porcupine.Operation
		want bool
	}{
		{"exclusive globs of two holders overlap", []porcupine.Operation{
			{Input: reserve("a1", src, false, 0, 5, 100), Output: res(OK, a1src(0, 105))},
			{Input: reserve("a2", srcA, false, 0, 5, 101), Output: res(OK, a2srcA)},
		}, false},
		{"the second one conflicts", []porcupine.Operation{
			{Input: reserve("a1", src, false, 0, 5, 100), Output: res(OK, a1src(0, 105))},
			{Input: reserve("a2", srcA, false, 0, 5, 101), Output: res(Conflict, a1src(0, 105))},
		}, true},
		{"shared meets shared", []porcupine.Operation{
			{Input: reserve("a1", src, true, 0, 5, 100), Output: res(OK, ResText("bot", "a1", "src/**", true, 0, 105))},
			{Input: reserve("a2", srcA, true, 0, 5, 101), Output: res(OK, ResText("bot", "a2", "src/a.go", true, 0, 106))},
		}, true},
		{"a refused reserve that reserved the rest", []porcupine.Operation{
			{Input: reserve("a1", src, false, 0, 5, 100), Output: res(OK, a1src(0, 105))},
			{Input: reserve("a2", srcA|docs, false, 0, 5, 101), Output: res(Conflict, a1src(0, 105))},
			{Input: list(101), Output: res(OK, a1src(0, 105), ResText("bot", "a2", "docs/**", false, 0, 106))},
		}, false},
		{"a claim's reservation ends with its release", []porcupine.Operation{
			{Input: claim(Acquire, 0, 100), Output: granted(1, 100, 0)},
			{Input: reserve("a1", src, false, 1, 0, 100), Output: res(OK, a1src(1, 0))},
			{Input: claim(Release, 0, 101), Output: ResOutput{Result: OK, Claim: Output{Result: OK, Freed: true}}},
			{Input: reserve("a2", srcA, false, 0, 5, 101), Output: res(OK, a2srcA)},
		}, true},
		{"and not before", []porcupine.Operation{
			{Input: claim(Acquire, 0, 100), Output: granted(1, 100, 0)},
			{Input: reserve("a1", src, false, 1, 0, 100), Output: res(OK, a1src(1, 0))},
			{Input: reserve("a2", srcA, false, 0, 5, 101), Output: res(OK, a2srcA)},
		}, false},
		{"a claim's reservation lapses with it, to the second", []porcupine.Operation{
			{Input: claim(Acquire, 5, 100), Output: granted(1, 100, 105)},
			{Input: reserve("a1", src, false, 1, 0, 100), Output: res(OK, a1src(1, 105))},
			{Input: list(104), Output: res(OK, a1src(1, 105))},
			{Input: list(105), Output: res(OK)},
		}, true},
		{"a lapsed one listed", []porcupine.Operation{
			{Input: claim(Acquire, 5, 100), Output: granted(1, 100, 105)},
			{Input: reserve("a1", src, false, 1, 0, 100), Output: res(OK, a1src(1, 105))},
			{Input: list(105), Output: res(OK, a1src(1, 105))},
		}, false},
		{"a new tenure of its holder does not bring it back", []porcupine.Operation{
			{Input: claim(Acquire, 1, 100), Output: granted(1, 100, 101)},
			{Input: reserve("a1", src, false, 1, 0, 100), Output: res(OK, a1src(1, 101))},
			{Input: claim(Acquire, 5, 102), Output: granted(2, 102, 107)},
			{Input: list(102), Output: res(OK, a1src(1, 107))},
		}, false},
		{"a reserve for a claim not held", []porcupine.Operation{
			{Input: claim(Acquire, 0, 100), Output: granted(1, 100, 0)},
			{Input: reserve("a2", srcA, false, 1, 0, 100), Output: ResOutput{Result: NotHolder, Claim: Output{Result: NotHolder, Holder: "bot", Agent: "a1"}}},
			{Input: list(100), Output: res(OK)},
		}, true},
	} {
		for i := range tc.ops {
			tc.ops[i].Call, tc.ops[i].Return = int64(2*i), int64(2*i+1)
		}
		if ok := porcupine.CheckOperations(m, tc.ops); ok != tc.want {
			t.Errorf("%s: linearizable = %v, want %v", tc.name, ok, tc.want)
		}
	}
}
