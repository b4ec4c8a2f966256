package leasemodel

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Path reservations span a repository's issues and live as long as
// their anchors, so the per-issue model cannot check them: the
// reservations model is the rules of one repository's reservations,
// each anchored to a claim (of one of a few issues, whose rules are
// Spec's) or to a ttl of its own, together with those claims, as one
// state (no partition: keep the histories small). Its globs are a small
// universe, given with which pairs may match a common path: the model
// does not judge globs, it takes the overlaps as the test computed them.
//
// A reserve is all or none: an exclusive glob conflicts with another
// holder's live reservation whose glob overlaps it, a shared one only
// with another holder's exclusive ones; a holder never conflicts with
// itself, and a reserve of a glob the holder has replaces it (at the
// end of the listing). A reserve that succeeds also drops every
// reservation that is no longer live, as the ledger does when its globs
// may meet them all (the test's universe keeps every glob's literal
// prefix above or below every other's: then they may). A reservation of
// a claim is live while that tenure is: the claim live, held by the
// reservation's holder under the token it was made with.
//
// The writes' clock: a claim's write holds its issue, a reservation's
// write the whole repository (the ledger's locks on PostgreSQL), so a
// claim's write is placed no earlier than its issue's last write or the
// last reservation's write, and a reservation's write no earlier than
// any write. Reads (Reservations) are judged at their own clock value.

// Conflict: a reserve refused for others' reservations (ResOutput.List
// names them).
const Conflict Result = 101

// ResInput is one call of the reservations model.
type ResInput struct {
	Kind          Kind
	Holder, Agent string
	// Issue: the claim an Acquire or Release is about, a Reserve is
	// anchored to (0: none, TTL), an Unreserve is limited to (0: none).
	Issue int64
	// TTL: an Acquire's (0: open-ended), a Reserve's of no claim.
	TTL    int64
	Globs  uint64 // bit i: glob i of the universe
	Shared bool
	Lo, Hi int64 // the clock just before the call and just after the answer
}

// ResOutput is one answer. Result is the claim's answer's for Acquire
// and Release (Claim is that answer); OK, NotHolder (Claim names the
// live holder, if any), Conflict or Unavailable for a reserve; OK for
// the rest. List is what the answer lists, each as ResText says, in its
// order, "; " between: a reserve's reservations (OK) or those in its
// way (Conflict), an unreserve's removed ones, the live ones.
type ResOutput struct {
	Result Result
	Claim  Output
	List   string
}

// ResText is one reservation as the model's outputs list it: the
// holder (account/agent), the glob (" shared" after it if so), the
// claim it lives with (#0: none) and its anchor's expiry (0: none).
func ResText(holder, agent, glob string, shared bool, issue, expiresAt int64) string {
	s := ""
	if shared {
		s = " shared"
	}
	return fmt.Sprintf("%s/%s %s%s #%d until %d", holder, agent, glob, s, issue, expiresAt)
}

// ResRow is one reservation in the model's state, live or not.
type ResRow struct {
	Holder, Agent string
	Glob          int
	Shared        bool
	Issue         int64 // the claim (0: none), under Token
	Token         int64
	ExpiresAt     int64 // its own ttl's end (no claim)
}

// ResState is the claims (Claims[i] is issue i+1's lease row) and the
// reservations, oldest first, with the clock value of the last
// reservation's write.
type ResState struct {
	Claims    []State
	Rows      []ResRow
	LastWrite int64
}

func (s ResState) clone() ResState {
	return ResState{Claims: slices.Clone(s.Claims), Rows: slices.Clone(s.Rows), LastWrite: s.LastWrite}
}

// key is the whole state as text (its equality and hash); without the
// writes' clock values if rows only.
func (s ResState) key(rowsOnly bool) string {
	var b strings.Builder
	for _, c := range s.Claims {
		if rowsOnly {
			c.LastWrite = 0
		}
		fmt.Fprintf(&b, "%+v|", c)
	}
	for _, r := range s.Rows {
		fmt.Fprintf(&b, "%+v|", r)
	}
	if !rowsOnly {
		fmt.Fprint(&b, s.LastWrite)
	}
	return b.String()
}

// resRules is the model over a universe of globs.
type resRules struct {
	globs   []string
	overlap [][]bool
}

// live says whether r is live at now, and its anchor's expiry.
func (m resRules) live(s ResState, r ResRow, now int64) (bool, int64) {
	if r.Issue == 0 {
		return r.ExpiresAt > now, r.ExpiresAt
	}
	c := s.Claims[r.Issue-1]
	return c.Live(now) && c.Token == r.Token && c.Holder == r.Holder && c.Agent == r.Agent, c.ExpiresAt
}

func (m resRules) text(s ResState, r ResRow, now int64) string {
	_, exp := m.live(s, r, now)
	return ResText(r.Holder, r.Agent, m.globs[r.Glob], r.Shared, r.Issue, exp)
}

