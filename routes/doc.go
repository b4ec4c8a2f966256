// Package routes holds the sidecar's gin HTTP handlers: the lease API (reads,
// writes for API token holders, and the issue page's claim, release and
// force-release buttons, the session cookie's only writes, which check the
// request's Origin), the live lease events as Server-Sent
// Events, sign-in through Gitea's OAuth2 provider (the sidecar's own session
// cookie), the board (an HTML page for people, board.go), the badge assets (assets.go, with their CORS rules, cors.go) and
// a liveness probe; and, apart, for an address only operators reach,
// readiness and metrics (admin.go).
//
// It reaches the ledger only through the lease service (plugin/lease) and
// the live events through the service's streams, and shows
// a repository's leases only to viewers who may read that repository: an
// unknown repository and one the viewer may not see get the same 404, byte
// for byte. It never decides who holds a lease (models/) or what a user may
// do (the lease service, plugin/lease); it asks it. It sends no request to Gitea
// itself: the forge and SignIn do (plugin/gitea).
package routes
