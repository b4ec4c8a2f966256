package contract

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Usage is what `collab-lease help` prints: the grammar of docs/ssh.md,
// verbatim.
const Usage = `collab-lease acquire <owner>/<repo> <issue> [--ttl <dur>] [--wait <dur>] [--agent <name>]
collab-lease renew   <owner>/<repo> <issue> --ttl <dur> [--agent <name>]
collab-lease release <owner>/<repo> <issue> [--force] [--agent <name>]
collab-lease list    <owner>/<repo> [--agent <name>]
collab-lease next    <owner>/<repo> [--label <name>]... [--pulls] [--oldest] [--ttl <dur>] [--wait <dur>] [--agent <name>]
collab-lease check   <owner>/<repo> <issue> --token <n> [--agent <name>]
collab-lease history <owner>/<repo> <issue> [--limit <n>] [--agent <name>]
collab-lease handoff <owner>/<repo> <issue> --to <login>[/<agent>] [--agent <name>]
collab-lease session [--agent <name>] [--grace <dur>] [--resume <id>]
collab-lease help
`

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
	VerbSession Verb = "session"
	VerbHelp    Verb = "help"
)

// Command is one parsed `collab-lease` exec request. It is purely syntactic:
// whether the repository exists, or the caller may touch it, is for the
// server to ask the forge.
type Command struct {
	Verb  Verb
	Owner string // without a leading "/"
	Name  string // without a trailing ".git"
	// Issue is > 0 for acquire, renew, release, check and history; 0 for
	// list, next and help.
	Issue int64
	// TTL is 0 when no --ttl was given (an open-ended acquire or next, and
	// always for the other verbs); otherwise whole seconds in [1s, maxTTL].
	TTL time.Duration
	// Wait (acquire --wait, next --wait): how long to wait for a held
	// issue, or for any issue next may take, to free up; 0 means do not
	// wait. Whole seconds in [1s, maxTTL].
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
	// Token (check --token): the fencing token to check, > 0.
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
	if c.Issue != 0 {
		fmt.Fprintf(&b, " %d", c.Issue)
	}
	for _, l := range c.Labels {
		b.WriteString(" --label " + shellQuote(l))
	}
	if c.Pulls {
		b.WriteString(" --pulls")
	}
	if c.Oldest {
		b.WriteString(" --oldest")
	}
	if c.TTL != 0 {
		b.WriteString(" --ttl " + formatTTL(c.TTL))
	}
	if c.Wait != 0 {
		b.WriteString(" --wait " + formatTTL(c.Wait))
	}
	if c.Force {
		b.WriteString(" --force")
	}
	if c.Token != 0 {
		fmt.Fprintf(&b, " --token %d", c.Token)
	}
	if c.Verb == VerbHistory && c.Limit != DefaultHistoryLimit {
		fmt.Fprintf(&b, " --limit %d", c.Limit)
	}
	if c.ToLogin != "" {
		b.WriteString(" --to " + c.To())
	}
	if c.Grace != 0 {
		b.WriteString(" --grace " + formatTTL(c.Grace))
	}
	if c.Resume != "" {
		b.WriteString(" --resume " + c.Resume)
	}
	if c.Agent != "" {
		b.WriteString(" --agent " + c.Agent)
	}
	return b.String()
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
//   - --ttl (or --ttl=<dur>) may stand anywhere after the sub-verb, at most
//     once, and only for acquire and renew. Any other word starting with "-"
//     is an unknown flag; there is no "--" terminator.
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
	g, ok := grammars[verb]
	switch {
	case verb == VerbHelp:
		if len(args) > 0 {
			return Command{}, usageErrorf("help takes no arguments, got %s", quoteArg(args[0]))
		}
		return Command{Verb: VerbHelp}, nil
	case !ok:
		return Command{}, usageErrorf("unknown verb %s; try: collab-lease help", quoteArg(words[1]))
	}
	expected := verbGrammar(verb)

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
		f, known := flags[flag]
		switch {
		case !known && g.positional == 2 && len(w) > 1 && isDigitByte(w[1]):
			// A negative issue, not a flag: say so.
			return Command{}, usageErrorf("issue must be a positive number, got %s", quoteArg(w))
		case !known:
			return Command{}, usageErrorf("unknown flag %s; expected: %s", quoteArg(w), expected)
		case !strings.Contains(g.flags, flag+" "):
			return Command{}, usageErrorf("%s takes no %s; expected: %s", verb, flag, expected)
		case f.meta == "" && hasValue:
			return Command{}, usageErrorf("%s takes no value, got %s", flag, quoteArg(w))
		case f.meta != "" && !hasValue:
			if i+1 == len(args) {
				return Command{}, usageErrorf("%s needs %s, e.g. %s", flag, f.needs, f.example)
			}
			i++
			value = args[i]
		}
		if _, seen := given[flag]; seen && flag != "--label" {
			return Command{}, usageErrorf("%s given more than once", flag)
		}
		given[flag] = value
		if flag == "--label" {
			if err := checkLabel(value, len(cmd.Labels)); err != nil {
				return Command{}, err
			}
			cmd.Labels = append(cmd.Labels, value)
		}
	}

	if len(pos) > g.positional {
		return Command{}, usageErrorf("unexpected argument %s; expected: %s", quoteArg(pos[g.positional]), expected)
	}
	if len(pos) < g.positional {
		missing := "<owner>/<repo>"
		if len(pos) == 1 {
			missing = "<issue>"
		}
		return Command{}, usageErrorf("%s needs %s; expected: %s", verb, missing, expected)
	}
	if g.positional > 0 {
		if cmd.Owner, cmd.Name, err = ParseRepo(pos[0]); err != nil {
			return Command{}, err
		}
	}
	if g.positional == 2 {
		if cmd.Issue, err = ParseIssue(pos[1]); err != nil {
			return Command{}, err
		}
	}
	for _, required := range strings.Fields(g.required) {
		if _, ok := given[required]; !ok {
			return Command{}, usageErrorf("%s needs %s %s; expected: %s", verb, required, flags[required].meta, expected)
		}
	}
	if v, ok := given["--ttl"]; ok {
		if cmd.TTL, err = ParseTTL(v, maxTTL); err != nil {
			return Command{}, err
		}
	}
	if v, ok := given["--wait"]; ok {
		if cmd.Wait, err = parseTTL("--wait", v, maxTTL); err != nil {
			return Command{}, err
		}
	}
	if v, ok := given["--token"]; ok {
		if cmd.Token, err = parsePositive("--token", v, 1<<63-1); err != nil {
			return Command{}, err
		}
	}
	if verb == VerbHistory {
		cmd.Limit = DefaultHistoryLimit
		if v, ok := given["--limit"]; ok {
			n, err := parsePositive("--limit", v, MaxHistoryLimit)
			if err != nil {
				return Command{}, err
			}
			cmd.Limit = int(n)
		}
	}
	if v, ok := given["--to"]; ok {
		if cmd.ToLogin, cmd.ToAgent, err = ParseTo(v); err != nil {
			return Command{}, err
		}
	}
	if v, ok := given["--grace"]; ok {
		if cmd.Grace, err = parseTTL("--grace", v, maxTTL); err != nil {
			return Command{}, err
		}
		if cmd.Grace < MinGrace {
			return Command{}, usageErrorf("--grace must be at least %s, got %s", formatTTL(MinGrace), quoteArg(v))
		}
	}
	if v, ok := given["--resume"]; ok {
		if !validSessionID(v) {
			return Command{}, usageErrorf("--resume needs a session id (32 lowercase hex digits), got %s", quoteArg(v))
		}
		cmd.Resume = v
	}
	if v, ok := given["--agent"]; ok {
		if cmd.Agent, err = ParseAgent(v); err != nil {
			return Command{}, err
		}
	}
	_, cmd.Force = given["--force"]
	_, cmd.Pulls = given["--pulls"]
	_, cmd.Oldest = given["--oldest"]
	return cmd, nil
}

