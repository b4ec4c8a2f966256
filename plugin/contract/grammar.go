package contract

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The grammar of collab-lease, written once: a row per verb (syntaxes)
// and a row per flag (flagSpecs). ParseCommand reads a command by them;
// Usage, the "expected:" of its error lines and git collab's synopses are
// written from them. A new verb is its constant and one row of syntaxes;
// a new flag, its field of Command and one row of flagSpecs.

// Syntax is one verb's grammar.
type Syntax struct {
	Verb     Verb
	Args     []Arg    // its positional words, in order
	Flags    []string // the flags it takes, in the order Usage shows them
	Required []string // those of Flags it cannot do without
}

// Arg is a positional word of a verb.
type Arg int

// The positional words.
const (
	ArgRepo      Arg = iota // <owner>/<repo>, as ParseRepo reads it
	ArgIssue                // <issue>, as ParseIssue reads it
	ArgPull                 // <pull>, a pull request's number, read as ParseIssue reads an issue's
	ArgGlobs                // <glob>..., one or more path globs as CheckGlob reads them; always last
	ArgSomeGlobs            // [<glob>...], as ArgGlobs but maybe none; always last
)

var (
	repoArgs  = []Arg{ArgRepo}
	issueArgs = []Arg{ArgRepo, ArgIssue}
	pullArgs  = []Arg{ArgRepo, ArgPull}
)

// variadic reports whether a takes every word left (it is the last).
func (a Arg) variadic() bool { return a == ArgGlobs || a == ArgSomeGlobs }

// syntaxes are the verbs, in the order Usage lists them. Help takes
// nothing, and ParseCommand reads it itself.
var syntaxes = []Syntax{
	{VerbAcquire, issueArgs, []string{"--ttl", "--wait", "--agent"}, nil},
	{VerbRenew, issueArgs, []string{"--ttl", "--agent"}, []string{"--ttl"}},
	{VerbRelease, issueArgs, []string{"--force", "--agent"}, nil},
	{VerbList, repoArgs, []string{"--agent"}, nil},
	{VerbNext, repoArgs, []string{"--label", "--pulls", "--oldest", "--ttl", "--wait", "--agent"}, nil},
	{VerbCheck, issueArgs, []string{"--token", "--agent"}, []string{"--token"}},
	{VerbHistory, issueArgs, []string{"--limit", "--agent"}, nil},
	{VerbHandoff, issueArgs, []string{"--to", "--agent"}, []string{"--to"}},
	{VerbMerge, pullArgs, []string{"--token", "--style", "--delete-branch", "--wait", "--agent"}, nil},
	{VerbReserve, []Arg{ArgRepo, ArgGlobs}, []string{"--issue", "--shared", "--ttl", "--agent"}, nil},
	{VerbUnreserve, []Arg{ArgRepo, ArgSomeGlobs}, []string{"--issue", "--force", "--agent"}, nil},
	{VerbReservations, repoArgs, []string{"--path", "--agent"}, nil},
	{VerbSession, nil, []string{"--agent", "--grace", "--resume"}, nil},
	{VerbHelp, nil, nil, nil},
}

// argSpecs say how each Arg is shown in Usage and read into a Command.
var argSpecs = [...]struct {
	meta string
	set  func(c *Command, s string) error
}{
	ArgRepo: {"<owner>/<repo>", func(c *Command, s string) (err error) {
		c.Owner, c.Name, err = ParseRepo(s)
		return err
	}},
	ArgIssue: {"<issue>", func(c *Command, s string) (err error) {
		c.Issue, err = ParseIssue(s)
		return err
	}},
	ArgPull: {"<pull>", func(c *Command, s string) (err error) {
		c.Issue, err = ParsePull(s)
		return err
	}},
	ArgGlobs:     {"<glob>...", addGlob},
	ArgSomeGlobs: {"[<glob>...]", addGlob},
}

// addGlob reads one more glob of a variadic Arg.
func addGlob(c *Command, s string) (err error) {
	c.Globs, err = AddGlob(c.Globs, s)
	return err
}

// AddGlob is globs with s added, as reserve and unreserve read their
// globs: s as CheckGlob accepts it, a repeat read once, at most
// MaxReserveGlobs in all. On an error, globs are returned unchanged.
func AddGlob(globs []string, s string) ([]string, error) {
	if err := CheckGlob(s); err != nil {
		return globs, err
	}
	if slices.Contains(globs, s) {
		return globs, nil
	}
	if len(globs) == MaxReserveGlobs {
		return globs, usageErrorf("more than %d globs; reserve them in several calls", MaxReserveGlobs)
	}
	return append(globs, s), nil
}

