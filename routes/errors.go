package routes

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/lease"
)

// Errors of this transport; the lease service's and the forge's keep their
// own sentinels. The table replies answers them all.
var (
	// errUnauthorized: the request carried credentials that are not valid
	// (an unknown, revoked or malformed token).
	errUnauthorized = errors.New("invalid credentials")
	// errSignIn: the OAuth2 sign-in cannot be completed (Gitea refused
	// the code, or the callback has none). The three below are the
	// sign-in cookie's own failures, each with its own line for the user.
	errSignIn = errors.New("sign-in failed")
	// errSignInCookie: the callback came without a sign-in cookie this
	// sidecar sealed (another browser, an altered cookie, another key).
	errSignInCookie = fmt.Errorf("%w: no valid sign-in cookie", errSignIn)
	// errSignInExpired: the sign-in cookie is older than signInTTL.
	errSignInExpired = fmt.Errorf("%w: sign-in cookie expired", errSignIn)
	// errSignInState: the callback's state is not the one sealed in this
	// browser's sign-in cookie (a swapped cookie or a forged callback).
	errSignInState = fmt.Errorf("%w: state does not match the sign-in cookie", errSignIn)
	// errTokenRequired: a write came without an API token (a session
	// cookie alone never authorizes one: CSRF).
	errTokenRequired = errors.New("writes need an API token: Authorization: token <gitea token>")
	// errTooManyStreams: the viewer, or the client's address, holds as
	// many event streams as it may.
	errTooManyStreams = errors.New("too many event streams")
	// errShuttingDown: the server is shutting down and starts no stream.
	errShuttingDown = errors.New("shutting down")
)

// badRequestError is a malformed request line (a path or query number);
// its message is shown.
type badRequestError struct{ msg string }

func (e *badRequestError) Error() string { return e.msg }

// invalidError is a well-formed request whose content cannot be done (a
// write's body: not JSON, a bad or missing ttl); its message is shown.
// It is 422, as Gitea answers a body that fails validation; malformed
// numbers in the path or query stay 400, as they always were.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }

// errorBody is the one JSON shape of every error reply.
type errorBody struct {
	Error string `json:"error"`
}

// An answer is one error reply: its status, its body and the headers that
// go with it. A reply that says "try again" (429, 503) carries Retry-After,
// and only such a reply does.
type answer struct {
	status     int
	msg        string              // the body's error
	body       func(err error) any // the body, when it depends on the error
	retryAfter string              // Retry-After, in seconds
	challenge  bool                // WWW-Authenticate: the token scheme
}

// The answers of more than one row, and of the helpers below. The bodies
// of 401, 404, 500 and the plain 503 are fixed, so no reply can tell an
// unknown repository from one the viewer may not see.
var (
	unauthorizedAnswer = answer{status: http.StatusUnauthorized, msg: "invalid token", challenge: true}
	notFoundAnswer     = answer{status: http.StatusNotFound, msg: "not found"}
	unavailableAnswer  = answer{status: http.StatusServiceUnavailable, msg: "temporarily unavailable, try again", retryAfter: "5"}
	internalAnswer     = answer{status: http.StatusInternalServerError, msg: "internal error"}
)

func (a answer) write(c *gin.Context, err error) {
	if a.retryAfter != "" {
		c.Header("Retry-After", a.retryAfter)
	}
	if a.challenge {
		c.Header("WWW-Authenticate", `token realm="collab-lease"`)
	}
	var body any = errorBody{Error: a.msg}
	if a.body != nil {
		body = a.body(err)
	}
	c.AbortWithStatusJSON(a.status, body)
}

// logAs is what the log says of a failed request.
type logAs int

const (
	quiet      logAs = iota // the client's own doing: nothing
	signInLog               // info: a sign-in refused, with why
	retryLog                // warning: retryable, with the detail
	failureLog              // error: the sidecar's fault, with the detail
)

