package gitea

import (
	"testing"

	sdk "code.gitea.io/sdk/gitea"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// The write rules, one row per way Gitea grants (or withholds) write access
// to a repository's issues and pull requests.
func TestWriteRules(t *testing.T) {
	team := func(perm string, units map[string]string) *sdk.Team {
		return &sdk.Team{ID: 1, Permission: sdk.AccessMode(perm), UnitsMap: units}
	}
	issuesOnly := team("none", map[string]string{"repo.issues": "write", "repo.code": "read"})
	pullsOnly := team("none", map[string]string{"repo.pulls": "write"})
	readAll := team("read", map[string]string{"repo.code": "read", "repo.issues": "read", "repo.pulls": "read"})
	// A team created with permission "write" plus a units map: Gitea
	// records "write" as the repository-wide mode, but the units decide.
	writeButReadUnits := team("write", map[string]string{"repo.issues": "read", "repo.pulls": "read"})

	tests := []struct {
		name          string
		g             grants
		issues, pulls bool // units enabled
		archived      bool
		wantIssues    bool
		wantPulls     bool
	}{
		{"site admin, owner, owner team, admin collaborator", grants{admin: true, mode: "owner"}, true, true, false, true, true},
		{"admin, issues disabled", grants{admin: true, mode: "owner"}, false, true, false, false, true},
		{"admin, archived", grants{admin: true, mode: "owner"}, true, true, true, false, false},
		{"write collaborator", grants{mode: "write", collaborator: true}, true, true, false, true, true},
		{"read collaborator", grants{mode: "read", collaborator: true}, true, true, false, false, false},
		{"public repository, no grant", grants{mode: "read"}, true, true, false, false, false},
		{"no access", grants{mode: "none"}, true, true, false, false, false},
		{"write collaborator, pulls disabled", grants{mode: "write", collaborator: true}, true, false, false, true, false},
		{"team: issues unit only", grants{mode: "none", teams: []*sdk.Team{issuesOnly}}, true, true, false, true, false},
		{"team: pulls unit only", grants{mode: "none", teams: []*sdk.Team{pullsOnly}}, true, true, false, false, true},
		{"two unit teams", grants{mode: "none", teams: []*sdk.Team{issuesOnly, pullsOnly}}, true, true, false, true, true},
		{"read team", grants{mode: "read", teams: []*sdk.Team{readAll}}, true, true, false, false, false},
		{"read team and write collaborator", grants{mode: "write", collaborator: true, teams: []*sdk.Team{readAll}}, true, true, false, true, true},
		{"write-mode team with read units", grants{mode: "write", teams: []*sdk.Team{writeButReadUnits}}, true, true, false, false, false},
		{"write-mode team with read units, also a collaborator", grants{mode: "write", collaborator: true, teams: []*sdk.Team{writeButReadUnits}}, true, true, false, true, true},
		{"team: issues unit, issues disabled", grants{mode: "none", teams: []*sdk.Team{issuesOnly}}, false, true, false, false, false},
		{"team: issues unit, archived", grants{mode: "none", teams: []*sdk.Team{issuesOnly}}, true, true, true, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			repo := &sdk.Repository{
				ID: 9, FullName: "acme/widgets", Archived: tt.archived,
				HasIssues: tt.issues, HasPullRequests: tt.pulls,
				Permissions: &sdk.Permission{Admin: tt.g.admin},
			}
			if tt.issues {
				repo.InternalTracker = &sdk.InternalTracker{}
			}
			got := toRepo(repo, tt.g)
			got.CanReadIssues, got.CanReadPulls = false, false // TestReadRules
			// Admin is Gitea's admin permission, whatever the units and
			// even when archived: who may force-release what is held.
			want := forge.Repo{ID: 9, FullName: "acme/widgets", CanRead: true, CanWriteIssues: tt.wantIssues, CanWritePulls: tt.wantPulls, Admin: tt.g.admin}
			if got != want {
				t.Errorf("toRepo = %+v, want %+v", got, want)
			}
		})
	}
}

// The read rules of a repository the user may read at all: which of its
// issues and pull requests they see.
func TestReadRules(t *testing.T) {
	team := func(perm string, units map[string]string) *sdk.Team {
		return &sdk.Team{ID: 1, Permission: sdk.AccessMode(perm), UnitsMap: units}
	}
	issuesOnly := team("none", map[string]string{"repo.issues": "write"})
	pullsRead := team("none", map[string]string{"repo.pulls": "read"})
	tests := []struct {
		name                   string
		g                      grants
		private, issues, pulls bool
		wantIssues, wantPulls  bool
	}{
		{"admin", grants{admin: true}, true, true, true, true, true},
		{"collaborator", grants{mode: "read", collaborator: true, teams: []*sdk.Team{issuesOnly}}, true, true, true, true, true},
		{"no team covers it", grants{mode: "read"}, true, true, true, true, true},
		{"team: issues only", grants{teams: []*sdk.Team{issuesOnly}}, true, true, true, true, false},
		{"team: pulls read only", grants{teams: []*sdk.Team{pullsRead}}, true, true, true, false, true},
		{"team: issues only, public repository", grants{teams: []*sdk.Team{issuesOnly}}, false, true, true, true, true},
		{"pulls disabled", grants{mode: "read"}, true, true, false, true, false},
		{"issues disabled", grants{mode: "read"}, true, false, true, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			repo := &sdk.Repository{ID: 9, FullName: "acme/widgets", Private: tt.private,
				HasIssues: tt.issues, HasPullRequests: tt.pulls, Permissions: &sdk.Permission{Admin: tt.g.admin}}
			if tt.issues {
				repo.InternalTracker = &sdk.InternalTracker{}
			}
			got := toRepo(repo, tt.g)
			if got.CanReadIssues != tt.wantIssues || got.CanReadPulls != tt.wantPulls {
				t.Errorf("reads issues %v, pulls %v; want %v, %v", got.CanReadIssues, got.CanReadPulls, tt.wantIssues, tt.wantPulls)
			}
		})
	}
}

// An external issue tracker is "has_issues" in Gitea's API, but there are no
// Gitea issues to lease.
func TestExternalTrackerGrantsNoIssues(t *testing.T) {
	repo := &sdk.Repository{ID: 9, FullName: "acme/widgets", HasIssues: true, HasPullRequests: true, ExternalTracker: &sdk.ExternalTracker{}}
	got := toRepo(repo, grants{admin: true})
	if got.CanWriteIssues || !got.CanWritePulls {
		t.Errorf("toRepo = %+v", got)
	}
}
