package leasemodel

import (
	"fmt"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
)

// The claim caps span issues, so the per-issue model above cannot check
// them: CapsModel is the rules of open-ended claims of one account's
// agents on a few issues, under a cap on the account's live claims, as
// one state for all of them (no partition: keep the histories small).

// CapsInput is one call: Acquire or Release of Issue (an index into the
// state) by Agent.
type CapsInput struct {
	Kind  Kind // Acquire or Release
	Issue int
	Agent string
}

// CapsOutput is an answer: OK (with Token for an acquire), Held (another
// agent holds it), Limit (a new claim past the cap) or Unavailable
// (nothing done).
type CapsOutput struct {
	Result Result
	Token  int64
}

// Limit: a new claim would pass the cap.
const Limit Result = 100

// CapsState is every issue's holder ("" free) and token.
type CapsState struct {
	Holders []string
	Tokens  []int64
}

func (s CapsState) clone() CapsState {
	return CapsState{Holders: slices.Clone(s.Holders), Tokens: slices.Clone(s.Tokens)}
}

// CapsSpec is the answer to in on s under cap, and the state after it.
func CapsSpec(s CapsState, in CapsInput, cap int) (CapsOutput, CapsState) {
	i := in.Issue
	switch in.Kind {
	case Acquire:
		switch {
		case s.Holders[i] == in.Agent:
			return CapsOutput{Result: OK, Token: s.Tokens[i]}, s // a re-acquire never counts
		case s.Holders[i] != "":
			return CapsOutput{Result: Held}, s
		}
		live := 0
		for _, h := range s.Holders {
			if h != "" {
				live++
			}
		}
		if live >= cap {
			return CapsOutput{Result: Limit}, s
		}
		ns := s.clone()
		ns.Holders[i], ns.Tokens[i] = in.Agent, s.Tokens[i]+1
		return CapsOutput{Result: OK, Token: ns.Tokens[i]}, ns
	case Release: // any agent of the account may release
		ns := s.clone()
		ns.Holders[i] = ""
		return CapsOutput{Result: OK}, ns
	}
	panic("CapsSpec: not an acquire or a release")
}

// NewCaps returns the rules of n issues under a cap as a porcupine model.
func NewCaps(n, cap int) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return CapsState{Holders: make([]string, n), Tokens: make([]int64, n)} },
		Step: func(state, input, output any) (bool, any) {
			out := output.(CapsOutput)
			if out.Result == Unavailable {
				return true, state
			}
			want, next := CapsSpec(state.(CapsState), input.(CapsInput), cap)
			return want == out, next
		},
		Equal: func(a, b any) bool {
			x, y := a.(CapsState), b.(CapsState)
			return slices.Equal(x.Holders, y.Holders) && slices.Equal(x.Tokens, y.Tokens)
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(CapsInput), output.(CapsOutput)
			return fmt.Sprintf("%s #%d by %s → %d token %d", in.Kind, in.Issue, in.Agent, out.Result, out.Token)
		},
		DescribeState: func(state any) string {
			s := state.(CapsState)
			var b strings.Builder
			for i := range s.Holders {
				fmt.Fprintf(&b, "#%d %q token %d; ", i, s.Holders[i], s.Tokens[i])
			}
			return b.String()
		},
	}
}
