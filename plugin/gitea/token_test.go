package gitea

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/clocktest"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

const userToken = "usertoken0123456789"

// Gitea's answers to the token's write probe (DELETE …/issues/comments/0).
var (
	writeScope   = status(404, `{"message":"comment does not exist [id: 0]"}`)
	noWriteScope = status(403, `{"message":"token does not have at least one of required scope(s), required=[write:issue], token scope=read:issue,read:repository"}`)
)

// tokenRoutes answers a TokenRepo call for alice on acme/widgets: the
// admin's requests as alice sees the repository (a write collaborator in
// no team), and the token's own three requests with repo, labels and the
// write probe.
func tokenRoutes(repo, labels, probe http.HandlerFunc) map[string]http.HandlerFunc {
	routes := repoRoutes(widgets(false, true, true), "write", true, nil, nil)
	asAdmin := routes["GET /api/v1/repos/acme/widgets"]
	routes["GET /api/v1/repos/acme/widgets"] = func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "token "+userToken {
			repo(w, r)
			return
		}
		asAdmin(w, r)
	}
	routes["GET /api/v1/repos/acme/widgets/labels"] = func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "token "+userToken || r.Header.Get("Sudo") != "" || r.URL.Query().Get("limit") != "1" {
			http.Error(w, `{"message":"the fake wants the user's token and limit=1"}`, http.StatusTeapot)
			return
		}
		labels(w, r)
	}
	routes["DELETE /api/v1/repos/acme/widgets/issues/comments/0"] = func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "token "+userToken || r.Header.Get("Sudo") != "" {
			http.Error(w, `{"message":"the fake wants the user's token"}`, http.StatusTeapot)
			return
		}
		probe(w, r)
	}
	return routes
}

var alice = forge.User{ID: 3, Login: "alice"}

func TestTokenRepo(t *testing.T) {
	noScope := status(403, `{"message":"token does not have at least one of required scope(s), required=[read:repository]"}`)
	publicOnly := status(403, `{"message":"token scope is limited to public repos"}`)
	read := forge.Repo{ID: 42, FullName: "acme/widgets", Private: true, CanRead: true, CanReadIssues: true, CanReadPulls: true}
	write := read
	write.CanWriteIssues, write.CanWritePulls = true, true
	tests := []struct {
		name                string
		repo, labels, probe http.HandlerFunc
		want                forge.Repo
		wantErr             error
	}{
		{"repository and issues", jsonBody(widgets(false, true, true)), jsonBody([]any{}), noWriteScope, read, nil},
		{"write:issue", jsonBody(widgets(false, true, true)), jsonBody([]any{}), writeScope, write, nil},
		{"write:issue, probe answered 204", jsonBody(widgets(false, true, true)), jsonBody([]any{}), status(204, ``), write, nil},
		{"no read:issue", jsonBody(widgets(false, true, true)), noScope, noWriteScope,
			forge.Repo{ID: 42, FullName: "acme/widgets", Private: true, CanRead: true}, nil},
		{"no read:repository", noScope, jsonBody([]any{}), writeScope, forge.Repo{}, forge.ErrNotFound},
		{"public-only on a private repository", publicOnly, publicOnly, status(403, `{"message":"token scope is limited to public issues"}`), forge.Repo{}, forge.ErrNotFound},
		{"not visible to the token's user", status(404, `{"message":"not found"}`), status(404, ``), status(404, ``), forge.Repo{}, forge.ErrNotFound},
		{"revoked token", status(401, `{"message":"invalid token"}`), status(401, ``), status(401, ``), forge.Repo{}, forge.ErrNotFound},
		{"Gitea failing", status(500, ``), jsonBody([]any{}), writeScope, forge.Repo{}, forge.ErrUnavailable},
		{"labels failing", jsonBody(widgets(false, true, true)), status(502, ``), writeScope, forge.Repo{}, forge.ErrUnavailable},
		{"probe failing", jsonBody(widgets(false, true, true)), jsonBody([]any{}), status(502, ``), forge.Repo{}, forge.ErrUnavailable},
		{"another repository by now", jsonBody(map[string]any{"id": 43}), jsonBody([]any{}), writeScope, forge.Repo{}, forge.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newFake(t, tokenRoutes(tt.repo, tt.labels, tt.probe))
			f := newTestForge(t, g.srv.URL, clocktest.New(), time.Second)
			got, err := f.TokenRepo(context.Background(), alice, userToken, "acme", "widgets")
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("TokenRepo = %+v, want %+v", got, tt.want)
			}
			var withToken int
			for _, r := range g.requests() {
				if r.Auth == "token "+userToken {
					withToken++
					if r.Sudo != "" {
						t.Errorf("%s with the token and Sudo %q", r.Path, r.Sudo)
					}
				}
			}
			if withToken != 3 {
				t.Errorf("%d requests with the token, want 3: %+v", withToken, g.requests())
			}
		})
	}
}

