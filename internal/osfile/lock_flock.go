//go:build darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd

package osfile

import (
	"os"
	"syscall"
)

// LockExclusive takes an exclusive flock on f (the footer's directory),
// waiting for another holder; closing f releases it.
func LockExclusive(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			return err
		}
	}
}
