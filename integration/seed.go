package integration

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// World is what Seed creates: who is who, where their keys are, and which
// repositories and issues exist, so tests name them instead of hard-coding
// numbers.
//
// Access in the organization Org (public repository Widgets, private
// repository Secret) and in Alice's private repository Notes:
//
//	Admin   site administrator
//	Alice   owns Notes; write collaborator on Widgets and Secret
//	Bob     write collaborator on Widgets
//	Carol   read collaborator on Widgets, Secret and Notes
//	Dave    in team IssuesTeam: write on the Issues unit only (Widgets, Secret)
//	Grace   in team PullsTeam: write on the Pull Requests unit only (Widgets, Secret)
//	Heidi   admin collaborator on Secret
//	Olivia  in the Owners team of Org
//	Erin    nothing (reads public Widgets like anyone)
//	Frank   write collaborator on Widgets, but prohibited from logging in
//	Ivan    write collaborator on Widgets, but not activated
type World struct {
	Admin                                                            *User
	Alice, Bob, Carol, Dave, Erin, Frank, Grace, Heidi, Ivan, Olivia *User

	Org                               string // "acme"
	OwnersTeam, IssuesTeam, PullsTeam Team
	Widgets                           Repo // Org's public repository
	Secret                            Repo // Org's private repository
	Notes                             Repo // Alice's private repository

	// In Widgets: an open issue, a closed issue and an open pull request
	// (from branch "feature").
	OpenIssue, ClosedIssue, PullRequest int64
	SecretIssue                         int64 // an open issue in Secret
	SecretPull                          int64 // an open pull request in Secret
	NotesIssue                          int64 // an open issue in Notes

	// DeployKey is a deploy key of Widgets: a key Gitea knows that belongs
	// to no user.
	DeployKey Key
	KeyDir    string // holds every private key file
}

// User is a seeded Gitea account.
type User struct {
	Login    string
	ID       int64
	Password string
	// Token is an access token of the user with scope "all" (empty for
	// Frank and Ivan, who cannot create one).
	Token string
	Key   Key
}

// Key is an ed25519 SSH key pair registered in Gitea.
type Key struct {
	ID          int64         // Gitea's key ID (user key, or deploy key for World.DeployKey)
	Path        string        // private key file (OpenSSH format, mode 0600)
	Public      ssh.PublicKey //
	Authorized  string        // public key in authorized_keys format
	Fingerprint string        // "SHA256:…"
}

// Repo is a seeded repository.
type Repo struct {
	Owner, Name string
	ID          int64
}

// FullName is "owner/name".
func (r Repo) FullName() string { return r.Owner + "/" + r.Name }

// Team is a seeded organization team.
type Team struct {
	ID   int64
	Name string
}

// Users returns every seeded user, the administrator first.
func (w *World) Users() []*User {
	return []*User{w.Admin, w.Alice, w.Bob, w.Carol, w.Dave, w.Erin, w.Frank, w.Grace, w.Heidi, w.Ivan, w.Olivia}
}

// SeedWorld seeds g for a test and fails the test if that fails.
func SeedWorld(t testing.TB, g *Gitea) *World {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := Seed(ctx, g)
	if err != nil {
		t.Fatalf("seed Gitea: %v\n%s", err, g.LogTail(30))
	}
	return w
}

