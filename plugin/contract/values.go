package contract

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The parsers of the words a command holds: <owner>/<repo>, <issue>, the
// durations, and the values of the other flags. Each failure is a
// *UsageError that names the word.

// Limits on <owner> and <repo>: Gitea's forms cap repository names at 100;
// owners are capped at 40 there, but older instances and imports may hold
// longer ones, and an unknown name costs only a "repository not found".
const maxRepoPartLen = 100

// Limits of the agent verbs' flags (docs/ssh.md, The agent verbs).
const (
	DefaultHistoryLimit = 20  // history without --limit
	MaxHistoryLimit     = 200 // the largest --limit
	MaxLabels           = 10  // --label given at most this often
	maxLabelLen         = 255 // bytes of one label name
)

// MinGrace is the least session --grace.
const MinGrace = 5 * time.Second

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
func ParseIssue(s string) (int64, error) { return parseNumber("issue", s) }

// ParsePull parses <pull> as ParseCommand does: as ParseIssue, with
// errors that name a pull request.
func ParsePull(s string) (int64, error) { return parseNumber("pull request", s) }

// parseNumber reads the number of an issue or pull request (what names
// it in the error lines) as ParseIssue documents.
func parseNumber(what, s string) (int64, error) {
	d := strings.TrimPrefix(s, "#")
	if d == "" || !allDigitBytes(d) {
		return 0, usageErrorf("%s must be a positive number like 42 or #42, got %s", what, quoteArg(s))
	}
	if d[0] == '0' {
		if strings.Trim(d, "0") == "" {
			return 0, usageErrorf("%s must be a positive number, got %s", what, quoteArg(s))
		}
		return 0, usageErrorf("%s must not have a leading zero, got %s", what, quoteArg(s))
	}
	n, err := strconv.ParseInt(d, 10, 64)
	if err != nil {
		return 0, usageErrorf("%s number too large, got %s", what, quoteArg(s))
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

// FormatDuration writes d, rounded to the second, the way people type it
// ("168h", "1h30m", "90s" becomes "1m30s") rather than time.Duration's
// "168h0m0s"; ParseDuration reads it back (0 is "0s").
func FormatDuration(d time.Duration) string { return formatTTL(d.Round(time.Second)) }

// formatTTL is FormatDuration of a whole number of seconds.
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

// MaxAgentLen is the longest agent name, for every transport and for
// the ledger, whose agent columns are this size (models/lease.go).
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
