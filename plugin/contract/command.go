package contract

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
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

// MaxCommandLen bounds an exec command in bytes. Every valid command is far
// shorter; the bound keeps a hostile megabyte from costing more than a length
// check.
const MaxCommandLen = 4096

// Limits on <owner> and <repo>: Gitea's forms cap repository names at 100;
// owners are capped at 40 there, but older instances and imports may hold
// longer ones, and an unknown name costs only a "repository not found".
const maxRepoPartLen = 100

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

// Limits of the agent verbs' flags (docs/ssh.md, The agent verbs).
const (
	DefaultHistoryLimit = 20  // history without --limit
	MaxHistoryLimit     = 200 // the largest --limit
	MaxLabels           = 10  // --label given at most this often
	maxLabelLen         = 255 // bytes of one label name
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

// MinGrace is the least session --grace.
const MinGrace = 5 * time.Second

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

// shellQuote writes s as one word SplitWords reads back: bare when it
// holds nothing special, otherwise single-quoted.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '-' || r == '_' || r == '.' || r == '/' || r == ':' ||
			'0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z')
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
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
func validSessionID(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isDigitByte(c) && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// flags are every flag of the grammar: the placeholder of its value in
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

// maxLoginLen bounds a login of --to.
const maxLoginLen = 255

// ParseTo reads handoff's --to: a login, and optionally "/" and one of
// its agents (ParseAgent's rules). A login is 1 to 255 of
// [A-Za-z0-9_.-], as Gitea's are; whether it names an account is the
// server's to say.
func ParseTo(s string) (login, agent string, err error) {
	login, agent, hasAgent := strings.Cut(s, "/")
	ok := login != "" && len(login) <= maxLoginLen
	for i := 0; ok && i < len(login); i++ {
		ok = isAlnumByte(login[i]) || login[i] == '.' || login[i] == '_' || login[i] == '-'
	}
	if !ok {
		return "", "", usageErrorf("--to must be a login, or login/agent, got %s", quoteArg(s))
	}
	if hasAgent {
		if _, err := ParseAgent(agent); err != nil {
			return "", "", usageErrorf("--to %s: the agent must be 1 to %d of A-Z a-z 0-9 . _ - starting with a letter or digit", quoteArg(s), MaxAgentLen)
		}
	}
	return login, agent, nil
}

// MaxAgentLen is the longest agent name.
const MaxAgentLen = 40

// ParseAgent accepts an agent name: 1 to MaxAgentLen bytes of
// [A-Za-z0-9._-], starting with a letter or digit (so it never reads as a
// flag, and needs no quoting anywhere it is shown).
func ParseAgent(s string) (string, error) {
	ok := s != "" && len(s) <= MaxAgentLen && isAlnumByte(s[0])
	for i := 0; ok && i < len(s); i++ {
		ok = isAlnumByte(s[i]) || s[i] == '.' || s[i] == '_' || s[i] == '-'
	}
	if !ok {
		return "", usageErrorf("--agent must be 1 to %d of A-Z a-z 0-9 . _ - starting with a letter or digit, got %s", MaxAgentLen, quoteArg(s))
	}
	return s, nil
}

func isAlnumByte(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// checkLabel accepts the value of one more --label after have of them: a
// label name of at most 255 bytes without a comma (the forge's list filter
// separates names with commas), and at most MaxLabels in all.
func checkLabel(l string, have int) error {
	switch {
	case have == MaxLabels:
		return usageErrorf("--label given more than %d times", MaxLabels)
	case l == "":
		return usageErrorf("--label is empty; expected a label name")
	case len(l) > maxLabelLen:
		return usageErrorf("--label %s is longer than %d bytes", quoteArg(l), maxLabelLen)
	case strings.Contains(l, ","):
		return usageErrorf("--label %s may not contain a comma; give --label once per label", quoteArg(l))
	}
	return nil
}

// parsePositive parses the value of a numeric flag: ASCII decimal digits
// without a sign or a leading zero, in [1, limit].
func parsePositive(flag, s string, limit int64) (int64, error) {
	switch {
	case s == "" || !allDigitBytes(s) || strings.Trim(s, "0") == "":
		return 0, usageErrorf("%s must be a positive number, got %s", flag, quoteArg(s))
	case s[0] == '0':
		return 0, usageErrorf("%s must not have a leading zero, got %s", flag, quoteArg(s))
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > limit {
		return 0, usageErrorf("%s %s is more than the maximum of %d", flag, quoteArg(s), limit)
	}
	return n, nil
}

// SplitWords splits an exec command into words the way a POSIX shell would,
// minus everything a shell does besides quoting, because OpenSSH hands the
// server one string and callers quote their arguments for a remote shell:
//
//   - Spaces and tabs separate words. An unquoted CR or LF ends the command:
//     only spaces, tabs, CRs and LFs may follow it (a client may append a
//     newline), since another word would be a second command to a shell and
//     we run exactly one. CR and LF inside quotes or after a backslash, and
//     every other control character but tab, anywhere, are errors: no valid
//     argument holds one, and they would forge lines in logs.
//   - '...' is literal. "..." is literal except that a backslash escapes
//     " \ $ and ` (and is kept before anything else). Outside quotes a
//     backslash escapes the next byte; a trailing one is an error.
//   - Adjacent parts concatenate: 'acme'/"widgets" is acme/widgets.
//   - No expansion, globbing, comments or operators: $, *, #, ; and the like
//     are ordinary characters (the grammar rejects them where they matter;
//     "#42" is an issue, not a comment).
//   - An empty word (a pair of quotes with nothing between) is an error: no
//     argument may be empty, and a silently dropped one would shift the
//     others.
//   - A line longer than MaxCommandLen bytes is an error.
//
// An empty or blank line gives no words and no error.
func SplitWords(line string) ([]string, error) {
	if len(line) > MaxCommandLen {
		return nil, usageErrorf("command too long (over %d bytes)", MaxCommandLen)
	}
	controlErr := func(c byte) error {
		return usageErrorf("command contains a control character (0x%02x)", c)
	}
	plain := true // nothing but words and blanks: no quote, backslash or line end
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case (c < 0x20 && c != '\t' && c != '\r' && c != '\n') || c == 0x7f:
			return nil, controlErr(c)
		case c == '\\' || c == '\'' || c == '"' || c == '\r' || c == '\n':
			plain = false
		}
	}
	if plain {
		// The common line, split without copying its words.
		words := strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' })
		if len(words) == 0 {
			return nil, nil
		}
		return words, nil
	}
	isLineEnd := func(c byte) bool { return c == '\r' || c == '\n' }

	var words []string
	var cur strings.Builder
	inWord := false
	ended := false // an unquoted CR or LF was seen: only blanks may follow
	endWord := func() error {
		if cur.Len() == 0 {
			return usageErrorf(`empty argument ('' or "")`)
		}
		words = append(words, cur.String())
		cur.Reset()
		inWord = false
		return nil
	}
	for i := 0; i < len(line); {
		c := line[i]
		if c == ' ' || c == '\t' || isLineEnd(c) {
			if inWord {
				if err := endWord(); err != nil {
					return nil, err
				}
			}
			ended = ended || isLineEnd(c)
			i++
			continue
		}
		if ended {
			return nil, usageErrorf("command spans more than one line")
		}
		inWord = true
		switch c {
		case '\\':
			if i+1 == len(line) {
				return nil, usageErrorf("command ends in a backslash")
			}
			if isLineEnd(line[i+1]) {
				return nil, controlErr(line[i+1])
			}
			cur.WriteByte(line[i+1])
			i += 2
		case '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, usageErrorf("unclosed single quote in %s", quoteArg(line[i:]))
			}
			part := line[i+1 : i+1+j]
			if k := strings.IndexAny(part, "\r\n"); k >= 0 {
				return nil, controlErr(part[k])
			}
			cur.WriteString(part)
			i += j + 2
		case '"':
			open := i
			i++
			for {
				if i == len(line) {
					return nil, usageErrorf("unclosed double quote in %s", quoteArg(line[open:]))
				}
				c := line[i]
				if c == '"' {
					i++
					break
				}
				if isLineEnd(c) {
					return nil, controlErr(c)
				}
				if c == '\\' && i+1 < len(line) && strings.IndexByte("\"\\$`", line[i+1]) >= 0 {
					cur.WriteByte(line[i+1])
					i += 2
					continue
				}
				cur.WriteByte(c)
				i++
			}
		default:
			cur.WriteByte(c)
			i++
		}
	}
	if inWord {
		if err := endWord(); err != nil {
			return nil, err
		}
	}
	return words, nil
}

