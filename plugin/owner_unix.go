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

// keepOwnerOf is keepOwner for an open file.
func keepOwnerOf(f *os.File, old fs.FileInfo) {
	if sys, ok := old.Sys().(*syscall.Stat_t); ok {
		_ = f.Chown(int(sys.Uid), int(sys.Gid))
	}
}

// ownerOf is the user ID that owns what fi describes.
func ownerOf(fi fs.FileInfo) (int, bool) {
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(sys.Uid), true
	}
	return -1, false
}

// linkCount is the number of hard links of what fi describes.
func linkCount(fi fs.FileInfo) uint64 {
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(sys.Nlink)
	}
	return 1
}
