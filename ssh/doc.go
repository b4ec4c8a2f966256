// Package ssh serves the collab-lease verb on the sidecar's own SSH port.
//
// It has two parts, the gliderlabs way. Server is a generic SSH server for
// exec requests: it admits connections within limits (evicting stalled
// handshakes first), takes identity only from the public key verified
// during authentication, resolved through Keys, and hands each exec or
// shell request with that identity (ConnInfo) to a Handler; it never
// offers a shell, pty, subsystem or forwarding. LeaseVerb is the Handler
// of the collab-lease verb: it parses with plugin/contract's grammar, makes
// one call to the lease service (plugin/lease), which decides who may do
// what, and answers an error by its class (lease.Classify; the exit codes
// in dispatch.go). Neither writes the ledger or holds a permission rule.
// Besides: the interfaces of a Handler and what it is handed (handler.go),
// the host key kept in the data directory (hostkey.go), and TCP quick
// acknowledgements on Linux (quickack_linux.go, quickack_other.go).
package ssh