// An errorRow is one row of the table: the errors it answers (those that are
// its sentinel, or of its type), how, what the log says of them, and what
// /readyz says of a check that fails with one ("" is "failing").
type errorRow struct {
	is    error            // errors.Is(err, is), or
	as    func(error) bool // errors.As(err, &T) of the row's type
	say   answer
	log   logAs
	ready string
}

func (r *errorRow) match(err error) bool {
	if r.as != nil {
		return r.as(err)
	}
	return errors.Is(err, r.is)
}

// replies is the one translation of errors into HTTP replies, in order:
// the first row that matches the error answers it; an error no row
// matches is internalReply's. The SSH verb's table (exitCodes in ssh/)
// answers the same errors, and says "try again" (exit 75) exactly where
// this one does (429 or 503 with Retry-After); a test holds the two to it.
var replies = []errorRow{
	// The request itself: its line, its body, its credentials.
	{as: isA[*badRequestError], say: answer{status: http.StatusBadRequest, body: func(err error) any {
		bad, _ := errors.AsType[*badRequestError](err)
		return errorBody{Error: bad.msg}
	}}},
	{is: errSignIn, log: signInLog, say: answer{status: http.StatusBadRequest, body: func(err error) any {
		return errorBody{Error: signInProblem(err)}
	}}},
	{is: lease.ErrInvalid, say: answer{status: http.StatusBadRequest, msg: "invalid request"}},
	{as: isA[*invalidError], say: answer{status: http.StatusUnprocessableEntity, body: func(err error) any {
		invalid, _ := errors.AsType[*invalidError](err)
		return errorBody{Error: invalid.msg}
	}}},
	{is: errUnauthorized, say: unauthorizedAnswer},
	{is: errTokenRequired, say: answer{status: http.StatusUnauthorized, msg: errTokenRequired.Error(), challenge: true}},
	{is: lease.ErrRevoked, say: unauthorizedAnswer},
	// Only a viewer who may read the repository is told what it may not
	// write, so naming it reveals nothing.
	{as: isA[*lease.WriteRequiredError], say: answer{status: http.StatusForbidden, body: func(err error) any {
		return errorBody{Error: err.Error()}
	}}},
	// The request is fine but its target may not claim: the caller can
	// read the repository, and learns no more than that the login may not
	// claim there (no account, or no write access, answer alike).
	{as: isA[*lease.TargetMayNotClaimError], say: answer{status: http.StatusUnprocessableEntity, body: func(err error) any {
		return errorBody{Error: err.Error()}
	}}},
	// A handoff to the holder itself: nothing to hand on, and the caller,
	// who may change the claim, learns nothing it could not list.
	{as: isA[*lease.TargetHoldsError], say: answer{status: http.StatusUnprocessableEntity, body: func(err error) any {
		return errorBody{Error: err.Error()}
	}}},
	// The sidecar's own forge credentials are wrong. Deliberately "try
	// again", as over SSH (exit 75): the request was fine, nothing was
	// done, and it succeeds unchanged once an operator fixes the token,
	// whereas a 500 (like exit 1) tells the client to give up on it. The
	// operator hears of it: it is logged as an error and /readyz fails.
	// Retry-After is long, as only a person can help; the body says whom
	// to ask, as the SSH line does, and nothing of any repository. Before
	// the not-found rows: Gitea's checks wrap in it a 404 from something
	// that is not Gitea's API.
	{is: forge.ErrConfig, log: failureLog, ready: "misconfigured (see the sidecar's log)", say: answer{
		status:     http.StatusServiceUnavailable,
		msg:        strings.TrimPrefix(contract.LineMisconfigured, contract.ErrorPrefix),
		retryAfter: "60",
	}},
	{is: lease.ErrRepoNotFound, say: notFoundAnswer},
	{is: lease.ErrIssueNotFound, say: notFoundAnswer},
	{is: forge.ErrNotFound, say: notFoundAnswer},
	{as: isA[*lease.ConflictError], say: answer{status: http.StatusConflict, body: func(err error) any {
		conflict, _ := errors.AsType[*lease.ConflictError](err)
		return conflict.Reply
	}}},
	{is: lease.ErrIssueClosed, say: answer{status: http.StatusConflict, msg: "issue is closed"}},
	// Try again: too many requests from the caller, or the sidecar cannot
	// answer now. Nothing was done.
	{is: forge.ErrRateLimited, say: answer{status: http.StatusTooManyRequests, msg: "too many requests, try again", retryAfter: "1"}},
	{is: errTooManyStreams, say: answer{status: http.StatusTooManyRequests, msg: "too many event streams: close one and try again", retryAfter: "10"}},
	// ErrLedgerUnreachable is also an ErrBusy: its row comes first for
	// /readyz's word.
	{is: lease.ErrLedgerUnreachable, say: unavailableAnswer, log: retryLog, ready: "unreachable"},
	{is: lease.ErrBusy, say: unavailableAnswer, log: retryLog, ready: "busy"},
	{is: forge.ErrUnavailable, say: unavailableAnswer, log: retryLog, ready: "unreachable"},
	{is: errShuttingDown, say: unavailableAnswer, log: retryLog},
	{is: lease.ErrTryAgain, say: unavailableAnswer, log: retryLog},
	{is: lease.ErrTooManyWaiters, say: unavailableAnswer, log: retryLog},
	// Sessions are SSH's alone; were a session's refusal ever handed to
	// HTTP, it would be "try again", as over SSH (exit 75).
	{is: lease.ErrTooManySessions, say: unavailableAnswer, log: retryLog},
	{is: lease.ErrSessionMoved, say: unavailableAnswer, log: retryLog},
	{is: lease.ErrSessionGone, say: unavailableAnswer, log: retryLog},
	// A deadline passed (the request's own, or a bound on the ledger or
	// on Gitea): a bounded wait ends in a loud, retryable error, as over
	// SSH (exit 75).
	{is: context.DeadlineExceeded, say: unavailableAnswer, log: retryLog, ready: "unreachable"},
	// The request was canceled: mostly its client went away and reads no
	// reply; one still there (the server stopping under it) is told what
	// a deadline tells, as over SSH (exit 75). It is not the sidecar's
	// fault, so not an internal error.
	{is: context.Canceled, say: unavailableAnswer, log: retryLog},
}