// ParseRepo parses <owner>/<repo> as ParseCommand does (see there): one
// optional leading "/" and trailing ".git", then Gitea's rules for owner
// and repository names. Every failure is a *UsageError naming s.
func ParseRepo(s string) (owner, name string, err error) {
	p := strings.TrimPrefix(s, "/")
	if n := len(p) - len(".git"); n >= 0 && strings.EqualFold(p[n:], ".git") {
		p = p[:n]
	}
	owner, name, ok := strings.Cut(p, "/")
	if !ok || strings.Contains(name, "/") {
		return "", "", usageErrorf("repository must be <owner>/<repo>, got %s", quoteArg(s))
	}
	if err := checkNamePart("owner", owner, s); err != nil {
		return "", "", err
	}
	if owner[0] == '-' {
		return "", "", usageErrorf("owner may not start with \"-\" in %s", quoteArg(s))
	}
	if err := checkNamePart("repository name", name, s); err != nil {
		return "", "", err
	}
	if name == "-" {
		return "", "", usageErrorf("repository name may not be \"-\" in %s", quoteArg(s))
	}
	lower := strings.ToLower(name)
	for _, suffix := range []string{".git", ".wiki", ".rss", ".atom"} {
		if strings.HasSuffix(lower, suffix) {
			return "", "", usageErrorf("repository name may not end in %s in %s", suffix, quoteArg(s))
		}
	}
	return owner, name, nil
}

