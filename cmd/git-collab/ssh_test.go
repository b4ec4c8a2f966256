package main

import (
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

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
		verb  contract.Verb
		repo  string
		issue int64
		flags []Flag
		want  string
	}{
		{contract.VerbAcquire, "acme/widgets", 42, []Flag{{"--ttl", "30m"}}, "collab-lease acquire 'acme/widgets' '42' --ttl '30m'"},
		{contract.VerbAcquire, "acme/widgets", 42, nil, "collab-lease acquire 'acme/widgets' '42'"},
		{contract.VerbAcquire, "acme/widgets", 42, []Flag{{"--wait", "5m"}, {"--ttl", "1h"}}, "collab-lease acquire 'acme/widgets' '42' --wait '5m' --ttl '1h'"},
		{contract.VerbRenew, "acme/widgets", 7, []Flag{{"--ttl", "7200"}}, "collab-lease renew 'acme/widgets' '7' --ttl '7200'"},
		{contract.VerbRelease, "a/b", 1, nil, "collab-lease release 'a/b' '1'"},
		{contract.VerbRelease, "a/b", 1, []Flag{{"--force", ""}}, "collab-lease release 'a/b' '1' --force"},
		{contract.VerbList, "acme/widgets", 0, nil, "collab-lease list 'acme/widgets'"},
		{contract.VerbNext, "acme/widgets", 0, []Flag{{"--label", "good first issue"}, {"--label", "it's"}, {"--pulls", ""}, {"--ttl", "30m"}},
			`collab-lease next 'acme/widgets' --label 'good first issue' --label 'it'\''s' --pulls --ttl '30m'`},
		{contract.VerbCheck, "acme/widgets", 7, []Flag{{"--token", "3"}}, "collab-lease check 'acme/widgets' '7' --token '3'"},
		{contract.VerbHistory, "acme/widgets", 7, nil, "collab-lease history 'acme/widgets' '7'"},
		{contract.VerbHistory, "acme/widgets", 7, []Flag{{"--limit", "5"}}, "collab-lease history 'acme/widgets' '7' --limit '5'"},
	} {
		got, cmd, err := RemoteCommand(c.verb, c.repo, c.issue, c.flags)
		if err != nil || got != c.want {
			t.Errorf("got %s, %v; want %s", got, err, c.want)
		}
		// What it returns is the sidecar's reading of the line.
		if again, err := contract.ParseCommand(got, 0); err != nil || !reflect.DeepEqual(again, cmd) || cmd.Verb != c.verb || cmd.Repo() != c.repo || cmd.Issue != c.issue {
			t.Errorf("%s parses to %+v, %v; RemoteCommand said %+v", got, again, err, cmd)
		}
	}

	// The flags' values arrive as the user wrote them.
	_, cmd, err := RemoteCommand(contract.VerbNext, "acme/widgets", 0, []Flag{{"--label", "good first issue"}, {"--label", "it's"}, {"--pulls", ""}, {"--ttl", "30m"}})
	if err != nil || !reflect.DeepEqual(cmd.Labels, []string{"good first issue", "it's"}) || !cmd.Pulls || cmd.TTL != 30*time.Minute {
		t.Errorf("next: %+v, %v", cmd, err)
	}
	_, cmd, err = RemoteCommand(contract.VerbCheck, "acme/widgets", 7, []Flag{{"--token", "9223372036854775807"}})
	if err != nil || cmd.Token != 1<<63-1 {
		t.Errorf("check: %+v, %v", cmd, err)
	}
	_, cmd, err = RemoteCommand(contract.VerbHistory, "acme/widgets", 7, nil)
	if err != nil || cmd.Limit != contract.DefaultHistoryLimit {
		t.Errorf("history: %+v, %v", cmd, err)
	}

	// A flag ParseArgs never makes is refused, not sent.
	if got, _, err := RemoteCommand(contract.VerbAcquire, "a/b", 1, []Flag{{"--remote", "x"}}); err == nil {
		t.Errorf("sent %s", got)
	}
}

// The client's commands take every flag of their sidecar verbs, and no
// other (docs/agents.md, Commands).
func TestVerbsMirrorTheSidecarsGrammar(t *testing.T) {
	usage := map[contract.Verb]string{}
	for _, line := range strings.Split(contract.Usage, "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			usage[contract.Verb(f[1])] = line
		}
	}
	for _, v := range verbs {
		if v.remote == "" {
			continue // mcp runs the others
		}
		line, ok := usage[v.remote]
		if !ok {
			t.Errorf("%s runs %s, which the sidecar does not know", v.name, v.remote)
			continue
		}
		if strings.Contains(line, "<issue>") != v.issue {
			t.Errorf("%s: takes <issue> %v, but the sidecar's %q", v.name, v.issue, line)
		}
		for _, o := range options {
			if !o.sidecar {
				continue
			}
			inGrammar := strings.Contains(line, " "+o.name+" ") || strings.Contains(line, "["+o.name+" ") || strings.Contains(line, "["+o.name+"]")
			if inGrammar != v.takes(o.name) {
				t.Errorf("%s takes %s: %v; the sidecar's %q", v.name, o.name, v.takes(o.name), line)
			}
			required := strings.Contains(line, " "+o.name+" ") && !strings.Contains(line, "["+o.name)
			if required != (v.required == o.name) {
				t.Errorf("%s requires %s: %v; the sidecar's %q", v.name, o.name, v.required == o.name, line)
			}
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
