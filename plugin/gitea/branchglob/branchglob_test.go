package branchglob

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/collab-lease/collab-lease/plugin/forge"
)

// Gitea's own cases (models/git/protected_branch_test.go), its matching of
// plain names without regard to case (strings.EqualFold, Unicode's simple
// folding: the Kelvin sign is a k) and of globs with regard to it, and the
// quoting of branch names with glob characters.
func TestMatchesAsGiteaDoes(t *testing.T) {
	for _, tc := range []struct {
		rule, branch string
		want         bool
	}{
		{"release/*", "release/v1.17", true},
		{"release/**/v1.17", "release/test/v1.17", true},
		{"release/**/v1.17", "release/test/1/v1.17", true},
		{"release/*/v1.17", "release/test/1/v1.17", false},
		{"release/v*", "release/v1.16", true},
		{"*", "release/v1.16", false},
		{"**", "release/v1.16", true},
		{"main", "main", true},
		{"master", "main", false},
		{"{main,dev}", "dev", true},
		{"fix-?", "fix-1", true},
		{"fix-?", "fix-/", false},
		{"v1.0", "v1x0", false}, // the dot is no wildcard
		{Quote("a{b}"), "a{b}", true},
		{Quote("a{b}"), "ab", false},
		{"[", "[", true}, // not a glob Gitea can compile: taken literally
		// A plain name, without regard to case.
		{"Main", "main", true},
		{"MAIN", "main", true},
		{"main", "MAIN", true},
		{"Dev", "dev", true},
		{"\u212aey", "key", true},  // the Kelvin sign folds to k
		{"ſtable", "STABLE", true}, // and the long s to s
		{"straße", "STRASSE", false},
		// A glob, with regard to it.
		{"ma*", "main", true},
		{"ma*", "MAIN", false},
		{"ma*", "Main", false},
		{"[M]AIN", "MAIN", true},
		{"[M]AIN", "main", false},
		{"[m]ain", "Main", false},
		{"{MAIN}", "main", false},
		{`fix-\*`, "fix-*", true},
		{`fix-\*`, "FIX-*", false},
		{"[Dd]ev", "dev", true},
		{"[Dd]ev", "DEV", false},
	} {
		if got := Matches(tc.rule, tc.branch); got != tc.want {
			t.Errorf("rule %q, branch %q: %v, want %v", tc.rule, tc.branch, got, tc.want)
		}
	}
}

// The sidecar's rule for a branch applies to it and to none of its
// namesakes, in any case.
func TestRuleNameAppliesToItsBranchAlone(t *testing.T) {
	for _, tc := range []struct{ branch, want string }{
		{"main", "[m]ain"},
		{"MAIN", "[M]AIN"},
		{"Dev", "[D]ev"},
		{"fence-pr", "[f]ence-pr"},
		{"1.2-3", "1.2-3"},         // no letter: a plain name is this branch's alone
		{"12-x", "12-[x]"},         // the first letter that has another case
		{"fix/äb", "[f]ix/äb"},     // a byte offset, not a rune's
		{"123/ä", "123/[ä]"},       // a letter of two bytes
		{"a{b}", `a\{b\}`},         // a glob already, matched with regard to case
		{"Fix*", `Fix\*`},          // so is this
		{"\u212aey", "[\u212a]ey"}, // the Kelvin sign has other cases (k, K)
	} {
		got, ok := RuleName(tc.branch)
		if !ok || got != tc.want {
			t.Errorf("RuleName(%q) = %q, %v; want %q", tc.branch, got, ok, tc.want)
		}
	}
	for _, bad := range []string{"", "a\xff", "a\ufffd"} {
		if got, ok := RuleName(bad); ok {
			t.Errorf("RuleName(%q) = %q, want none", bad, got)
		}
	}
	branches := []string{"main", "MAIN", "Main", "mAIN", "dev", "Dev", "DEV", "key", "KEY", "\u212aey", "stable", "ſtable", "STABLE",
		"fix/a", "fix/A", "FIX/a", "a{b}", "A{B}", "a{B}", "fix-*", "FIX-*", "1.2", "1x2", "straße", "STRASSE", "ǅ", "ǆ", "Ǆ"}
	for _, b := range branches {
		name, ok := RuleName(b)
		if !ok {
			t.Fatalf("RuleName(%q): none", b)
		}
		for _, other := range branches {
			if got := Matches(name, other); got != (other == b) {
				t.Errorf("the rule %q for %q applies to %q: %v", name, b, other, got)
			}
		}
		if !IsGlob(name) && strings.ToLower(b) != strings.ToUpper(b) {
			t.Errorf("the rule %q for %q is a plain name, which Gitea applies to other cases too", name, b)
		}
	}
}

