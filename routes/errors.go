package routes

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/lease"
)

// Errors of this transport; forge and ledger errors keep their own
// sentinels and are mapped by status.
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

// status is the one place that maps an error onto an HTTP status.
func status(err error) int {
	var bad *badRequestError
	var invalid *invalidError
	var write *lease.WriteRequiredError
	switch {
	case errors.As(err, &bad), errors.Is(err, errSignIn), errors.Is(err, lease.ErrInvalid):
		return http.StatusBadRequest
	case errors.As(err, &invalid):
		return http.StatusUnprocessableEntity
	case errors.Is(err, errUnauthorized), errors.Is(err, errTokenRequired), errors.Is(err, lease.ErrRevoked):
		return http.StatusUnauthorized
	case errors.As(err, &write):
		return http.StatusForbidden
	case errors.Is(err, lease.ErrRepoNotFound), errors.Is(err, lease.ErrIssueNotFound), errors.Is(err, forge.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, lease.ErrConflict), errors.Is(err, lease.ErrIssueClosed):
		return http.StatusConflict
	case errors.Is(err, forge.ErrRateLimited):
		return http.StatusTooManyRequests
	case errors.Is(err, errTooManyStreams):
		return http.StatusTooManyRequests
	case errors.Is(err, forge.ErrUnavailable), errors.Is(err, lease.ErrBusy), errors.Is(err, errShuttingDown),
		errors.Is(err, lease.ErrTryAgain), errors.Is(err, lease.ErrTooManyWaiters),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable
	default: // plugin.ErrConfig and anything unexpected
		return http.StatusInternalServerError
	}
}

// fail answers err with the helper of its status, logging server-side
// failures with their detail (which the client never sees).
func (h *handler) fail(c *gin.Context, err error) {
	switch code := status(err); code {
	case http.StatusBadRequest:
		var bad *badRequestError
		switch {
		case errors.As(err, &bad):
			badRequest(c, bad.msg)
		case errors.Is(err, errSignIn):
			h.log.Info("sign-in refused", "err", err)
			badRequest(c, signInProblem(err))
		default:
			badRequest(c, "invalid request")
		}
	case http.StatusUnprocessableEntity:
		var invalid *invalidError
		errors.As(err, &invalid)
		c.AbortWithStatusJSON(http.StatusUnprocessableEntity, errorBody{Error: invalid.msg})
	case http.StatusUnauthorized:
		if errors.Is(err, errTokenRequired) {
			c.Header("WWW-Authenticate", `token realm="collab-lease"`)
			c.AbortWithStatusJSON(http.StatusUnauthorized, errorBody{Error: errTokenRequired.Error()})
			return
		}
		unauthorized(c)
	case http.StatusForbidden:
		// Only a viewer who may read the repository is told what it may
		// not write, so naming it reveals nothing.
		c.AbortWithStatusJSON(http.StatusForbidden, errorBody{Error: err.Error()})
	case http.StatusNotFound:
		notFound(c)
	case http.StatusConflict:
		var conflict *lease.ConflictError
		if errors.As(err, &conflict) {
			c.AbortWithStatusJSON(http.StatusConflict, conflict.Reply)
			return
		}
		c.AbortWithStatusJSON(http.StatusConflict, errorBody{Error: "issue is closed"})
	case http.StatusTooManyRequests:
		if errors.Is(err, errTooManyStreams) {
			c.Header("Retry-After", "10")
			c.AbortWithStatusJSON(http.StatusTooManyRequests, errorBody{Error: "too many event streams: close one and try again"})
			return
		}
		tooManyRequests(c)
	case http.StatusServiceUnavailable:
		h.log.Warn("http request failed, retryable", "path", c.Request.URL.Path, "err", err)
		unavailable(c)
	default:
		h.log.Error("http request failed", "path", c.Request.URL.Path, "err", err)
		serverError(c)
	}
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

// One helper per status. The bodies of 401, 404, 500 and 503 are fixed, so
// no reply can tell an unknown repository from one the viewer may not see.

func badRequest(c *gin.Context, msg string) {
	c.AbortWithStatusJSON(http.StatusBadRequest, errorBody{Error: msg})
}

func unauthorized(c *gin.Context) {
	c.Header("WWW-Authenticate", `token realm="collab-lease"`)
	c.AbortWithStatusJSON(http.StatusUnauthorized, errorBody{Error: "invalid token"})
}

func notFound(c *gin.Context) {
	c.AbortWithStatusJSON(http.StatusNotFound, errorBody{Error: "not found"})
}

func unavailable(c *gin.Context) {
	c.Header("Retry-After", "5")
	c.AbortWithStatusJSON(http.StatusServiceUnavailable, errorBody{Error: "temporarily unavailable, try again"})
}

func serverError(c *gin.Context) {
	c.AbortWithStatusJSON(http.StatusInternalServerError, errorBody{Error: "internal error"})
}

func tooManyRequests(c *gin.Context) {
	c.Header("Retry-After", "1")
	c.AbortWithStatusJSON(http.StatusTooManyRequests, errorBody{Error: "too many requests, try again"})
}
