package fence

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// The push fence. While an open pull request whose head is in its own
// repository, or an issue it closes, is claimed, its head branch carries
// a branch protection rule of the sidecar's, named so that the forge
// applies it to that branch and no other (forge.BranchRules.Name) and
// applied before every other rule that matches the branch, that lets
// only the holders' accounts push. No live claim: no rule.
//
// The rule adds a restriction and removes none: it carries every other
// setting of the rule that would apply to the branch without it (the
// admin's: approvals, status checks, merge allowlists, …), and lets push
// (and force-push) only those holders that rule lets: every writer
// becomes the holders; an allowlist becomes the holders on it (by name
// or team), possibly nobody; no pushes stays no pushes. Deploy keys are
// not holders.
//
// The forge cannot tell the sidecar's rules from an admin's, so the
// ledger records which rules the sidecar made (models.FenceRule),
// before it asks the forge to make one: the worker edits and removes
// only those, and where an admin's rule already has the name it would
// give its own it leaves the branch alone (and records that, for doctor).

// branchKey is one branch of one repository.
type branchKey struct {
	repoID int64
	branch string
}

// fenceBranches recomputes the push fence of every branch in marked.
func (w *Worker) fenceBranches(ctx context.Context, marked map[branchKey]struct{}, states map[branchKey]*state, names *repoNames) {
	for _, k := range inOrder(marked, func(a, b branchKey) int {
		return cmp.Or(cmp.Compare(a.repoID, b.repoID), strings.Compare(a.branch, b.branch))
	}) {
		if ctx.Err() != nil {
			return
		}
		st := stateOf(states, k)
		// One replica at a time keeps a branch's rule: a replica acting
		// on a read of the record and of the forge that another is
		// changing could delete the record of a rule just made, which
		// would then pass for an admin's.
		var outcome string
		ran, err := w.ledger.Exclusive(ctx, models.ChoreOfBranch(k.repoID, k.branch), func(ctx context.Context) error {
			var err error
			outcome, err = w.fenceBranch(ctx, k, st, names)
			return err
		})
		if err == nil && !ran {
			st.backOff(w.o.Now()) // another replica is at it: look again after it
			continue
		}
		if err != nil {
			st.backOff(w.o.Now())
			w.observePush("failed")
			if w.o.Log != nil {
				w.o.Log("keeping a pushed-branch fence failed; retrying", "repo_id", k.repoID, "branch", k.branch, "attempt", st.failed, "err", err)
			}
			continue
		}
		st.failed, st.retryAt = 0, time.Time{}
		if outcome != "" {
			w.observePush(outcome)
		}
		if st.posted == "" {
			delete(states, k) // no rule of ours there: nothing to remember
		}
	}
}

func (w *Worker) observePush(outcome string) {
	if w.o.ObservePush != nil {
		w.o.ObservePush(outcome)
	}
}