// checkNamePart applies the rules Gitea's owner and repository names share.
// Besides matching Gitea, they keep a name a single, literal URL path
// segment when the forge client builds /repos/{owner}/{repo}.
func checkNamePart(what, n, whole string) error {
	if n == "" {
		return usageErrorf("%s is empty in %s; expected <owner>/<repo>", what, quoteArg(whole))
	}
	if len(n) > maxRepoPartLen {
		return usageErrorf("%s is longer than %d characters in %s", what, maxRepoPartLen, quoteArg(whole))
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !isDigitByte(c) && !('a' <= c && c <= 'z') && !('A' <= c && c <= 'Z') && c != '-' && c != '_' && c != '.' {
			return usageErrorf("%s may contain only letters, digits, '-', '_' and '.', got %s", what, quoteArg(whole))
		}
	}
	if n == "." || strings.Contains(n, "..") {
		return usageErrorf("%s may not be \".\" or contain \"..\" in %s", what, quoteArg(whole))
	}
	return nil
}

// ParseIssue parses <issue> as ParseCommand does: ASCII decimal digits,
// optionally after one "#", positive, without a sign or a leading zero, at
// most 2^63-1. Every failure is a *UsageError naming s.
func ParseIssue(s string) (int64, error) {
	d := strings.TrimPrefix(s, "#")
	if d == "" || !allDigitBytes(d) {
		return 0, usageErrorf("issue must be a positive number like 42 or #42, got %s", quoteArg(s))
	}
	if d[0] == '0' {
		if strings.Trim(d, "0") == "" {
			return 0, usageErrorf("issue must be a positive number, got %s", quoteArg(s))
		}
		return 0, usageErrorf("issue must not have a leading zero, got %s", quoteArg(s))
	}
	n, err := strconv.ParseInt(d, 10, 64)
	if err != nil {
		return 0, usageErrorf("issue number too large, got %s", quoteArg(s))
	}
	return n, nil
}

// ParseDuration parses a lease duration: whole seconds written as plain
// ASCII digits ("300"), or a Go duration ("90s", "30m", "2h", "1h30m",
// "2000ms"). The result must be at least 1s, a whole number of seconds
// (leases are stored and shown at second precision, so 1.5s would be a
// promise the ledger cannot keep) and at most maxTTL; a maxTTL of zero or
// less means no maximum beyond what a time.Duration holds. No sign is
// accepted. Every failure is a *UsageError naming s and, when exceeded, the
// maximum.
func ParseDuration(s string, maxTTL time.Duration) (time.Duration, error) {
	return parseTTL("duration", s, maxTTL)
}

