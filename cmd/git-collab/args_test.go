package main

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// parseArgsCases are command lines (split at spaces) and what ParseArgs
// makes of them: an Invocation, or an error containing error.
var parseArgsCases = []struct {
	args  string
	want  Invocation
	error string
}{
	{args: "claim 42", want: Invocation{Verb: "claim", Issue: 42, Remote: "origin"}},
	{args: "claim #42 --ttl 30m", want: Invocation{Verb: "claim", Issue: 42, Flags: []Flag{{"--ttl", "30m"}}, Remote: "origin"}},
	{args: "claim --ttl=300 42 --json", want: Invocation{Verb: "claim", Issue: 42, Flags: []Flag{{"--ttl", "300"}}, Remote: "origin", JSON: true}},
	{args: "--remote upstream claim 42", want: Invocation{Verb: "claim", Issue: 42, Remote: "upstream"}},
	{args: "claim 42 --remote=upstream", want: Invocation{Verb: "claim", Issue: 42, Remote: "upstream"}},
	{args: "claim 42 --ttl 1h30m", want: Invocation{Verb: "claim", Issue: 42, Flags: []Flag{{"--ttl", "1h30m"}}, Remote: "origin"}},
	{args: "claim 42 --ttl 2000ms", want: Invocation{Verb: "claim", Issue: 42, Flags: []Flag{{"--ttl", "2000ms"}}, Remote: "origin"}},
	{args: "renew 7 --ttl 2h", want: Invocation{Verb: "renew", Issue: 7, Flags: []Flag{{"--ttl", "2h"}}, Remote: "origin"}},
	{args: "unclaim 7 --json", want: Invocation{Verb: "unclaim", Issue: 7, Remote: "origin", JSON: true}},
	{args: "claims", want: Invocation{Verb: "claims", Remote: "origin"}},
	{args: "claims --json --remote up", want: Invocation{Verb: "claims", Remote: "up", JSON: true}},
	{args: "claim -- 42", want: Invocation{Verb: "claim", Issue: 42, Remote: "origin"}},
	{args: "claim 9223372036854775807", want: Invocation{Verb: "claim", Issue: 1<<63 - 1, Remote: "origin"}},
	// The agent verbs, and the flags they send on.
	{args: "next", want: Invocation{Verb: "next", Remote: "origin"}},
	{args: "next --label bug --label=ui --pulls --ttl 30m --json", want: Invocation{Verb: "next", Remote: "origin", JSON: true,
		Flags: []Flag{{"--label", "bug"}, {"--label", "ui"}, {"--pulls", ""}, {"--ttl", "30m"}}}},
	{args: "--label -odd next", want: Invocation{Verb: "next", Remote: "origin", Flags: []Flag{{"--label", "-odd"}}}},
	{args: "claim 42 --wait 5m --ttl 30m", want: Invocation{Verb: "claim", Issue: 42, Remote: "origin", Flags: []Flag{{"--wait", "5m"}, {"--ttl", "30m"}}}},
	{args: "claim 42 --wait=300", want: Invocation{Verb: "claim", Issue: 42, Remote: "origin", Flags: []Flag{{"--wait", "300"}}}},
	{args: "check #7 --token 3", want: Invocation{Verb: "check", Issue: 7, Remote: "origin", Flags: []Flag{{"--token", "3"}}}},
	{args: "check --token=9223372036854775807 7", want: Invocation{Verb: "check", Issue: 7, Remote: "origin", Flags: []Flag{{"--token", "9223372036854775807"}}}},
	{args: "history 7", want: Invocation{Verb: "history", Issue: 7, Remote: "origin"}},
	{args: "history 7 --limit 200", want: Invocation{Verb: "history", Issue: 7, Remote: "origin", Flags: []Flag{{"--limit", "200"}}}},
	{args: "unclaim 7 --force", want: Invocation{Verb: "unclaim", Issue: 7, Remote: "origin", Flags: []Flag{{"--force", ""}}}},
	{args: "check --help", want: Invocation{Verb: "check", Remote: "origin", Help: true}},
	{args: "merge 7", want: Invocation{Verb: "merge", Issue: 7, Remote: "origin"}},
	{args: "merge #7 --token 3 --style squash --delete-branch --wait 5m --agent a-1 --json", want: Invocation{Verb: "merge", Issue: 7, Remote: "origin", JSON: true,
		Flags: []Flag{{"--token", "3"}, {"--style", "squash"}, {"--delete-branch", ""}, {"--wait", "5m"}, {"--agent", "a-1"}}}},
	{args: "merge --style=fast-forward-only 7", want: Invocation{Verb: "merge", Issue: 7, Remote: "origin", Flags: []Flag{{"--style", "fast-forward-only"}}}},
	// The reservations: globs as given (fromRoot reads them from the root).
	{args: "reserve src/auth/** docs/ --issue 42 --shared", want: Invocation{Verb: "reserve", Remote: "origin", Globs: []string{"src/auth/**", "docs/"},
		Flags: []Flag{{"--issue", "42"}, {"--shared", ""}}}},
	{args: "reserve --ttl 1h ../lib/* :/docs/", want: Invocation{Verb: "reserve", Remote: "origin", Globs: []string{"../lib/*", ":/docs/"}, Flags: []Flag{{"--ttl", "1h"}}}},
	{args: "unreserve", want: Invocation{Verb: "unreserve", Remote: "origin"}},
	{args: "unreserve src/** --force --json", want: Invocation{Verb: "unreserve", Remote: "origin", Globs: []string{"src/**"}, Flags: []Flag{{"--force", ""}}, JSON: true}},
	{args: "reservations --path src/a.go", want: Invocation{Verb: "reservations", Remote: "origin", Flags: []Flag{{"--path", "src/a.go"}}}},
	// mcp sends nothing itself: it takes only the remote.
	{args: "mcp", want: Invocation{Verb: "mcp", Remote: "origin"}},
	{args: "mcp --remote upstream", want: Invocation{Verb: "mcp", Remote: "upstream"}},
	{args: "mcp --json", error: "mcp takes no --json; usage: git collab mcp [--agent <name>] [--grace <dur>] [--remote <name>]"},
	{args: "mcp --ttl 30m", error: "mcp takes no --ttl"},
	{args: "mcp 42", error: `unexpected argument "42"`},
	// Help, in every spelling.
	{args: "help", want: Invocation{Verb: "help", Remote: "origin"}},
	{args: "-h", want: Invocation{Verb: "help", Remote: "origin", Help: true}},
	{args: "--help", want: Invocation{Verb: "help", Remote: "origin", Help: true}},
	{args: "help claim", want: Invocation{Verb: "help", Topic: "claim", Remote: "origin"}},
	{args: "help --man", want: Invocation{Verb: "help", Remote: "origin", Man: true}},
	{args: "claim --help", want: Invocation{Verb: "claim", Remote: "origin", Help: true}},
	{args: "renew -h", want: Invocation{Verb: "renew", Remote: "origin", Help: true}},
	{args: "claim oops --help", want: Invocation{Verb: "claim", Remote: "origin", Help: true}},

	{args: "", error: "missing command"},
	{args: "grab 42", error: `unknown command "grab"`},
	{args: "help grab", error: `no command "grab"`},
	{args: "help claim renew", error: "at most one command"},
	{args: "claim", error: "claim needs an issue number"},
	{args: "claim 42 43", error: `unexpected argument "43"`},
	{args: "claims 42", error: `unexpected argument "42"`},
	{args: "claim 0", error: "positive number"},
	{args: "claim 042", error: `issue must not have a leading zero, got "042"`},
	{args: "claim -5", error: "positive number"},
	{args: "claim +5", error: "positive number"},
	{args: "claim 4x", error: "positive number"},
	{args: "claim ##4", error: "positive number"},
	{args: "claim '4'", error: "positive number"},
	{args: "claim 9223372036854775808", error: "too large"},
	{args: "claim 42 --ttl", error: "--ttl needs a value"},
	{args: "claim 42 --ttl 0", error: "at least 1"},
	{args: "claim 42 --ttl 500ms", error: "at least 1s"},
	{args: "claim 42 --ttl 1.5s", error: "whole number of seconds"},
	{args: "claim 42 --ttl -5m", error: `--ttl "-5m" must be at least 1s`},
	{args: "claim 42 --ttl +5m", error: "not a duration"},
	{args: "claim 42 --ttl 5x", error: "not a duration"},
	{args: "claim 42 --ttl 5m;id", error: "not a duration"},
	{args: "claim 42 --ttl 1m --ttl 2m", error: "more than once"},
	{args: "renew 42", error: "renew needs --ttl"},
	{args: "unclaim 42 --ttl 5m", error: "unclaim takes no --ttl"},
	{args: "claims --ttl 5m", error: "claims takes no --ttl"},
	{args: "claim 42 --remote", error: "--remote needs a value"},
	{args: "claim 42 --remote=", error: "--remote needs a remote name"},
	{args: "claim 42 --remote -x", error: "--remote needs a remote name"},
	{args: "claim 42 --force", error: "claim takes no --force; usage: git collab claim <issue> [--ttl <dur>] [--wait <dur>] [--agent <name>] [--remote <name>] [--json]"},
	{args: "claim 42 --frobnicate", error: `unknown option "--frobnicate"`},
	{args: "claim 42 --json=yes", error: "takes no value"},
	{args: "claim 42 --man", error: "--man belongs to git collab help"},

	// What the sidecar would refuse, refused in its words, before
	// anything is sent.
	{args: "claim 42 --wait", error: "--wait needs a value"},
	{args: "claim 42 --wait 0", error: `--wait "0" must be at least 1s`},
	{args: "claim 42 --wait soon", error: `--wait "soon" is not a duration; use whole seconds (300) or a Go duration (90s, 30m, 2h)`},
	{args: "claim 42 --wait=", error: "--wait is empty; use whole seconds (300) or a Go duration (90s, 30m, 2h)"},
	{args: "claim 42 --wait 1m --wait 2m", error: "--wait given more than once"},
	{args: "renew 42 --wait 5m --ttl 5m", error: "renew takes no --wait"},
	{args: "next 42", error: `unexpected argument "42"; usage: git collab next [--label <name>]...`},
	{args: "next --wait 0", error: `--wait "0" must be at least 1s`},
	{args: "next --label", error: "--label needs a value"},
	{args: "next --label=", error: "--label is empty; expected a label name"},
	{args: "next --label a,b", error: `--label "a,b" may not contain a comma; give --label once per label`},
	{args: "next" + strings.Repeat(" --label x", 11), error: "--label given more than 10 times"},
	{args: "next --label " + strings.Repeat("l", 256), error: "is longer than 255 bytes"},
	{args: "next --pulls --pulls", error: "--pulls given more than once"},
	{args: "next --pulls=yes", error: "--pulls takes no value"},
	{args: "next --ttl 0", error: `--ttl "0" must be at least 1s`},
	{args: "check 7", error: "check needs --token <n>; usage: git collab check [<issue> --token <n>] [--agent <name>] [--remote <name>] [--json]"},
	{args: "check --token 3", error: "check needs an issue number"},
	{args: "check 7 --token", error: "--token needs a value"},
	{args: "check 7 --token 0", error: `--token must be a positive number, got "0"`}, // the sidecar's words
	{args: "check 7 --token 03", error: `--token must not have a leading zero, got "03"`},
	{args: "check 7 --token -3", error: `--token must be a positive number, got "-3"`},
	{args: "check 7 --token=", error: `--token must be a positive number, got ""`},
	{args: "check 7 --token 9223372036854775808", error: `--token "9223372036854775808" is more than the maximum of 9223372036854775807`},
	{args: "check 7 --token 3 --token 4", error: "--token given more than once"},
	{args: "history 7 --limit 0", error: `--limit must be a positive number, got "0"`},
	{args: "history 7 --limit 201", error: `--limit "201" is more than the maximum of 200`},
	{args: "history 7 --limit ten", error: `--limit must be a positive number, got "ten"`},
	{args: "history", error: "history needs an issue number"},
	{args: "history 7 --ttl 5m", error: "history takes no --ttl"},
	{args: "unclaim 7 --force=yes", error: "--force takes no value"},
	{args: "merge", error: "merge needs a pull request number; usage: git collab merge <pull> [--token <n>]"},
	{args: "merge 7 8", error: `unexpected argument "8"`},
	{args: "merge 07", error: `pull request must not have a leading zero, got "07"`},
	{args: "merge x", error: `pull request must be a positive number like 42 or #42, got "x"`},
	{args: "merge 7 --style octopus", error: `--style must be one of merge, rebase, rebase-merge, squash, fast-forward-only, got "octopus"`},
	{args: "merge 7 --style", error: "--style needs a value"},
	{args: "merge 7 --delete-branch=yes", error: "--delete-branch takes no value"},
	{args: "merge 7 --token 0", error: `--token must be a positive number, got "0"`},
	{args: "merge 7 --wait 1.5s", error: `--wait "1.5s" must be a whole number of seconds`},
	{args: "merge 7 --ttl 5m", error: "merge takes no --ttl"},
	{args: "claim 7 --style squash", error: "claim takes no --style"},
	{args: "check 7 --token 3 --delete-branch", error: "check takes no --delete-branch"},
	{args: "claims --force", error: "claims takes no --force"},
	{args: "reserve", error: "reserve needs <glob>...; usage: git collab reserve <glob>... [--issue <n>]"},
	{args: "reserve --issue 4", error: "reserve needs <glob>..."},
	{args: "reserve src/** --issue 4 --ttl 1h", error: "--issue and --ttl both given"},
	{args: "reserve /etc --ttl 1h", error: `glob "/etc" starts with /`},
	{args: "reserve --ttl=1h -- -odd", error: `unknown flag "-odd"`}, // the sidecar's grammar takes no word starting with "-" for a glob
	{args: "reserve src/** --issue 04", error: `issue must not have a leading zero, got "04"`},
	{args: "reserve src/** --shared=yes", error: "--shared takes no value"},
	{args: "reserve src/** --path x", error: "reserve takes no --path"},
	{args: "unreserve --shared", error: "unreserve takes no --shared"},
	{args: "reservations src/**", error: `unexpected argument "src/**"; usage: git collab reservations [--path <path>]`},
	{args: "reservations --path", error: "--path needs a value"},
	{args: "reservations --path /a", error: `--path "/a" starts with /`},
	{args: "claim 42 --reserve src/**", error: "claim takes no --reserve"},
	{args: "claim 42 --issue 4", error: "claim takes no --issue"},
}

