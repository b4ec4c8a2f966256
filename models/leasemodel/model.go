package leasemodel

import (
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/anishathalye/porcupine"
)

// Key is an issue of a repository (the same fields as the ledger's key,
// so that one converts to the other).
type Key struct {
	RepoID int64
	Issue  int64
}

// Kind is the operation a call makes.
type Kind uint8

const (
	Acquire Kind = iota
	Renew
	Release
	List   // one issue's part of a list of its repository
	Close  // the forge closed the issue (at Input.Version)
	Reopen // the forge reopened it (at Input.Version)
	// A next over a repository's candidates is checked issue by issue, as
	// a list is: NextTake is the candidate it took (free then, and now
	// the caller's, like a new tenure of Acquire); NextSkip each candidate
	// before it, or every one if it found none (live-held, by anyone, or
	// closed, at an instant of the call).
	NextTake
	NextSkip
	// Handoff: Holder (the account of the caller, any of its agents)
	// hands the live lease to To/ToAgent: a new tenure, token old+1,
	// keeping the expiry but at least HandoffLife ahead.
	Handoff
	// Agent sessions (docs/ssh.md, Sessions), each projected onto every
	// issue it may touch: Beat is a session's heartbeat: a live lease
	// the session keeps expires no earlier than Left seconds from now,
	// never past its cap. EndSession is its clean end: a live lease it
	// keeps is freed. Resume is another connection taking it over: a
	// Beat of its grace (Left) that also says whether the issue is a
	// live lease of the session (as List does). An Acquire with Session
	// set claims in the session: the expiry is Left (its grace) from
	// now, never past the cap TTL sets.
	Beat
	EndSession
	Resume
	// The reservations model's (reservations.go), besides Acquire and
	// Release of a claim: Reserve the Globs (Shared), anchored to the
	// claim of Issue, else for TTL; Unreserve the caller's Globs (0:
	// all), of the claim of Issue only if it is not 0; list the live
	// Reservations.
	Reserve
	Unreserve
	Reservations
)

// HandoffLife is the least a handed-off tenure has left, in seconds.
const HandoffLife = 600

func (k Kind) String() string {
	return [...]string{"acquire", "renew", "release", "list", "close", "reopen", "next-take", "next-skip", "handoff", "beat", "end-session", "resume", "reserve", "unreserve", "reservations"}[k]
}

// Input is one call. TTL is in seconds (0: open-ended acquire).
type Input struct {
	Kind   Kind
	Key    Key
	Holder string // the account
	Agent  string // which of its agents ("" the account itself): with Holder, who holds
	// To and ToAgent: whom a Handoff hands the lease to.
	To, ToAgent string
	TTL         int64
	// Version orders the forge's events on an issue (Close, Reopen): an
	// event older than the state recorded changes nothing.
	Version int64
	Lo, Hi  int64 // the clock (Unix seconds) just before the call and just after the answer
	// Session: the agent session the call is made in ("" none), and
	// Left: the seconds a Beat or Resume keeps its leases alive, or an
	// Acquire's grace.
	Session string
	Left    int64
}

// Result is the kind of an answer.
type Result uint8

const (
	OK          Result = iota
	Held               // acquire: the issue has another live holder
	NotHolder          // renew, release: the caller does not hold the issue
	Unavailable        // nothing was done (the store's ErrBusy, the SSH verb's exit 75)
	Closed             // acquire: the forge's close of the issue is recorded
	Invalid            // handoff: the target holds the lease already
	Cooling            // acquire: the claim lapsed less than the lock-delay ago (ExpiresAt: until when)
)

// Output is one answer, with only the fields the answer carries set, so
// that two answers compare with ==.
type Output struct {
	Result     Result
	Present    bool   // list: the issue has a live lease
	Holder     string // ok: the holder; held/not_holder: the live holder ("" none)
	Agent      string // the holder's agent, where Holder is said
	Token      int64
	AcquiredAt int64
	ExpiresAt  int64 // 0: open-ended, or none
	Freed      bool  // release: it freed a live lease
	Session    string
}

