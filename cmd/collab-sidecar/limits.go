package main

import (
	"fmt"
	"time"
)

// Every time bound of collab-sidecar, in one place. The settings give the
// forge timeout (each question to Gitea, --forge-timeout); the rest are
// fixed, or derived from it below.
const (
	// shutdownGrace bounds how long in-flight commands and requests may
	// run after SIGTERM.
	shutdownGrace = 20 * time.Second
	// sshWriteTimeout cuts an SSH client that takes none of what the
	// server sends for this long (ssh.Server.WriteTimeout). It is well
	// below shutdownGrace, so a client that stopped reading never holds
	// a shutdown to its end.
	sshWriteTimeout = 10 * time.Second
	// HTTP server bounds. Every request's own work (forge, ledger,
	// sign-in) is bounded by operationTimeout; these bound the connection
	// around it, so a slow or idle client cannot hold it.
	httpReadHeaderTimeout = 10 * time.Second
	httpReadTimeout       = 30 * time.Second
	httpIdleTimeout       = 2 * time.Minute
	httpMaxHeaderBytes    = 64 << 10
	// proxyHeaderTimeout bounds how long a load balancer's connection
	// may take to send its PROXY protocol header (--proxy-protocol-from);
	// a balancer sends it as soon as it has connected.
	proxyHeaderTimeout = 5 * time.Second
	// metricsLedgerTimeout bounds the ledger count behind the live-lease
	// gauge, per scrape.
	metricsLedgerTimeout = 2 * time.Second
	// doctorTimeout bounds all of doctor's checks together.
	doctorTimeout = 30 * time.Second
	// healthcheckTimeout bounds the container probe of /healthz.
	healthcheckTimeout = 5 * time.Second
)

// operationTimeout bounds one SSH command or HTTP request: a few questions
// to Gitea (each within the forge timeout) and the ledger.
func operationTimeout(cfg Config) time.Duration { return 3 * cfg.ForgeTimeout }

// httpWriteTimeout bounds writing one HTTP answer: the operation, then
// time to send it.
func httpWriteTimeout(cfg Config) time.Duration { return operationTimeout(cfg) + 10*time.Second }

// durationSetting renders a default for the settings table the way people
// type it: whole hours, else whole seconds ("168h", "60s").
func durationSetting(d time.Duration) string {
	if d >= time.Hour && d%time.Hour == 0 {
		return fmt.Sprintf("%dh", d/time.Hour)
	}
	return fmt.Sprintf("%ds", d/time.Second)
}

// liveRecheck is how often a live event stream asks Gitea again whether
// its viewer may still read the repository: as often as the permission
// cache forgets, but no more than every few seconds per stream.
func liveRecheck(cfg Config) time.Duration { return max(cfg.PermCacheTTL, 5*time.Second) }