func TestParseArgs(t *testing.T) {
	for _, c := range parseArgsCases {
		got, err := ParseArgs(strings.Fields(c.args))
		if c.error != "" {
			if err == nil || !strings.Contains(err.Error(), c.error) {
				t.Errorf("%q: got %+v, %v; want an error containing %q", c.args, got, err, c.error)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: got %+v, %v; want %+v", c.args, got, err, c.want)
		}
	}
}

// A value the sidecar would refuse is refused with the sidecar's own words.
func TestFlagErrorsAreTheSidecars(t *testing.T) {
	for _, c := range []struct{ args, line string }{
		{"claim 042", "collab-lease acquire acme/widgets 042"},
		{"claim 7 --ttl 1.5s", "collab-lease acquire acme/widgets 7 --ttl 1.5s"},
		{"claim 7 --ttl 1m --ttl=2m", "collab-lease acquire acme/widgets 7 --ttl 1m --ttl 2m"},
		{"claim 7 --wait 0", "collab-lease acquire acme/widgets 7 --wait 0"},
		{"claim 7 --wait=", "collab-lease acquire acme/widgets 7 --wait="},
		{"next --ttl soon", "collab-lease next acme/widgets --ttl soon"},
		{"next --label=", "collab-lease next acme/widgets --label="},
		{"next --label a,b", "collab-lease next acme/widgets --label a,b"},
		{"next" + strings.Repeat(" --label x", 11), "collab-lease next acme/widgets" + strings.Repeat(" --label x", 11)},
		{"next --pulls --pulls", "collab-lease next acme/widgets --pulls --pulls"},
		{"check 7 --token 3x", "collab-lease check acme/widgets 7 --token 3x"},
		{"check 7 --token=", "collab-lease check acme/widgets 7 --token="},
		{"check 7 --token 99999999999999999999", "collab-lease check acme/widgets 7 --token 99999999999999999999"},
		{"history 7 --limit 201", "collab-lease history acme/widgets 7 --limit 201"},
		{"history 7 --limit 007", "collab-lease history acme/widgets 7 --limit 007"},
	} {
		_, err := ParseArgs(strings.Fields(c.args))
		_, serverErr := contract.ParseCommand(c.line, 0)
		if err == nil || serverErr == nil || serverErr.Error() != "usage: "+err.Error() {
			t.Errorf("%q: git collab says %v; the sidecar says %v", c.args, err, serverErr)
		}
	}
}

// FuzzParseArgs checks that whatever command line ParseArgs accepts, the
// sidecar's grammar reads as meant, and that whatever it refuses is a
// usage error of one line. Arguments are separated by NUL, which no
// argument can hold.
func FuzzParseArgs(f *testing.F) {
	for _, c := range parseArgsCases {
		f.Add(strings.Join(strings.Fields(c.args), "\x00"))
	}
	f.Add("next\x00--label\x00good first issue\x00--label=it's\x00--pulls")
	f.Add("check\x007\x00--token\x003\x00--token\x00'4'")
	f.Add("next\x00--label\x00a\nb")
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Split(line, "\x00")
		inv, err := ParseArgs(args)
		if err != nil {
			var ue *usageError
			if !errors.As(err, &ue) || strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("%q: error %q (%T)", args, err, err)
			}
			return
		}
		if inv.Verb == "help" || inv.Help {
			return
		}
		v := findVerb(inv.Verb)
		if v == nil {
			t.Fatalf("%q: accepted unknown command %q", args, inv.Verb)
		}
		if v.remote == "" { // mcp: nothing for the sidecar but the remote
			if inv.Issue != 0 || inv.Flags != nil || inv.JSON {
				t.Fatalf("%q: mcp accepted %+v", args, inv)
			}
			return
		}
		if v.name == "check" && inv.Issue == 0 {
			return // the run's claim: COLLAB_ISSUE and COLLAB_TOKEN name it, at run time
		}
		// Read from the root; one above it here is for where git collab
		// runs to decide.
		globs, err := rootGlobs("", inv.Globs)
		if err != nil {
			return
		}
		flags := slices.Clone(inv.Flags)
		for i, fl := range flags {
			if fl.Name == "--path" {
				if flags[i].Value, err = rootPath("", fl.Value, false); err != nil {
					return
				}
			}
		}
		sent, cmd, err := RemoteCommand(v.remote, "acme/widgets", inv.Issue, flags, globs...)
		if err != nil {
			t.Fatalf("%q: accepted, but the command for the sidecar fails: %v", args, err)
		}
		if strings.ContainsAny(sent, "\n\r\x00") {
			t.Fatalf("%q: sends %q", args, sent)
		}
		if cmd.Verb != v.remote || cmd.Repo() != "acme/widgets" || (inv.Issue > 0) != (v.issue || v.pull) || inv.Issue > 0 && cmd.Issue != inv.Issue {
			t.Fatalf("%q: the sidecar reads %+v", args, cmd)
		}
		for _, g := range cmd.Globs {
			if !slices.Contains(globs, g) {
				t.Fatalf("%q: the sidecar reads the glob %q, not one of %q", args, g, globs)
			}
		}
		var labels []string
		pulls, force, deleteBranch := false, false, false
		for _, fl := range inv.Flags {
			if !v.takes(fl.Name) {
				t.Fatalf("%q: %s sends %s", args, v.name, fl.Name)
			}
			switch fl.Name {
			case "--label":
				labels = append(labels, fl.Value)
			case "--pulls":
				pulls = true
			case "--force":
				force = true
			case "--delete-branch":
				deleteBranch = true
			}
		}
		if !reflect.DeepEqual(cmd.Labels, labels) || cmd.Pulls != pulls || cmd.Force != force || cmd.DeleteBranch != deleteBranch {
			t.Fatalf("%q: the sidecar reads %+v", args, cmd)
		}
	})
}
