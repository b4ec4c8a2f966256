package main

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// Git reads what git-collab needs from the repository it runs in.
type Git interface {
	// RemoteURL is the URL of the named remote after git's own rewriting
	// (url.<base>.insteadOf), as `git remote get-url` prints it.
	RemoteURL(name string) (string, error)
	// Config is the value of a config key; "" when it is unset.
	Config(key string) (string, error)
	// Prefix is where in the work tree git runs, as a path from its root
	// ending in "/" ("src/auth/"), "" at the root: what a path named
	// there is relative to.
	Prefix() (string, error)
	// LocalValues are the values of a multi-valued key in the
	// repository's own config file (.git/config), in order; none when
	// it is unset, and errNoRepository outside a repository.
	LocalValues(key string) ([]string, error)
	// AddLocal adds a value to a multi-valued key in the repository's
	// own config file, after the values it has.
	AddLocal(key, value string) error
	// UnsetLocal removes the values of key in the repository's own
	// config file that valueRegex (a regular expression, as git config
	// reads one) matches; none matching is no error.
	UnsetLocal(key, valueRegex string) error
}

// errNoRepository says that git runs outside any repository.
var errNoRepository = errors.New("not inside a git repository")

// execGit runs the git on PATH in the current directory.
type execGit struct {
	dir string // "" is the current directory
	env []string
}

var _ Git = execGit{}

func (g execGit) RemoteURL(name string) (string, error) {
	out, err := g.run("remote", "get-url", "--", name)
	if err != nil {
		if strings.Contains(err.Error(), "not a git repository") {
			return "", errors.New("not inside a git repository; run git collab in a checkout of the repository")
		}
		if strings.Contains(err.Error(), "No such remote") {
			return "", fmt.Errorf("no remote %s in this repository; name one with --remote <name>", quote(name))
		}
		return "", err
	}
	return out, nil
}

func (g execGit) Config(key string) (string, error) {
	out, err := g.run("config", "--get", "--", key)
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 1 { // the key is unset
		return "", nil
	}
	return out, err
}

func (g execGit) Prefix() (string, error) {
	out, err := g.run("rev-parse", "--show-prefix")
	if err != nil && strings.Contains(err.Error(), "not a git repository") {
		return "", errors.New("not inside a git repository; run git collab in a checkout of the repository")
	}
	return out, err
}

func (g execGit) LocalValues(key string) ([]string, error) {
	out, err := g.run("config", "--local", "--get-all", "--", key)
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ee.ExitCode() == 1: // the key is unset
		return nil, nil
	case err != nil && strings.Contains(err.Error(), "--local can only be used inside a git repository"):
		return nil, errNoRepository
	case err != nil:
		return nil, err
	}
	return strings.Split(out, "\n"), nil
}

func (g execGit) AddLocal(key, value string) error {
	_, err := g.run("config", "--local", "--add", "--", key, value)
	return err
}

func (g execGit) UnsetLocal(key, valueRegex string) error {
	// git config unset --value (git 2.46) would say the same; --unset-all
	// with a value pattern works on every git there is.
	_, err := g.run("config", "--local", "--unset-all", "--", key, valueRegex)
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 5 { // nothing matched
		return nil
	}
	return err
}

func (g execGit) run(args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir, cmd.Env = g.dir, g.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg == "" {
			msg = err.Error()
		}
		return "", &gitError{args: args, msg: msg, err: err}
	}
	return strings.TrimRight(out.String(), "\r\n"), nil
}

type gitError struct {
	args []string
	msg  string
	err  error
}

func (e *gitError) Error() string { return "git " + strings.Join(e.args, " ") + ": " + e.msg }
func (e *gitError) Unwrap() error { return e.err }
