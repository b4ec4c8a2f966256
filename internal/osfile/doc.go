// Package osfile holds the small operating-system helpers of the sidecar's
// file writes: replacing a file atomically (WriteFileAtomic), keeping a
// replaced file's owner, reading owners and link counts, an exclusive
// lock on a directory (flock, where the system has it), and secret files
// (Secret: made once, mode 0600, by whichever process gets there first,
// and refused when others may read them).
//
// They do what they are asked on the paths they are given, and decide
// nothing about which paths are safe to write: that is their callers'
// (plugin/footer, plugin/gitea, ssh, cmd/collab-sidecar).
//
// Its files: atomic replacement (atomic.go), secret files (secret.go),
// owners and link counts (owner_unix.go, owner_other.go), the lock
// (lock_flock.go, lock_other.go).
package osfile
