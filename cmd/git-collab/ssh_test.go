package main

import (
	"os/exec"
	"reflect"
	"testing"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

func TestResolveSSH(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		core string
		want SSHCommand
	}{
		{"COLLAB_SSH_COMMAND first", map[string]string{"COLLAB_SSH_COMMAND": "ssh -i a", "GIT_SSH_COMMAND": "ssh -i b", "GIT_SSH": "plink"}, "ssh -i c",
			SSHCommand{Shell: "ssh -i a", Source: "COLLAB_SSH_COMMAND"}},
		{"then GIT_SSH_COMMAND", map[string]string{"GIT_SSH_COMMAND": "ssh -i b", "GIT_SSH": "plink"}, "ssh -i c",
			SSHCommand{Shell: "ssh -i b", Source: "GIT_SSH_COMMAND"}},
		{"then core.sshCommand", map[string]string{"GIT_SSH": "/opt/ssh"}, "ssh -i c",
			SSHCommand{Shell: "ssh -i c", Source: "git config core.sshCommand"}},
		{"then GIT_SSH, a program", map[string]string{"GIT_SSH": "/opt/my ssh"}, "",
			SSHCommand{Program: "/opt/my ssh", Source: "GIT_SSH"}},
		{"else ssh", nil, "", SSHCommand{Program: "ssh", Source: "ssh"}},
		{"empty values are unset", map[string]string{"COLLAB_SSH_COMMAND": "", "GIT_SSH_COMMAND": ""}, "",
			SSHCommand{Program: "ssh", Source: "ssh"}},
	}
	for _, c := range cases {
		asked := false
		got := ResolveSSH(func(k string) string { return c.env[k] }, func() string { asked = true; return c.core })
		if got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
		if asked && (c.env["COLLAB_SSH_COMMAND"] != "" || c.env["GIT_SSH_COMMAND"] != "") {
			t.Errorf("%s: read git config although the environment answered", c.name)
		}
	}
}

func TestSSHCommandArgs(t *testing.T) {
	shell := SSHCommand{Shell: "ssh -i 'my key'"}
	if got, want := shell.Args("-p", "2222", "git@h", "cmd"), []string{"sh", "-c", `ssh -i 'my key' "$@"`, "ssh", "-p", "2222", "git@h", "cmd"}; !reflect.DeepEqual(got, want) {
		t.Errorf("shell: %q", got)
	}
	prog := SSHCommand{Program: "/opt/my ssh"}
	if got, want := prog.Args("-p", "2222", "git@h", "cmd"), []string{"/opt/my ssh", "-p", "2222", "git@h", "cmd"}; !reflect.DeepEqual(got, want) {
		t.Errorf("program: %q", got)
	}
}

func TestRemoteCommand(t *testing.T) {
	for _, c := range []struct {
		verb      contract.Verb
		repo      string
		issue     int64
		ttl, want string
	}{
		{contract.VerbAcquire, "acme/widgets", 42, "30m", "collab-lease acquire 'acme/widgets' '42' --ttl '30m'"},
		{contract.VerbAcquire, "acme/widgets", 42, "", "collab-lease acquire 'acme/widgets' '42'"},
		{contract.VerbRenew, "acme/widgets", 7, "7200", "collab-lease renew 'acme/widgets' '7' --ttl '7200'"},
		{contract.VerbRelease, "a/b", 1, "", "collab-lease release 'a/b' '1'"},
		{contract.VerbList, "acme/widgets", 0, "", "collab-lease list 'acme/widgets'"},
	} {
		got := RemoteCommand(c.verb, c.repo, c.issue, c.ttl)
		if got != c.want {
			t.Errorf("got %s, want %s", got, c.want)
		}
		// The sidecar's grammar reads it as meant.
		cmd, err := contract.ParseCommand(got, 0)
		if err != nil || cmd.Verb != c.verb || cmd.Repo() != c.repo || cmd.Issue != c.issue {
			t.Errorf("%s parses to %+v, %v", got, cmd, err)
		}
	}
}

// A quoted word reaches a POSIX shell as exactly itself.
func TestShellQuoteRoundTrip(t *testing.T) {
	for _, s := range []string{"acme/widgets", "it's", "''", `a"b\c$d` + "`e`", "a b\tc", "$(id)", "#42", "-x", "ü"} {
		out, err := exec.Command("sh", "-c", "printf '%s' "+shellQuote(s)).Output()
		if err != nil || string(out) != s {
			t.Errorf("%q came back as %q (%v)", s, out, err)
		}
	}
}
