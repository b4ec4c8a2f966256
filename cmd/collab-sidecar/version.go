package main

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/collab-lease/collab-lease/buildinfo"
)

// version names the build when the go command could not stamp it (a
// container build has no .git; see buildinfo.Read): set at link time,
// -ldflags "-X main.version=v1.2.3", as the Dockerfile and make build do.
var version string

// buildInfoMetric is the series that names the running build, in the
// Prometheus convention of a constant 1 with the build as labels.
func buildInfoMetric(b buildinfo.Info) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "collab_lease_build_info",
		Help: "Always 1; its labels name the running build (module version, VCS commit, whether modified, Go version).",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision,
			"modified": strconv.FormatBool(b.Dirty), "goversion": b.GoVersion},
	})
	g.Set(1)
	return g
}