// State is one issue's lease row as the model sees it.
type State struct {
	Holder     string // "": free
	Agent      string // the holder's agent ("" the account itself)
	Token      int64
	AcquiredAt int64
	ExpiresAt  int64 // 0: open-ended (or free)
	// Session keeps the lease alive ("" none), never past Cap (0: none).
	Session   string
	Cap       int64
	LastWrite int64 // the clock value of the latest write on this issue
	// The forge's state of the issue as the ledger records it: Known once
	// an acquire or a close recorded it, Closed and its Version.
	Known   bool
	Closed  bool
	Version int64
}

// Live says whether the row is a live lease at clock value now: a lease is
// not live at its exact expiry instant.
func (s State) Live(now int64) bool {
	return s.Holder != "" && (s.ExpiresAt == 0 || s.ExpiresAt > now)
}

func (s State) sameRow(o State) bool {
	s.LastWrite, o.LastWrite = 0, 0
	return s == o
}

// Spec is the lease rules (docs/ssh.md) as a sequential function: the
// answer to in on state s at clock value now, and the state after it,
// with no lock-delay.
func Spec(s State, in Input, now int64) (Output, State) { return Options{}.Spec(s, in, now) }

// Spec is the lease rules under o's lock-delay.
func (o Options) Spec(s State, in Input, now int64) (Output, State) {
	live := s.Live(now)
	// The lock-delay: a claim that lapsed less than LockDelay ago cools;
	// nobody but its holder may claim it, and no release ends that.
	cooling := o.LockDelay > 0 && s.Holder != "" && s.ExpiresAt != 0 && !live && now < s.ExpiresAt+o.LockDelay
	exp := int64(0)
	if in.TTL > 0 {
		exp = now + in.TTL
	}
	refused := func(r Result) (Output, State) {
		if !live {
			return Output{Result: r}, s
		}
		return Output{Result: r, Holder: s.Holder, Agent: s.Agent, ExpiresAt: s.ExpiresAt}, s
	}
	granted := func(s State) (Output, State) {
		return Output{Result: OK, Holder: s.Holder, Agent: s.Agent, Token: s.Token, AcquiredAt: s.AcquiredAt, ExpiresAt: s.ExpiresAt, Session: s.Session}, s
	}
	// The holder is the account and the agent; any agent of the account
	// (or the account itself) may release.
	mine := s.Holder == in.Holder && s.Agent == in.Agent
	ours := s.Holder == in.Holder
	// A claim in a session expires a grace from now, never past its cap.
	session, capAt := "", int64(0)
	if in.Session != "" && (in.Kind == Acquire || in.Kind == Renew) {
		session, capAt = in.Session, exp
		exp = now + in.Left
		if capAt != 0 {
			exp = min(exp, capAt)
		}
	}
	// A re-acquire or renew outside the session, by the holder, of a
	// lease its session keeps: the session still keeps it, under the
	// call's cap (none without a ttl).
	if in.Session == "" && (in.Kind == Acquire || in.Kind == Renew) && live && mine && s.Session != "" {
		session, capAt = s.Session, exp
		exp = s.ExpiresAt
		if capAt != 0 {
			exp = min(exp, capAt)
		}
	}
	keptAlive := func(s State) State {
		if live && s.Session == in.Session && s.ExpiresAt != 0 {
			s.ExpiresAt = max(s.ExpiresAt, now+in.Left)
			if s.Cap != 0 {
				s.ExpiresAt = min(s.ExpiresAt, s.Cap)
			}
		}
		return s
	}
	freed := func(s State) State {
		s.Holder, s.Agent, s.AcquiredAt, s.ExpiresAt, s.Session, s.Cap = "", "", 0, 0, "", 0
		return s
	}

	switch in.Kind {
	case Acquire:
		switch {
		case s.Closed:
			return Output{Result: Closed}, s
		case live && !mine:
			return refused(Held)
		case cooling && !mine:
			return Output{Result: Cooling, ExpiresAt: s.ExpiresAt + o.LockDelay}, s
		case live: // idempotent: same tenure, expiry from this call (and kept by its session, if any)
			s.ExpiresAt, s.Session, s.Cap = exp, session, capAt
			return granted(s)
		default: // a new tenure, token old+1
			return granted(State{Holder: in.Holder, Agent: in.Agent, Token: s.Token + 1, AcquiredAt: now, ExpiresAt: exp, LastWrite: s.LastWrite,
				Known: true, Version: s.Version, Session: session, Cap: capAt})
		}
	case Renew:
		if !live || !mine {
			return refused(NotHolder)
		}
		s.ExpiresAt, s.Session, s.Cap = exp, session, capAt
		return granted(s)
	case Release:
		if live && !ours {
			return refused(NotHolder)
		}
		if cooling { // whoever releases it, its holder too: it cools on
			return Output{Result: OK}, s
		}
		if s.Holder != "" { // the row is freed and keeps its token
			s = freed(s)
		}
		return Output{Result: OK, Freed: live}, s
	case List:
		if !live {
			return Output{Result: OK}, s
		}
		return Output{Result: OK, Present: true, Holder: s.Holder, Agent: s.Agent, Token: s.Token, AcquiredAt: s.AcquiredAt, ExpiresAt: s.ExpiresAt, Session: s.Session}, s
	case Beat:
		return Output{Result: OK}, keptAlive(s)
	case Resume:
		s = keptAlive(s)
		if !live || s.Session != in.Session {
			return Output{Result: OK}, s
		}
		return Output{Result: OK, Present: true, Holder: s.Holder, Agent: s.Agent, Token: s.Token, AcquiredAt: s.AcquiredAt, ExpiresAt: s.ExpiresAt, Session: s.Session}, s
	case EndSession:
		if !live || s.Session != in.Session {
			return Output{Result: OK}, s
		}
		return Output{Result: OK, Freed: true}, freed(s)
	case Close:
		if s.Known && in.Version < s.Version {
			return Output{Result: OK}, s // older than what is recorded
		}
		s.Known, s.Closed, s.Version = true, true, max(s.Version, in.Version)
		if s.Holder != "" && live { // the live tenure ends; the row keeps its token
			s = freed(s)
		}
		return Output{Result: OK, Freed: live}, s
	case Reopen:
		if s.Known && in.Version >= s.Version {
			s.Closed, s.Version = false, in.Version
		}
		return Output{Result: OK}, s
	case NextTake:
		if live || s.Closed || cooling && !mine {
			return Output{Result: Held}, s // not free: next would not take it
		}
		return granted(State{Holder: in.Holder, Agent: in.Agent, Token: s.Token + 1, AcquiredAt: now, ExpiresAt: exp, LastWrite: s.LastWrite,
			Known: true, Version: s.Version})
	case NextSkip:
		if live || s.Closed || cooling && !mine {
			return Output{Result: Held}, s
		}
		return Output{Result: OK}, s // free: next should have taken it
	case Handoff:
		switch {
		case !live || !ours:
			return refused(NotHolder)
		case s.Holder == in.To && s.Agent == in.ToAgent:
			return Output{Result: Invalid}, s
		}
		ns := State{Holder: in.To, Agent: in.ToAgent, Token: s.Token + 1, AcquiredAt: now, LastWrite: s.LastWrite,
			Known: s.Known, Closed: s.Closed, Version: s.Version}
		if s.ExpiresAt != 0 {
			ns.ExpiresAt = max(s.ExpiresAt, now+HandoffLife)
		}
		return granted(ns)
	}
	panic("unknown operation kind")
}

