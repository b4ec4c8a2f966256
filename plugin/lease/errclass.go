package lease

import (
	"context"
	"errors"

	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// A Class is the kind of answer an error gets, whichever transport gives
// it. Classify decides an error's class once; the SSH verb renders a
// class as an exit code (ssh/dispatch.go), the HTTP API as a status, a
// body and Retry-After (routes/errors.go), each in a few lines.
type Class int

// The classes. Only Throttled, AtLimit, Unavailable and Misconfigured say
// "try again" (Retry): exit 75 over SSH, 429 or 503 with Retry-After over
// HTTP.
const (
	// Internal: the sidecar's fault, or an error nothing here knows;
	// logged, and the client is told only "internal error".
	Internal Class = iota
	// Conflict: an answer, not a failure: the contract's JSON (Reply).
	Conflict
	// Usage: the request is malformed (its line says how).
	Usage
	// Invalid: the ledger's ErrInvalid, a request no parser should have
	// let through.
	Invalid
	// SignIn: a browser's sign-in cannot be completed (its line says
	// what to do).
	SignIn
	// Unauthenticated: the credentials are not (or no longer) valid.
	Unauthenticated
	// TokenRequired: a write came without an API token.
	TokenRequired
	// Forbidden: the viewer may read the repository but may not do this.
	Forbidden
	// NotFound: no such repository or issue, or one the viewer may not
	// see: the two are one answer.
	NotFound
	// Closed: the issue is closed.
	Closed
	// Unprocessable: a well-formed request whose content cannot be done.
	Unprocessable
	// Throttled: the caller asked more of the forge than its share.
	Throttled
	// AtLimit: the caller holds as many event streams as it may.
	AtLimit
	// Unavailable: the sidecar cannot answer now (the forge, the ledger,
	// a bound, a deadline, a session no longer here); nothing was done.
	Unavailable
	// Misconfigured: the sidecar's own forge credentials are wrong; an
	// operator must act, then the same request succeeds.
	Misconfigured
	classes // the number of classes
)

// Classes are all the classes, for the transports' tests.
func Classes() []Class {
	out := make([]Class, classes)
	for i := range out {
		out[i] = Class(i)
	}
	return out
}

// Retry says whether the class means "try again": nothing was done, and
// the same request may succeed later.
func (c Class) Retry() bool {
	return c == Throttled || c == AtLimit || c == Unavailable || c == Misconfigured
}

func (c Class) String() string {
	names := [...]string{"internal", "conflict", "usage", "invalid", "sign_in", "unauthenticated",
		"token_required", "forbidden", "not_found", "closed", "unprocessable", "throttled", "at_limit",
		"unavailable", "misconfigured"}
	if c < 0 || c >= classes {
		return "unknown"
	}
	return names[c]
}

// Info is how the transports answer one error: its class, the one line
// the client is told, and what the sidecar's log makes of it.
type Info struct {
	Class Class
	// Line is the error line, "error: …" (over HTTP the body's error,
	// without "error: "); a Conflict has none, but Reply.
	Line string
	// Reply is a Conflict's answer: the contract's JSON.
	Reply any
	// Outcome is what logs and metrics call the answer.
	Outcome string
	// Logged: the error, with its detail, goes to the log as an error;
	// the client is told only Line.
	Logged bool
	// Health is what a readiness check failing with the error says of
	// its dependency, in a few public words ("" is "failing").
	Health string
}

// Retry says whether the answer means "try again" (its class's Retry).
func (i Info) Retry() bool { return i.Class.Retry() }

// A Refusal is a refusal of a transport's own (a request line it cannot
// read, a write without a token, too many connections of one account):
// Classify answers it with its Class and Line like any refusal of the
// service, so a transport declares its refusals but classifies none.
type Refusal struct {
	Class   Class
	Msg     string // Error()
	Line    string // what the client is told, without "error: "; "" is Msg
	Outcome string // what logs and metrics call it; "" is the class's name
}

func (e *Refusal) Error() string { return e.Msg }

// lineInternal is what the client is told of an Internal error.
const lineInternal = contract.ErrorPrefix + "internal error"

// internal answers an error no row of classified matches.
var internal = Info{Class: Internal, Line: lineInternal, Outcome: "internal", Logged: true}

// A classRow answers the errors it matches (its sentinel's, or its
// type's): their Info, and true.
type classRow func(error) (Info, bool)

// is answers every error that is sentinel with info.
func is(sentinel error, info Info) classRow {
	return func(err error) (Info, bool) { return info, errors.Is(err, sentinel) }
}

// as answers every error whose tree holds a T: info, whose line is the
// T's own message (info's, when it has one).
func as[T error](info Info) classRow {
	return func(err error) (Info, bool) {
		t, ok := errors.AsType[T](err)
		answer := info
		if ok && answer.Line == "" {
			answer.Line = contract.ErrorLine(t.Error())
		}
		return answer, ok
	}
}

// usage answers every error that is sentinel as a malformed request:
// "error: usage: " and the error's message.
func usage(sentinel error, info Info) classRow {
	return func(err error) (Info, bool) {
		if !errors.Is(err, sentinel) {
			return Info{}, false
		}
		answer := info
		answer.Line = contract.ErrorLine("usage: " + err.Error())
		return answer, true
	}
}

// classified is the one classification of the errors the transports can
// meet, in order: the first row that matches an error answers it; an
// error no row matches is internal. A new refusal gets its row here (and
// its value in the test's sentinelValues); the transports then answer
// it by its class.
var classified = []classRow{
	// A transport's own refusals: first, as some wrap what they refuse
	// (an invalid token wraps the forge's not-found).
	func(err error) (Info, bool) {
		r, ok := errors.AsType[*Refusal](err)
		if !ok {
			return Info{}, false
		}
		info := Info{Class: r.Class, Line: contract.ErrorLine(r.Msg), Outcome: r.Outcome}
		if r.Line != "" {
			info.Line = contract.ErrorLine(r.Line)
		}
		if info.Outcome == "" {
			info.Outcome = r.Class.String()
		}
		return info, true
	},
	// An answer, not a failure: the contract's JSON, named by its status.
	func(err error) (Info, bool) {
		c, ok := errors.AsType[*ConflictError](err)
		if !ok {
			return Info{}, false
		}
		return Info{Class: Conflict, Reply: c.Reply, Outcome: c.Status()}, true
	},
	as[*contract.UsageError](Info{Class: Usage, Outcome: "usage"}),
	usage(contract.ErrUsage, Info{Class: Usage, Outcome: "usage"}),
	is(ErrRevoked, Info{Class: Unauthenticated, Line: contract.LineRevoked, Outcome: "revoked"}),
	is(ErrRepoNotFound, Info{Class: NotFound, Line: contract.LineRepoNotFound, Outcome: "repo_not_found"}),
	is(ErrIssueNotFound, Info{Class: NotFound, Line: contract.LineIssueNotFound, Outcome: "issue_not_found"}),
	is(ErrIssueClosed, Info{Class: Closed, Line: contract.LineIssueClosed, Outcome: "issue_closed"}),
	// Only a viewer who may read the repository is told what it may not
	// write, so naming it reveals nothing.
	as[*WriteRequiredError](Info{Class: Forbidden, Outcome: "forbidden"}),
	// The target of a handoff may not claim, or holds the claim: the
	// caller can read the repository, and learns no more than that the
	// login may not claim there (no account, or no write access, answer
	// alike), or what it could list.
	as[*TargetMayNotClaimError](Info{Class: Unprocessable, Outcome: "target_may_not_claim"}),
	as[*TargetHoldsError](Info{Class: Unprocessable, Outcome: "target_holds"}),
	// Try again: nothing was done.
	is(forge.ErrUnavailable, Info{Class: Unavailable, Line: contract.LineForgeUnavailable, Outcome: "forge_unavailable", Health: "unreachable"}),
	is(forge.ErrRateLimited, Info{Class: Throttled, Line: contract.LineTooManyRequests, Outcome: "rate_limited"}),
	// ErrLedgerUnreachable is also an ErrBusy; its row comes first for
	// its Health.
	is(ErrLedgerUnreachable, Info{Class: Unavailable, Line: contract.LineBusy, Outcome: "busy", Health: "unreachable"}),
	is(ErrBusy, Info{Class: Unavailable, Line: contract.LineBusy, Outcome: "busy", Health: "busy"}),
	is(ErrTryAgain, Info{Class: Unavailable, Line: contract.LineNextTryAgain, Outcome: "try_again"}),
	is(ErrTooManyWaiters, Info{Class: Unavailable, Line: contract.LineTooManyWaiters, Outcome: "too_many_waiters"}),
	// Sessions are SSH's alone. A command of a session the ledger no
	// longer keeps (another connection resumed it, or it is over) is
	// retried in a new session.
	is(ErrTooManySessions, Info{Class: Unavailable, Line: contract.LineTooManySessions, Outcome: "too_many_sessions"}),
	is(ErrSessionMoved, Info{Class: Unavailable, Line: contract.LineSessionMoved, Outcome: "session_moved"}),
	is(ErrSessionGone, Info{Class: Unavailable, Line: contract.LineSessionGone, Outcome: "session_gone"}),
	// A deadline passed (the request's own, or a bound on the ledger or
	// on the forge): a bounded wait ends in a loud, retryable error.
	is(context.DeadlineExceeded, Info{Class: Unavailable, Line: contract.LineBusy, Outcome: "busy", Health: "unreachable"}),
	// The request was canceled: mostly its client went away and reads no
	// reply; one still there (the server stopping under it) is told what
	// a deadline tells. It is not the sidecar's fault, so not Internal
	// (no error in the log for a client that hung up during a wait).
	is(context.Canceled, Info{Class: Unavailable, Line: contract.LineCanceled, Outcome: "canceled"}),
	// The sidecar's own forge credentials are wrong. Deliberately "try
	// again": the request was fine, nothing was done, and it succeeds
	// unchanged once an operator fixes the token, whereas Internal tells
	// the client to give up on it. The line says whom to ask, and nothing
	// of any repository; the log has the detail, as an error. Before the
	// forge's not-found: Gitea's checks wrap in it a 404 from something
	// that is not Gitea's API.
	is(forge.ErrConfig, Info{Class: Misconfigured, Line: contract.LineMisconfigured, Outcome: "config", Logged: true,
		Health: "misconfigured (see the sidecar's log)"}),
	usage(ErrInvalid, Info{Class: Invalid, Outcome: "invalid"}),
	// The service turns the forge's not-found into ErrRevoked,
	// ErrRepoNotFound or ErrIssueNotFound on every verb, so one that gets
	// here is a bug of the service. Its answer must reveal nothing: a
	// repository the viewer may not see answers "repository not found",
	// exactly as one that does not exist, so the forge's not-found does
	// too, on both transports (exit 1 over SSH, 404 over HTTP), rather
	// than an internal error a caller could tell apart. The operator
	// still hears of the bug: it is logged as an error, with an outcome
	// of its own.
	is(forge.ErrNotFound, Info{Class: NotFound, Line: contract.LineRepoNotFound, Outcome: "forge_not_found", Logged: true}),
}

// Classify is how the transports answer err: the first row of classified
// that matches it, or Internal.
func Classify(err error) Info {
	for _, match := range classified {
		if info, ok := match(err); ok {
			return info
		}
	}
	return internal
}
