package main

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// DefaultSidecarPort is where the sidecar serves SSH unless told otherwise
// (docs/operating.md, Configuration; --ssh-listen).
const DefaultSidecarPort = "2222"

// Where the sidecar's address may come from, in the order they are tried.
const (
	sourceGitConfig = "git config collab.sidecar"
	sourceEnv       = "COLLAB_SIDECAR"
)

// Sidecar is the SSH endpoint of the collab-lease verb, and where its
// address came from (for messages that say what to change).
type Sidecar struct {
	Host, Port string
	User       string // the SSH user: the remote URL's, else "git"
	Source     string
}

// Addr is "host:port".
func (s Sidecar) Addr() string { return net.JoinHostPort(s.Host, s.Port) }

// Destination is ssh's "user@host".
func (s Sidecar) Destination() string { return s.User + "@" + s.Host }

// setHint says how to point git-collab at a sidecar.
const setHint = "set git config collab.sidecar host:port or COLLAB_SIDECAR"

// ResolveSidecar decides where the sidecar is: the git config value
// collab.sidecar, else the environment variable COLLAB_SIDECAR, else the
// host of the remote on port 2222. Empty values count as unset. A value is
// "host:port" or just "host" (port 2222); IPv6 hosts are bracketed.
func ResolveSidecar(gitConfig, env, remoteName string, r Remote) (Sidecar, error) {
	user := r.User
	if user == "" {
		user = "git"
	}
	for _, c := range []struct{ value, source string }{{gitConfig, sourceGitConfig}, {env, sourceEnv}} {
		if c.value == "" {
			continue
		}
		host, port, err := splitSidecarAddr(c.value)
		if err != nil {
			return Sidecar{}, fmt.Errorf("%s %s: %v; expected host:port", c.source, quote(c.value), err)
		}
		return Sidecar{Host: host, Port: port, User: user, Source: c.source}, nil
	}
	if r.Local() {
		return Sidecar{}, fmt.Errorf("cannot tell where the collab-lease sidecar is: remote %s is a local path, not a forge; %s",
			quote(remoteName), setHint)
	}
	return Sidecar{Host: r.Host, Port: DefaultSidecarPort, User: user,
		Source: fmt.Sprintf("the host of remote %s", quote(remoteName))}, nil
}

func splitSidecarAddr(v string) (host, port string, err error) {
	host, port, err = net.SplitHostPort(v)
	if err != nil {
		// A bare host: a name, an IPv4 address or a bracketed IPv6 one.
		h := v
		if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
			h = h[1 : len(h)-1]
		} else if strings.Contains(h, ":") {
			return "", "", fmt.Errorf("%v", unwrapAddrError(err))
		}
		host, port = h, DefaultSidecarPort
	}
	if err := checkHost(host); err != nil {
		return "", "", err
	}
	if n, err := strconv.Atoi(port); err != nil || !allDigits(port) || n < 1 || n > 65535 || port[0] == '0' {
		return "", "", fmt.Errorf("port %s is not a port number", quote(port))
	}
	return host, port, nil
}

func unwrapAddrError(err error) error {
	if ae, ok := err.(*net.AddrError); ok {
		return fmt.Errorf("%s", ae.Err)
	}
	return err
}
