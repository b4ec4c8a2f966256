package gitea

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	sdk "code.gitea.io/sdk/gitea"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// Who may write a repository's issues (or pull requests), worked out the way
// Gitea itself does it (models/perm/access/repo_permission.go,
// GetIndividualUserRepoPermission and Permission.UnitAccessMode, v1.26):
//
//   - The repository is visible to the user exactly when GET /repos/{o}/{r}
//     made as the user (admin token + Sudo) answers 200: Gitea runs its own
//     permission check there (any unit readable, or public access; private
//     owners; restricted users; enforced two-factor authentication).
//   - Its "permissions.admin" is true for site administrators, the owner,
//     members of an owner or admin team, and admin collaborators. They
//     write every enabled unit.
//   - Otherwise Gitea keeps one repository-wide access mode, which
//     GET /repos/{o}/{r}/collaborators/{u}/permission reports. If no team of
//     the owning organization that the user is in covers the repository,
//     every unit gets that mode (raised by the unit's public "anonymous" or
//     "everyone" access, which Gitea caps at read for issues and pull
//     requests): the user writes issues iff the mode is at least write. The
//     Code unit's "permissions.push" shows exactly that when the Code unit
//     is enabled, which saves the extra request.
//   - If teams of the user do cover the repository (GET /user/teams as the
//     user, intersected with GET /repos/{o}/{r}/teams), each unit gets the
//     highest of: the teams' mode for that unit (units_map), the
//     repository-wide mode if the user is also a collaborator, and read for
//     a public repository. So they write issues iff a covering team grants
//     write on "repo.issues", or they are a collaborator whose mode is at
//     least write.
//   - A disabled unit (or an external tracker instead of Gitea's issues)
//     grants nothing.
//
// ("permissions.push" alone is not the answer: it is the Code unit's mode,
// false for a team that may only write issues, and false for everyone but
// admins when the Code unit is disabled.)
//
// An archived repository is read-only in Gitea's interface (no new issues,
// no comments, no pushes), so nobody may take a lease there: this is the one
// rule that is ours, not Gitea's permission model.

// Gitea's unit names in a team's units_map.
const (
	unitIssues = "repo.issues"
	unitPulls  = "repo.pulls"
)

// grants is what Gitea says about one user and one repository.
type grants struct {
	admin        bool           // permissions.admin of the user's repository view
	mode         sdk.AccessMode // the repository-wide AccessMode
	collaborator bool           // the user is a collaborator of the repository
	teams        []*sdk.Team    // the user's teams that cover the repository
}

// canWrite tells whether g grants write on the unit, if enabled.
func canWrite(g grants, unit string, enabled bool) bool {
	if !enabled {
		return false
	}
	if g.admin {
		return true
	}
	if len(g.teams) == 0 {
		return atLeastWrite(g.mode)
	}
	if g.collaborator && atLeastWrite(g.mode) {
		return true
	}
	for _, t := range g.teams {
		if atLeastWrite(sdk.AccessMode(t.UnitsMap[unit])) || atLeastAdmin(t.Permission) {
			return true
		}
	}
	return false
}

// canRead tells whether g lets the user see the unit, if enabled, of a
// repository the user may read at all: everyone reads a public
// repository's units; otherwise as canWrite, one level lower.
func canRead(g grants, unit string, enabled, public bool) bool {
	switch {
	case !enabled:
		return false
	case g.admin, public, len(g.teams) == 0, g.collaborator:
		return true
	}
	for _, t := range g.teams {
		if m := sdk.AccessMode(t.UnitsMap[unit]); m == sdk.AccessModeRead || atLeastWrite(m) || atLeastAdmin(t.Permission) {
			return true
		}
	}
	return false
}

func atLeastWrite(m sdk.AccessMode) bool {
	return m == sdk.AccessModeWrite || atLeastAdmin(m)
}

func atLeastAdmin(m sdk.AccessMode) bool {
	return m == sdk.AccessModeAdmin || m == sdk.AccessModeOwner
}

