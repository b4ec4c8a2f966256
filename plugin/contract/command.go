package contract

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// A command line: its verbs, what it parses into (Command), and
// ParseCommand, which reads it by the rows of grammar.go with the lexer of
// words.go and the value parsers of values.go.

// Verb is a collab-lease sub-verb.
type Verb string

// The sub-verbs (docs/ssh.md); matched case-sensitively, like any command.
const (
	VerbAcquire Verb = "acquire"
	VerbRenew   Verb = "renew"
	VerbRelease Verb = "release"
	VerbList    Verb = "list"
	VerbNext    Verb = "next"
	VerbCheck   Verb = "check"
	VerbHistory Verb = "history"
	VerbHandoff Verb = "handoff"
	VerbMerge   Verb = "merge"
	// The path reservations (docs/ssh.md, Reserving paths).
	VerbReserve      Verb = "reserve"
	VerbUnreserve    Verb = "unreserve"
	VerbReservations Verb = "reservations"
	// VerbUnquarantine lifts an issue's quarantine (docs/ssh.md,
	// Quarantine).
	VerbUnquarantine Verb = "unquarantine"
	VerbSession      Verb = "session"
	VerbHelp         Verb = "help"
)

// Command is one parsed `collab-lease` exec request. It is purely syntactic:
// whether the repository exists, or the caller may touch it, is for the
// server to ask the forge.
type Command struct {
	Verb  Verb
	Owner string // without a leading "/"
	Name  string // without a trailing ".git"
	// Issue is > 0 for acquire, renew, release, check and history, and
	// merge's pull request; 0 for list, next and help. For reserve and
	// unreserve, --issue: the claim the reservations live with (0: none).
	Issue int64
	// TTL is 0 when no --ttl was given (an open-ended acquire or next, and
	// always for the other verbs); otherwise whole seconds in [1s, maxTTL].
	TTL time.Duration
	// Wait (acquire --wait, next --wait): how long to wait for a held
	// issue, or for any issue next may take, to free up; 0 means do not
	// wait. Whole seconds in [1s, maxTTL]. For merge, how long to wait for
	// the turn to merge into the base branch: DefaultMergeWait unless
	// given.
	Wait time.Duration
	// Force (release --force): release another account's lease, as a
	// repository admin.
	Force bool
	// Labels (next --label): every label a candidate must carry, in the
	// order given; Pulls (next --pulls): pull requests instead of issues.
	Labels []string
	Pulls  bool
	// Oldest (next --oldest): the oldest free issue, whatever the
	// sidecar's priority labels.
	Oldest bool
	// Token (check --token, merge --token): the fencing token to check, > 0;
	// 0 for a merge without one (the caller's current token).
	Token int64
	// ToLogin and ToAgent (handoff --to <login>[/<agent>]): whom the
	// claim goes to, an account and, after a "/", one of its agents.
	ToLogin, ToAgent string
	// Agent (--agent, every verb but help): which agent of the account
	// asks ("" none: the account itself). Agents of one account are
	// distinct holders. ParseAgent says what a name may be.
	Agent string
	// Limit (history --limit): how many tenures, in [1, MaxHistoryLimit];
	// DefaultHistoryLimit when not given.
	Limit int
	// Grace (session --grace): how long the session's claims outlive its
	// last sign of life; 0 when not given (the default). Whole seconds
	// in [MinGrace, maxTTL].
	Grace time.Duration
	// Resume (session --resume): the id of the session to take over.
	Resume string
	// Style (merge --style): how the forge merges, one of MergeStyles; ""
	// is the forge's "merge". DeleteBranch (merge --delete-branch): delete
	// the head branch once merged.
	Style        string
	DeleteBranch bool
	// Globs (reserve, unreserve): the path globs, each as CheckGlob
	// accepts it, in the order given, without repeats; at most
	// MaxReserveGlobs. Shared (reserve --shared): a shared reservation,
	// which meets only others' exclusive ones. Path (reservations
	// --path): only the reservations whose glob matches this path.
	Globs  []string
	Shared bool
	Path   string
}

// To is handoff's target as --to names it: "login" or "login/agent".
func (c Command) To() string {
	if c.ToAgent == "" {
		return c.ToLogin
	}
	return c.ToLogin + "/" + c.ToAgent
}

// Repo is the repository as the caller named it, "owner/name".
func (c Command) Repo() string { return c.Owner + "/" + c.Name }