// flagSpec is one flag of the grammar.
type flagSpec struct {
	name string
	meta string // the placeholder of its value in Usage; "" for a flag without one
	// needs and example are what "<flag> needs <needs>, e.g. <example>"
	// says of a flag given without its value.
	needs, example string
	// repeat: the flag may be given more than once, and each value is
	// read as it comes; any other flag's value is read once the words
	// are all in.
	repeat bool
	// set reads the flag's value (a flag without one gets "") into c;
	// maxTTL is ParseCommand's.
	set func(c *Command, v string, maxTTL time.Duration) error
	// preset, if set, gives c the flag's default when the verb takes it.
	preset func(c *Command)
	// show is what Command.String writes after the flag's name, one
	// value for each time it is given ("" for a flag without a value).
	show func(c Command) []string
}

// flagSpecs are every flag of the grammar, in the order Command.String
// writes them and ParseCommand reads their values (so, of two wrong
// values, the one named first here is reported).
var flagSpecs = []flagSpec{
	{name: "--label", meta: "<name>", needs: "a label name", example: "--label bug", repeat: true,
		set: func(c *Command, v string, _ time.Duration) error {
			if err := checkLabel(v, len(c.Labels)); err != nil {
				return err
			}
			c.Labels = append(c.Labels, v)
			return nil
		},
		show: func(c Command) []string {
			quoted := make([]string, len(c.Labels))
			for i, l := range c.Labels {
				quoted[i] = shellQuote(l)
			}
			return quoted
		}},
	{name: "--pulls",
		set:  func(c *Command, _ string, _ time.Duration) error { c.Pulls = true; return nil },
		show: func(c Command) []string { return shown(c.Pulls, "") }},
	{name: "--oldest",
		set:  func(c *Command, _ string, _ time.Duration) error { c.Oldest = true; return nil },
		show: func(c Command) []string { return shown(c.Oldest, "") }},
	{name: "--ttl", meta: "<dur>", needs: "a duration", example: "--ttl 30m",
		set: func(c *Command, v string, maxTTL time.Duration) (err error) {
			c.TTL, err = ParseTTL(v, maxTTL)
			return err
		},
		show: func(c Command) []string { return shown(c.TTL != 0, formatTTL(c.TTL)) }},
	{name: "--wait", meta: "<dur>", needs: "a duration", example: "--wait 5m",
		set: func(c *Command, v string, maxTTL time.Duration) (err error) {
			c.Wait, err = parseTTL("--wait", v, maxTTL)
			return err
		},
		preset: func(c *Command) {
			if c.Verb == VerbMerge {
				c.Wait = DefaultMergeWait
			}
		},
		show: func(c Command) []string {
			return shown(c.Wait != 0 && (c.Verb != VerbMerge || c.Wait != DefaultMergeWait), formatTTL(c.Wait))
		}},
	{name: "--style", meta: "merge|rebase|rebase-merge|squash|fast-forward-only", needs: "a merge style", example: "--style squash",
		set: func(c *Command, v string, _ time.Duration) error {
			if !ValidMergeStyle(v) {
				return usageErrorf("--style must be one of %s, got %s", strings.Join(MergeStyles(), ", "), quoteArg(v))
			}
			c.Style = v
			return nil
		},
		show: func(c Command) []string { return shown(c.Style != "", c.Style) }},
	{name: "--delete-branch",
		set:  func(c *Command, _ string, _ time.Duration) error { c.DeleteBranch = true; return nil },
		show: func(c Command) []string { return shown(c.DeleteBranch, "") }},
	{name: "--issue", meta: "<n>", needs: "an issue number", example: "--issue 42",
		set: func(c *Command, v string, _ time.Duration) (err error) {
			if c.Issue, err = ParseIssue(v); err != nil {
				return err
			}
			if c.TTL != 0 {
				return usageErrorf("--issue and --ttl both given: a reservation of a claim lives as long as the claim")
			}
			return nil
		},
		show: func(c Command) []string {
			s, _ := SyntaxOf(c.Verb)
			return shown(c.Issue != 0 && s.Takes("--issue"), strconv.FormatInt(c.Issue, 10))
		}},
	{name: "--shared",
		set:  func(c *Command, _ string, _ time.Duration) error { c.Shared = true; return nil },
		show: func(c Command) []string { return shown(c.Shared, "") }},
	{name: "--path", meta: "<path>", needs: "a path in the repository", example: "--path src/auth/login.go",
		set: func(c *Command, v string, _ time.Duration) (err error) {
			c.Path, err = ParsePath(v)
			return err
		},
		show: func(c Command) []string { return shown(c.Path != "", shellQuote(c.Path)) }},
	{name: "--force",
		set:  func(c *Command, _ string, _ time.Duration) error { c.Force = true; return nil },
		show: func(c Command) []string { return shown(c.Force, "") }},
	{name: "--token", meta: "<n>", needs: "a number", example: "--token 3",
		set: func(c *Command, v string, _ time.Duration) (err error) {
			c.Token, err = parsePositive("--token", v, 1<<63-1)
			return err
		},
		show: func(c Command) []string { return shown(c.Token != 0, strconv.FormatInt(c.Token, 10)) }},
	{name: "--limit", meta: "<n>", needs: "a number", example: "--limit 20",
		set: func(c *Command, v string, _ time.Duration) error {
			n, err := parsePositive("--limit", v, MaxHistoryLimit)
			c.Limit = int(n)
			return err
		},
		preset: func(c *Command) { c.Limit = DefaultHistoryLimit },
		show: func(c Command) []string {
			return shown(c.Verb == VerbHistory && c.Limit != DefaultHistoryLimit, strconv.Itoa(c.Limit))
		}},
	{name: "--to", meta: "<login>[/<agent>]", needs: "whom to hand the claim to", example: "--to bob/agent-8",
		set: func(c *Command, v string, _ time.Duration) (err error) {
			c.ToLogin, c.ToAgent, err = ParseTo(v)
			return err
		},
		show: func(c Command) []string { return shown(c.ToLogin != "", c.To()) }},
	{name: "--grace", meta: "<dur>", needs: "a duration", example: "--grace 30s",
		set: func(c *Command, v string, maxTTL time.Duration) (err error) {
			if c.Grace, err = parseTTL("--grace", v, maxTTL); err != nil {
				return err
			}
			if c.Grace < MinGrace {
				return usageErrorf("--grace must be at least %s, got %s", formatTTL(MinGrace), quoteArg(v))
			}
			return nil
		},
		show: func(c Command) []string { return shown(c.Grace != 0, formatTTL(c.Grace)) }},
	{name: "--resume", meta: "<id>", needs: "a session id", example: "--resume 0f3c…",
		set: func(c *Command, v string, _ time.Duration) error {
			if !validSessionID(v) {
				return usageErrorf("--resume needs a session id (32 lowercase hex digits), got %s", quoteArg(v))
			}
			c.Resume = v
			return nil
		},
		show: func(c Command) []string { return shown(c.Resume != "", c.Resume) }},
	{name: "--agent", meta: "<name>", needs: "an agent name", example: "--agent agent-7",
		set: func(c *Command, v string, _ time.Duration) (err error) {
			c.Agent, err = ParseAgent(v)
			return err
		},
		show: func(c Command) []string { return shown(c.Agent != "", c.Agent) }},
}