// Options are what the places that check the rules see differently.
type Options struct {
	// IgnoreFreed: a release's answer does not say whether it freed a
	// live lease (the SSH verb's does not), so the model does not ask;
	// Output.Freed of a release is not compared.
	IgnoreFreed bool
	// LockDelay is the ledger's lock-delay in seconds (0: none).
	LockDelay int64
}

// New returns the rules as a porcupine model.
func New(o Options) porcupine.Model {
	return (&porcupine.NondeterministicModel{
		Partition: partition,
		Init:      func() []any { return []any{State{}} },
		Step: func(state, input, output any) []any {
			return o.step(state.(State), input.(Input), output.(Output))
		},
		Hash: func(state any) uint64 {
			s := state.(State)
			h := fnv.New64a()
			fmt.Fprintf(h, "%s|%s|%d|%d|%d|%d|%v|%v|%d|%s|%d", s.Holder, s.Agent, s.Token, s.AcquiredAt, s.ExpiresAt, s.LastWrite, s.Known, s.Closed, s.Version, s.Session, s.Cap)
			return h.Sum64()
		},
		DescribeOperation: describeOperation,
		DescribeState: func(state any) string {
			s := state.(State)
			return fmt.Sprintf("%q/%q token %d at %d until %d (session %.6s cap %d; last write %d; closed %v at version %d)", s.Holder, s.Agent, s.Token, s.AcquiredAt, s.ExpiresAt, s.Session, s.Cap, s.LastWrite, s.Closed, s.Version)
		},
	}).ToModel()
}

