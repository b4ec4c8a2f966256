//go:build !(darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd)

package osfile

import "os"

// LockExclusive: no flock here, so concurrent installs are not serialised.
func LockExclusive(*os.File) error { return nil }