// spec is the answer to in on s at clock value now, and the state after
// it.
func (m resRules) spec(s ResState, in ResInput, now int64) (ResOutput, ResState) {
	mine := func(r ResRow) bool { return r.Holder == in.Holder && r.Agent == in.Agent }
	has := func(set uint64, g int) bool { return set&(1<<g) != 0 }
	var list []string
	switch in.Kind {
	case Acquire, Release:
		ns := s.clone()
		out, c := Spec(s.Claims[in.Issue-1], Input{Kind: in.Kind, Holder: in.Holder, Agent: in.Agent, TTL: in.TTL}, now)
		ns.Claims[in.Issue-1] = c
		return ResOutput{Result: out.Result, Claim: out}, ns
	case Reserve:
		row := ResRow{Holder: in.Holder, Agent: in.Agent, Shared: in.Shared, Issue: in.Issue}
		if in.Issue != 0 {
			c := s.Claims[in.Issue-1]
			if !c.Live(now) || c.Holder != in.Holder || c.Agent != in.Agent {
				out, _ := Spec(c, Input{Kind: Renew, Holder: in.Holder, Agent: in.Agent}, now) // renew's not_holder
				return ResOutput{Result: NotHolder, Claim: out}, s
			}
			row.Token = c.Token
		} else {
			row.ExpiresAt = now + in.TTL
		}
		ns := s.clone()
		ns.Rows = ns.Rows[:0]
		for _, r := range s.Rows {
			live, _ := m.live(s, r, now)
			switch {
			case !live || (mine(r) && has(in.Globs, r.Glob)):
				continue // dropped, or replaced
			case !mine(r) && !(in.Shared && r.Shared) && m.meets(in.Globs, r.Glob):
				list = append(list, m.text(s, r, now))
			}
			ns.Rows = append(ns.Rows, r)
		}
		if len(list) > 0 {
			return ResOutput{Result: Conflict, List: strings.Join(list, "; ")}, s
		}
		for g := range m.globs {
			if has(in.Globs, g) {
				r := row
				r.Glob = g
				ns.Rows = append(ns.Rows, r)
				list = append(list, m.text(ns, r, now))
			}
		}
		return ResOutput{Result: OK, List: strings.Join(list, "; ")}, ns
	case Unreserve:
		ns := s.clone()
		ns.Rows = ns.Rows[:0]
		for _, r := range s.Rows {
			if live, _ := m.live(s, r, now); live && mine(r) && (in.Globs == 0 || has(in.Globs, r.Glob)) && (in.Issue == 0 || r.Issue == in.Issue) {
				list = append(list, m.text(s, r, now))
				continue
			}
			ns.Rows = append(ns.Rows, r)
		}
		return ResOutput{Result: OK, List: strings.Join(list, "; ")}, ns
	case Reservations:
		for _, r := range s.Rows {
			if live, _ := m.live(s, r, now); live {
				list = append(list, m.text(s, r, now))
			}
		}
		return ResOutput{Result: OK, List: strings.Join(list, "; ")}, s
	}
	panic("the reservations model: unknown operation kind")
}

// meets says whether a glob of set overlaps glob g.
func (m resRules) meets(set uint64, g int) bool {
	for i := range m.globs {
		if set&(1<<i) != 0 && m.overlap[i][g] {
			return true
		}
	}
	return false
}

// step returns every state the model can be in after in answered out
// on s, trying each clock value of the call's window.
func (m resRules) step(s ResState, in ResInput, out ResOutput) []any {
	if out.Result == Unavailable {
		return []any{s} // nothing was written
	}
	lo := in.Lo
	switch in.Kind {
	case Acquire, Release:
		lo = max(lo, s.LastWrite, s.Claims[in.Issue-1].LastWrite)
	case Reserve, Unreserve:
		lo = max(lo, s.LastWrite)
		for _, c := range s.Claims {
			lo = max(lo, c.LastWrite)
		}
	}
	var next []any
	for now := lo; now <= in.Hi; now++ {
		want, ns := m.spec(s, in, now)
		if want != out {
			continue
		}
		switch in.Kind {
		case Acquire, Release:
			ns.Claims[in.Issue-1].LastWrite = now
		case Reserve, Unreserve:
			if ns.LastWrite == s.LastWrite { // a refusal returns s itself
				ns = ns.clone()
			}
			ns.LastWrite = now
		}
		if !slices.ContainsFunc(next, func(x any) bool { return x.(ResState).key(true) == ns.key(true) }) {
			next = append(next, ns)
		}
	}
	return next
}

// NewReservations returns the reservations model over globs (overlap
// says which pairs may match a common path) and issues 1 to issues, as
// a porcupine model.
func NewReservations(globs []string, overlap func(i, j int) bool, issues int) porcupine.Model {
	m := resRules{globs: globs, overlap: make([][]bool, len(globs))}
	for i := range globs {
		m.overlap[i] = make([]bool, len(globs))
		for j := range globs {
			m.overlap[i][j] = overlap(i, j)
		}
	}
	return (&porcupine.NondeterministicModel{
		Init: func() []any { return []any{ResState{Claims: make([]State, issues)}} },
		Step: func(state, input, output any) []any {
			return m.step(state.(ResState), input.(ResInput), output.(ResOutput))
		},
		Equal: func(a, b any) bool { return a.(ResState).key(false) == b.(ResState).key(false) },
		Hash: func(state any) uint64 {
			h := fnv.New64a()
			_, _ = h.Write([]byte(state.(ResState).key(false)))
			return h.Sum64()
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(ResInput), output.(ResOutput)
			var gs []string
			for i, g := range m.globs {
				if in.Globs&(1<<i) != 0 {
					gs = append(gs, g)
				}
			}
			return fmt.Sprintf("%s by %s/%s #%d ttl %d %q shared %v @[%d,%d] -> %d %+v [%s]", in.Kind, in.Holder, in.Agent, in.Issue, in.TTL, gs, in.Shared, in.Lo, in.Hi,
				out.Result, out.Claim, out.List)
		},
		DescribeState: func(state any) string { return state.(ResState).key(false) },
	}).ToModel()
}
