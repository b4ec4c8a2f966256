package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// Invocation is one parsed command line.
type Invocation struct {
	Verb   string // a name from verbs, or "help"
	Issue  int64  // > 0 for claim, unclaim, renew
	TTL    string // as the user wrote it (already validated); "" for none
	Remote string // default "origin"
	JSON   bool
	Help   bool   // show help for Verb instead of running it
	Topic  string // for `help <verb>`
	Man    bool   // `help --man`: print the manual page
}

// usageError is a mistake on the command line: nothing was sent.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// contractUsage words an error of the contract's grammar as one of ours:
// the same detail the sidecar would print, without its "usage: ".
func contractUsage(err error) error {
	var ue *contract.UsageError
	if errors.As(err, &ue) {
		return &usageError{msg: ue.Detail}
	}
	return err
}

// ParseArgs reads `git collab <verb> [<args>] [options]`. Options may come
// before or after the verb and its arguments, as "--opt value" or
// "--opt=value"; "--" ends the options.
func ParseArgs(args []string) (Invocation, error) {
	inv := Invocation{Remote: "origin"}
	var pos []string
	haveTTL := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		name, value, hasValue := strings.Cut(a, "=")
		takeValue := func() (string, error) {
			if hasValue {
				return value, nil
			}
			if i+1 == len(args) {
				return "", usagef("%s needs a value", name)
			}
			i++
			return args[i], nil
		}
		var err error
		switch name {
		case "-h", "--help":
			if hasValue {
				return inv, usagef("%s takes no value", name)
			}
			inv.Help = true
		case "--json":
			if hasValue {
				return inv, usagef("--json takes no value")
			}
			inv.JSON = true
		case "--man":
			inv.Man = true
		case "--remote":
			if inv.Remote, err = takeValue(); err != nil {
				return inv, err
			}
			if inv.Remote == "" || strings.HasPrefix(inv.Remote, "-") {
				return inv, usagef("--remote needs a remote name, got %s", quote(inv.Remote))
			}
		case "--ttl":
			if haveTTL {
				return inv, usagef("--ttl given more than once")
			}
			haveTTL = true
			if inv.TTL, err = takeValue(); err != nil {
				return inv, err
			}
			// Checked as the sidecar checks it, except for its maximum,
			// which only the sidecar knows.
			if _, err := contract.ParseTTL(inv.TTL, 0); err != nil {
				return inv, contractUsage(err)
			}
		default:
			if len(a) > 1 && isDigit(a[1]) {
				return inv, usagef("issue must be a positive number, got %s", quote(a))
			}
			return inv, usagef("unknown option %s; see git collab -h", quote(a))
		}
	}

	if len(pos) == 0 {
		if inv.Help {
			inv.Verb = "help"
			return inv, nil
		}
		return inv, usagef("missing command; see git collab -h")
	}
	inv.Verb, pos = pos[0], pos[1:]
	if inv.Verb == "help" {
		if len(pos) > 1 {
			return inv, usagef("help takes at most one command, got %s", quote(pos[1]))
		}
		if len(pos) == 1 {
			if findVerb(pos[0]) == nil {
				return inv, usagef("no command %s; see git collab -h", quote(pos[0]))
			}
			inv.Topic = pos[0]
		}
		return inv, nil
	}
	v := findVerb(inv.Verb)
	if v == nil {
		return inv, usagef("unknown command %s; see git collab -h", quote(inv.Verb))
	}
	if inv.Man {
		return inv, usagef("--man belongs to git collab help")
	}
	if inv.Help {
		return inv, nil // the rest of the line does not matter
	}
	if haveTTL && !v.ttl {
		return inv, usagef("%s takes no --ttl; usage: %s", v.name, v.synopsis)
	}
	if v.ttlRequired && !haveTTL {
		return inv, usagef("%s needs --ttl <dur>; usage: %s", v.name, v.synopsis)
	}
	want := 0
	if v.issue {
		want = 1
	}
	if len(pos) > want {
		return inv, usagef("unexpected argument %s; usage: %s", quote(pos[want]), v.synopsis)
	}
	if len(pos) < want {
		return inv, usagef("%s needs an issue number; usage: %s", v.name, v.synopsis)
	}
	if v.issue {
		var err error
		if inv.Issue, err = contract.ParseIssue(pos[0]); err != nil {
			return inv, contractUsage(err)
		}
	}
	return inv, nil
}
