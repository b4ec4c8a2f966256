package main

import (
	"fmt"
	"io"
	"net/http"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// runPing asks the sidecar whether it answers the gate's ping with the
// gate's secret: doctor runs it to tell whether the hook reaches the
// sidecar. One line either way: "ok: …" on stdout, or what failed on
// stderr with exit status 1.
func runPing(dir string, stdout, stderr io.Writer) int {
	g, err := loadGate(dir)
	if err != nil {
		fmt.Fprintf(stderr, "collab-gate-hook: the gate is not configured in %s: %v\n", dir, err)
		return exitRefuse
	}
	where := g.url.Redacted()
	if err := ping(g); err != nil {
		fmt.Fprintf(stderr, "collab-gate-hook: %s: %v\n", where, err)
		return exitRefuse
	}
	fmt.Fprintf(stdout, "ok: %s answered\n", where)
	return exitAllow
}

// ping makes the authenticated GET of contract.GatePingPath, which the
// sidecar answers with 204.
func ping(g gate) error {
	status, _, err := call(g, http.MethodGet, contract.GatePingPath, nil)
	switch {
	case err != nil:
		return err
	case status == http.StatusNoContent:
		return nil
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return fmt.Errorf("answered %d %s: the gate's secret (%s) is not the one the sidecar holds", status, http.StatusText(status), contract.GateSecretFile)
	case status == http.StatusNotFound:
		return fmt.Errorf("answered %d %s: is this the sidecar's admin address, with the gate on (serve --gate)?", status, http.StatusText(status))
	default:
		return fmt.Errorf("answered %d %s, not 204", status, http.StatusText(status))
	}
}
