package forge

import (
	"sort"
	"time"
)

// Branch protection rules, as the push fence reads and writes them. Only
// what the fence decides about is named; the rule's other settings
// (required approvals, status checks, merge allowlists, …) travel in
// Settings, as the forge spelled them, so that a rule the fence makes
// can carry them unchanged.

// Allow is who a rule lets push (or force-push) to its branches.
type Allow struct {
	Enabled    bool     // anyone may at all
	Listed     bool     // only those listed (else every writer)
	Users      []string // logins, when Listed
	Teams      []string // team names, when Listed
	DeployKeys bool     // deploy keys with write access too, when Listed
}

// BranchRule is one branch protection rule of a repository.
type BranchRule struct {
	Name      string // the branch name or glob pattern it is for
	Priority  int64  // lower applies first
	Created   time.Time
	Push      Allow
	ForcePush Allow
	// Settings are the rule's other settings, opaque to the fence.
	Settings map[string]any
}

// BranchRules is what the forge says of the rules of one branch.
type BranchRules struct {
	// Name is what the forge names a rule for exactly this branch: one
	// it applies to this branch and to no other. "" where no name can
	// (the fence then leaves the branch alone).
	Name string
	// Exact is the rule of that name, if any (the fence's own, or an
	// admin's).
	Exact *BranchRule
	// Legacy is the rule named as earlier sidecars named their rule for
	// this branch, if any, where that name is not Name: it may be an
	// earlier sidecar's rule, which the fence replaces, or an admin's.
	Legacy *BranchRule
	// Match is the rule that would apply to the branch without Exact,
	// if any: of the other rules that match the branch (Legacy among
	// them), the one the forge takes first, so none of them has a lower
	// priority.
	Match *BranchRule
	// MatchBesideLegacy is Match with Legacy gone too.
	MatchBesideLegacy *BranchRule
}

// SortRules puts rules in the order the forge applies them to a branch
// (the first that matches applies): priority, lower first; then plain
// names before patterns (isPattern tells them apart); then the older
// first.
func SortRules(rules []BranchRule, isPattern func(name string) bool) {
	sort.SliceStable(rules, func(i, j int) bool {
		a, b := rules[i], rules[j]
		if a.Priority != b.Priority {
			return a.Priority < b.Priority
		}
		if isPattern(a.Name) != isPattern(b.Name) {
			return !isPattern(a.Name)
		}
		return a.Created.Before(b.Created)
	})
}