// A token grants the repository admin's force-release, as it grants
// write, only with write:issue.
func TestTokenAdminNeedsWriteScope(t *testing.T) {
	for _, tc := range []struct {
		name  string
		probe http.HandlerFunc
		admin bool
	}{{"read scopes", noWriteScope, false}, {"write:issue", writeScope, true}} {
		t.Run(tc.name, func(t *testing.T) {
			routes := repoRoutes(widgets(true, true, true), "admin", true, nil, nil)
			routes["GET /api/v1/repos/acme/widgets/labels"] = jsonBody([]any{})
			routes["DELETE /api/v1/repos/acme/widgets/issues/comments/0"] = tc.probe
			g := newFake(t, routes)
			f := newTestForge(t, g.srv.URL, clocktest.New(), time.Second)
			ctx := context.Background()
			if r, err := f.Repo(ctx, "alice", "acme", "widgets"); err != nil || !r.Admin {
				t.Fatalf("Repo as the admin alice: %+v %v, want Admin", r, err)
			}
			r, err := f.TokenRepo(ctx, alice, userToken, "acme", "widgets")
			if err != nil {
				t.Fatal(err)
			}
			if r.Admin != tc.admin || r.CanWriteIssues != tc.admin || r.CanWritePulls != tc.admin || !r.CanReadIssues {
				t.Errorf("TokenRepo of the admin alice = %+v, want Admin and write %v", r, tc.admin)
			}
		})
	}
}

// Answers are cached like Repo's, under a hash of the token: the cache
// never holds the token, and another token asks again.
func TestTokenRepoCache(t *testing.T) {
	g := newFake(t, tokenRoutes(jsonBody(widgets(false, true, true)), jsonBody([]any{}), noWriteScope))
	clk := clocktest.New()
	f := newTestForge(t, g.srv.URL, clk, time.Second)
	ctx := context.Background()
	first, err := f.TokenRepo(ctx, alice, userToken, "acme", "widgets")
	if err != nil {
		t.Fatal(err)
	}
	g.reset()
	if again, err := f.TokenRepo(ctx, alice, userToken, "Acme", "Widgets"); err != nil || again != first {
		t.Fatalf("cached: %+v %v", again, err)
	}
	if n := len(g.requests()); n != 0 {
		t.Errorf("%d requests for a cached answer", n)
	}
	f.perms.mu.Lock()
	for k := range f.perms.entries {
		if strings.Contains(k, userToken) {
			t.Errorf("cache key %q holds the token", k)
		}
	}
	f.perms.mu.Unlock()

	// Another token of the same user is asked about.
	if _, err := f.TokenRepo(ctx, alice, "anothertoken", "acme", "widgets"); !errors.Is(err, forge.ErrUnavailable) && !errors.Is(err, forge.ErrNotFound) {
		t.Fatalf("another token: %v", err)
	}
	if n := len(g.requests()); n != 3 {
		t.Errorf("another token: %d requests, want its own 3 (the user's view is cached)", n)
	}
	g.reset()
	clk.Advance(DefaultPermCacheTTL)
	if _, err := f.TokenRepo(ctx, alice, userToken, "acme", "widgets"); err != nil {
		t.Fatal(err)
	}
	if n := len(g.requests()); n == 0 {
		t.Error("no requests after the cache lifetime")
	}
}