// fenceBranch brings the branch's rule to what the ledger says now, and
// returns what it did to it ("made", "updated", "removed", or "" for
// nothing).
func (w *Worker) fenceBranch(ctx context.Context, k branchKey, st *state, names *repoNames) (string, error) {
	var holders []string
	if w.o.FencePushes {
		var err error
		if holders, err = w.holders(ctx, k); err != nil {
			return "", err
		}
	}
	sig := strings.Join(holders, "\x00")
	if sig != "" && sig == st.posted {
		return "", nil // this rule stands already
	}
	rec, err := w.ledger.FenceRuleOf(ctx, k.repoID, k.branch)
	if err != nil {
		return "", err
	}
	st.posted = ""
	if len(holders) == 0 && (rec == nil || rec.Admin) {
		if rec != nil {
			return "", w.ledger.DropFenceRule(ctx, k.repoID, k.branch)
		}
		return "", nil
	}
	full, err := names.get(ctx, w, k.repoID)
	if errors.Is(err, forge.ErrNotFound) {
		// Gone, or not visible to the sidecar's token now: its rules
		// too, or not. The record stays, so that a rule that is still
		// there is never taken for an admin's once the repository is
		// seen again.
		return "", nil
	}
	if err != nil {
		return "", err
	}
	owner, name, _ := strings.Cut(full, "/")
	rules, err := w.forge.BranchRules(ctx, owner, name, k.branch)
	if err != nil {
		return "", err
	}
	// Read again, after the forge's answer: a rule another replica made
	// meanwhile was recorded before it was made, so it is seen here as
	// the sidecar's, never taken for an admin's.
	if rec, err = w.ledger.FenceRuleOf(ctx, k.repoID, k.branch); err != nil {
		return "", err
	}
	// A rule of the exact name is the sidecar's if the ledger says it
	// made it: with the same creation time, or an unknown one (the
	// sidecar stopped between making it and recording when).
	ours := rules.Exact != nil && rec != nil && !rec.Admin && (rec.Created <= 0 || rec.Created == rules.Exact.Created.Unix())
	// Earlier sidecars named their rule as the branch itself, which the
	// forge may apply to the branch's namesakes in other cases too
	// (MAIN's rule to main). Such a rule, if the ledger says it is the
	// sidecar's, is replaced by one of the new name: made first, so that
	// the branch is never unfenced between, then removed.
	legacy := rules.Legacy != nil && rec != nil && !rec.Admin && legacyIntent(rec.Created, rules.Legacy)
	if legacy {
		rules.Match = rules.MatchBesideLegacy
	}
	dropLegacy := func() error {
		if !legacy {
			return nil
		}
		return w.forge.DeleteBranchRule(ctx, owner, name, rules.Legacy.Name)
	}
	if len(holders) == 0 || rules.Name == "" {
		if len(holders) > 0 && w.o.Log != nil {
			w.o.Log("not fencing pushes to a branch: no rule name applies to it alone (its name is not valid UTF-8, or holds U+FFFD)", "repo", full, "branch", k.branch)
		}
		outcome := ""
		if ours {
			if err := w.forge.DeleteBranchRule(ctx, owner, name, rules.Exact.Name); err != nil {
				return "", err
			}
			outcome = "removed"
		}
		if legacy {
			if err := dropLegacy(); err != nil {
				return "", err
			}
			outcome = "removed"
		}
		return outcome, w.ledger.DropFenceRule(ctx, k.repoID, k.branch)
	}
	if rules.Exact != nil && !ours {
		if err := dropLegacy(); err != nil {
			return "", err
		}
		if rec == nil || !rec.Admin {
			if w.o.Log != nil {
				w.o.Log("not fencing pushes to a branch: an admin's branch protection rule has the name the sidecar gives its own (collab-sidecar doctor lists these)", "repo", full, "branch", k.branch, "rule", rules.Name)
			}
			return "", w.ledger.SaveFenceRule(ctx, models.FenceRule{RepoID: k.repoID, Branch: k.branch, Admin: true})
		}
		return "", nil
	}
	want, err := w.pushRule(ctx, owner, rules, holders)
	if err != nil {
		return "", err
	}
	if rules.Exact == nil {
		// Recorded first: a crash after the forge made it leaves a rule
		// the next start knows is the sidecar's.
		if rec == nil {
			err = w.ledger.IntendFenceRule(ctx, k.repoID, k.branch)
		} else {
			var replaced *forge.BranchRule
			if legacy {
				replaced = rules.Legacy
			}
			err = w.ledger.SaveFenceRule(ctx, models.FenceRule{RepoID: k.repoID, Branch: k.branch, Created: intent(replaced)})
		}
		if err != nil {
			return "", err
		}
		made, err := w.forge.CreateBranchRule(ctx, owner, name, want)
		if errors.Is(err, forge.ErrExists) {
			// A rule of the branch's name was made between the look at
			// the forge's rules and this answer, and not by a replica
			// (they take turns at a branch): an admin's. Taking it for
			// the one this intent was for would edit it.
			if err := dropLegacy(); err != nil {
				return "", err
			}
			if w.o.Log != nil {
				w.o.Log("not fencing pushes to a branch: an admin made a branch protection rule of the name the sidecar gives its own (collab-sidecar doctor lists these)", "repo", full, "branch", k.branch, "rule", rules.Name)
			}
			return "", w.ledger.SaveFenceRule(ctx, models.FenceRule{RepoID: k.repoID, Branch: k.branch, Admin: true})
		}
		if err != nil {
			return "", err
		}
		if err := dropLegacy(); err != nil {
			return "", err
		}
		if err := w.ledger.SaveFenceRule(ctx, models.FenceRule{RepoID: k.repoID, Branch: k.branch, Created: made.Created.Unix()}); err != nil {
			return "", err
		}
		st.posted = sig
		return "made", nil
	}
	outcome := ""
	if !sameRule(*rules.Exact, want) {
		// An edit leaves a setting it does not name as it was: name, as
		// the forge's default, each one the rule should no longer carry.
		want.Settings = withDefaults(want.Settings, rules.Exact.Settings)
		if _, err := w.forge.EditBranchRule(ctx, owner, name, want); err != nil {
			return "", err
		}
		outcome = "updated"
	}
	if legacy {
		if err := dropLegacy(); err != nil {
			return "", err
		}
		outcome = "updated"
	}
	if rec.Created <= 0 {
		if err := w.ledger.SaveFenceRule(ctx, models.FenceRule{RepoID: k.repoID, Branch: k.branch, Created: rules.Exact.Created.Unix()}); err != nil {
			return "", err
		}
	}
	st.posted = sig
	return outcome, nil
}

