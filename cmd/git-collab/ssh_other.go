//go:build !unix

package main

import "os/exec"

// detach has no sessions to make here: a cancelled context stops cmd
// itself, as exec.CommandContext does.
func detach(*exec.Cmd) {}