// shown is show's answer for a flag given once with value v if given.
func shown(given bool, v string) []string {
	if !given {
		return nil
	}
	return []string{v}
}

// Usage is what `collab-lease help` prints: the grammar of docs/ssh.md,
// verbatim, a line per row of syntaxes, the verbs padded to one width.
var Usage = usage()

func usage() string {
	width := 0
	for _, s := range syntaxes {
		width = max(width, len(s.Verb))
	}
	var b strings.Builder
	for _, s := range syntaxes {
		if words := s.words(); len(words) > 0 {
			fmt.Fprintf(&b, "collab-lease %-*s %s\n", width, s.Verb, strings.Join(words, " "))
		} else {
			fmt.Fprintf(&b, "collab-lease %s\n", s.Verb)
		}
	}
	return b.String()
}

// SyntaxOf is the row of syntaxes for v.
func SyntaxOf(v Verb) (Syntax, bool) {
	for _, s := range syntaxes {
		if s.Verb == v {
			return s, true
		}
	}
	return Syntax{}, false
}

// Takes reports whether the verb takes the flag named flag ("--ttl").
func (s Syntax) Takes(flag string) bool { return slices.Contains(s.Flags, flag) }

// TakesArg reports whether the verb takes the positional word a.
func (s Syntax) TakesArg(a Arg) bool { return slices.Contains(s.Args, a) }

// Line is the verb's line of Usage without its alignment, as error lines
// quote it.
func (s Syntax) Line() string {
	return strings.Join(append([]string{"collab-lease", string(s.Verb)}, s.words()...), " ")
}

// words are what Line shows after the verb: its positional words, then
// its flags.
func (s Syntax) words() []string {
	var words []string
	for _, a := range s.Args {
		words = append(words, a.Meta())
	}
	return append(words, s.FlagWords()...)
}

// FlagWords are the verb's flags as Usage shows them: "--ttl <dur>" for
// a required one, "[--ttl <dur>]" for another, "[--label <name>]..." for
// one that may be repeated.
func (s Syntax) FlagWords() []string {
	var words []string
	for _, name := range s.Flags {
		w := name
		f := findFlag(name)
		if f.meta != "" {
			w += " " + f.meta
		}
		if !slices.Contains(s.Required, name) {
			w = "[" + w + "]"
		}
		if f.repeat {
			w += "..."
		}
		words = append(words, w)
	}
	return words
}

// Meta is the placeholder Usage shows for a: "<owner>/<repo>", "<issue>".
func (a Arg) Meta() string { return argSpecs[a].meta }

// FlagMeta is the placeholder of the value of the flag named name
// ("<dur>"), "" for a flag without a value; ok is false for no flag of
// the grammar.
func FlagMeta(name string) (meta string, ok bool) {
	if f := findFlag(name); f != nil {
		return f.meta, true
	}
	return "", false
}

func findFlag(name string) *flagSpec {
	for i := range flagSpecs {
		if flagSpecs[i].name == name {
			return &flagSpecs[i]
		}
	}
	return nil
}
