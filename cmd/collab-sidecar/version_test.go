package main

import (
	"bytes"
	"maps"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/collab-lease/collab-lease/buildinfo"
)

func TestVersion(t *testing.T) {
	for _, arg := range []string{"--version", "version"} {
		var stdout, stderr bytes.Buffer
		code := run([]string{arg}, func(string) string { return "" }, &stdout, &stderr)
		out := stdout.String()
		if code != 0 || stderr.Len() != 0 || !strings.HasPrefix(out, "collab-sidecar ") ||
			!strings.Contains(out, ", go1.") || strings.Count(out, "\n") != 1 {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want one line naming the build", arg, code, out, stderr.String())
		}
	}
}

func TestBuildInfoMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(buildInfoMetric(buildinfo.Info{Version: "v1.2.3", Revision: "0123456789abcdef", Dirty: true, GoVersion: "go1.26.0"}))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(families) != 1 || families[0].GetName() != "collab_lease_build_info" || len(families[0].GetMetric()) != 1 {
		t.Fatalf("build info series: %v", families)
	}
	m := families[0].GetMetric()[0]
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	want := map[string]string{"version": "v1.2.3", "revision": "0123456789abcdef", "modified": "true", "goversion": "go1.26.0"}
	if m.GetGauge().GetValue() != 1 || !maps.Equal(labels, want) {
		t.Errorf("collab_lease_build_info = %v, labels %v; want 1 with %v", m.GetGauge().GetValue(), labels, want)
	}
}