// Seed creates the World in g through the admin API, making independent
// requests in parallel. Private keys go to <g.Dir>/keys.
func Seed(ctx context.Context, g *Gitea) (*World, error) {
	w := &World{Org: "acme", KeyDir: filepath.Join(g.Dir, "keys")}
	if err := os.MkdirAll(w.KeyDir, 0o700); err != nil {
		return nil, err
	}
	admin := g.Admin()
	logins := []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "olivia"}
	users := map[string]*User{}
	for _, l := range logins {
		users[l] = &User{Login: l, Password: randomHex(8) + "Aa1!"}
	}
	w.Alice, w.Bob, w.Carol, w.Dave, w.Erin = users["alice"], users["bob"], users["carol"], users["dave"], users["erin"]
	w.Frank, w.Grace, w.Heidi, w.Ivan, w.Olivia = users["frank"], users["grace"], users["heidi"], users["ivan"], users["olivia"]
	w.Admin = &User{Login: g.AdminLogin, Password: g.AdminPassword, Token: g.AdminToken}
	for _, u := range w.Users() {
		k, err := newKey(w.KeyDir, u.Login)
		if err != nil {
			return nil, err
		}
		u.Key = k
	}
	deploy, err := newKey(w.KeyDir, "widgets-deploy")
	if err != nil {
		return nil, err
	}
	w.DeployKey = deploy

	// Phase 1: accounts, keys, the organization.
	var p parallel
	for _, u := range w.Users()[1:] {
		p.Go(func() error { return createUser(ctx, g, u, u != w.Frank && u != w.Ivan) })
	}
	p.Go(func() error {
		var me struct{ ID int64 }
		if err := admin.Do(ctx, "GET", "/user", nil, &me); err != nil {
			return err
		}
		w.Admin.ID = me.ID
		return addKey(ctx, g, w.Admin)
	})
	p.Go(func() error {
		return admin.Do(ctx, "POST", "/orgs", map[string]any{"username": w.Org, "visibility": "public"}, nil)
	})
	if err := p.Wait(); err != nil {
		return nil, fmt.Errorf("seed: %w", err)
	}

	// Phase 2: repositories, teams, account states.
	w.Widgets = Repo{Owner: w.Org, Name: "widgets"}
	w.Secret = Repo{Owner: w.Org, Name: "secret"}
	w.Notes = Repo{Owner: "alice", Name: "notes"}
	createRepo := func(r *Repo, path string, private bool) func() error {
		return func() error {
			var out struct{ ID int64 }
			err := admin.Do(ctx, "POST", path, map[string]any{
				"name": r.Name, "private": private, "auto_init": true, "default_branch": "main",
			}, &out)
			r.ID = out.ID
			return err
		}
	}
	p.Go(createRepo(&w.Widgets, "/orgs/"+w.Org+"/repos", false))
	p.Go(createRepo(&w.Secret, "/orgs/"+w.Org+"/repos", true))
	p.Go(createRepo(&w.Notes, "/admin/users/alice/repos", true))
	p.Go(func() error {
		var teams []struct {
			ID   int64
			Name string
		}
		if err := admin.Do(ctx, "GET", "/orgs/"+w.Org+"/teams", nil, &teams); err != nil {
			return err
		}
		for _, t := range teams {
			if t.Name == "Owners" {
				w.OwnersTeam = Team{ID: t.ID, Name: t.Name}
			}
		}
		if w.OwnersTeam.ID == 0 {
			return errors.New("the organization has no Owners team")
		}
		return admin.Do(ctx, "PUT", fmt.Sprintf("/teams/%d/members/%s", w.OwnersTeam.ID, w.Olivia.Login), nil, nil)
	})
	createTeam := func(t *Team, name, unit string, member *User) func() error {
		return func() error {
			var out struct{ ID int64 }
			// No "permission": the team's access is per unit only.
			if err := admin.Do(ctx, "POST", "/orgs/"+w.Org+"/teams", map[string]any{
				"name": name, "units_map": map[string]string{unit: "write"},
			}, &out); err != nil {
				return err
			}
			*t = Team{ID: out.ID, Name: name}
			return admin.Do(ctx, "PUT", fmt.Sprintf("/teams/%d/members/%s", t.ID, member.Login), nil, nil)
		}
	}
	p.Go(createTeam(&w.IssuesTeam, "issue-triage", "repo.issues", w.Dave))
	p.Go(createTeam(&w.PullsTeam, "pull-reviewers", "repo.pulls", w.Grace))
	p.Go(func() error { return editUser(ctx, g, w.Frank, map[string]any{"prohibit_login": true}) })
	if err := p.Wait(); err != nil {
		return nil, fmt.Errorf("seed: %w", err)
	}

	// Phase 3: access, issues, the pull request, the deploy key.
	collab := func(r Repo, u *User, perm string) {
		p.Go(func() error {
			return admin.Do(ctx, "PUT", "/repos/"+r.FullName()+"/collaborators/"+u.Login, map[string]any{"permission": perm}, nil)
		})
	}
	collab(w.Widgets, w.Alice, "write")
	collab(w.Widgets, w.Bob, "write")
	collab(w.Widgets, w.Carol, "read")
	collab(w.Widgets, w.Frank, "write")
	collab(w.Widgets, w.Ivan, "write")
	collab(w.Secret, w.Alice, "write")
	collab(w.Secret, w.Carol, "read")
	collab(w.Secret, w.Heidi, "admin")
	collab(w.Notes, w.Carol, "read")
	for _, t := range []Team{w.IssuesTeam, w.PullsTeam} {
		for _, r := range []Repo{w.Widgets, w.Secret} {
			p.Go(func() error {
				return admin.Do(ctx, "PUT", fmt.Sprintf("/teams/%d/repos/%s", t.ID, r.FullName()), nil, nil)
			})
		}
	}
	issue := func(r Repo, n *int64, title string, closed bool) {
		p.Go(func() error {
			var out struct{ Number int64 }
			err := admin.Do(ctx, "POST", "/repos/"+r.FullName()+"/issues", map[string]any{"title": title, "closed": closed}, &out)
			*n = out.Number
			return err
		})
	}
	issue(w.Widgets, &w.OpenIssue, "An open issue", false)
	issue(w.Widgets, &w.ClosedIssue, "A closed issue", true)
	issue(w.Secret, &w.SecretIssue, "A secret issue", false)
	issue(w.Notes, &w.NotesIssue, "A note", false)
	p.Go(func() error { return pullRequest(ctx, admin, w.Widgets, &w.PullRequest) })
	p.Go(func() error { return pullRequest(ctx, admin, w.Secret, &w.SecretPull) })
	p.Go(func() error {
		var out struct{ ID int64 }
		err := admin.Do(ctx, "POST", "/repos/"+w.Widgets.FullName()+"/keys", map[string]any{
			"title": "deploy", "key": w.DeployKey.Authorized, "read_only": true,
		}, &out)
		w.DeployKey.ID = out.ID
		return err
	})
	if err := p.Wait(); err != nil {
		return nil, fmt.Errorf("seed: %w", err)
	}
	// Gitea refuses an inactive collaborator, so deactivate Ivan last.
	if err := editUser(ctx, g, w.Ivan, map[string]any{"active": false}); err != nil {
		return nil, fmt.Errorf("seed: %w", err)
	}
	return w, nil
}

