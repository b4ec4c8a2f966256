package forgetest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/gitea/branchglob"
)

// Branch protection rules in memory, for the push fence's tests. The
// rules that bear on a branch are found as Gitea finds them
// (plugin/gitea/branchglob).

// AddBranchRule puts an admin's rule into repository fullName; a zero
// Created is now.
func (f *Forge) AddBranchRule(fullName string, r forge.BranchRule) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Created.IsZero() {
		r.Created = f.ruleTime()
	}
	key := strings.ToLower(fullName)
	f.rules[key] = append(f.rules[key], cloneRule(r))
}

// SetTeam makes logins the members of team of organization org.
func (f *Forge) SetTeam(org, team string, logins ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.teams[strings.ToLower(org)+"/"+team] = slices.Clone(logins)
}

// BranchRule returns repository fullName's rule named name, if any.
func (f *Forge) BranchRule(fullName, name string) (forge.BranchRule, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.rules[strings.ToLower(fullName)] {
		if r.Name == name {
			return cloneRule(r), true
		}
	}
	return forge.BranchRule{}, false
}

// ruleTime is a creation time after every other, as the forge's clock
// would give (whole seconds, as Gitea's).
func (f *Forge) ruleTime() time.Time {
	f.ruleClock++
	return time.Unix(1_800_000_000+f.ruleClock, 0)
}

func cloneRule(r forge.BranchRule) forge.BranchRule {
	r.Push.Users, r.Push.Teams = slices.Clone(r.Push.Users), slices.Clone(r.Push.Teams)
	r.ForcePush.Users, r.ForcePush.Teams = slices.Clone(r.ForcePush.Users), slices.Clone(r.ForcePush.Teams)
	if r.Settings != nil {
		s := make(map[string]any, len(r.Settings))
		for k, v := range r.Settings {
			s[k] = v
		}
		r.Settings = s
	}
	return r
}

// BranchRules implements fence.Forge.
func (f *Forge) BranchRules(ctx context.Context, owner, name, branch string) (forge.BranchRules, error) {
	if err := f.enter(ctx, "BranchRules"); err != nil {
		return forge.BranchRules{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.repos[strings.ToLower(owner+"/"+name)]; !ok {
		return forge.BranchRules{}, fmt.Errorf("forgetest BranchRules %s/%s: %w", owner, name, forge.ErrNotFound)
	}
	rules := make([]forge.BranchRule, 0, len(f.rules[strings.ToLower(owner+"/"+name)]))
	for _, r := range f.rules[strings.ToLower(owner+"/"+name)] {
		rules = append(rules, cloneRule(r))
	}
	return branchglob.Rules(rules, branch), nil
}

// CreateBranchRule implements fence.Forge.
func (f *Forge) CreateBranchRule(ctx context.Context, owner, name string, r forge.BranchRule) (forge.BranchRule, error) {
	if err := f.enter(ctx, "CreateBranchRule"); err != nil {
		return forge.BranchRule{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	key := strings.ToLower(owner + "/" + name)
	for _, have := range f.rules[key] {
		if have.Name == r.Name {
			return forge.BranchRule{}, fmt.Errorf("forgetest CreateBranchRule %s: %w", r.Name, forge.ErrExists)
		}
	}
	r = cloneRule(r)
	r.Created = f.ruleTime()
	f.rules[key] = append(f.rules[key], r)
	return cloneRule(r), nil
}

// EditBranchRule implements fence.Forge.
func (f *Forge) EditBranchRule(ctx context.Context, owner, name string, r forge.BranchRule) (forge.BranchRule, error) {
	if err := f.enter(ctx, "EditBranchRule"); err != nil {
		return forge.BranchRule{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	rules := f.rules[strings.ToLower(owner+"/"+name)]
	for i, have := range rules {
		if have.Name == r.Name {
			r = cloneRule(r)
			r.Created = have.Created
			rules[i] = r
			return cloneRule(r), nil
		}
	}
	return forge.BranchRule{}, fmt.Errorf("forgetest EditBranchRule %s: %w", r.Name, forge.ErrNotFound)
}

// DeleteBranchRule implements fence.Forge.
func (f *Forge) DeleteBranchRule(ctx context.Context, owner, name, rule string) error {
	if err := f.enter(ctx, "DeleteBranchRule"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	key := strings.ToLower(owner + "/" + name)
	f.rules[key] = slices.DeleteFunc(f.rules[key], func(r forge.BranchRule) bool { return r.Name == rule })
	return nil
}

// TeamMember implements fence.Forge.
func (f *Forge) TeamMember(ctx context.Context, org, team, login string) (bool, error) {
	if err := f.enter(ctx, "TeamMember"); err != nil {
		return false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.teams[strings.ToLower(org)+"/"+team], login), nil
}