// grammar is what one verb takes: how many positional words (<owner>/<repo>,
// and <issue> if 2), which flags (each followed by a space) and which of
// them it requires.
type grammar struct {
	positional int
	flags      string
	required   string
	line       string // its Usage line, without alignment
}

var grammars = map[Verb]grammar{
	VerbAcquire: {2, "--ttl --wait --agent ", "", "collab-lease acquire <owner>/<repo> <issue> [--ttl <dur>] [--wait <dur>] [--agent <name>]"},
	VerbRenew:   {2, "--ttl --agent ", "--ttl", "collab-lease renew <owner>/<repo> <issue> --ttl <dur> [--agent <name>]"},
	VerbRelease: {2, "--force --agent ", "", "collab-lease release <owner>/<repo> <issue> [--force] [--agent <name>]"},
	VerbList:    {1, "--agent ", "", "collab-lease list <owner>/<repo> [--agent <name>]"},
	VerbNext:    {1, "--label --pulls --oldest --ttl --wait --agent ", "", "collab-lease next <owner>/<repo> [--label <name>]... [--pulls] [--oldest] [--ttl <dur>] [--wait <dur>] [--agent <name>]"},
	VerbCheck:   {2, "--token --agent ", "--token", "collab-lease check <owner>/<repo> <issue> --token <n> [--agent <name>]"},
	VerbHistory: {2, "--limit --agent ", "", "collab-lease history <owner>/<repo> <issue> [--limit <n>] [--agent <name>]"},
	VerbHandoff: {2, "--to --agent ", "--to", "collab-lease handoff <owner>/<repo> <issue> --to <login>[/<agent>] [--agent <name>]"},
	VerbSession: {0, "--agent --grace --resume ", "", "collab-lease session [--agent <name>] [--grace <dur>] [--resume <id>]"},
}

// validSessionID says whether s has the form of a session id.
// Usage ("" for a flag without one), and what error messages say of it.
var flags = map[string]struct{ meta, needs, example string }{
	"--ttl":    {"<dur>", "a duration", "--ttl 30m"},
	"--wait":   {"<dur>", "a duration", "--wait 5m"},
	"--label":  {"<name>", "a label name", "--label bug"},
	"--token":  {"<n>", "a number", "--token 3"},
	"--limit":  {"<n>", "a number", "--limit 20"},
	"--agent":  {"<name>", "an agent name", "--agent agent-7"},
	"--to":     {"<login>[/<agent>]", "whom to hand the claim to", "--to bob/agent-8"},
	"--grace":  {"<dur>", "a duration", "--grace 30s"},
	"--resume": {"<id>", "a session id", "--resume 0f3c…"},
	"--pulls":  {},
	"--oldest": {},
	"--force":  {},
}

// verbGrammar is the Usage line for v with its alignment padding removed, for
// error messages.
func verbGrammar(v Verb) string {
	if g, ok := grammars[v]; ok {
		return g.line
	}
	return "collab-lease help"
}
