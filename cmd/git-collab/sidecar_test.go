package main

import (
	"strings"
	"testing"
)

func TestResolveSidecar(t *testing.T) {
	forge := Remote{Host: "forge.example", Port: "22", User: "git", Owner: "acme", Name: "widgets"}
	alice := Remote{Host: "forge.example", User: "alice", Owner: "acme", Name: "widgets"}
	https := Remote{Host: "forge.example", Owner: "acme", Name: "widgets"} // an https URL's login is not kept
	local := Remote{Owner: "acme", Name: "widgets"}
	cases := []struct {
		name          string
		config, env   string
		remote        Remote
		addr, dest    string
		source, error string
	}{
		{name: "git config wins", config: "side.example:2200", env: "env.example:2300", remote: forge,
			addr: "side.example:2200", dest: "git@side.example", source: sourceGitConfig},
		{name: "then the environment", env: "env.example:2300", remote: forge,
			addr: "env.example:2300", dest: "git@env.example", source: sourceEnv},
		{name: "then the remote's host on 2222, not its git port", remote: forge,
			addr: "forge.example:2222", dest: "git@forge.example", source: `the host of remote "origin"`},
		{name: "the remote URL's user", remote: alice, addr: "forge.example:2222", dest: "alice@forge.example"},
		{name: "git when the URL names no ssh user", remote: https, addr: "forge.example:2222", dest: "git@forge.example"},
		{name: "a host without a port", config: "side.example", remote: forge, addr: "side.example:2222"},
		{name: "an IPv4 address", env: "127.0.0.1:40022", remote: forge, addr: "127.0.0.1:40022", dest: "git@127.0.0.1"},
		{name: "a bracketed IPv6 address", config: "[::1]:2200", remote: forge, addr: "[::1]:2200", dest: "git@::1"},
		{name: "a bracketed IPv6 host", config: "[::1]", remote: forge, addr: "[::1]:2222"},
		{name: "an IPv6 remote host", remote: Remote{Host: "2001:db8::7", Owner: "a", Name: "b"}, addr: "[2001:db8::7]:2222", dest: "git@2001:db8::7"},
		{name: "a local path with git config", config: "side.example:2200", remote: local, addr: "side.example:2200"},
		{name: "a local path with the environment", env: "side.example", remote: local, addr: "side.example:2222"},

		{name: "a local path and nothing set", remote: local,
			error: `cannot tell where the collab-lease sidecar is: remote "origin" is a local path, not a forge; set git config collab.sidecar host:port or COLLAB_SIDECAR`},
		{name: "a bad git config value is not skipped", config: "side example:22", env: "env.example", remote: forge,
			error: `git config collab.sidecar "side example:22": host "side example" is not a host name; expected host:port`},
		{name: "a bad environment value", env: "side.example:ssh", remote: forge,
			error: `COLLAB_SIDECAR "side.example:ssh": port "ssh" is not a port number; expected host:port`},
		{name: "port 0", config: "side.example:0", remote: forge, error: `port "0" is not a port number`},
		{name: "port too large", config: "side.example:65536", remote: forge, error: `port "65536" is not a port number`},
		{name: "a signed port", config: "side.example:+22", remote: forge, error: `port "+22" is not a port number`},
		{name: "an empty host", config: ":2222", remote: forge, error: "no host"},
		{name: "an option for a host", config: "-oProxyCommand=id:22", remote: forge, error: `starts with "-"`},
		{name: "an unbracketed IPv6 address", config: "::1", remote: forge, error: "too many colons"},
		{name: "a URL", config: "ssh://side.example:2222", remote: forge, error: "expected host:port"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := ResolveSidecar(c.config, c.env, "origin", c.remote)
			if c.error != "" {
				if err == nil || !strings.Contains(err.Error(), c.error) {
					t.Fatalf("got %+v, %v; want an error containing %q", s, err, c.error)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Addr() != c.addr || (c.dest != "" && s.Destination() != c.dest) || (c.source != "" && s.Source != c.source) {
				t.Fatalf("got %s %s from %s; want %s %s from %s", s.Addr(), s.Destination(), s.Source, c.addr, c.dest, c.source)
			}
		})
	}
}