// pullRequest commits a file to a new branch "feature" of r and opens a
// pull request from it.
func pullRequest(ctx context.Context, admin *API, r Repo, n *int64) error {
	if err := admin.Do(ctx, "POST", "/repos/"+r.FullName()+"/contents/feature.txt", map[string]any{
		"content": base64.StdEncoding.EncodeToString([]byte("a feature\n")),
		"message": "Add a feature", "branch": "main", "new_branch": "feature",
	}, nil); err != nil {
		return err
	}
	var out struct{ Number int64 }
	err := admin.Do(ctx, "POST", "/repos/"+r.FullName()+"/pulls", map[string]any{
		"head": "feature", "base": "main", "title": "Add a feature",
	}, &out)
	*n = out.Number
	return err
}

// NewUser creates the account login in g (a random password) with a new
// key, its private half written to <keyDir>/<login>, and an access token
// with scope "all".
func NewUser(ctx context.Context, g *Gitea, keyDir, login string) (*User, error) {
	u := &User{Login: login, Password: randomHex(8) + "Aa1!"}
	k, err := newKey(keyDir, login)
	if err != nil {
		return nil, err
	}
	u.Key = k
	if err := createUser(ctx, g, u, true); err != nil {
		return nil, fmt.Errorf("create user %s: %w", login, err)
	}
	return u, nil
}

