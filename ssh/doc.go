// Package ssh serves the collab-lease verb on the sidecar's own SSH port.
//
// Identity comes only from the public key verified during authentication,
// resolved through the forge; authorization and the issue check are asked of
// the forge before one ledger call. It never writes the ledger itself and
// never offers a shell, pty, subsystem or forwarding.
package ssh