// step returns every state the model can be in after in answered out on
// s, trying each clock value of the operation's window.
func (o Options) step(s State, in Input, out Output) []any {
	if out.Result == Unavailable {
		return []any{s} // nothing was written
	}
	// A session's write is projected onto every issue; where it changes
	// nothing (no lease of the session there) the ledger took no lock on
	// the issue and wrote nothing, so it is a read of it, as List is.
	projected := in.Kind == Beat || in.Kind == EndSession || in.Kind == Resume
	lo := in.Lo
	if in.Kind != List && !projected {
		lo = max(lo, s.LastWrite)
	}
	var next []any
	for now := lo; now <= in.Hi; now++ {
		want, ns := o.Spec(s, in, now)
		if o.IgnoreFreed {
			want.Freed = out.Freed
		}
		if want != out {
			continue
		}
		wrote := in.Kind != List && !(projected && ns.sameRow(s))
		if wrote && now < s.LastWrite {
			continue
		}
		if wrote {
			ns.LastWrite = now
		}
		if !slices.ContainsFunc(next, func(x any) bool { return x.(State).sameRow(ns) }) {
			next = append(next, ns)
		}
	}
	return next
}

// partition splits a history by issue.
func partition(history []porcupine.Operation) [][]porcupine.Operation {
	by := map[Key][]porcupine.Operation{}
	var keys []Key
	for _, op := range history {
		k := op.Input.(Input).Key
		if _, ok := by[k]; !ok {
			keys = append(keys, k)
		}
		by[k] = append(by[k], op)
	}
	out := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		out = append(out, by[k])
	}
	return out
}

func describeOperation(input, output any) string {
	in, out := input.(Input), output.(Output)
	call := fmt.Sprintf("%s %d#%d by %s ttl %d @[%d,%d]", in.Kind, in.Key.RepoID, in.Key.Issue, in.Holder, in.TTL, in.Lo, in.Hi)
	if in.Session != "" {
		call += fmt.Sprintf(" in session %.6s (left %d)", in.Session, in.Left)
	}
	if in.Kind == Close || in.Kind == Reopen {
		call = fmt.Sprintf("%s %d#%d version %d @[%d,%d]", in.Kind, in.Key.RepoID, in.Key.Issue, in.Version, in.Lo, in.Hi)
	}
	switch out.Result {
	case Held:
		if in.Kind == NextSkip {
			return call + " -> skipped"
		}
		return fmt.Sprintf("%s -> held by %s until %d", call, out.Holder, out.ExpiresAt)
	case NotHolder:
		return fmt.Sprintf("%s -> not_holder (%q until %d)", call, out.Holder, out.ExpiresAt)
	case Unavailable:
		return call + " -> unavailable"
	case Closed:
		return call + " -> closed"
	case Cooling:
		return fmt.Sprintf("%s -> cooling until %d", call, out.ExpiresAt)
	}
	switch in.Kind {
	case Release, Close:
		return fmt.Sprintf("%s -> ok (freed %v)", call, out.Freed)
	case Reopen:
		return call + " -> ok"
	case List:
		if !out.Present {
			return call + " -> not listed"
		}
	}
	return fmt.Sprintf("%s -> %s token %d at %d until %d", call, out.Holder, out.Token, out.AcquiredAt, out.ExpiresAt)
}
