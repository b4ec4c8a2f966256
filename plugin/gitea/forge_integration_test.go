package gitea

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/collab-lease/collab-lease/integration"
	"github.com/collab-lease/collab-lease/plugin/clocktest"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// The Forge against a real Gitea 1.26, seeded with integration.Seed. One
// Gitea serves every subtest; the subtests that change Gitea use things of
// their own, and the outage comes last.
func TestForgeAgainstGitea(t *testing.T) {
	g := integration.NewGitea(t)
	w := integration.SeedWorld(t, g)
	ctx := context.Background()

	// The Forge runs with the least a token needs: read:user,
	// read:repository and read:issue, of a site administrator.
	var tok struct {
		SHA1 string `json:"sha1"`
	}
	basic := &integration.API{URL: g.URL, User: w.Admin.Login, Password: w.Admin.Password}
	if err := basic.Do(ctx, "POST", "/users/"+w.Admin.Login+"/tokens", map[string]any{
		"name": "forge-read-only", "scopes": []string{"read:user", "read:repository", "read:issue"},
	}, &tok); err != nil {
		t.Fatal(err)
	}
	clk := clocktest.New()
	f, err := New(Options{URL: g.URL, Token: tok.SHA1, Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("permissions", func(t *testing.T) { testPermissions(t, f, w) })
	t.Run("permissions agree with what Gitea enforces", func(t *testing.T) { testPermissionOracle(t, g, f, w) })
	t.Run("more ways Gitea grants and withholds", func(t *testing.T) { testMoreGrants(t, g, f, w) })
	t.Run("keys", func(t *testing.T) { testKeys(t, g, f, w, clk) })
	t.Run("issues", func(t *testing.T) { testIssues(t, g, f, w) })
	t.Run("tokens", func(t *testing.T) { testTokens(t, g, f, w) })
	t.Run("token scopes", func(t *testing.T) { testTokenScopes(t, g, f, w) })
	t.Run("users by login", func(t *testing.T) { testUserByLogin(t, g, f, w) })
	t.Run("rename keeps the ID", func(t *testing.T) { testRename(t, g, f, w, clk) })
	t.Run("bad admin tokens", func(t *testing.T) { testBadAdminTokens(t, g, w) })
	t.Run("system webhook", func(t *testing.T) { testWebhook(t, g, f, w) })
	t.Run("reconcile's questions", func(t *testing.T) { testReconcileQuestions(t, f, w) })
	t.Run("next's questions", func(t *testing.T) { testNext(t, g, f, w) })
	t.Run("outage", func(t *testing.T) { testOutage(t, g, f, w, clk) })
}

// access is the expected view of one user on one repository: "-" not
// found, "r" read only, "ri" read and write issues, "rp" read and write
// pulls, "rip" read and write both.
type access string

func (a access) repo(r forge.Repo) access {
	s := "r"
	if r.CanWriteIssues {
		s += "i"
	}
	if r.CanWritePulls {
		s += "p"
	}
	return access(s)
}

func testPermissions(t *testing.T, f *Forge, w *integration.World) {
	// Columns: Widgets (public, org), Secret (private, org), Notes
	// (private, Alice's).
	rows := []struct {
		login                  string
		widgets, secret, notes access
		why                    string
	}{
		{"", "r", "-", "-", "anonymous: public repositories, read only"},
		{w.Admin.Login, "rip", "rip", "rip", "site administrator"},
		{w.Alice.Login, "rip", "rip", "rip", "write collaborator; owner of Notes"},
		{w.Bob.Login, "rip", "-", "-", "write collaborator on Widgets"},
		{w.Carol.Login, "r", "r", "r", "read collaborator"},
		{w.Dave.Login, "ri", "ri", "-", "team with write on the Issues unit only"},
		{w.Grace.Login, "rp", "rp", "-", "team with write on the Pull Requests unit only"},
		{w.Heidi.Login, "r", "rip", "-", "admin collaborator on Secret"},
		{w.Olivia.Login, "rip", "rip", "-", "Owners team of the organization"},
		{w.Erin.Login, "r", "-", "-", "no access: public repositories only"},
		// Permissions say what Gitea grants; that Frank and Ivan may not
		// log in stops them at key resolution.
		{w.Frank.Login, "rip", "-", "-", "write collaborator, prohibited from login"},
		{w.Ivan.Login, "rip", "-", "-", "write collaborator, not activated"},
		{"nobody-by-this-name", "-", "-", "-", "no such user"},
	}
	for _, row := range rows {
		for _, c := range []struct {
			repo integration.Repo
			want access
		}{{w.Widgets, row.widgets}, {w.Secret, row.secret}, {w.Notes, row.notes}} {
			t.Run(fmt.Sprintf("%s on %s", or(row.login, "anonymous"), c.repo.FullName()), func(t *testing.T) {
				r, err := f.Repo(context.Background(), row.login, c.repo.Owner, c.repo.Name)
				got := access("-")
				switch {
				case err == nil:
					got = access("").repo(r)
					if r.ID != c.repo.ID || r.FullName != c.repo.FullName() || !r.CanRead {
						t.Errorf("Repo = %+v, want ID %d, %s, CanRead", r, c.repo.ID, c.repo.FullName())
					}
					if r.Private != (c.repo != w.Widgets) {
						t.Errorf("Private = %v", r.Private)
					}
				case !errors.Is(err, forge.ErrNotFound):
					t.Fatalf("err = %v, want nil or ErrNotFound", err)
				}
				if got != c.want {
					t.Errorf("%s (%s): got %q, want %q", row.login, row.why, got, c.want)
				}
			})
		}
	}
	t.Run("a repository that does not exist", func(t *testing.T) {
		for _, login := range []string{"", w.Admin.Login, w.Alice.Login} {
			if _, err := f.Repo(context.Background(), login, w.Org, "no-such-repo"); !errors.Is(err, forge.ErrNotFound) {
				t.Errorf("as %q: %v, want ErrNotFound", login, err)
			}
			if _, err := f.Repo(context.Background(), login, "no-such-owner", "widgets"); !errors.Is(err, forge.ErrNotFound) {
				t.Errorf("as %q: %v, want ErrNotFound", login, err)
			}
		}
	})
}

// oracle asks Gitea whether login may write issue (or pull request) n of r:
// it removes a label that does not exist from it, as the user. Gitea
// answers 403 unless the user may write that unit (CanWriteIssuesOrPulls),
// 422 (no such label) if they may, and 404 if they cannot see the issue;
// nothing changes either way. "-" not visible, "r" read, "w" write.
func oracle(t *testing.T, g *integration.Gitea, login string, r integration.Repo, n int64) access {
	t.Helper()
	err := g.As(login).Do(context.Background(), "DELETE", fmt.Sprintf("/repos/%s/issues/%d/labels/987654321", r.FullName(), n), nil, nil)
	var apiErr *integration.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("oracle for %s on %s#%d: %v", login, r.FullName(), n, err)
	}
	switch apiErr.Status {
	case http.StatusNotFound:
		return "-"
	case http.StatusForbidden:
		return "r"
	case http.StatusUnprocessableEntity:
		return "w"
	}
	t.Fatalf("oracle for %s on %s#%d: %v", login, r.FullName(), n, err)
	return ""
}

// forgeView is the Forge's answer in the oracle's terms.
func forgeView(r forge.Repo, err error, write func(forge.Repo) bool) access {
	switch {
	case err != nil:
		return "-"
	case write(r):
		return "w"
	}
	return "r"
}

func canWriteIssues(r forge.Repo) bool { return r.CanWriteIssues }
func canWritePulls(r forge.Repo) bool  { return r.CanWritePulls }

// testPermissionOracle checks the Forge's write answers against Gitea's own
// enforcement: removing a label that does not exist from an issue (or pull
// request), as the user. Gitea answers 403 unless the user may write that
// issue's unit (CanWriteIssuesOrPulls), 422 (no such label) if they may,
// and 404 if they cannot see it; nothing changes either way.
func testPermissionOracle(t *testing.T, g *integration.Gitea, f *Forge, w *integration.World) {
	ctx := context.Background()
	type item struct {
		repo       integration.Repo
		issue, pul int64
	}
	for _, it := range []item{{w.Widgets, w.OpenIssue, w.PullRequest}, {w.Secret, w.SecretIssue, w.SecretPull}, {w.Notes, w.NotesIssue, 0}} {
		for _, u := range append(w.Users(), &integration.User{Login: "nobody-by-this-name"}) {
			r, err := f.Repo(ctx, u.Login, it.repo.Owner, it.repo.Name)
			if err != nil && !errors.Is(err, forge.ErrNotFound) {
				t.Fatal(err)
			}
			if got, want := forgeView(r, err, canWriteIssues), oracle(t, g, u.Login, it.repo, it.issue); got != want {
				t.Errorf("%s on %s issues: forge %q, Gitea %q", u.Login, it.repo.FullName(), got, want)
			}
			if it.pul == 0 {
				continue
			}
			if got, want := forgeView(r, err, canWritePulls), oracle(t, g, u.Login, it.repo, it.pul); got != want {
				t.Errorf("%s on %s pulls: forge %q, Gitea %q", u.Login, it.repo.FullName(), got, want)
			}
		}
	}
}

// testMoreGrants sets up rarer grants in repositories of their own and
// checks the Forge against Gitea's enforcement (the oracle) for each.
func testMoreGrants(t *testing.T, g *integration.Gitea, f *Forge, w *integration.World) {
	ctx := context.Background()
	admin := g.Admin()
	newUser := func(login string) {
		must(t, admin.Do(ctx, "POST", "/admin/users", map[string]any{
			"username": login, "email": login + "@example.com", "password": "Secret-0123456789", "must_change_password": false,
		}, nil))
	}
	newTeam := func(name string, body map[string]any, member string, repo integration.Repo) int64 {
		var team struct{ ID int64 }
		body["name"] = name
		must(t, admin.Do(ctx, "POST", "/orgs/"+w.Org+"/teams", body, &team))
		must(t, admin.Do(ctx, "PUT", fmt.Sprintf("/teams/%d/members/%s", team.ID, member), nil, nil))
		must(t, admin.Do(ctx, "PUT", fmt.Sprintf("/teams/%d/repos/%s", team.ID, repo.FullName()), nil, nil))
		return team.ID
	}
	collab := func(r integration.Repo, login, perm string) {
		must(t, admin.Do(ctx, "PUT", "/repos/"+r.FullName()+"/collaborators/"+login, map[string]any{"permission": perm}, nil))
	}
	newIssue := func(r integration.Repo) int64 {
		var is struct{ Number int64 }
		must(t, admin.Do(ctx, "POST", "/repos/"+r.FullName()+"/issues", map[string]any{"title": "an issue"}, &is))
		return is.Number
	}
	newRepo := func(name string, edit map[string]any) integration.Repo {
		must(t, admin.Do(ctx, "POST", "/orgs/"+w.Org+"/repos", map[string]any{"name": name, "auto_init": true}, nil))
		if edit != nil {
			must(t, admin.Do(ctx, "PATCH", "/repos/"+w.Org+"/"+name, edit, nil))
		}
		return integration.Repo{Owner: w.Org, Name: name}
	}
	for _, u := range []string{"uma", "trent", "vera", "walt"} {
		newUser(u)
	}

	// An issue tracker without code: "permissions.push" is false for
	// every non-admin there, yet writers write its issues.
	tracker := newRepo("tracker", nil)
	trackerIssue := newIssue(tracker)
	collab(tracker, "uma", "write")
	// A classic write team (all units).
	newTeam("writers", map[string]any{"permission": "write", "units": []string{"repo.code", "repo.issues", "repo.pulls"}}, "trent", tracker)
	// A team created with permission "write" but read-only issues: the
	// units decide, unless the member is also a write collaborator (Gitea
	// then gives every unit the collaborator's mode).
	mixed := newTeam("mixed", map[string]any{"permission": "write", "units_map": map[string]string{
		"repo.code": "write", "repo.issues": "read",
	}}, "vera", tracker)
	must(t, admin.Do(ctx, "PUT", fmt.Sprintf("/teams/%d/members/walt", mixed), nil, nil))
	collab(tracker, "vera", "read")
	collab(tracker, "walt", "write")
	// Only now: Gitea lets nobody add a team to a repository without code
	// (it checks admin access on the Code unit).
	must(t, admin.Do(ctx, "PATCH", "/repos/"+tracker.FullName(), map[string]any{"has_code": false, "has_pull_requests": false}, nil))

	want := map[string]access{"uma": "w", "trent": "w", "vera": "r", "walt": "w", w.Bob.Login: "r", w.Dave.Login: "r"}
	for login, expected := range want {
		r, err := f.Repo(ctx, login, tracker.Owner, tracker.Name)
		if err != nil && !errors.Is(err, forge.ErrNotFound) {
			t.Fatal(err)
		}
		got, truth := forgeView(r, err, canWriteIssues), oracle(t, g, login, tracker, trackerIssue)
		if got != truth {
			t.Errorf("%s on %s issues: forge %q, Gitea %q", login, tracker.FullName(), got, truth)
		}
		if got != expected {
			t.Errorf("%s on %s issues: %q, want %q", login, tracker.FullName(), got, expected)
		}
		if err == nil && r.CanWritePulls {
			t.Errorf("%s writes pull requests of %s, which has none", login, tracker.FullName())
		}
	}

	// Withheld: issues disabled, and an archived repository.
	noIssues := newRepo("no-issues", map[string]any{"has_issues": false})
	collab(noIssues, w.Bob.Login, "write")
	if r, err := f.Repo(ctx, w.Bob.Login, noIssues.Owner, noIssues.Name); err != nil || r.CanWriteIssues || !r.CanWritePulls {
		t.Errorf("write collaborator, issues disabled: %+v %v", r, err)
	}
	attic := newRepo("attic", nil)
	collab(attic, w.Bob.Login, "write")
	must(t, admin.Do(ctx, "PATCH", "/repos/"+attic.FullName(), map[string]any{"archived": true}, nil))
	for _, login := range []string{w.Bob.Login, w.Admin.Login} {
		if r, err := f.Repo(ctx, login, attic.Owner, attic.Name); err != nil || r.CanWriteIssues || r.CanWritePulls || !r.CanRead {
			t.Errorf("%s on an archived repository: %+v %v, want read only", login, r, err)
		}
	}
}

func testKeys(t *testing.T, g *integration.Gitea, f *Forge, w *integration.World, clk *clocktest.Clock) {
	ctx := context.Background()
	for _, u := range []*integration.User{w.Admin, w.Alice, w.Bob, w.Carol, w.Dave, w.Erin, w.Grace, w.Heidi, w.Olivia} {
		got, err := f.UserByKey(ctx, u.Key.Fingerprint)
		if err != nil || got != (forge.User{ID: u.ID, Login: u.Login}) {
			t.Errorf("key of %s: %+v %v", u.Login, got, err)
		}
	}
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	unknown, _ := ssh.NewPublicKey(priv.Public())
	for name, fp := range map[string]string{
		"an unknown key": ssh.FingerprintSHA256(unknown),
		"a deploy key":   w.DeployKey.Fingerprint,
		"the key of a user prohibited from login": w.Frank.Key.Fingerprint,
		"the key of a user not activated":         w.Ivan.Key.Fingerprint,
	} {
		if u, err := f.UserByKey(ctx, fp); !errors.Is(err, forge.ErrNotFound) {
			t.Errorf("%s: %+v %v, want ErrNotFound", name, u, err)
		}
	}

	// A deleted key keeps working until its cache entry expires.
	erin := w.Erin
	if err := g.Admin().Do(ctx, "DELETE", fmt.Sprintf("/admin/users/%s/keys/%d", erin.Login, erin.Key.ID), nil, nil); err != nil {
		t.Fatal(err)
	}
	if u, err := f.UserByKey(ctx, erin.Key.Fingerprint); err != nil || u.Login != erin.Login {
		t.Errorf("deleted key within its cache lifetime: %+v %v", u, err)
	}
	clk.Advance(DefaultKeyCacheTTL)
	if u, err := f.UserByKey(ctx, erin.Key.Fingerprint); !errors.Is(err, forge.ErrNotFound) {
		t.Errorf("deleted key after its cache lifetime: %+v %v, want ErrNotFound", u, err)
	}
}

func testIssues(t *testing.T, g *integration.Gitea, f *Forge, w *integration.World) {
	ctx := context.Background()
	cases := []struct {
		login string
		repo  integration.Repo
		n     int64
		want  forge.Issue
		err   error
	}{
		{w.Alice.Login, w.Widgets, w.OpenIssue, forge.Issue{Number: w.OpenIssue}, nil},
		{w.Alice.Login, w.Widgets, w.ClosedIssue, forge.Issue{Number: w.ClosedIssue, Closed: true}, nil},
		{w.Alice.Login, w.Widgets, w.PullRequest, forge.Issue{Number: w.PullRequest, IsPull: true}, nil},
		{"", w.Widgets, w.OpenIssue, forge.Issue{Number: w.OpenIssue}, nil},
		{w.Carol.Login, w.Secret, w.SecretIssue, forge.Issue{Number: w.SecretIssue}, nil},
		{w.Grace.Login, w.Secret, w.SecretPull, forge.Issue{Number: w.SecretPull, IsPull: true}, nil},
		// Dave's team grants the Issues unit only: he sees the repository
		// and its issues, not its pull requests.
		{w.Dave.Login, w.Secret, w.SecretIssue, forge.Issue{Number: w.SecretIssue}, nil},
		{w.Dave.Login, w.Secret, w.SecretPull, forge.Issue{}, forge.ErrNotFound},
		{"", w.Secret, w.SecretIssue, forge.Issue{}, forge.ErrNotFound},
		{w.Erin.Login, w.Secret, w.SecretIssue, forge.Issue{}, forge.ErrNotFound},
		{w.Erin.Login, w.Notes, w.NotesIssue, forge.Issue{}, forge.ErrNotFound},
		{w.Alice.Login, w.Widgets, 9999, forge.Issue{}, forge.ErrNotFound},
		{w.Alice.Login, integration.Repo{Owner: w.Org, Name: "no-such-repo"}, 1, forge.Issue{}, forge.ErrNotFound},
	}
	for _, c := range cases {
		got, err := f.Issue(ctx, c.login, c.repo.Owner, c.repo.Name, c.n)
		if err == nil && (got.Updated.IsZero() || time.Since(got.Updated) > time.Hour) {
			t.Errorf("Issue(%q, %s#%d) updated at %s, want the seeding's time", c.login, c.repo.FullName(), c.n, got.Updated)
		}
		got.Updated = time.Time{}
		if !errors.Is(err, c.err) || (c.err == nil && err != nil) || got != c.want {
			t.Errorf("Issue(%q, %s#%d) = %+v, %v; want %+v, %v", c.login, c.repo.FullName(), c.n, got, err, c.want, c.err)
		}
	}

	// Fresh every time: closing an issue shows at once.
	var is struct{ Number int64 }
	if err := g.Admin().Do(ctx, "POST", "/repos/"+w.Widgets.FullName()+"/issues", map[string]any{"title": "to be closed"}, &is); err != nil {
		t.Fatal(err)
	}
	if got, err := f.Issue(ctx, w.Bob.Login, w.Widgets.Owner, w.Widgets.Name, is.Number); err != nil || got.Closed {
		t.Fatalf("new issue: %+v %v", got, err)
	}
	if err := g.Admin().Do(ctx, "PATCH", fmt.Sprintf("/repos/%s/issues/%d", w.Widgets.FullName(), is.Number), map[string]any{"state": "closed"}, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := f.Issue(ctx, w.Bob.Login, w.Widgets.Owner, w.Widgets.Name, is.Number); err != nil || !got.Closed {
		t.Errorf("issue just closed: %+v %v", got, err)
	}
}

func testTokens(t *testing.T, g *integration.Gitea, f *Forge, w *integration.World) {
	ctx := context.Background()
	for _, u := range []*integration.User{w.Alice, w.Carol, w.Admin} {
		if got, err := f.UserByToken(ctx, u.Token); err != nil || got != (forge.User{ID: u.ID, Login: u.Login}) {
			t.Errorf("token of %s: %+v %v", u.Login, got, err)
		}
	}
	if got, err := f.UserByToken(ctx, "0123456789abcdef0123456789abcdef01234567"); !errors.Is(err, forge.ErrNotFound) {
		t.Errorf("unknown token: %+v %v, want ErrNotFound", got, err)
	}
}

// newToken creates an access token of u with these scopes, as u (Gitea
// creates tokens only with the user's own password).
func newToken(t *testing.T, g *integration.Gitea, u *integration.User, name string, scopes ...string) string {
	t.Helper()
	var tok struct {
		SHA1 string `json:"sha1"`
	}
	basic := &integration.API{URL: g.URL, User: u.Login, Password: u.Password}
	if err := basic.Do(context.Background(), "POST", "/users/"+u.Login+"/tokens", map[string]any{"name": name, "scopes": scopes}, &tok); err != nil {
		t.Fatal(err)
	}
	return tok.SHA1
}

// testTokenScopes checks that a token is honoured within its scopes
// (docs/http.md, "Who sees what"): Carol reads the private Secret and the public Widgets, and
// shows them through tokens of various scopes.
func testTokenScopes(t *testing.T, g *integration.Gitea, f *Forge, w *integration.World) {
	ctx := context.Background()
	carol := forge.User{ID: w.Carol.ID, Login: w.Carol.Login}
	units := func(r forge.Repo) string {
		s := ""
		if r.CanReadIssues {
			s += "i"
		}
		if r.CanReadPulls {
			s += "p"
		}
		return s
	}
	// view is what TokenRepo says: "-" not found, else the readable
	// units ("" none, "ip" both).
	view := func(r forge.Repo, err error) string {
		switch {
		case errors.Is(err, forge.ErrNotFound):
			return "-"
		case err != nil:
			t.Fatalf("TokenRepo: %v", err)
		case !r.CanRead:
			t.Errorf("TokenRepo = %+v: want read", r)
		}
		return units(r)
	}
	rows := []struct {
		name            string
		scopes          []string
		secret, widgets string
	}{
		{"repository and issues", []string{"read:repository", "read:issue"}, "ip", "ip"},
		{"write scopes include read", []string{"write:repository", "write:issue"}, "ip", "ip"},
		{"all", []string{"all"}, "ip", "ip"},
		{"user only", []string{"read:user"}, "-", "-"},
		{"issues without the repository", []string{"read:user", "read:issue"}, "-", "-"},
		{"repository without issues", []string{"read:repository"}, "", ""},
		{"public only", []string{"public-only", "read:repository", "read:issue"}, "-", "ip"},
	}
	for i, row := range rows {
		token := newToken(t, g, w.Carol, fmt.Sprintf("scopes-%d", i), row.scopes...)
		for _, c := range []struct {
			repo integration.Repo
			want string
		}{{w.Secret, row.secret}, {w.Widgets, row.widgets}} {
			if got := view(f.TokenRepo(ctx, carol, token, c.repo.Owner, c.repo.Name)); got != c.want {
				t.Errorf("%s (%v) on %s: %q, want %q", row.name, row.scopes, c.repo.FullName(), got, c.want)
			}
		}
	}

	// Gitea refuses a missing scope before it looks for the repository
	// (403 for one that exists and one that does not), and a public-only
	// token on a private repository with 403 too.
	statusOf := func(token, path string) int {
		err := (&integration.API{URL: g.URL, Token: token}).Do(ctx, "GET", path, nil, nil)
		var apiErr *integration.APIError
		if errors.As(err, &apiErr) {
			return apiErr.Status
		}
		if err != nil {
			t.Fatal(err)
		}
		return http.StatusOK
	}
	userOnly := newToken(t, g, w.Carol, "user-only", "read:user")
	publicOnly := newToken(t, g, w.Carol, "public-only", "public-only", "read:repository", "read:issue")
	for _, c := range []struct {
		token, path string
		want        int
	}{
		{userOnly, "/repos/" + w.Secret.FullName(), http.StatusForbidden},
		{userOnly, "/repos/" + w.Org + "/no-such-repo", http.StatusForbidden},
		{userOnly, "/repos/" + w.Secret.FullName() + "/labels?limit=1", http.StatusForbidden},
		{publicOnly, "/repos/" + w.Secret.FullName(), http.StatusForbidden},
		{publicOnly, "/repos/" + w.Secret.FullName() + "/labels?limit=1", http.StatusForbidden},
		{publicOnly, "/repos/" + w.Org + "/no-such-repo", http.StatusNotFound},
		{w.Erin.Token, "/repos/" + w.Secret.FullName(), http.StatusNotFound},
	} {
		if got := statusOf(c.token, c.path); got != c.want {
			t.Errorf("GET %s: HTTP %d, want %d", c.path, got, c.want)
		}
	}

	// The token never sees more than its user: Dave's team grants the
	// Issues unit only, Erin nothing on Secret.
	if got := view(f.TokenRepo(ctx, forge.User{ID: w.Dave.ID, Login: w.Dave.Login}, w.Dave.Token, w.Secret.Owner, w.Secret.Name)); got != "i" {
		t.Errorf("Dave's all-scopes token on %s: %q, want issues only", w.Secret.FullName(), got)
	}
	if got := view(f.TokenRepo(ctx, forge.User{ID: w.Erin.ID, Login: w.Erin.Login}, w.Erin.Token, w.Secret.Owner, w.Secret.Name)); got != "-" {
		t.Errorf("Erin's token on %s: %q, want not found", w.Secret.FullName(), got)
	}
	// Nor through a token of another user.
	if got := view(f.TokenRepo(ctx, carol, w.Erin.Token, w.Secret.Owner, w.Secret.Name)); got != "-" {
		t.Errorf("Erin's token as Carol on %s: %q, want not found", w.Secret.FullName(), got)
	}

	// Write through a token needs write:issue (or "all") and keeps what
	// the user may write: Alice writes Secret, Dave its issues only.
	for i, c := range []struct {
		u      *integration.User
		scopes []string
		want   access
	}{
		{w.Alice, []string{"read:repository", "read:issue"}, "r"},
		{w.Alice, []string{"write:repository", "read:issue"}, "r"},
		{w.Alice, []string{"read:repository", "write:issue"}, "rip"},
		{w.Alice, []string{"all"}, "rip"},
		{w.Dave, []string{"read:repository", "write:issue"}, "ri"},
		{w.Carol, []string{"read:repository", "write:issue"}, "r"},
	} {
		u := forge.User{ID: c.u.ID, Login: c.u.Login}
		token := newToken(t, g, c.u, fmt.Sprintf("write-%d", i), c.scopes...)
		r, err := f.TokenRepo(ctx, u, token, w.Secret.Owner, w.Secret.Name)
		if err != nil || access("").repo(r) != c.want {
			t.Errorf("%s's token %v on %s: %+v %v, want %q", c.u.Login, c.scopes, w.Secret.FullName(), r, err, c.want)
		}
	}

	// A deleted token is refused (after the cache lifetime of the answer).
	token := newToken(t, g, w.Carol, "to-be-deleted", "read:repository", "read:issue")
	if got := view(f.TokenRepo(ctx, carol, token, w.Notes.Owner, w.Notes.Name)); got != "ip" {
		t.Fatalf("before deletion: %q", got)
	}
	basic := &integration.API{URL: g.URL, User: w.Carol.Login, Password: w.Carol.Password}
	if err := basic.Do(ctx, "DELETE", "/users/"+w.Carol.Login+"/tokens/to-be-deleted", nil, nil); err != nil {
		t.Fatal(err)
	}
	fresh, err := New(Options{URL: g.URL, Token: g.AdminToken, PermCacheTTL: -1})
	if err != nil {
		t.Fatal(err)
	}
	if got := view(fresh.TokenRepo(ctx, carol, token, w.Notes.Owner, w.Notes.Name)); got != "-" {
		t.Errorf("deleted token: %q, want not found", got)
	}
}

// testUserByLogin resolves logins to accounts, across a rename and a new
// account taking the old login.
func testUserByLogin(t *testing.T, g *integration.Gitea, f *Forge, w *integration.World) {
	ctx := context.Background()
	// Frank may not log in and Ivan is not activated: they exist.
	for _, u := range w.Users() {
		if got, err := f.UserByLogin(ctx, u.Login); err != nil || got != (forge.User{ID: u.ID, Login: u.Login}) {
			t.Errorf("UserByLogin(%s) = %+v, %v; want ID %d", u.Login, got, err, u.ID)
		}
	}
	if got, err := f.UserByLogin(ctx, strings.ToUpper(w.Bob.Login)); err != nil || got.ID != w.Bob.ID || got.Login != w.Bob.Login {
		t.Errorf("UserByLogin in upper case = %+v, %v", got, err)
	}
	for _, login := range []string{w.Org, "nobody-by-this-name"} {
		if got, err := f.UserByLogin(ctx, login); !errors.Is(err, forge.ErrNotFound) {
			t.Errorf("UserByLogin(%s) = %+v, %v; want ErrNotFound", login, got, err)
		}
	}

	admin := g.Admin()
	var rex struct{ ID int64 }
	if err := admin.Do(ctx, "POST", "/admin/users", map[string]any{
		"username": "rex", "email": "rex@example.com", "password": "Secret-0123456789", "must_change_password": false,
	}, &rex); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "POST", "/admin/users/rex/rename", map[string]any{"new_username": "rex2"}, nil); err != nil {
		t.Fatal(err)
	}
	for _, login := range []string{"rex", "rex2"} {
		if got, err := f.UserByLogin(ctx, login); err != nil || got != (forge.User{ID: rex.ID, Login: "rex2"}) {
			t.Errorf("after the rename, UserByLogin(%s) = %+v, %v; want ID %d, rex2", login, got, err, rex.ID)
		}
	}
	var rexNew struct{ ID int64 }
	if err := admin.Do(ctx, "POST", "/admin/users", map[string]any{
		"username": "rex", "email": "rex-new@example.com", "password": "Secret-0123456789", "must_change_password": false,
	}, &rexNew); err != nil {
		t.Fatal(err)
	}
	if got, err := f.UserByLogin(ctx, "rex"); err != nil || got != (forge.User{ID: rexNew.ID, Login: "rex"}) || rexNew.ID == rex.ID {
		t.Errorf("a new account took the login: UserByLogin(rex) = %+v, %v; want ID %d", got, err, rexNew.ID)
	}
}

func testRename(t *testing.T, g *integration.Gitea, f *Forge, w *integration.World, clk *clocktest.Clock) {
	ctx := context.Background()
	admin := g.Admin()
	if err := admin.Do(ctx, "POST", "/orgs/"+w.Org+"/repos", map[string]any{"name": "before"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "PUT", "/repos/"+w.Org+"/before/collaborators/"+w.Bob.Login, map[string]any{"permission": "write"}, nil); err != nil {
		t.Fatal(err)
	}
	before, err := f.Repo(ctx, w.Bob.Login, w.Org, "before")
	if err != nil || !before.CanWriteIssues {
		t.Fatalf("before the rename: %+v %v", before, err)
	}
	if err := admin.Do(ctx, "PATCH", "/repos/"+w.Org+"/before", map[string]any{"name": "after"}, nil); err != nil {
		t.Fatal(err)
	}
	after, err := f.Repo(ctx, w.Bob.Login, w.Org, "after")
	if err != nil || after.ID != before.ID || after.FullName != w.Org+"/after" || !after.CanWriteIssues {
		t.Errorf("after the rename: %+v %v, want ID %d", after, err, before.ID)
	}
	// Gitea redirects the old name to the repository; the answer names
	// it as it is now.
	clk.Advance(DefaultPermCacheTTL)
	old, err := f.Repo(ctx, w.Bob.Login, w.Org, "before")
	if err != nil || old.ID != before.ID || old.FullName != w.Org+"/after" {
		t.Errorf("the old name after the rename: %+v %v", old, err)
	}
}

func testBadAdminTokens(t *testing.T, g *integration.Gitea, w *integration.World) {
	ctx := context.Background()
	for name, token := range map[string]string{
		"an invalid token":       "0123456789abcdef0123456789abcdef01234567",
		"a token of a non-admin": w.Alice.Token,
	} {
		t.Run(name, func(t *testing.T) {
			f, err := New(Options{URL: g.URL, Token: token})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.UserByKey(ctx, w.Bob.Key.Fingerprint); !errors.Is(err, forge.ErrConfig) {
				t.Errorf("UserByKey: %v, want ErrConfig", err)
			}
			if _, err := f.Repo(ctx, w.Bob.Login, w.Widgets.Owner, w.Widgets.Name); !errors.Is(err, forge.ErrConfig) {
				t.Errorf("Repo: %v, want ErrConfig", err)
			}
			if _, err := f.Issue(ctx, w.Bob.Login, w.Widgets.Owner, w.Widgets.Name, w.OpenIssue); !errors.Is(err, forge.ErrConfig) {
				t.Errorf("Issue: %v, want ErrConfig", err)
			}
			if _, err := f.Check(ctx); !errors.Is(err, forge.ErrConfig) {
				t.Errorf("Check: %v, want ErrConfig", err)
			}
		})
	}
	t.Run("a token without the repository scope", func(t *testing.T) {
		var tok struct {
			SHA1 string `json:"sha1"`
		}
		basic := &integration.API{URL: g.URL, User: w.Admin.Login, Password: w.Admin.Password}
		if err := basic.Do(ctx, "POST", "/users/"+w.Admin.Login+"/tokens", map[string]any{
			"name": "no-repo-scope", "scopes": []string{"read:user", "read:issue"},
		}, &tok); err != nil {
			t.Fatal(err)
		}
		f, err := New(Options{URL: g.URL, Token: tok.SHA1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Repo(ctx, w.Bob.Login, w.Widgets.Owner, w.Widgets.Name); !errors.Is(err, forge.ErrConfig) {
			t.Errorf("Repo: %v, want ErrConfig", err)
		}
	})
}

func testOutage(t *testing.T, g *integration.Gitea, f *Forge, w *integration.World, clk *clocktest.Clock) {
	ctx := context.Background()
	clk.Advance(time.Hour) // start with empty caches
	if _, err := f.UserByKey(ctx, w.Alice.Key.Fingerprint); err != nil {
		t.Fatal(err)
	}
	if err := g.Stop(); err != nil {
		t.Fatal(err)
	}
	// Cached identities still resolve; nothing else turns into "not found".
	if u, err := f.UserByKey(ctx, w.Alice.Key.Fingerprint); err != nil || u.Login != w.Alice.Login {
		t.Errorf("cached key while Gitea is down: %+v %v", u, err)
	}
	checks := map[string]func() error{
		"UserByKey":   func() error { _, err := f.UserByKey(ctx, w.Bob.Key.Fingerprint); return err },
		"UserByToken": func() error { _, err := f.UserByToken(ctx, w.Bob.Token); return err },
		"Repo":        func() error { _, err := f.Repo(ctx, w.Bob.Login, w.Widgets.Owner, w.Widgets.Name); return err },
		"Issue": func() error {
			_, err := f.Issue(ctx, w.Bob.Login, w.Widgets.Owner, w.Widgets.Name, w.OpenIssue)
			return err
		},
	}
	for name, check := range checks {
		if err := check(); !errors.Is(err, forge.ErrUnavailable) {
			t.Errorf("%s while Gitea is down: %v, want ErrUnavailable", name, err)
		}
	}
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := g.Start(startCtx); err != nil {
		t.Fatal(err)
	}
	for name, check := range checks {
		if err := check(); err != nil {
			t.Errorf("%s after Gitea is back: %v", name, err)
		}
	}
}

// must fails the test at once on an error of setting Gitea up.
func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// BenchmarkForgeAgainstGitea measures uncached calls against a real Gitea
// (the caches are off): what an SSH connection or a command costs when the
// caches are cold.
func BenchmarkForgeAgainstGitea(b *testing.B) {
	g := integration.NewGitea(b)
	w := integration.SeedWorld(b, g)
	f, err := New(Options{URL: g.URL, Token: g.AdminToken, KeyCacheTTL: -1, PermCacheTTL: -1})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("UserByKey", func(b *testing.B) {
		for b.Loop() {
			if _, err := f.UserByKey(ctx, w.Alice.Key.Fingerprint); err != nil {
				b.Fatal(err)
			}
		}
	})
	repo := func(u *integration.User, r integration.Repo) func(*testing.B) {
		return func(b *testing.B) {
			for b.Loop() {
				if _, err := f.Repo(ctx, u.Login, r.Owner, r.Name); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.Run("Repo/collaborator", repo(w.Bob, w.Widgets))
	b.Run("Repo/org-team-member", repo(w.Dave, w.Secret))
	b.Run("Repo/owner", repo(w.Alice, w.Notes))
	b.Run("Issue", func(b *testing.B) {
		for b.Loop() {
			if _, err := f.Issue(ctx, w.Alice.Login, w.Widgets.Owner, w.Widgets.Name, w.OpenIssue); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// What the reconcile asks: a repository's name by ID, and its issues and
// pull requests closed since a time.
func testReconcileQuestions(t *testing.T, f *Forge, w *integration.World) {
	ctx := context.Background()
	if got, err := f.RepoName(ctx, w.Widgets.ID); err != nil || got != w.Widgets.FullName() {
		t.Fatalf("RepoName(%d) = %q %v, want %s", w.Widgets.ID, got, err, w.Widgets.FullName())
	}
	if _, err := f.RepoName(ctx, 1<<40); !errors.Is(err, forge.ErrNotFound) {
		t.Fatalf("RepoName of no repository: %v, want ErrNotFound", err)
	}
	closed, requests, complete, err := f.ClosedSince(ctx, w.Widgets.Owner, w.Widgets.Name, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if requests != 1 || !complete {
		t.Fatalf("ClosedSince of a few issues: %d requests, complete %v; want 1, true", requests, complete)
	}
	found := false
	for _, is := range closed {
		if !is.Closed || is.Updated.IsZero() {
			t.Errorf("ClosedSince listed %+v, not a closed issue with its update time", is)
		}
		found = found || is.Number == w.ClosedIssue
	}
	if !found {
		t.Fatalf("ClosedSince = %+v, want the seeded closed issue #%d", closed, w.ClosedIssue)
	}
	if later, _, complete, err := f.ClosedSince(ctx, w.Widgets.Owner, w.Widgets.Name, time.Now().Add(time.Hour)); err != nil || len(later) != 0 || !complete {
		t.Fatalf("ClosedSince an hour from now = %+v %v %v, want nothing, complete", later, complete, err)
	}
}