// Any two branches: the rule of one applies to it and not to the other.
func FuzzRuleName(f *testing.F) {
	for _, seed := range [][2]string{{"main", "MAIN"}, {"Dev", "dev"}, {"\u212aey", "key"}, {"a{b}", "A{b}"}, {"x/**", "x/y"}, {"ǅ", "ǆ"}} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		name, ok := RuleName(a)
		if !ok {
			if a != "" && utf8.ValidString(a) && !strings.ContainsRune(a, utf8.RuneError) {
				t.Fatalf("RuleName(%q): none", a)
			}
			return
		}
		if !Matches(name, a) {
			t.Fatalf("the rule %q for %q does not apply to it", name, a)
		}
		if a != b && Matches(name, b) {
			t.Fatalf("the rule %q for %q applies to %q too", name, a, b)
		}
	})
}

func TestRulesFindsWhatGiteaWouldApply(t *testing.T) {
	at := func(s int64) time.Time { return time.Unix(1_800_000_000+s, 0) }
	rules := []forge.BranchRule{
		{Name: "work*", Priority: 2, Created: at(1)},
		{Name: "[w]ork", Priority: 9, Created: at(5)}, // the sidecar's, say
		{Name: "w*", Priority: 2, Created: at(0)},
		{Name: "main", Priority: 1, Created: at(2)},
		{Name: "WORK-1", Priority: 2, Created: at(3)},
		{Name: "work", Priority: 0, Created: at(4)}, // an earlier sidecar's, or an admin's
	}
	name := func(r *forge.BranchRule) string {
		if r == nil {
			return ""
		}
		return r.Name
	}
	for _, tc := range []struct {
		branch                                  string
		rule, exact, legacy, match, matchBeside string
	}{
		// Exact is the rule of the sidecar's name; the rule of the name
		// earlier sidecars gave is Legacy, and comes first (priority 0).
		{"work", "[w]ork", "[w]ork", "work", "work", "w*"},
		// A plain name of another case is just a rule that applies (it
		// comes before the glob of the same priority).
		{"work-1", "[w]ork-1", "", "", "WORK-1", "WORK-1"},
		{"WORK", "[W]ORK", "", "", "work", "work"},
		{"a{b}", `a\{b\}`, "", "", "", ""},
		{"main", "[m]ain", "", "main", "main", ""},
		{"x\xff", "", "", "", "", ""},
	} {
		got := Rules(append([]forge.BranchRule(nil), rules...), tc.branch)
		if got.Name != tc.rule || name(got.Exact) != tc.exact || name(got.Legacy) != tc.legacy ||
			name(got.Match) != tc.match || name(got.MatchBesideLegacy) != tc.matchBeside {
			t.Errorf("rules for %q: name %q, exact %q, legacy %q, match %q, beside %q; want %q %q %q %q %q", tc.branch,
				got.Name, name(got.Exact), name(got.Legacy), name(got.Match), name(got.MatchBesideLegacy),
				tc.rule, tc.exact, tc.legacy, tc.match, tc.matchBeside)
		}
	}
	if got := Rules(nil, "x"); got.Match != nil || got.Exact != nil || got.Legacy != nil {
		t.Fatalf("no rules: %+v", got)
	}
}
