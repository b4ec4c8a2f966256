package ssh

import (
	"context"
	"io"
	"net"
	"time"
)

// Handler answers the requests of authenticated connections: one exec
// request per session, or a shell request. The Server owns everything
// around it (admission, limits, timeouts, shutdown) and calls it only for
// connections whose key was verified; LeaseVerb is the collab-lease verb.
type Handler interface {
	// Exec answers the command line of one exec request. ctx ends after
	// the server's CommandTimeout (or what Patient allows), or as soon as
	// the client closes the session or goes away.
	Exec(ctx context.Context, c ConnInfo, line string) Reply
	// Greet answers an interactive login (a shell request).
	Greet(c ConnInfo) Reply
}

// Streaming is a Handler some of whose commands say how they are getting
// on while they run (acquire --wait: its place in the queue): Exec with
// stderr, to which it may write whole lines before its Reply. The server
// sends what it writes at once, under the same write deadline as a
// reply.
type Streaming interface {
	ExecStreaming(ctx context.Context, c ConnInfo, line string, stderr io.Writer) Reply
}

// Patient is a Handler some of whose commands may take longer than the
// server's CommandTimeout (acquire --wait): Timeout returns how long the
// command line may run, given the server's own timeout. While such a
// command runs, the server keeps the connection alive, so its idle
// timeout does not cut a client that is only waiting.
type Patient interface {
	Timeout(line string, def time.Duration) time.Duration
}

// ConnInfo is what a verified connection knows of its client. It is read
// from the authenticated connection's permissions, never from a key that
// was only offered.
type ConnInfo struct {
	// Fingerprint is the "SHA256:…" fingerprint of the key the client
	// proved it holds.
	Fingerprint string
	// UserID and Login name the Gitea account the key resolved to at the
	// handshake (zero when Unavailable).
	UserID int64
	Login  string
	// Unavailable: the forge could not resolve the key at the handshake
	// (unreachable, or key lookups saturated), so the client was let in
	// without an identity, to be told to retry.
	Unavailable bool
	// Crowded: the account already had as many connections open as it
	// may (Server.MaxConnsPerAccount); every command is told to retry.
	Crowded bool
	// RemoteAddr is the client's address.
	RemoteAddr net.Addr
}

// Reply is the whole answer to one request: what goes to stdout and to
// stderr, written as they are, then the exit status.
type Reply struct {
	Stdout []byte
	Stderr string
	Code   int
	// Outcome names the result for logs and metrics; it is not sent.
	Outcome string
	// Err is the detail of an internal error, for the log only.
	Err error
}
