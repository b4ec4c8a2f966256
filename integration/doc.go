// Package integration starts a real Gitea (built from its Go module by the
// nested module in integration/giteabin) on loopback and seeds it, for the
// end-to-end tests and `make demo`. It is test and demo support only; the
// sidecar's binaries never import it.
//
// Its files: Gitea started and stopped (gitea.go, gitea_linux.go,
// gitea_other.go), a small client of its REST API (gitea_api.go) and what
// is seeded into it (seed.go); a receiver of its webhooks (hooks.go); the
// sidecar built, installed, started and restarted (sidecar.go,
// sidecar_linux.go, sidecar_other.go); the real git collab (gitcollab.go)
// and a real `collab-lease session` over OpenSSH (session.go); a
// process's CPU time (proc_linux.go, proc_other.go). The tests are the
// *_test.go files; integration/demo is `make demo`, and integration/giteabin
// the nested module that builds Gitea.
package integration