// repoAs fetches the repository as login sees it and works out what login
// may write. Independent requests go out in parallel, in at most two
// rounds: the user's view and teams first; then, only if needed, the
// access mode, the collaborator check and the repository's teams.
func (f *Forge) repoAs(ctx context.Context, login, owner, name string) (forge.Repo, error) {
	if login == "" {
		// Anonymous viewers read public repositories and write nothing.
		repo, err := f.repoView(ctx, "", owner, name)
		if err != nil {
			return forge.Repo{}, err
		}
		return toRepo(repo, grants{}), nil
	}

	var (
		wg   sync.WaitGroup
		repo *sdk.Repository
		mine []*sdk.Team
		errs [3]error
	)
	wg.Go(func() { repo, errs[0] = f.repoView(ctx, login, owner, name) })
	wg.Go(func() { mine, errs[1] = f.userTeams(ctx, login) })
	wg.Wait()
	if err := worst(errs[:]); err != nil {
		return forge.Repo{}, err
	}
	g := grants{admin: repo.Permissions.Admin}
	inOrg := teamsOf(mine, repo.Owner.ID)
	switch {
	case g.admin:
		return toRepo(repo, g), nil
	case len(inOrg) == 0 && repo.HasCode:
		// No team can cover the repository, so every unit has the
		// repository-wide mode, and the Code unit's "push" shows it.
		g.mode = sdk.AccessModeRead
		if repo.Permissions.Push {
			g.mode = sdk.AccessModeWrite
		}
		return toRepo(repo, g), nil
	}

	// Name the repository as it is now (the request may have come through
	// a redirect from an old name).
	owner, name = repo.Owner.UserName, repo.Name
	var covering []*sdk.Team
	wg.Go(func() { g.mode, errs[0] = f.accessMode(ctx, login, owner, name) })
	if len(inOrg) > 0 {
		wg.Go(func() { g.collaborator, errs[1] = f.isCollaborator(ctx, login, owner, name) })
		wg.Go(func() { covering, errs[2] = f.repoTeams(ctx, owner, name) })
	}
	wg.Wait()
	if err := worst(errs[:]); err != nil {
		return forge.Repo{}, err
	}
	g.teams = intersectTeams(inOrg, covering)
	return toRepo(repo, g), nil
}

// teamsOf returns the teams that belong to the organization orgID.
func teamsOf(teams []*sdk.Team, orgID int64) []*sdk.Team {
	var out []*sdk.Team
	for _, t := range teams {
		if t != nil && t.Organization != nil && t.Organization.ID == orgID {
			out = append(out, t)
		}
	}
	return out
}

func toRepo(repo *sdk.Repository, g grants) forge.Repo {
	writable := !repo.Archived
	issues := repo.HasIssues && repo.InternalTracker != nil
	return forge.Repo{
		ID:             repo.ID,
		FullName:       repo.FullName,
		Private:        repo.Private,
		CanRead:        true,
		CanWriteIssues: writable && canWrite(g, unitIssues, issues),
		CanWritePulls:  writable && canWrite(g, unitPulls, repo.HasPullRequests),
		CanReadIssues:  canRead(g, unitIssues, issues, !repo.Private),
		CanReadPulls:   canRead(g, unitPulls, repo.HasPullRequests, !repo.Private),
		Admin:          g.admin,
	}
}

