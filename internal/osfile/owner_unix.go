//go:build unix

package osfile

import (
	"io/fs"
	"os"
	"syscall"
)

// KeepOwner gives path the owner and group of the file old describes,
// where this process may (as root, or when they are its own).
func KeepOwner(path string, old fs.FileInfo) {
	if sys, ok := old.Sys().(*syscall.Stat_t); ok {
		_ = os.Lchown(path, int(sys.Uid), int(sys.Gid))
	}
}

// KeepOwnerOf is KeepOwner for an open file.
func KeepOwnerOf(f *os.File, old fs.FileInfo) {
	if sys, ok := old.Sys().(*syscall.Stat_t); ok {
		_ = f.Chown(int(sys.Uid), int(sys.Gid))
	}
}

// OwnerOf is the user ID that owns what fi describes.
func OwnerOf(fi fs.FileInfo) (int, bool) {
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(sys.Uid), true
	}
	return -1, false
}

// LinkCount is the number of hard links of what fi describes.
func LinkCount(fi fs.FileInfo) uint64 {
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(sys.Nlink)
	}
	return 1
}