// String renders c in the canonical form ParseCommand accepts, for logs.
func (c Command) String() string {
	var b strings.Builder
	b.WriteString("collab-lease ")
	b.WriteString(string(c.Verb))
	if c.Verb == VerbHelp {
		return b.String()
	}
	if c.Owner != "" {
		b.WriteString(" " + c.Repo())
	}
	if s, _ := SyntaxOf(c.Verb); c.Issue != 0 && (s.TakesArg(ArgIssue) || s.TakesArg(ArgPull)) {
		fmt.Fprintf(&b, " %d", c.Issue)
	}
	for _, g := range c.Globs {
		b.WriteString(" " + shellQuote(g))
	}
	for _, f := range flagSpecs {
		for _, v := range f.show(c) {
			b.WriteString(" " + f.name)
			if v != "" {
				b.WriteString(" " + v)
			}
		}
	}
	return b.String()
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ErrUsage is the category of every error the grammar returns: the request
// is malformed, nothing was looked up, and retrying it unchanged cannot help.
var ErrUsage = errors.New("usage")

// UsageError says what is wrong with a command, in one line that names the
// offending word (quoted, so control characters and escapes cannot reach a
// terminal or a log) and, where it helps, the grammar that was expected.
// Its Error() is "usage: <detail>", so the server prints it as
// ErrorLine(err.Error()): "error: usage: <detail>".
type UsageError struct {
	Detail string
}

func (e *UsageError) Error() string { return "usage: " + e.Detail }

// Is makes errors.Is(err, ErrUsage) true.
func (e *UsageError) Is(target error) bool { return target == ErrUsage }

func usageErrorf(format string, args ...any) error {
	return &UsageError{Detail: fmt.Sprintf(format, args...)}
}

// ParseCommand parses an SSH exec request into a Command. maxTTL is the
// configured maximum lease duration; a maxTTL of zero or less means no
// maximum beyond what a time.Duration holds. Every failure is a *UsageError.
//
// Decisions the grammar of docs/ssh.md leaves open:
//   - Words are split as SplitWords documents.
//   - A flag (--ttl <dur>, or --ttl=<dur>) may stand anywhere after the
//     sub-verb, at most once (--label up to MaxLabels times), and only for
//     the verbs whose row of syntaxes names it. Any other word starting with
//     "-" is an unknown flag; there is no "--" terminator.
//   - <owner>/<repo> may have one leading "/" and one trailing ".git" (any
//     case); what remains is exactly owner "/" name, each 1–100 of
//     [A-Za-z0-9_.-], never "." or containing "..", the owner not starting
//     with "-" (it would read as a flag). The name follows Gitea's reserved
//     rules: not "-", not ending in .git, .wiki, .rss or .atom (any case).
//     Case is kept: the forge decides what matches.
//   - <issue> is ASCII decimal digits, optionally after one "#", without a
//     sign or a leading zero (so "042" is not silently taken as 42 by one
//     tool and as octal 34 by another), at most 2^63-1.
//   - <dur> is as ParseDuration documents.
func ParseCommand(line string, maxTTL time.Duration) (Command, error) {
	words, err := SplitWords(line)
	if err != nil {
		return Command{}, err
	}
	if len(words) == 0 {
		return Command{}, usageErrorf("empty command; try: collab-lease help")
	}
	if words[0] != "collab-lease" {
		return Command{}, usageErrorf("unknown command %s; this server runs only collab-lease (try: collab-lease help)", quoteArg(words[0]))
	}
	if len(words) == 1 {
		return Command{}, usageErrorf("missing sub-verb; try: collab-lease help")
	}
	verb := Verb(words[1])
	args := words[2:]
	s, ok := SyntaxOf(verb)
	switch {
	case verb == VerbHelp:
		if len(args) > 0 {
			return Command{}, usageErrorf("help takes no arguments, got %s", quoteArg(args[0]))
		}
		return Command{Verb: VerbHelp}, nil
	case !ok:
		return Command{}, usageErrorf("unknown verb %s; try: collab-lease help", quoteArg(words[1]))
	}

	cmd := Command{Verb: verb}
	var pos []string
	given := map[string]string{} // flag -> its value, for the single-valued ones
	for i := 0; i < len(args); i++ {
		w := args[i]
		if !strings.HasPrefix(w, "-") {
			pos = append(pos, w)
			continue
		}
		flag, value, hasValue := strings.Cut(w, "=")
		f := findFlag(flag)
		switch {
		case f == nil && s.TakesArg(ArgIssue) && len(w) > 1 && isDigitByte(w[1]):
			// A negative issue, not a flag: say so.
			return Command{}, usageErrorf("issue must be a positive number, got %s", quoteArg(w))
		case f == nil:
			return Command{}, usageErrorf("unknown flag %s; expected: %s", quoteArg(w), s.Line())
		case !s.Takes(flag):
			return Command{}, usageErrorf("%s takes no %s; expected: %s", verb, flag, s.Line())
		case f.meta == "" && hasValue:
			return Command{}, usageErrorf("%s takes no value, got %s", flag, quoteArg(w))
		case f.meta != "" && !hasValue:
			if i+1 == len(args) {
				return Command{}, usageErrorf("%s needs %s, e.g. %s", flag, f.needs, f.example)
			}
			i++
			value = args[i]
		}
		if _, seen := given[flag]; seen && !f.repeat {
			return Command{}, usageErrorf("%s given more than once", flag)
		}
		given[flag] = value
		if f.repeat { // read as it comes: the value knows the ones before it
			if err := f.set(&cmd, value, maxTTL); err != nil {
				return Command{}, err
			}
		}
	}

	variadic := len(s.Args) > 0 && s.Args[len(s.Args)-1].variadic()
	if len(pos) > len(s.Args) && !variadic {
		return Command{}, usageErrorf("unexpected argument %s; expected: %s", quoteArg(pos[len(s.Args)]), s.Line())
	}
	if need := len(s.Args) - btoi(variadic && s.Args[len(s.Args)-1] == ArgSomeGlobs); len(pos) < need {
		return Command{}, usageErrorf("%s needs %s; expected: %s", verb, s.Args[len(pos)].Meta(), s.Line())
	}
	for i, w := range pos {
		a := s.Args[min(i, len(s.Args)-1)]
		if err := argSpecs[a].set(&cmd, w); err != nil {
			return Command{}, err
		}
	}
	for _, required := range s.Required {
		if _, ok := given[required]; !ok {
			return Command{}, usageErrorf("%s needs %s %s; expected: %s", verb, required, findFlag(required).meta, s.Line())
		}
	}
	// The other flags' values, in the order of flagSpecs: when two are
	// wrong, the first of them there is the one reported.
	for _, f := range flagSpecs {
		if !s.Takes(f.name) {
			continue
		}
		if f.preset != nil {
			f.preset(&cmd)
		}
		if v, ok := given[f.name]; ok && !f.repeat {
			if err := f.set(&cmd, v, maxTTL); err != nil {
				return Command{}, err
			}
		}
	}
	return cmd, nil
}
