package gitea

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/gitea/branchglob"
)

// Branch protection rules, for the push fence (verified on Gitea 1.26):
// GET, POST /repos/{o}/{r}/branch_protections; PATCH and DELETE
// …/branch_protections/{rule name}. They need a repository admin's token
// with write:repository, which the sidecar's site administrator token is
// when it has that scope. Gitea applies to a branch the first rule that
// matches it, ordered by priority (lower first), then plain names before
// globs, then creation time (plugin/gitea/branchglob matches and names
// them as Gitea does).

// The fields of a rule the fence decides about; every other field of
// Gitea's rule JSON is carried as it is (forge.BranchRule.Settings).
var ruleOwnFields = map[string]bool{
	"rule_name": true, "branch_name": true, "priority": true, "created_at": true, "updated_at": true,
	"enable_push": true, "enable_push_whitelist": true, "push_whitelist_usernames": true,
	"push_whitelist_teams": true, "push_whitelist_deploy_keys": true,
	"enable_force_push": true, "enable_force_push_allowlist": true, "force_push_allowlist_usernames": true,
	"force_push_allowlist_teams": true, "force_push_allowlist_deploy_keys": true,
}

// ruleJSON is the part of Gitea's rule JSON the fence reads.
type ruleJSON struct {
	RuleName                     string    `json:"rule_name"`
	Priority                     int64     `json:"priority"`
	Created                      time.Time `json:"created_at"`
	EnablePush                   bool      `json:"enable_push"`
	EnablePushWhitelist          bool      `json:"enable_push_whitelist"`
	PushWhitelistUsernames       []string  `json:"push_whitelist_usernames"`
	PushWhitelistTeams           []string  `json:"push_whitelist_teams"`
	PushWhitelistDeployKeys      bool      `json:"push_whitelist_deploy_keys"`
	EnableForcePush              bool      `json:"enable_force_push"`
	EnableForcePushAllowlist     bool      `json:"enable_force_push_allowlist"`
	ForcePushAllowlistUsernames  []string  `json:"force_push_allowlist_usernames"`
	ForcePushAllowlistTeams      []string  `json:"force_push_allowlist_teams"`
	ForcePushAllowlistDeployKeys bool      `json:"force_push_allowlist_deploy_keys"`
}

// decodeRule reads one rule of Gitea's JSON.
func decodeRule(raw json.RawMessage) (forge.BranchRule, error) {
	var r ruleJSON
	if err := json.Unmarshal(raw, &r); err != nil {
		return forge.BranchRule{}, err
	}
	var all map[string]any
	if err := json.Unmarshal(raw, &all); err != nil {
		return forge.BranchRule{}, err
	}
	if r.RuleName == "" {
		return forge.BranchRule{}, errors.New("a rule without a name")
	}
	settings := map[string]any{}
	for k, v := range all {
		if !ruleOwnFields[k] {
			settings[k] = v
		}
	}
	return forge.BranchRule{
		Name: r.RuleName, Priority: r.Priority, Created: r.Created,
		Push: forge.Allow{Enabled: r.EnablePush, Listed: r.EnablePushWhitelist, Users: r.PushWhitelistUsernames,
			Teams: r.PushWhitelistTeams, DeployKeys: r.PushWhitelistDeployKeys},
		ForcePush: forge.Allow{Enabled: r.EnableForcePush, Listed: r.EnableForcePushAllowlist, Users: r.ForcePushAllowlistUsernames,
			Teams: r.ForcePushAllowlistTeams, DeployKeys: r.ForcePushAllowlistDeployKeys},
		Settings: settings,
	}, nil
}

// encodeRule is the JSON of a create or an edit of r.
func encodeRule(r forge.BranchRule) map[string]any {
	body := make(map[string]any, len(r.Settings)+len(ruleOwnFields))
	for k, v := range r.Settings {
		if !ruleOwnFields[k] {
			body[k] = v
		}
	}
	list := func(s []string) []string {
		if s == nil {
			return []string{} // an edit leaves a list that is left out as it was
		}
		return s
	}
	body["rule_name"] = r.Name
	body["priority"] = r.Priority
	body["enable_push"] = r.Push.Enabled
	body["enable_push_whitelist"] = r.Push.Listed
	body["push_whitelist_usernames"] = list(r.Push.Users)
	body["push_whitelist_teams"] = list(r.Push.Teams)
	body["push_whitelist_deploy_keys"] = r.Push.DeployKeys
	body["enable_force_push"] = r.ForcePush.Enabled
	body["enable_force_push_allowlist"] = r.ForcePush.Listed
	body["force_push_allowlist_usernames"] = list(r.ForcePush.Users)
	body["force_push_allowlist_teams"] = list(r.ForcePush.Teams)
	body["force_push_allowlist_deploy_keys"] = r.ForcePush.DeployKeys
	return body
}

func (f *Forge) rulesPath(owner, name string) string {
	return "/api/v1/repos/" + owner + "/" + name + "/branch_protections"
}

