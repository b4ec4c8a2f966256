//go:build unix

package plugin

import (
	"io/fs"
	"os"
	"syscall"
)

// keepOwner gives path the owner and group of the file old describes,
// where this process may (as root, or when they are its own).
func keepOwner(path string, old fs.FileInfo) {
	if sys, ok := old.Sys().(*syscall.Stat_t); ok {
		_ = os.Lchown(path, int(sys.Uid), int(sys.Gid))
	}
}