// internalReply answers an error no row matches: the sidecar's fault,
// whose detail stays in the log.
var internalReply = errorRow{say: internalAnswer, log: failureLog}

// lookup is the row of rows that answers err (internalReply if none).
func lookup(rows []errorRow, err error) *errorRow {
	for i := range rows {
		if rows[i].match(err) {
			return &rows[i]
		}
	}
	return &internalReply
}

// fail answers err with the row of replies that matches it.
func (h *handler) fail(c *gin.Context, err error) {
	r := lookup(replies, err)
	switch r.log {
	case signInLog:
		h.log.Info("sign-in refused", "err", err)
	case retryLog:
		h.log.Warn("http request failed, retryable", "path", c.Request.URL.Path, "err", err)
	case failureLog:
		h.log.Error("http request failed", "path", c.Request.URL.Path, "err", err)
	}
	r.say.write(c, err)
}

// isA says whether err's tree holds a T (errors.AsType).
func isA[T error](err error) bool {
	_, ok := errors.AsType[T](err)
	return ok
}

// signInProblem is the one line a browser is shown for a sign-in that
// cannot be completed.
func signInProblem(err error) string {
	switch {
	case errors.Is(err, errSignInCookie):
		return "sign-in was not started in this browser, or its cookie is invalid: start again from Gitea"
	case errors.Is(err, errSignInExpired):
		return "sign-in took longer than 10 minutes and expired: start again from Gitea"
	case errors.Is(err, errSignInState):
		return "sign-in does not match the one this browser started: start again from Gitea"
	default:
		return "sign-in failed or expired: start again from Gitea"
	}
}

// Replies of the handlers that answer without an error.

func badRequest(c *gin.Context, msg string) {
	answer{status: http.StatusBadRequest, msg: msg}.write(c, nil)
}

func notFound(c *gin.Context) { notFoundAnswer.write(c, nil) }

func serverError(c *gin.Context) { internalAnswer.write(c, nil) }
