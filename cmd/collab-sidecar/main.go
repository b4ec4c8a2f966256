// Command collab-sidecar runs collab-lease beside a Gitea: the SSH server
// of the collab-lease verb and the HTTP server of the lease API and badge
// assets, on its embedded SQLite ledger; and it installs itself into a
// Gitea (footer tags, OAuth2 application, system webhook). It is the
// composition root: configuration is parsed and validated here, and every
// package receives its dependencies explicitly.
//
// Its files: the settings (config.go) and every time bound (limits.go);
// serve (serve.go), its Prometheus series (metrics.go) and the secrets it
// keeps in the data directory (datadir.go names its files; the browser
// session key, sessionkey.go; the webhook's secret, webhooksecret.go);
// install and --uninstall (install.go); doctor (doctor.go); the container's
// healthcheck (healthcheck.go); --version (version.go).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/collab-lease/collab-lease/buildinfo"
	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/contract"
)

const usage = `collab-sidecar: atomic, expiring work claims on Gitea issues.

Usage:
  collab-sidecar serve [flags]     run the SSH and HTTP servers (see: collab-sidecar serve --help)
  collab-sidecar install [flags]   wire a Gitea to this sidecar: badge tags in its custom footer,
                                   the OAuth2 application for sign-in, the system webhook
                                   (--uninstall removes all three)
  collab-sidecar doctor [flags]    check the Gitea URL, token, footer, sign-in, webhook and data directory;
                                   says what to fix (exit 0 only when all pass)
  collab-sidecar gate remove [flags]
                                   take the gate's hook out of every repository (--gitea-repo-root DIR
                                   or --gitea-custom DIR), leaving Gitea's own hooks as they were
  collab-sidecar healthcheck       ask the running server's /healthz (for container health checks)
  collab-sidecar help              show this text
  collab-sidecar --version         show the version, commit and Go version of this build
`

func main() {
	tuneGC(os.Getenv)
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// gcPercent is the garbage collector's target (GOGC) the sidecar runs
// with unless GOGC says otherwise. Go's default, 100, lets the heap grow
// to twice what is live and keeps what it grew to, which a burst of
// sessions opening at once makes large; at 50 a thousand idle sessions
// take about a tenth less memory, and the busy sessions' throughput,
// which waits on the ledger's commits more than on the CPU, holds
// (make bench rows 9 and 10).
const gcPercent = 50

// tuneGC sets gcPercent, unless the GOGC environment variable is set.
func tuneGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
}

// run is the one place that turns the final error into the process exit
// code.
func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return contract.ExitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch args[0] {
	case "serve":
		var cfg Config
		cfg, err = loadConfig("serve", args[1:], getenv, stdout)
		if err == nil {
			err = serve(ctx, cfg, stderr)
		}
	case "install":
		var (
			cfg Config
			f   installFlags
		)
		cfg, err = loadConfig("install", args[1:], getenv, stdout, f.define)
		if err == nil {
			err = install(ctx, cfg, f, stdout)
		}
	case "doctor":
		var cfg Config
		cfg, err = loadConfig("doctor", args[1:], getenv, stdout)
		if err == nil {
			err = doctor(ctx, cfg, stdout)
		}
	case "gate":
		err = gateCommand(args[1:], getenv, stdout)
	case "healthcheck":
		var cfg Config
		// The probe needs only the HTTP address: Gitea's URL and token
		// may be absent from its environment.
		cfg, err = loadConfig("healthcheck", args[1:], probeEnv(getenv), stdout)
		if err == nil {
			err = healthcheck(ctx, cfg)
		}
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return contract.ExitOK
	case "--version", "version":
		fmt.Fprintln(stdout, "collab-sidecar "+buildinfo.Read(version).String())
		return contract.ExitOK
	default:
		fmt.Fprintf(stderr, "collab-sidecar: unknown command %q\n\n%s", args[0], usage)
		return contract.ExitUsage
	}
	switch {
	case err == nil, errors.Is(err, errHelp):
		return contract.ExitOK
	case errors.Is(err, models.ErrBusy): // the database, unreachable or busy: try again (EX_TEMPFAIL)
		fmt.Fprintf(stderr, "collab-sidecar %s: %v\n", args[0], err)
		return contract.ExitTempFail
	default:
		fmt.Fprintf(stderr, "collab-sidecar %s: %v\n", args[0], err)
		return contract.ExitError
	}
}
