package branchglob

import (
	"unicode"
	"unicode/utf8"

	"github.com/collab-lease/collab-lease/plugin/forge"
)

// RuleName is the name of the sidecar's rule for branch: one Gitea
// applies to that branch and to no other. It is Quote(branch) where that
// is a glob already (globs match with regard to case), or a plain name
// no other case can spell (digits, dashes, …); otherwise the first letter
// that has another case goes between brackets, which makes the name a
// glob of exactly the branch: main's rule is [m]ain, which Gitea does not
// apply to MAIN, nor MAIN's ([M]AIN) to main. ok is false for a branch no
// name can match alone: one that is not valid UTF-8 or holds U+FFFD
// (Gitea's matching reads every invalid byte as U+FFFD, so "a\xff" and
// "a\xfe" are one name to it).
func RuleName(branch string) (name string, ok bool) {
	if branch == "" || !utf8.ValidString(branch) {
		return "", false
	}
	for _, r := range branch {
		if r == utf8.RuneError {
			return "", false
		}
	}
	q := Quote(branch)
	if IsGlob(q) {
		return q, true
	}
	for i, r := range q {
		if unicode.SimpleFold(r) != r {
			n := utf8.RuneLen(r)
			return q[:i] + "[" + q[i:i+n] + "]" + q[i+n:], true
		}
	}
	return q, true
}

// LegacyName is what sidecars before this one named the rule of branch:
// Quote(branch), which Gitea applies to the branch's namesakes in other
// cases too. ok is false where that is RuleName(branch) anyway.
func LegacyName(branch string) (name string, ok bool) {
	name, _ = RuleName(branch)
	q := Quote(branch)
	return q, q != name
}

// Rules picks out of a repository's rules those that bear on branch, as
// Gitea orders them: by priority, then plain names before globs, then by
// age; the first that matches a branch applies to it.
func Rules(rules []forge.BranchRule, branch string) forge.BranchRules {
	out := forge.BranchRules{}
	out.Name, _ = RuleName(branch)
	legacy, hasLegacy := LegacyName(branch)
	forge.SortRules(rules, IsGlob)
	for i := range rules {
		r := &rules[i]
		switch {
		case out.Exact == nil && out.Name != "" && r.Name == out.Name:
			// Gitea refuses a second rule of the same name.
			out.Exact = r
			continue
		case out.Legacy == nil && hasLegacy && r.Name == legacy:
			out.Legacy = r
			if out.Match == nil {
				out.Match = r
			}
			continue
		}
		if Matches(r.Name, branch) {
			if out.Match == nil {
				out.Match = r
			}
			if out.MatchBesideLegacy == nil {
				out.MatchBesideLegacy = r
			}
		}
	}
	return out
}
