package gitea

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	sdk "code.gitea.io/sdk/gitea"

	"github.com/collab-lease/collab-lease/plugin"
)

// Who may write a repository's issues (or pull requests), worked out the way
// Gitea itself does it (models/perm/access/repo_permission.go,
// GetIndividualUserRepoPermission and Permission.UnitAccessMode, v1.26):
//
//   - The repository is visible to the user exactly when GET /repos/{o}/{r}
//     made as the user (admin token + Sudo) answers 200; Gitea runs its own
//     permission check there (HasAnyUnitAccessOrPublicAccess, plus private
//     owners, restricted users and enforced two-factor authentication).
//   - Its "permissions.admin" is true for site administrators, the owner,
//     members of an owner team, admin collaborators and admin teams. They
//     write every enabled unit.
//   - Otherwise Gitea keeps one access mode for the repository, AccessMode,
//     which GET /repos/{o}/{r}/collaborators/{u}/permission reports. If the
//     user is in no team of the owning organization that covers the
//     repository, every unit gets AccessMode (raised by the unit's public
//     "anonymous"/"everyone" access, which Gitea caps at read for issues and
//     pull requests), so they write issues iff AccessMode >= write.
//   - If the user is in such teams, each unit gets the highest of: the
//     teams' mode for that unit (units_map), AccessMode if the user is also
//     a collaborator, and read for a public repository. So they write
//     issues iff a covering team grants write on "repo.issues", or they are
//     a collaborator and AccessMode >= write.
//   - A disabled unit (or an external tracker instead of Gitea's issues)
//     grants nothing; the covering teams are GET /user/teams (as the user)
//     intersected with GET /repos/{o}/{r}/teams.
//
// (The repository's "permissions.push" is not enough: it is the Code unit's
// mode, false for a team that may only write issues, and false for every
// non-admin when the Code unit is disabled.)
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

func atLeastWrite(m sdk.AccessMode) bool {
	return m == sdk.AccessModeWrite || atLeastAdmin(m)
}

func atLeastAdmin(m sdk.AccessMode) bool {
	return m == sdk.AccessModeAdmin || m == sdk.AccessModeOwner
}

// repoAs fetches the repository as login sees it and works out what login
// may write. The requests are independent and go out in parallel.
func (f *Forge) repoAs(ctx context.Context, login, owner, name string) (plugin.Repo, error) {
	if login == "" {
		// Anonymous viewers read public repositories and write nothing.
		repo, err := f.repoView(ctx, "", owner, name)
		if err != nil {
			return plugin.Repo{}, err
		}
		return toRepo(repo, grants{}), nil
	}

	var (
		wg       sync.WaitGroup
		repo     *sdk.Repository
		g        grants
		mine     []*sdk.Team
		covering []*sdk.Team
		errs     [5]error
	)
	wg.Go(func() { repo, errs[0] = f.repoView(ctx, login, owner, name) })
	wg.Go(func() { g.mode, errs[1] = f.accessMode(ctx, login, owner, name) })
	wg.Go(func() { g.collaborator, errs[2] = f.isCollaborator(ctx, login, owner, name) })
	wg.Go(func() { mine, errs[3] = f.userTeams(ctx, login) })
	wg.Go(func() { covering, errs[4] = f.repoTeams(ctx, owner, name) })
	wg.Wait()
	if err := worst(errs[:]); err != nil {
		return plugin.Repo{}, err
	}
	g.admin = repo.Permissions != nil && repo.Permissions.Admin
	g.teams = intersectTeams(mine, covering)
	return toRepo(repo, g), nil
}

func toRepo(repo *sdk.Repository, g grants) plugin.Repo {
	writable := !repo.Archived
	issues := repo.HasIssues && repo.InternalTracker != nil
	return plugin.Repo{
		ID:             repo.ID,
		FullName:       repo.FullName,
		Private:        repo.Private,
		CanRead:        true,
		CanWriteIssues: writable && canWrite(g, unitIssues, issues),
		CanWritePulls:  writable && canWrite(g, unitPulls, repo.HasPullRequests),
	}
}

// worst returns the most serious of errs: a configuration error first (an
// operator must act), then unavailability (retry), then not-found.
func worst(errs []error) error {
	for _, sentinel := range []error{plugin.ErrConfig, plugin.ErrUnavailable, plugin.ErrNotFound} {
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
		ids[t.ID] = true
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
	if repo.ID <= 0 || repo.FullName == "" {
		return nil, fmt.Errorf("GET /api/v1/repos/%s/%s: %w: malformed response: no id or full_name", owner, name, plugin.ErrUnavailable)
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
		return "", fmt.Errorf("%s: %w: malformed response", op, plugin.ErrUnavailable)
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
		return false, fmt.Errorf("%s: no such user: %w", op, plugin.ErrNotFound)
	}
	if err := sdkErr(op, id, resp, err); err != nil {
		return false, err
	}
	if resp.StatusCode != http.StatusNoContent {
		return false, fmt.Errorf("%s: %w: unexpected HTTP %d", op, plugin.ErrUnavailable, resp.StatusCode)
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
	return nil, fmt.Errorf("GET /api/v1/user/teams as %s: %w: more than %d teams", login, plugin.ErrUnavailable, pageSize*maxPages)
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