// The ledger's record of a branch's rule says, in Created, whose rules
// are the sidecar's (models.FenceRule): the forge's creation time of its
// rule; while it makes one, a negative intent; 0, where an earlier
// sidecar was making its rule (of the name it gave).

// intent is what the record says while the sidecar makes its rule: any
// rule of its name is its own, and so is replaced (an earlier sidecar's
// rule it replaces), if not nil.
func intent(replaced *forge.BranchRule) int64 {
	if replaced != nil && replaced.Created.Unix() > 1 {
		return -replaced.Created.Unix()
	}
	return -1
}

// legacyIntent reports whether a record whose Created is created says
// that r, a rule of the name earlier sidecars gave, is the sidecar's: it
// made r (created is r's creation time), an earlier sidecar was making
// it (0), or the sidecar is replacing it (intent).
func legacyIntent(created int64, r *forge.BranchRule) bool {
	t := r.Created.Unix()
	return created == 0 || t > 1 && (created == t || created == -t)
}

// holders are the accounts (logins, sorted) that may push to the branch
// now: for each open pull request of the repository with that head
// branch, the holder of the pull request's own claim, else the holders
// of the issues it closes. The expiry of every lease it reads goes on the
// bus's queue, so that the fence is recomputed at that instant.
func (w *Worker) holders(ctx context.Context, k branchKey) ([]string, error) {
	pulls, err := w.ledger.PullsOnBranch(ctx, k.repoID, k.branch)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range pulls {
		leases, err := w.ledger.Leases(ctx, p.RepoID, p.Links)
		if err != nil {
			return nil, err
		}
		own := slices.IndexFunc(leases, func(l models.Lease) bool { return l.Issue == p.Number })
		for i, l := range leases {
			if l.ExpiresAt != nil {
				w.bus.ExpireAt(l.Key, *l.ExpiresAt)
			}
			if (own < 0 || i == own) && l.Holder.Login != "" {
				out = append(out, l.Holder.Login)
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out), nil
}

// pushRule is the rule the branch should carry for holders, given the
// repository's rules as they bear on it.
func (w *Worker) pushRule(ctx context.Context, owner string, rules forge.BranchRules, holders []string) (forge.BranchRule, error) {
	want := forge.BranchRule{Name: rules.Name, Priority: firstPriority(rules)}
	m := rules.Match
	if m == nil {
		// An unprotected branch: every writer could push and force-push.
		every := forge.Allow{Enabled: true}
		m = &forge.BranchRule{Push: every, ForcePush: every}
	}
	want.Settings = maps.Clone(m.Settings)
	if _, ok := want.Settings[unprotectedFiles]; ok {
		// A push that touches only these files the forge takes from any
		// writer, allowlist or not: a lapsed holder's too. The fence
		// lets only the holders push, whatever the push touches.
		want.Settings[unprotectedFiles] = ""
	}
	var err error
	if want.Push, err = w.narrow(ctx, owner, m.Push, holders); err != nil {
		return want, err
	}
	if want.ForcePush, err = w.narrow(ctx, owner, m.ForcePush, holders); err != nil {
		return want, err
	}
	return want, nil
}

// unprotectedFiles is the setting of a rule whose files anyone who may
// write the repository may push to, as Gitea names it.
const unprotectedFiles = "unprotected_file_patterns"

// firstPriority is a priority that puts the sidecar's rule before every
// other rule that matches the branch (only those compete for it): the
// one it has if it does already, else one less than the first of them.
// Rules of other branches are left out, or the rules of two fenced
// branches would push each other's priorities ever lower. Never 0, which
// the forge takes for "last".
func firstPriority(rules forge.BranchRules) int64 {
	if e := rules.Exact; e != nil && e.Priority != 0 && (rules.Match == nil || e.Priority < rules.Match.Priority) {
		return e.Priority
	}
	p := int64(-1)
	if rules.Match != nil {
		p = rules.Match.Priority - 1
	}
	if p == 0 {
		p = -1
	}
	return p
}

// narrow is a, restricted to the holders it lets push.
func (w *Worker) narrow(ctx context.Context, owner string, a forge.Allow, holders []string) (forge.Allow, error) {
	if !a.Enabled {
		return forge.Allow{}, nil
	}
	out := forge.Allow{Enabled: true, Listed: true, Users: []string{}}
	for _, h := range holders {
		ok := !a.Listed || slices.ContainsFunc(a.Users, func(u string) bool { return strings.EqualFold(u, h) })
		for _, team := range a.Teams {
			if ok {
				break
			}
			in, err := w.forge.TeamMember(ctx, owner, team, h)
			if err != nil {
				return forge.Allow{}, fmt.Errorf("is %s in team %s: %w", h, team, err)
			}
			ok = in
		}
		if ok {
			out.Users = append(out.Users, h)
		}
	}
	return out, nil
}

// sameRule reports whether the forge's rule have already is want.
func sameRule(have, want forge.BranchRule) bool {
	return have.Priority == want.Priority && sameAllow(have.Push, want.Push) && sameAllow(have.ForcePush, want.ForcePush) &&
		sameSettings(have.Settings, want.Settings)
}

func sameAllow(a, b forge.Allow) bool {
	fold := func(s []string) []string {
		out := make([]string, len(s))
		for i, x := range s {
			out[i] = strings.ToLower(x)
		}
		sort.Strings(out)
		return out
	}
	return a.Enabled == b.Enabled && a.Listed == b.Listed && a.DeployKeys == b.DeployKeys &&
		slices.Equal(fold(a.Users), fold(b.Users)) && slices.Equal(fold(a.Teams), fold(b.Teams))
}

// sameSettings compares the settings the forge showed, taking a setting
// absent from one side as the forge's default (false, 0, "", none).
func sameSettings(a, b map[string]any) bool {
	for k, v := range a {
		w, ok := b[k]
		if ok && !reflect.DeepEqual(v, w) && !(isDefault(v) && isDefault(w)) || !ok && !isDefault(v) {
			return false
		}
	}
	for k, w := range b {
		if _, ok := a[k]; !ok && !isDefault(w) {
			return false
		}
	}
	return true
}

// withDefaults is want, plus the forge's default of every setting that
// only have names.
func withDefaults(want, have map[string]any) map[string]any {
	out := make(map[string]any, len(want)+len(have))
	for k, v := range have {
		switch v.(type) {
		case bool:
			out[k] = false
		case float64:
			out[k] = float64(0)
		case string:
			out[k] = ""
		case []any, nil:
			out[k] = []any{}
		}
	}
	for k, v := range want {
		out[k] = v
	}
	return out
}

// isDefault reports whether v (decoded JSON) is a setting's default.
func isDefault(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case bool:
		return !v
	case float64:
		return v == 0
	case string:
		return v == ""
	case []any:
		return len(v) == 0
	}
	return false
}
