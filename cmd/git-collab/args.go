package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// Invocation is one parsed command line.
type Invocation struct {
	Verb   string   // a name from verbs, or "help"
	Issue  int64    // > 0 for the commands that take <issue> (merge: <pull>)
	Globs  []string // reserve's and unreserve's <glob>..., from where git collab runs (fromRoot)
	Flags  []Flag   // the options that travel to the sidecar, in the order given
	Remote string   // default "origin"
	Repo   string   // owner/name, when not the remote's (check under run)
	JSON   bool
	Help   bool   // show help for Verb instead of running it
	Topic  string // for `help <verb>`
	Man    bool   // `help --man`: print the manual page
	// Run and mcp only: Next is run --next, Grace the session's --grace
	// ("" the sidecar's default), Command the command run runs.
	Next    bool
	Grace   string
	Command []string
	// Reserve are run's --reserve globs, as Globs are given.
	Reserve []string
}

// Flag is an option that travels to the sidecar as the collab-lease flag
// of the same name, with its value as the user wrote it ("" for a flag
// without one). Its value is checked by the sidecar's own grammar (see
// RemoteCommand), not here.
type Flag struct{ Name, Value string }

// option is one option of git collab, for parsing and for help.
type option struct {
	name string // "--ttl"; for help only, the spelling "-h, --help"
	meta string // the placeholder of its value ("<dur>"), "" if it takes none
	text string
	// sidecar: the option is the collab-lease flag of the same name, and
	// only the commands whose verb.flags name it take it.
	sidecar bool
	// session: an option of run and mcp themselves, not of the commands
	// they send; only the commands whose verb.flags name it take it.
	session bool
}

// scoped reports whether only the commands whose verb.flags name o take it.
func (o option) scoped() bool { return o.sidecar || o.session }

// options are every option of git collab, in the order help lists them.
// An option named as a flag of the contract's grammar takes its
// placeholder from there (withMetas), unless it names a shorter one for
// the list (the synopses keep the grammar's).
var options = withMetas([]option{
	{name: "--ttl", sidecar: true, text: "length of a claim or reservation: 300 (seconds), 30m, 2h"},
	{name: "--wait", sidecar: true, text: "claim, next, merge: wait up to <dur> for a claim or a turn"},
	{name: "--label", sidecar: true, text: "next: only issues with this label (repeat: with all of them)"},
	{name: "--pulls", sidecar: true, text: "next: pull requests instead of issues"},
	{name: "--oldest", sidecar: true, text: "next: the oldest issue, whatever the priority labels"},
	{name: "--token", sidecar: true, text: "check, merge: the token your claim was given"},
	{name: "--style", meta: "<style>", sidecar: true, text: "merge: how Gitea merges (default merge)"},
	{name: "--delete-branch", sidecar: true, text: "merge: delete the pull request's branch once merged"},
	{name: "--limit", sidecar: true, text: "history: show at most <n> claims (default 20, at most 200)"},
	{name: "--force", sidecar: true, text: "unclaim, unreserve: end someone else's (repository admins)"},
	{name: "--issue", sidecar: true, text: "reserve, unreserve: the reservations of your claim on <n>"},
	{name: "--shared", sidecar: true, text: "reserve: meets only others' exclusive reservations"},
	{name: "--path", sidecar: true, text: "reservations: only those whose glob matches <path>"},
	{name: "--to", sidecar: true, text: "handoff: whom the claim goes to"},
	{name: "--agent", sidecar: true, text: "act as this agent of your account (default COLLAB_AGENT)"},
	{name: "--next", session: true, text: "run: claim the next issue instead of <issue>"},
	{name: "--grace", session: true, text: "run, mcp: claims outlive a lost connection this long (30s)"},
	{name: "--reserve", meta: "<glob>", session: true, text: "run: reserve <glob> with the claim (repeat for more)"},
	{name: "--remote", meta: "<name>", text: "the remote whose URL names the repository (default origin)"},
	{name: "--json", text: "print the sidecar's JSON reply unchanged, nothing else"},
	{name: "-h, --help", text: "show help"},
})

// withMetas gives each option that is a flag of the contract's grammar,
// and names no placeholder of its own, the grammar's placeholder of its
// value.
func withMetas(opts []option) []option {
	for i := range opts {
		if meta, ok := contract.FlagMeta(opts[i].name); ok && opts[i].meta == "" {
			opts[i].meta = meta
		}
	}
	return opts
}