// ParseTTL parses the value of --ttl exactly as ParseCommand does, with
// errors that name --ttl, so a client that checks a TTL before sending it
// reports the line the server would. A client that does not know the
// server's maximum passes 0.
func ParseTTL(s string, maxTTL time.Duration) (time.Duration, error) {
	return parseTTL("--ttl", s, maxTTL)
}

func parseTTL(what, s string, limit time.Duration) (time.Duration, error) {
	tooLarge := func() error {
		if limit > 0 {
			return usageErrorf("%s %s is more than the maximum of %s", what, quoteArg(s), formatTTL(limit))
		}
		return usageErrorf("%s %s is too large", what, quoteArg(s))
	}
	var d time.Duration
	switch {
	case s == "":
		return 0, usageErrorf("%s is empty; use whole seconds (300) or a Go duration (90s, 30m, 2h)", what)
	case allDigitBytes(s):
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n > int64(1<<63-1)/int64(time.Second) {
			return 0, tooLarge()
		}
		d = time.Duration(n) * time.Second
	case s[0] == '-' && (allDigitBytes(s[1:]) || wellFormedGoDuration(s[1:])):
		return 0, usageErrorf("%s %s must be at least 1s", what, quoteArg(s))
	case wellFormedGoDuration(s):
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			// The syntax is fine, so the only failure left is overflow.
			return 0, tooLarge()
		}
	default:
		return 0, usageErrorf("%s %s is not a duration; use whole seconds (300) or a Go duration (90s, 30m, 2h)", what, quoteArg(s))
	}
	switch {
	case d < time.Second:
		return 0, usageErrorf("%s %s must be at least 1s", what, quoteArg(s))
	case d%time.Second != 0:
		return 0, usageErrorf("%s %s must be a whole number of seconds", what, quoteArg(s))
	case limit > 0 && d > limit:
		return 0, tooLarge()
	}
	return d, nil
}

// wellFormedGoDuration reports whether s is unsigned Go duration syntax
// (one or more number+unit pairs). It lets parseTTL tell a typo from
// an overflow, which time.ParseDuration reports the same way.
func wellFormedGoDuration(s string) bool {
	if s == "" {
		return false
	}
	for s != "" {
		i, digits := 0, 0
		for i < len(s) && isDigitByte(s[i]) {
			i++
			digits++
		}
		if i < len(s) && s[i] == '.' {
			i++
			for i < len(s) && isDigitByte(s[i]) {
				i++
				digits++
			}
		}
		if digits == 0 {
			return false
		}
		s = s[i:]
		u := 0
		for u < len(s) && s[u] != '.' && !isDigitByte(s[u]) {
			u++
		}
		switch s[:u] {
		case "ns", "us", "µs", "μs", "ms", "s", "m", "h":
		default:
			return false
		}
		s = s[u:]
	}
	return true
}

// formatTTL writes d the way people type it ("168h", "1h30m", "90s"
// becomes "1m30s") rather than time.Duration's "168h0m0s"; ParseDuration
// reads it back.
func formatTTL(d time.Duration) string {
	if d <= 0 || d%time.Second != 0 {
		return d.String()
	}
	h, m, s := d/time.Hour, d%time.Hour/time.Minute, d%time.Minute/time.Second
	var b strings.Builder
	if h > 0 {
		fmt.Fprintf(&b, "%dh", h)
	}
	if m > 0 {
		fmt.Fprintf(&b, "%dm", m)
	}
	if s > 0 {
		fmt.Fprintf(&b, "%ds", s)
	}
	return b.String()
}

// quoteArg renders a caller's word for an error line: Go-quoted, so the line
// stays one line of printable text, and cut short so a long word cannot
// swamp it.
func quoteArg(s string) string {
	const keep = 64
	if len(s) <= keep {
		return strconv.Quote(s)
	}
	cut := keep
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "…"
}

func isDigitByte(c byte) bool { return '0' <= c && c <= '9' }

func allDigitBytes(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isDigitByte(s[i]) {
			return false
		}
	}
	return true
}
