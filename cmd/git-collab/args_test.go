package main

import (
	"strings"
	"testing"
)

func TestParseArgs(t *testing.T) {
	cases := []struct {
		args  string
		want  Invocation
		error string
	}{
		{args: "claim 42", want: Invocation{Verb: "claim", Issue: 42, Remote: "origin"}},
		{args: "claim #42 --ttl 30m", want: Invocation{Verb: "claim", Issue: 42, TTL: "30m", Remote: "origin"}},
		{args: "claim --ttl=300 42 --json", want: Invocation{Verb: "claim", Issue: 42, TTL: "300", Remote: "origin", JSON: true}},
		{args: "--remote upstream claim 42", want: Invocation{Verb: "claim", Issue: 42, Remote: "upstream"}},
		{args: "claim 42 --remote=upstream", want: Invocation{Verb: "claim", Issue: 42, Remote: "upstream"}},
		{args: "claim 42 --ttl 1h30m", want: Invocation{Verb: "claim", Issue: 42, TTL: "1h30m", Remote: "origin"}},
		{args: "claim 42 --ttl 2000ms", want: Invocation{Verb: "claim", Issue: 42, TTL: "2000ms", Remote: "origin"}},
		{args: "renew 7 --ttl 2h", want: Invocation{Verb: "renew", Issue: 7, TTL: "2h", Remote: "origin"}},
		{args: "unclaim 7 --json", want: Invocation{Verb: "unclaim", Issue: 7, Remote: "origin", JSON: true}},
		{args: "claims", want: Invocation{Verb: "claims", Remote: "origin"}},
		{args: "claims --json --remote up", want: Invocation{Verb: "claims", Remote: "up", JSON: true}},
		{args: "claim -- 42", want: Invocation{Verb: "claim", Issue: 42, Remote: "origin"}},
		{args: "claim 9223372036854775807", want: Invocation{Verb: "claim", Issue: 1<<63 - 1, Remote: "origin"}},
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
		{args: "claim 42 --force", error: `unknown option "--force"`},
		{args: "claim 42 --json=yes", error: "takes no value"},
		{args: "claim 42 --man", error: "--man belongs to git collab help"},
	}
	for _, c := range cases {
		got, err := ParseArgs(strings.Fields(c.args))
		if c.error != "" {
			if err == nil || !strings.Contains(err.Error(), c.error) {
				t.Errorf("%q: got %+v, %v; want an error containing %q", c.args, got, err, c.error)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q: got %+v, %v; want %+v", c.args, got, err, c.want)
		}
	}
}
