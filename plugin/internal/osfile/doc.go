// Package osfile holds the small operating-system helpers of the sidecar's
// file writes: replacing a file atomically (WriteFileAtomic), keeping a
// replaced file's owner, reading owners and link counts, and an exclusive
// lock on a directory (flock, where the system has it).
//
// They do what they are asked on the paths they are given, and decide
// nothing about which paths are safe to write: that is their callers'
// (plugin/footer, plugin/gitea).
package osfile
