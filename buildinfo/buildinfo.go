// Package buildinfo says which build of collab-lease is running: the
// module version, VCS commit and Go version that the go command stamps into
// every binary (runtime/debug.ReadBuildInfo), for --version, the sidecar's
// start log line and its build-info metric.
//
// It imports only the standard library, so the client (cmd/git-collab)
// may use it, and it decides nothing but how a build is named.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// Info names one build.
type Info struct {
	// Version is the module version: a release tag, a pseudo-version, or
	// "(devel)" when the go command knew none; or the version given at
	// link time (see Read).
	Version string
	// Revision is the VCS commit, "" when the build carries none (built
	// with -buildvcs=false, or outside a Git work tree, as in a
	// container build whose context has no .git).
	Revision string
	// Time is the commit's time (RFC 3339), "" when unknown.
	Time string
	// Dirty: built from a work tree with uncommitted changes.
	Dirty bool
	// GoVersion is the toolchain that built it, e.g. "go1.26.0".
	GoVersion string
}

// Read returns the build of the running binary. linked is a version given
// at link time (-ldflags "-X main.version=…", as the Dockerfile and make
// build do); when it is not empty it names the build instead of the
// module version, which is "(devel)" for a build without VCS information.
func Read(linked string) Info {
	bi, _ := debug.ReadBuildInfo()
	return From(bi, linked)
}

// From is Read for the build information bi (nil: none at all).
func From(bi *debug.BuildInfo, linked string) Info {
	i := Info{Version: "(devel)", GoVersion: runtime.Version()}
	if bi != nil {
		if bi.Main.Version != "" {
			i.Version = bi.Main.Version
		}
		if bi.GoVersion != "" {
			i.GoVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				i.Revision = s.Value
			case "vcs.time":
				i.Time = s.Value
			case "vcs.modified":
				i.Dirty = s.Value == "true"
			}
		}
	}
	if linked = strings.TrimSpace(linked); linked != "" {
		i.Version = linked
	}
	return i
}

// String is the one-line form --version prints:
// "v1.2.3, commit 0123456789ab (modified), go1.26.0".
func (i Info) String() string {
	s := i.Version
	if i.Revision != "" {
		s += ", commit " + i.ShortRevision()
		if i.Dirty {
			s += " (modified)"
		}
	}
	return s + ", " + i.GoVersion
}

// ShortRevision is the first 12 characters of Revision.
func (i Info) ShortRevision() string {
	if len(i.Revision) > 12 {
		return i.Revision[:12]
	}
	return i.Revision
}