// worst returns the most serious of errs: a configuration error first (an
// operator must act), then unavailability (retry), then not-found.
func worst(errs []error) error {
	for _, sentinel := range []error{forge.ErrConfig, forge.ErrRateLimited, forge.ErrUnavailable, forge.ErrNotFound} {
		for _, err := range errs {
			if errors.Is(err, sentinel) {
				return err
			}
		}
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// intersectTeams returns the teams of mine that are also in covering.
func intersectTeams(mine, covering []*sdk.Team) []*sdk.Team {
	ids := make(map[int64]bool, len(covering))
	for _, t := range covering {
		if t != nil {
			ids[t.ID] = true
		}
	}
	var out []*sdk.Team
	for _, t := range mine {
		if ids[t.ID] {
			out = append(out, t)
		}
	}
	return out
}

// repoView is GET /repos/{o}/{r} as login (or anonymously).
func (f *Forge) repoView(ctx context.Context, login, owner, name string) (*sdk.Repository, error) {
	id := f.asViewer(login)
	repo, resp, err := f.sdk(ctx, id).GetRepo(owner, name)
	if err := sdkErr("GET /api/v1/repos/"+owner+"/"+name, id, resp, err); err != nil {
		return nil, err
	}
	if repo.ID <= 0 || repo.FullName == "" || repo.Name == "" || repo.Owner == nil || repo.Owner.ID <= 0 || repo.Owner.UserName == "" {
		return nil, fmt.Errorf("GET /api/v1/repos/%s/%s: %w: malformed response: no id, name or owner", owner, name, forge.ErrUnavailable)
	}
	if repo.Permissions == nil {
		repo.Permissions = &sdk.Permission{} // anonymous views carry none
	}
	return repo, nil
}

// accessMode is the repository-wide AccessMode Gitea computes for login.
func (f *Forge) accessMode(ctx context.Context, login, owner, name string) (sdk.AccessMode, error) {
	id := f.asAdmin()
	p, resp, err := f.sdk(ctx, id).CollaboratorPermission(owner, name, login)
	op := fmt.Sprintf("GET /api/v1/repos/%s/%s/collaborators/%s/permission", owner, name, login)
	if err := sdkErr(op, id, resp, err); err != nil {
		return "", err
	}
	if p == nil {
		return "", fmt.Errorf("%s: %w: malformed response", op, forge.ErrUnavailable)
	}
	return p.Permission, nil
}

// isCollaborator is GET /repos/{o}/{r}/collaborators/{u}: 204 yes, 404 no,
// 422 no such user. (The SDK reports every status but 204 as "no", so
// check it here.)
func (f *Forge) isCollaborator(ctx context.Context, login, owner, name string) (bool, error) {
	id := f.asAdmin()
	yes, resp, err := f.sdk(ctx, id).IsCollaborator(owner, name, login)
	op := fmt.Sprintf("GET /api/v1/repos/%s/%s/collaborators/%s", owner, name, login)
	if resp != nil && resp.StatusCode == http.StatusNotFound {
		return false, nil
	}
	if resp != nil && resp.StatusCode == http.StatusUnprocessableEntity {
		return false, fmt.Errorf("%s: no such user: %w", op, forge.ErrNotFound)
	}
	if err := sdkErr(op, id, resp, err); err != nil {
		return false, err
	}
	if resp.StatusCode != http.StatusNoContent {
		return false, fmt.Errorf("%s: %w: unexpected HTTP %d", op, forge.ErrUnavailable, resp.StatusCode)
	}
	return yes, nil
}

// userTeams is GET /user/teams as login: all of login's teams in every
// organization, with their units_map.
func (f *Forge) userTeams(ctx context.Context, login string) ([]*sdk.Team, error) {
	const pageSize, maxPages = 50, 20
	id := f.asViewer(login)
	c := f.sdk(ctx, id)
	var all []*sdk.Team
	for page := 1; page <= maxPages; page++ {
		teams, resp, err := c.ListMyTeams(&sdk.ListTeamsOptions{ListOptions: sdk.ListOptions{Page: page, PageSize: pageSize}})
		if err := sdkErr("GET /api/v1/user/teams", id, resp, err); err != nil {
			return nil, err
		}
		all = append(all, teams...)
		if len(teams) < pageSize {
			return all, nil
		}
	}
	return nil, fmt.Errorf("GET /api/v1/user/teams as %s: %w: more than %d teams", login, forge.ErrUnavailable, pageSize*maxPages)
}

// repoTeams is GET /repos/{o}/{r}/teams: the teams that cover the
// repository. Gitea answers 405 for a repository not owned by an
// organization, which has no teams.
func (f *Forge) repoTeams(ctx context.Context, owner, name string) ([]*sdk.Team, error) {
	id := f.asAdmin()
	teams, resp, err := f.sdk(ctx, id).GetRepoTeams(owner, name)
	if resp != nil && resp.StatusCode == http.StatusMethodNotAllowed {
		return nil, nil
	}
	if err := sdkErr("GET /api/v1/repos/"+owner+"/"+name+"/teams", id, resp, err); err != nil {
		return nil, err
	}
	return teams, nil
}
