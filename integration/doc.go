// Package integration starts a real Gitea (built from its Go module by the
// nested module in integration/giteabin) on loopback and seeds it, for the
// end-to-end tests and `make demo`. It is test and demo support only; the
// sidecar's binaries never import it.
package integration
