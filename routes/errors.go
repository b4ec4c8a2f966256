package routes

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/lease"
)

// Refusals of this transport; the lease service's and the forge's keep
// their own. lease.Classify classifies them all, and the table replies
// answers each class.
var (
	// errUnauthorized: the request carried credentials that are not valid
	// (an unknown, revoked or malformed token).
	errUnauthorized = &lease.Refusal{Class: lease.Unauthenticated, Msg: "invalid credentials"}
	// errSignIn: the OAuth2 sign-in cannot be completed (Gitea refused
	// the code, or the callback has none). The three below are the
	// sign-in cookie's own failures, each with its own line for the user.
	errSignIn = signInRefusal("sign-in failed", "sign-in failed or expired: start again from Gitea")
	// errSignInCookie: the callback came without a sign-in cookie this
	// sidecar sealed (another browser, an altered cookie, another key).
	errSignInCookie = signInRefusal("sign-in failed: no valid sign-in cookie",
		"sign-in was not started in this browser, or its cookie is invalid: start again from Gitea")
	// errSignInExpired: the sign-in cookie is older than signInTTL.
	errSignInExpired = signInRefusal("sign-in failed: sign-in cookie expired",
		"sign-in took longer than 10 minutes and expired: start again from Gitea")
	// errSignInState: the callback's state is not the one sealed in this
	// browser's sign-in cookie (a swapped cookie or a forged callback).
	errSignInState = signInRefusal("sign-in failed: state does not match the sign-in cookie",
		"sign-in does not match the one this browser started: start again from Gitea")
	// errTokenRequired: a write came without an API token (a session
	// cookie alone never authorizes one: CSRF).
	errTokenRequired = &lease.Refusal{Class: lease.TokenRequired, Msg: "writes need an API token: Authorization: token <gitea token>"}
	// errTooManyStreams: the viewer, or the client's address, holds as
	// many event streams as it may.
	errTooManyStreams = &lease.Refusal{Class: lease.AtLimit, Msg: "too many event streams",
		Line: "too many event streams: close one and try again"}
	// errShuttingDown: the server is shutting down and starts no stream.
	errShuttingDown = &lease.Refusal{Class: lease.Unavailable, Msg: "shutting down"}
)

// signInRefusal is a sign-in that cannot be completed: its error, and the
// one line the browser is shown.
func signInRefusal(msg, line string) *lease.Refusal {
	return &lease.Refusal{Class: lease.SignIn, Msg: msg, Line: line}
}

// malformed is a malformed request line (a path or query number); its
// message is shown.
func malformed(msg string) error { return &lease.Refusal{Class: lease.Usage, Msg: msg} }

// unprocessable is a well-formed request whose content cannot be done (a
// write's body: not JSON, a bad or missing ttl); its message is shown.
// It is 422, as Gitea answers a body that fails validation; malformed
// numbers in the path or query stay 400, as they always were.
func unprocessable(msg string) error { return &lease.Refusal{Class: lease.Unprocessable, Msg: msg} }

// errorBody is the one JSON shape of every error reply.
type errorBody struct {
	Error string `json:"error"`
}

// An answer is how one class of errors is answered: its status, its
// body and the headers that go with it, and what the log says of it. A
// reply that says "try again" (429, 503) carries Retry-After, and only
// such a reply does.
type answer struct {
	status     int
	msg        string // the body's error; "" is the error's line
	retryAfter string // Retry-After, in seconds
	challenge  bool   // WWW-Authenticate: the token scheme
	log        logAs  // a logged error (lease.Info.Logged) is a failureLog
}

// The answers of more than one class, and of the helpers below. The
// bodies of 401, 404, 500 and the plain 503 are fixed, so no reply can
// tell an unknown repository from one the viewer may not see.
var (
	unauthorizedAnswer = answer{status: http.StatusUnauthorized, msg: "invalid token", challenge: true}
	notFoundAnswer     = answer{status: http.StatusNotFound, msg: "not found"}
	unavailableAnswer  = answer{status: http.StatusServiceUnavailable, msg: "temporarily unavailable, try again", retryAfter: "5", log: retryLog}
	internalAnswer     = answer{status: http.StatusInternalServerError, msg: "internal error", log: failureLog}
)

// replies is the HTTP table of the classes lease.Classify decides: every
// class has its answer here. "Try again" (429 or 503, with Retry-After) is
// exactly the classes whose Retry is true, which SSH answers with exit 75.
var replies = map[lease.Class]answer{
	lease.Internal:        internalAnswer,
	lease.Conflict:        {status: http.StatusConflict}, // the contract's JSON
	lease.Usage:           {status: http.StatusBadRequest},
	lease.Invalid:         {status: http.StatusBadRequest, msg: "invalid request"},
	lease.SignIn:          {status: http.StatusBadRequest, log: signInLog},
	lease.Unauthenticated: unauthorizedAnswer,
	lease.TokenRequired:   {status: http.StatusUnauthorized, challenge: true},
	lease.Forbidden:       {status: http.StatusForbidden},
	lease.NotFound:        notFoundAnswer,
	lease.Closed:          {status: http.StatusConflict},
	lease.Unprocessable:   {status: http.StatusUnprocessableEntity},
	lease.Throttled:       {status: http.StatusTooManyRequests, retryAfter: "1"},
	lease.AtLimit:         {status: http.StatusTooManyRequests, retryAfter: "10"},
	lease.Unavailable:     unavailableAnswer,
	// Retry-After is long, as only a person can help; the operator hears
	// of it: it is logged as an error and /readyz fails.
	lease.Misconfigured: {status: http.StatusServiceUnavailable, retryAfter: "60", log: failureLog},
}

// write answers with a, for an error classified as info.
func (a answer) write(c *gin.Context, info lease.Info) {
	if a.retryAfter != "" {
		c.Header("Retry-After", a.retryAfter)
	}
	if a.challenge {
		c.Header("WWW-Authenticate", `token realm="collab-lease"`)
	}
	var body any = errorBody{Error: a.msg}
	switch {
	case info.Reply != nil:
		body = info.Reply
	case a.msg == "":
		body = errorBody{Error: strings.TrimPrefix(info.Line, contract.ErrorPrefix)}
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

// fail answers err with the answer of its class.
func (h *handler) fail(c *gin.Context, err error) {
	info := lease.Classify(err)
	a := replies[info.Class]
	log := a.log
	if info.Logged {
		log = failureLog
	}
	switch log {
	case signInLog:
		h.log.Info("sign-in refused", "err", err)
	case retryLog:
		h.log.Warn("http request failed, retryable", "path", c.Request.URL.Path, "err", err)
	case failureLog:
		h.log.Error("http request failed", "path", c.Request.URL.Path, "err", err)
	}
	a.write(c, info)
}

// Replies of the handlers that answer without an error.

func badRequest(c *gin.Context, msg string) {
	answer{status: http.StatusBadRequest, msg: msg}.write(c, lease.Info{})
}

func notFound(c *gin.Context) { notFoundAnswer.write(c, lease.Info{}) }

func serverError(c *gin.Context) { internalAnswer.write(c, lease.Info{}) }
