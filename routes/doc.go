// Package routes holds the sidecar's gin HTTP handlers: the read-only lease
// API, sign-in through Gitea's OAuth2 provider (the sidecar's own session
// cookie), the badge assets and a liveness probe; and, apart, for an
// address only operators reach, readiness and metrics (admin.go).
//
// It only reads the ledger, and shows a repository's leases only to viewers
// who may read that repository: an unknown repository and one the viewer
// may not see get the same 404, byte for byte. It never decides who holds a
// lease (models/) or what a user may do (the forge, plugin/); it asks them.
// It sends no request to Gitea itself: the forge and SignIn do (plugin/gitea).
package routes