// sidecarOption is the option that travels to the sidecar under name, or nil.
func sidecarOption(name string) *option {
	for i := range options {
		if options[i].sidecar && options[i].name == name {
			return &options[i]
		}
	}
	return nil
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

// checkRepo stands in for the repository when ParseArgs checks a command
// against the sidecar's grammar before git has named the repository. Any
// name ParseRemoteURL accepts passes the grammar as this one does, and no
// rule for the other words depends on it, so the check says what the
// sidecar would say of the real command.
const checkRepo = "owner/repo"

// ParseArgs reads `git collab <verb> [<args>] [options]`. Options may come
// before or after the verb and its arguments, as "--opt value" or
// "--opt=value"; "--" ends the options.
//
// Which command takes which option, and how many arguments, is checked
// here, in git collab's words; the values of the options that travel to
// the sidecar are checked by the sidecar's own grammar, so a mistake reads
// exactly as the sidecar would report it, and nothing is sent.
func ParseArgs(args []string) (Invocation, error) {
	inv := Invocation{Remote: "origin"}
	var pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			if len(pos) > 0 && pos[0] == "run" {
				inv.Command = args[i+1:]
			} else {
				pos = append(pos, args[i+1:]...)
			}
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
		case "--next":
			if hasValue {
				return inv, usagef("--next takes no value")
			}
			inv.Next = true
		case "--grace":
			if inv.Grace != "" {
				return inv, usagef("--grace given more than once")
			}
			if inv.Grace, err = takeValue(); err != nil {
				return inv, err
			}
			if inv.Grace == "" {
				return inv, usagef("--grace is empty; use whole seconds (30) or a Go duration (30s, 2m)")
			}
		case "--reserve":
			var g string
			if g, err = takeValue(); err != nil {
				return inv, err
			}
			inv.Reserve = append(inv.Reserve, g)
		case "--remote":
			if inv.Remote, err = takeValue(); err != nil {
				return inv, err
			}
			if inv.Remote == "" || strings.HasPrefix(inv.Remote, "-") {
				return inv, usagef("--remote needs a remote name, got %s", quote(inv.Remote))
			}
		default:
			o := sidecarOption(name)
			switch {
			case o == nil && len(a) > 1 && isDigit(a[1]):
				return inv, usagef("issue must be a positive number, got %s", quote(a))
			case o == nil:
				return inv, usagef("unknown option %s; see git collab -h", quote(a))
			case o.meta == "" && hasValue:
				return inv, usagef("%s takes no value", name)
			case o.meta == "":
				inv.Flags = append(inv.Flags, Flag{Name: name})
			default:
				if value, err = takeValue(); err != nil {
					return inv, err
				}
				inv.Flags = append(inv.Flags, Flag{Name: name, Value: value})
			}
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
	given := map[string]bool{}
	for _, f := range inv.Flags {
		if !v.takes(f.Name) {
			return inv, usagef("%s takes no %s; usage: %s", v.name, f.Name, v.synopsis)
		}
		given[f.Name] = true
	}
	for name, set := range map[string]bool{"--next": inv.Next, "--grace": inv.Grace != "", "--reserve": len(inv.Reserve) > 0} {
		if set && !v.takes(name) {
			return inv, usagef("%s takes no %s; usage: %s", v.name, name, v.synopsis)
		}
	}
	if inv.Grace != "" {
		if err := checkGrace(inv.Grace); err != nil {
			return inv, err
		}
	}
	if v.name == "run" {
		return parseRun(inv, v, pos)
	}
	if v.name == "check" && len(pos) == 0 && !given["--token"] {
		return inv, nil // COLLAB_ISSUE and COLLAB_TOKEN say which
	}
	if v.required != "" && !given[v.required] {
		return inv, usagef("%s needs %s %s; usage: %s", v.name, v.required, sidecarOption(v.required).meta, v.synopsis)
	}
	want, what, parse := 0, "an issue number", contract.ParseIssue
	switch {
	case v.globs:
		if len(pos) == 0 && v.needGlob {
			return inv, usagef("%s needs <glob>...; usage: %s", v.name, v.synopsis)
		}
		if len(pos) > 0 {
			inv.Globs = pos
		}
		return inv, checkRemote(v.remote, inv.Issue, inv.Flags, inv.Globs)
	case v.issue:
		want = 1
	case v.pull:
		want, what, parse = 1, "a pull request number", contract.ParsePull
	}
	if len(pos) > want {
		return inv, usagef("unexpected argument %s; usage: %s", quote(pos[want]), v.synopsis)
	}
	if len(pos) < want {
		return inv, usagef("%s needs %s; usage: %s", v.name, what, v.synopsis)
	}
	if want == 1 {
		var err error
		if inv.Issue, err = parse(pos[0]); err != nil {
			return inv, contractUsage(err)
		}
	}
	if v.remote == "" { // mcp: it sends nothing itself
		if inv.JSON {
			return inv, usagef("%s takes no --json; usage: %s", v.name, v.synopsis)
		}
		for _, f := range inv.Flags { // checked now, as the sidecar would
			if _, err := contract.ParseAgent(f.Value); f.Name == "--agent" && err != nil {
				return inv, contractUsage(err)
			}
		}
		return inv, nil
	}
	return inv, checkRemote(v.remote, inv.Issue, inv.Flags, nil)
}

// checkRemote checks the command the sidecar would be sent, with the
// globs and --path read from the repository's root: one that climbs out
// of it with ".." is checked once git says where in the work tree git
// collab runs (fromRoot), which decides whether it leaves the
// repository.
func checkRemote(verb contract.Verb, issue int64, flags []Flag, globs []string) error {
	atRoot := func(p string, glob bool) string {
		if r, err := rootPath("", p, glob); err == nil {
			return r
		}
		return "x"
	}
	rooted := make([]string, len(globs))
	for i, g := range globs {
		rooted[i] = atRoot(g, true)
	}
	flags = slices.Clone(flags)
	for i, f := range flags {
		if f.Name == "--path" {
			flags[i].Value = atRoot(f.Value, false)
		}
	}
	_, _, err := RemoteCommand(verb, checkRepo, issue, flags, rooted...)
	return err
}

// minGrace is the shortest grace the sidecar allows a session.
const minGrace = 5 * time.Second

// checkGrace holds a --grace to what the sidecar accepts, but for its
// maximum (the maximum TTL), which only it knows.
func checkGrace(v string) error {
	d, err := contract.ParseDuration(v, 0)
	if err != nil {
		return usagef("--grace %s is not a duration in whole seconds; use 30, 30s or 2m", quote(v))
	}
	if d < minGrace {
		return usagef("--grace %s is less than the minimum of %s", quote(v), minGrace)
	}
	return nil
}

// parseRun checks the rest of `git collab run`: <issue> or --next, the
// options that go with each, and the command.
func parseRun(inv Invocation, v *verb, pos []string) (Invocation, error) {
	switch {
	case inv.JSON:
		return inv, usagef("run takes no --json; usage: %s", v.synopsis)
	case len(pos) > 1:
		return inv, usagef("unexpected argument %s; the command goes after --; usage: %s", quote(pos[1]), v.synopsis)
	case len(pos) == 1 && inv.Next:
		return inv, usagef("run takes <issue> or --next, not both; usage: %s", v.synopsis)
	case len(pos) == 0 && !inv.Next:
		return inv, usagef("run needs <issue> or --next; usage: %s", v.synopsis)
	case len(inv.Command) == 0:
		return inv, usagef("run needs a command after --; usage: %s", v.synopsis)
	}
	verb := contract.VerbNext
	if !inv.Next {
		verb = contract.VerbAcquire
		var err error
		if inv.Issue, err = contract.ParseIssue(pos[0]); err != nil {
			return inv, contractUsage(err)
		}
	}
	for _, f := range inv.Flags {
		switch {
		case (f.Name == "--label" || f.Name == "--pulls") && !inv.Next:
			return inv, usagef("%s goes with --next; usage: %s", f.Name, v.synopsis)
		}
	}
	if err := checkRemote(verb, inv.Issue, inv.Flags, nil); err != nil {
		return inv, err
	}
	if len(inv.Reserve) > 0 {
		// As run will send them, with --issue once it knows the issue.
		return inv, checkRemote(contract.VerbReserve, 0, []Flag{{Name: "--issue", Value: "1"}}, inv.Reserve)
	}
	return inv, nil
}
