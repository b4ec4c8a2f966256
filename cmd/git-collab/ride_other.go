//go:build !unix

package main

// privateDir cannot tell who owns a directory here: commands run under
// git collab run use ssh.
func privateDir(string) bool { return false }
