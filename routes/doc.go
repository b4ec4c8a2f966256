// Package routes holds the sidecar's gin HTTP handlers: the read-only lease
// API, the badge assets, health and metrics. It only reads the ledger, and
// shows a repository's leases only to viewers who may read that repository.
package routes
