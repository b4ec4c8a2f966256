package fence

import (
	"testing"

	"github.com/collab-lease/collab-lease/plugin/forge"
)

// The sidecar's rule goes before every rule that matches its branch, and
// keeps its place once it has it: the rules of two fenced branches do not
// push each other's priorities ever lower, since neither matches the
// other's branch.
func TestFirstPriority(t *testing.T) {
	rule := func(p int64) *forge.BranchRule { return &forge.BranchRule{Priority: p} }
	for _, tc := range []struct {
		name         string
		exact, match *forge.BranchRule
		want         int64
	}{
		{"alone", nil, nil, -1},
		{"before a match", nil, rule(3), 2},
		{"never 0, the forge's last", nil, rule(1), -1},
		{"before a negative match", nil, rule(-4), -5},
		{"kept while first", rule(-7), rule(3), -7},
		{"kept with no match", rule(-1), nil, -1},
		{"moved before a match that came first", rule(5), rule(2), 1},
		{"moved off 0", rule(0), nil, -1},
	} {
		if got := firstPriority(forge.BranchRules{Exact: tc.exact, Match: tc.match}); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// A setting absent on one side counts as the forge's default, so a rule
// made with no admin's rule to carry is not edited over and over.
func TestSameSettingsTakesAbsentAsTheDefault(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b map[string]any
		want bool
	}{
		{"both empty", nil, map[string]any{}, true},
		{"defaults on one side only", map[string]any{"required_approvals": float64(0), "enable_status_check": false, "status_check_contexts": nil}, nil, true},
		{"null and empty lists", map[string]any{"status_check_contexts": nil}, map[string]any{"status_check_contexts": []any{}}, true},
		{"a setting the other lacks", map[string]any{"required_approvals": float64(2)}, nil, false},
		{"a setting that differs", map[string]any{"status_check_contexts": []any{"ci"}}, map[string]any{"status_check_contexts": []any{"ci", "lint"}}, false},
	} {
		if got := sameSettings(tc.a, tc.b); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
		if got := sameSettings(tc.b, tc.a); got != tc.want {
			t.Errorf("%s, the other way: %v, want %v", tc.name, got, tc.want)
		}
	}
	// An edit names the forge's default of what should no longer be set.
	got := withDefaults(map[string]any{"required_approvals": float64(1)}, map[string]any{"required_approvals": float64(2), "enable_status_check": true, "status_check_contexts": []any{"ci"}, "protected_file_patterns": "*.lock"})
	if !sameSettings(got, map[string]any{"required_approvals": float64(1)}) || len(got) != 4 {
		t.Fatalf("withDefaults: %v", got)
	}
}
