package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestFrom(t *testing.T) {
	stamped := &debug.BuildInfo{
		GoVersion: "go1.26.0",
		Main:      debug.Module{Path: "github.com/collab-lease/collab-lease", Version: "v0.0.0-20261201120000-0123456789ab+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-12-01T12:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	cases := []struct {
		name   string
		bi     *debug.BuildInfo
		linked string
		want   Info
		line   string
	}{
		{"stamped by the go command", stamped, "",
			Info{Version: "v0.0.0-20261201120000-0123456789ab+dirty", Revision: "0123456789abcdef0123456789abcdef01234567",
				Time: "2026-12-01T12:00:00Z", Dirty: true, GoVersion: "go1.26.0"},
			"v0.0.0-20261201120000-0123456789ab+dirty, commit 0123456789ab (modified), go1.26.0"},
		{"a linked version names the build", stamped, " v1.2.3\n",
			Info{Version: "v1.2.3", Revision: "0123456789abcdef0123456789abcdef01234567",
				Time: "2026-12-01T12:00:00Z", Dirty: true, GoVersion: "go1.26.0"},
			"v1.2.3, commit 0123456789ab (modified), go1.26.0"},
		{"no VCS information", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}}, "",
			Info{Version: "(devel)", GoVersion: "go1.26.0"},
			"(devel), go1.26.0"},
		{"a container build: linked, no VCS", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}}, "v1.2.3",
			Info{Version: "v1.2.3", GoVersion: "go1.26.0"},
			"v1.2.3, go1.26.0"},
	}
	for _, c := range cases {
		got := From(c.bi, c.linked)
		if got != c.want {
			t.Errorf("%s: From = %+v, want %+v", c.name, got, c.want)
		}
		if s := got.String(); s != c.line {
			t.Errorf("%s: String = %q, want %q", c.name, s, c.line)
		}
	}
	if got := From(nil, ""); got.Version != "(devel)" || got.GoVersion == "" {
		t.Errorf("no build information: %+v", got)
	}
}

func TestReadNamesTheRunningBinary(t *testing.T) {
	if i := Read(""); i.Version == "" || i.GoVersion == "" {
		t.Errorf("Read = %+v: a build always has a version and a Go version", i)
	}
}
