//go:build !(darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd)

package plugin

import "os"

// lockExclusive: no flock here, so concurrent installs are not serialised.
func lockExclusive(*os.File) error { return nil }