func TestTokenRepoRejectsImpossibleInputWithoutAsking(t *testing.T) {
	g := newFake(t, nil)
	f := newTestForge(t, g.srv.URL, clocktest.New(), time.Second)
	ctx := context.Background()
	for _, c := range []struct {
		u                  forge.User
		token, owner, name string
	}{
		{alice, "", "acme", "widgets"},
		{alice, "a b", "acme", "widgets"},
		{alice, "to\nken", "acme", "widgets"},
		{forge.User{}, userToken, "acme", "widgets"},
		{alice, userToken, "acme", "../x"},
		{alice, userToken, "", "widgets"},
	} {
		if _, err := f.TokenRepo(ctx, c.u, c.token, c.owner, c.name); !errors.Is(err, forge.ErrNotFound) {
			t.Errorf("TokenRepo(%+v, %q, %q, %q) = %v, want ErrNotFound", c.u, c.token, c.owner, c.name, err)
		}
	}
	if n := len(g.requests()); n != 0 {
		t.Errorf("%d requests for impossible input", n)
	}
}

func TestUserByLogin(t *testing.T) {
	person := jsonBody(map[string]any{"id": 3, "login": "alice2", "active": false})
	found := jsonBody(map[string]any{"ok": true, "data": []any{map[string]any{"id": 3, "login": "alice2"}}})
	none := jsonBody(map[string]any{"ok": true, "data": []any{}})
	tests := []struct {
		name           string
		lookup, search http.HandlerFunc
		want           forge.User
		wantErr        error
	}{
		{"an account, even one that may not log in", person, found, forge.User{ID: 3, Login: "alice2"}, nil},
		{"no such login", status(404, `{"message":"user does not exist"}`), found, forge.User{}, forge.ErrNotFound},
		{"an organization", person, none, forge.User{}, forge.ErrNotFound},
		{"no id", jsonBody(map[string]any{"login": "alice"}), found, forge.User{}, forge.ErrUnavailable},
		{"Gitea failing", status(500, ``), found, forge.User{}, forge.ErrUnavailable},
		{"bad admin token", status(401, `{"message":"token is required"}`), found, forge.User{}, forge.ErrConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newFake(t, map[string]http.HandlerFunc{
				"GET /api/v1/users/alice":  tt.lookup,
				"GET /api/v1/users/search": tt.search,
			})
			f := newTestForge(t, g.srv.URL, clocktest.New(), time.Second)
			got, err := f.UserByLogin(context.Background(), "alice")
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("UserByLogin = %+v, want %+v", got, tt.want)
			}
			for _, r := range g.requests() {
				if r.Auth != "token "+adminToken || r.Sudo != "" {
					t.Errorf("%s: Authorization %q Sudo %q, want the admin token", r.Path, r.Auth, r.Sudo)
				}
				if r.Path == "/api/v1/users/search" && r.RawQuery != "page=1&limit=1&uid=3" && !strings.Contains(r.RawQuery, "uid=3") {
					t.Errorf("search query %q", r.RawQuery)
				}
			}
		})
	}
	g := newFake(t, nil)
	f := newTestForge(t, g.srv.URL, clocktest.New(), time.Second)
	for _, login := range []string{"", "a/b", "..", strings.Repeat("x", 300)} {
		if _, err := f.UserByLogin(context.Background(), login); !errors.Is(err, forge.ErrNotFound) {
			t.Errorf("UserByLogin(%q) = %v, want ErrNotFound", login, err)
		}
	}
	if n := len(g.requests()); n != 0 {
		t.Errorf("%d requests for impossible logins", n)
	}
}