// BranchRules implements fence.Forge: the repository's rules as they
// bear on branch.
func (f *Forge) BranchRules(ctx context.Context, owner, name, branch string) (forge.BranchRules, error) {
	if !validName(owner) || !validName(name) || branch == "" {
		return forge.BranchRules{}, fmt.Errorf("branch rules of %s/%s: %w", owner, name, forge.ErrNotFound)
	}
	ctx, cancel := f.within(ctx)
	defer cancel()
	var raw []json.RawMessage
	path := f.rulesPath(owner, name)
	if err := f.send(ctx, f.asAdmin(), http.MethodGet, path, nil, nil, &raw); err != nil {
		return forge.BranchRules{}, fmt.Errorf("branch rules of %s/%s: %w", owner, name, err)
	}
	rules := make([]forge.BranchRule, 0, len(raw))
	for _, r := range raw {
		rule, err := decodeRule(r)
		if err != nil {
			return forge.BranchRules{}, fmt.Errorf("GET %s: %w: malformed response: %v", path, forge.ErrUnavailable, err)
		}
		rules = append(rules, rule)
	}
	return branchglob.Rules(rules, branch), nil
}

// CreateBranchRule implements fence.Forge: POST a new rule. A rule of
// that name made meanwhile (Gitea answers 403 "Branch protection already
// exist", as it does to a token that may not) is worth another look, not
// a configuration error.
func (f *Forge) CreateBranchRule(ctx context.Context, owner, name string, r forge.BranchRule) (forge.BranchRule, error) {
	got, err := f.writeRule(ctx, http.MethodPost, owner, name, f.rulesPath(owner, name), r)
	if errors.Is(err, forge.ErrConfig) && strings.Contains(err.Error(), "already exist") {
		return got, fmt.Errorf("branch rule %q of %s/%s: %w: a rule of this name was made meanwhile", r.Name, owner, name, forge.ErrExists)
	}
	return got, err
}

// EditBranchRule implements fence.Forge: PATCH the rule named r.Name with
// every setting of r.
func (f *Forge) EditBranchRule(ctx context.Context, owner, name string, r forge.BranchRule) (forge.BranchRule, error) {
	return f.writeRule(ctx, http.MethodPatch, owner, name, f.rulesPath(owner, name)+"/"+escapeRuleName(r.Name), r)
}

func (f *Forge) writeRule(ctx context.Context, method, owner, name, path string, r forge.BranchRule) (forge.BranchRule, error) {
	if !validName(owner) || !validName(name) || r.Name == "" {
		return forge.BranchRule{}, fmt.Errorf("branch rule %q of %s/%s: %w", r.Name, owner, name, forge.ErrNotFound)
	}
	ctx, cancel := f.within(ctx)
	defer cancel()
	var raw json.RawMessage
	if err := f.send(ctx, f.asAdmin(), method, path, nil, encodeRule(r), &raw); err != nil {
		return forge.BranchRule{}, fmt.Errorf("branch rule %q of %s/%s: %w", r.Name, owner, name, err)
	}
	got, err := decodeRule(raw)
	if err != nil {
		return forge.BranchRule{}, fmt.Errorf("%s %s: %w: malformed response: %v", method, path, forge.ErrUnavailable, err)
	}
	return got, nil
}

// DeleteBranchRule implements fence.Forge: DELETE the rule named rule; a
// rule that is not there is no error.
func (f *Forge) DeleteBranchRule(ctx context.Context, owner, name, rule string) error {
	if !validName(owner) || !validName(name) || rule == "" {
		return fmt.Errorf("branch rule %q of %s/%s: %w", rule, owner, name, forge.ErrNotFound)
	}
	ctx, cancel := f.within(ctx)
	defer cancel()
	err := f.send(ctx, f.asAdmin(), http.MethodDelete, f.rulesPath(owner, name)+"/"+escapeRuleName(rule), nil, nil, nil)
	if err != nil && !errors.Is(err, forge.ErrNotFound) {
		return fmt.Errorf("branch rule %q of %s/%s: %w", rule, owner, name, err)
	}
	return nil
}

// escapeRuleName escapes a rule name for the path of send (whose
// JoinPath takes its path as escaped): each segment on its own, so that
// the name's slashes stay slashes, as Gitea's route takes the rest of the
// path as the name.
func escapeRuleName(rule string) string {
	parts := strings.Split(rule, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

// TeamMember implements fence.Forge: whether login is a member of the
// team of organization org (GET /orgs/{org}/teams/search, then GET
// /teams/{id}/members/{login}).
func (f *Forge) TeamMember(ctx context.Context, org, team, login string) (bool, error) {
	if !validName(org) || team == "" || !validName(login) {
		return false, nil
	}
	ctx, cancel := f.within(ctx)
	defer cancel()
	var found struct {
		Data []struct {
			ID   int64  `json:"id"`
			Name string `json:"name"`
		} `json:"data"`
	}
	q := url.Values{"q": {team}, "include_desc": {"false"}, "limit": {"50"}}
	err := f.send(ctx, f.asAdmin(), http.MethodGet, "/api/v1/orgs/"+org+"/teams/search", q, nil, &found)
	if errors.Is(err, forge.ErrNotFound) {
		return false, nil // not an organization: it has no teams
	}
	if err != nil {
		return false, fmt.Errorf("team %s of %s: %w", team, org, err)
	}
	for _, t := range found.Data {
		if !strings.EqualFold(t.Name, team) {
			continue
		}
		err := f.send(ctx, f.asAdmin(), http.MethodGet, fmt.Sprintf("/api/v1/teams/%d/members/%s", t.ID, login), nil, nil, nil)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, forge.ErrNotFound):
			return false, nil
		default:
			return false, fmt.Errorf("team %s of %s: %w", team, org, err)
		}
	}
	return false, nil
}