// createUser creates u with its key, and a token if withToken.
func createUser(ctx context.Context, g *Gitea, u *User, withToken bool) error {
	var out struct{ ID int64 }
	if err := g.Admin().Do(ctx, "POST", "/admin/users", map[string]any{
		"username": u.Login, "email": u.Login + "@example.com", "password": u.Password,
		"must_change_password": false, "full_name": strings.ToUpper(u.Login[:1]) + u.Login[1:],
	}, &out); err != nil {
		return err
	}
	u.ID = out.ID
	if err := addKey(ctx, g, u); err != nil {
		return err
	}
	if !withToken {
		return nil
	}
	var tok struct {
		SHA1 string `json:"sha1"`
	}
	basic := &API{URL: g.URL, User: u.Login, Password: u.Password}
	if err := basic.Do(ctx, "POST", "/users/"+u.Login+"/tokens", map[string]any{
		"name": "collab-lease-test", "scopes": []string{"all"},
	}, &tok); err != nil {
		return err
	}
	u.Token = tok.SHA1
	return nil
}

func addKey(ctx context.Context, g *Gitea, u *User) error {
	return registerKey(ctx, g, u.Login, u.Login+"-ed25519", &u.Key)
}

// AddKey gives u one more key, its private half written to <keyDir>/<name>:
// one account with a key per agent.
func AddKey(ctx context.Context, g *Gitea, u *User, keyDir, name string) (Key, error) {
	k, err := newKey(keyDir, name)
	if err != nil {
		return Key{}, err
	}
	if err := registerKey(ctx, g, u.Login, name, &k); err != nil {
		return Key{}, fmt.Errorf("add key %s to %s: %w", name, u.Login, err)
	}
	return k, nil
}

// registerKey registers k's public half as login's, titled title, and
// records Gitea's ID of it in k.
func registerKey(ctx context.Context, g *Gitea, login, title string, k *Key) error {
	var out struct{ ID int64 }
	err := g.Admin().Do(ctx, "POST", "/admin/users/"+login+"/keys", map[string]any{
		"title": title, "key": k.Authorized,
	}, &out)
	k.ID = out.ID
	return err
}

// editUser changes u through PATCH /admin/users/{u}, which needs the login
// source fields even when they do not change.
func editUser(ctx context.Context, g *Gitea, u *User, fields map[string]any) error {
	body := map[string]any{"login_name": u.Login, "source_id": 0}
	for k, v := range fields {
		body[k] = v
	}
	return g.Admin().Do(ctx, "PATCH", "/admin/users/"+url.PathEscape(u.Login), body, nil)
}

// newKey makes an ed25519 key pair and writes the private key to
// <dir>/<name> (0600) and the public key to <dir>/<name>.pub.
func newKey(dir, name string) (Key, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return Key{}, err
	}
	block, err := ssh.MarshalPrivateKey(priv, name)
	if err != nil {
		return Key{}, err
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return Key{}, err
	}
	k := Key{
		Path:        filepath.Join(dir, name),
		Public:      sshPub,
		Authorized:  strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub))) + " " + name,
		Fingerprint: ssh.FingerprintSHA256(sshPub),
	}
	if err := os.WriteFile(k.Path, pem.EncodeToMemory(block), 0o600); err != nil {
		return Key{}, err
	}
	if err := os.WriteFile(k.Path+".pub", []byte(k.Authorized+"\n"), 0o644); err != nil {
		return Key{}, err
	}
	return k, nil
}

// parallel runs functions concurrently and keeps every error.
type parallel struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error
}

func (p *parallel) Go(f func() error) {
	p.wg.Go(func() {
		if err := f(); err != nil {
			p.mu.Lock()
			p.errs = append(p.errs, err)
			p.mu.Unlock()
		}
	})
}

// Wait waits for every function and returns their errors joined; it can be
// used again afterwards.
func (p *parallel) Wait() error {
	p.wg.Wait()
	err := errors.Join(p.errs...)
	p.errs = nil
	return err
}
