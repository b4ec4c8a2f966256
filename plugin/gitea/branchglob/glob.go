// Package branchglob is Gitea's matching of branch protection rule names
// to branches, as Gitea 1.26 does it (its modules/glob and
// models/git/protected_branch.go, MIT licensed), and the naming of the
// sidecar's own rules: the push fence must find the very rule Gitea would
// apply to a branch, and make one Gitea applies to that branch alone. It
// is a leaf of plugin/gitea, so that the in-memory forge of the tests
// (plugin/forgetest) matches as Gitea does too.
//
// A rule name with none of *?\[]{} is a plain name, matched without
// regard to case (strings.EqualFold: MAIN is main's rule too); any other
// is a glob, matched with regard to case, whose * and ? stop at a slash
// and whose ** does not. The matching is in glob.go; the sidecar's rule
// names and the rules that bear on a branch, in rules.go.
package branchglob

import (
	"errors"
	"regexp"
	"strings"
)

// globSpecial reports whether c makes a rule name a glob.
func globSpecial(c byte) bool {
	return strings.IndexByte(`*?\[]{}`, c) >= 0
}

// IsGlob reports whether Gitea takes the rule name as a glob.
func IsGlob(name string) bool {
	for i := 0; i < len(name); i++ {
		if globSpecial(name[i]) {
			return true
		}
	}
	return false
}

// Quote is the branch taken literally as a rule name: itself, with any
// glob character escaped. Where that leaves a plain name, Gitea applies
// it to the branch's namesakes in other cases too (RuleName does not).
func Quote(branch string) string {
	var b strings.Builder
	for i := 0; i < len(branch); i++ {
		if globSpecial(branch[i]) {
			b.WriteByte('\\')
		}
		b.WriteByte(branch[i])
	}
	return b.String()
}

// Matches reports whether Gitea applies the rule named name to branch.
func Matches(name, branch string) bool {
	if !IsGlob(name) {
		return strings.EqualFold(name, branch)
	}
	re, err := compileGlob(name)
	if err != nil {
		// Gitea falls back to the name taken literally.
		re, _ = compileGlob(Quote(name))
	}
	return re != nil && re.MatchString(branch)
}

// compileGlob turns a glob into the regular expression Gitea's compiler
// makes of it, with / as the one separator.
func compileGlob(pattern string) (*regexp.Regexp, error) {
	g := globCompiler{pattern: []rune(pattern), nonSep: "[^/]"}
	s, err := g.compile(false)
	if err != nil {
		return nil, err
	}
	return regexp.Compile("^" + s + "$")
}

type globCompiler struct {
	pattern []rune
	pos     int
	nonSep  string
}

func (g *globCompiler) compileChars() (string, error) {
	result := ""
	if g.pos < len(g.pattern) && g.pattern[g.pos] == '!' {
		g.pos++
		result += "^"
	}
	for g.pos < len(g.pattern) {
		c := g.pattern[g.pos]
		g.pos++
		switch c {
		case ']':
			return "[" + result + "]", nil
		case '\\':
			if g.pos >= len(g.pattern) {
				return "", errors.New("unterminated character class escape")
			}
			result += "\\" + string(g.pattern[g.pos])
			g.pos++
		default:
			result += string(c)
		}
	}
	return "", errors.New("unterminated character class")
}

func (g *globCompiler) compile(sub bool) (string, error) {
	result := ""
	for g.pos < len(g.pattern) {
		c := g.pattern[g.pos]
		g.pos++
		if sub && c == '}' {
			return "(" + result + ")", nil
		}
		switch c {
		case '*':
			if g.pos < len(g.pattern) && g.pattern[g.pos] == '*' {
				g.pos++
				result += ".*"
			} else {
				result += g.nonSep + "*"
			}
		case '?':
			result += g.nonSep
		case '[':
			chars, err := g.compileChars()
			if err != nil {
				return "", err
			}
			result += chars
		case '{':
			s, err := g.compile(true)
			if err != nil {
				return "", err
			}
			result += s
		case ',':
			if sub {
				result += "|"
			} else {
				result += ","
			}
		case '\\':
			if g.pos >= len(g.pattern) {
				return "", errors.New("no character to escape")
			}
			result += "\\" + string(g.pattern[g.pos])
			g.pos++
		case '.', '+', '^', '$', '(', ')', '|':
			result += "\\" + string(c)
		default:
			result += string(c)
		}
	}
	return result, nil
}
