package contract

// Exit codes of the verb (docs/ssh.md, Exit codes). Clients pass them
// through unchanged.
const (
	// ExitOK: success, including an idempotent re-acquire and releasing
	// nothing; the reply is JSON on stdout.
	ExitOK = 0
	// ExitError: bad arguments, an unknown or unauthorized repository, an
	// unknown or closed issue; the reply is one error line on stderr.
	ExitError = 1
	// ExitConflict: held by another (acquire), not the holder (renew,
	// release); the reply is JSON (Conflict) on stdout.
	ExitConflict = 4
	// ExitTempFail (EX_TEMPFAIL): the forge unreachable, the ledger busy
	// past its timeout, a bound passed, the command canceled, the sidecar
	// misconfigured; retry. One error line on stderr.
	ExitTempFail = 75
)

// ExitUsage: a program of this module (collab-sidecar) was called with a
// command line it does not understand. The verb never answers it.
const ExitUsage = 2

// ErrorPrefix starts every error line on stderr.
const ErrorPrefix = "error: "

// The fixed error lines of the verb, without their newline. A usage error
// is ErrorLine(err.Error()) of a *UsageError: "error: usage: …".
const (
	LineRepoNotFound     = ErrorPrefix + "repository not found"
	LineIssueNotFound    = ErrorPrefix + "issue not found"
	LineIssueClosed      = ErrorPrefix + "issue is closed"
	LineForgeUnavailable = ErrorPrefix + "forge unavailable, try again"
	LineBusy             = ErrorPrefix + "lease database busy, try again"
	// LineNextTryAgain: next examined as many candidates as one call may
	// without finding a free one; a retry goes further.
	LineNextTryAgain = ErrorPrefix + "no free issue among the candidates examined so far, try again"
	// LineTooManyWaiters: acquire --wait found the waiters of the issue,
	// or of the sidecar, at their bound.
	LineTooManyWaiters = ErrorPrefix + "too many waiters, try again"
	// LineRevoked answers every command on a connection whose key was
	// deleted, or whose account was deactivated or may no longer log in,
	// since the connection was opened.
	LineRevoked = ErrorPrefix + "this key no longer belongs to an active Gitea account"
	// LineTooManyConnections answers every command on a connection its
	// account opened beyond the sidecar's per-account cap.
	LineTooManyConnections = ErrorPrefix + "too many connections for this account, try again"
	// LineTooManyRequests: the caller's address asked more of the forge
	// than its share allows; nothing was done.
	LineTooManyRequests = ErrorPrefix + "too many requests, try again"
	// LineMisconfigured: the sidecar's own credentials at the forge are
	// wrong; nothing was done. An operator must fix them, and then the
	// same command succeeds, so it is exit 75 (retry), not 1.
	LineMisconfigured = ErrorPrefix + "the sidecar is misconfigured; ask the forge admin to run collab-sidecar doctor"
	// LineCanceled: the command was canceled before it was answered (its
	// connection is closing); retry.
	LineCanceled = ErrorPrefix + "canceled, try again"
	// LineTooManySessions: the account has as many sessions open as the
	// sidecar allows (--max-sessions-per-account).
	LineTooManySessions = ErrorPrefix + "too many sessions for this account, try again"
	// LineSessionMoved: another connection resumed this session.
	LineSessionMoved = ErrorPrefix + "session resumed elsewhere"
	// LineSessionGone: the session a command was sent in is over.
	LineSessionGone = ErrorPrefix + "session is over"
)

// ErrorLine is the error line for msg, without its newline.
func ErrorLine(msg string) string { return ErrorPrefix + msg }
