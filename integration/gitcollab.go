package integration

import (
	"context"
	"os"
	"strings"
)

// What a program needs to run the real `git collab` (git, git-collab,
// OpenSSH) as a user against a sidecar.

// BuildGitCollab builds cmd/git-collab of this module (the client needs no
// cgo) into dir and returns the binary's path; with dir first on PATH,
// `git collab` runs it.
func BuildGitCollab(ctx context.Context, dir string) (string, error) {
	return buildCommand(ctx, dir, "git-collab", false)
}

// CheckoutEnv is the environment for git and `git collab` of a user whose
// HOME is home, with binDir (git-collab's) first on PATH: this process's
// environment without its COLLAB_*, GIT_*, PATH, HOME, MANPATH and
// SSH_AUTH_SOCK, and with git's system and global configuration off, so
// only the checkout's own configuration counts.
func CheckoutEnv(home, binDir string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "COLLAB_") || strings.HasPrefix(k, "GIT_") || k == "PATH" || k == "HOME" || k == "MANPATH" || k == "SSH_AUTH_SOCK" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"), "HOME="+home,
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull, "MANPAGER=cat", "PAGER=cat", "GIT_PAGER=cat")
}

// SSHCommand is the OpenSSH command line (for core.sshCommand or
// COLLAB_SSH_COMMAND) that offers only the private key at keyPath, checks
// s's host key and never prompts.
func (s *Sidecar) SSHCommand(keyPath string) string {
	return strings.Join([]string{"ssh -F", shellQuote(os.DevNull), "-i", shellQuote(keyPath), "-o IdentitiesOnly=yes -o IdentityAgent=none -o BatchMode=yes",
		"-o UserKnownHostsFile=" + shellQuote(s.KnownHosts), "-o StrictHostKeyChecking=yes -o ConnectTimeout=10 -o LogLevel=ERROR"}, " ")
}

// shellQuote single-quotes a word for a shell command string.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
