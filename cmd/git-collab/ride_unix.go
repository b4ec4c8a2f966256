//go:build unix

package main

import (
	"os"
	"syscall"
)

// privateDir says whether dir is a directory (not a link to one) of this
// process's user that no one else may enter, as run's socket directory is.
func privateDir(dir string) bool {
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm()&0o077 != 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Getuid()
}
