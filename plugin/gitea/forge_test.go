package gitea

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/clocktest"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// Tests of the mapping from Gitea's answers to the forge's errors, and of
// the requests the Forge sends, against an httptest fake of Gitea.

const adminToken = "admintoken0123456789"

// seen is what the fake recorded about one request.
type seen struct {
	Method, Path, RawQuery, Sudo, Auth string
	Fingerprint                        string // the decoded fingerprint query parameter
}

// fake is a Gitea stand-in: routes map "METHOD /path" to a handler, and
// every request is recorded.
type fake struct {
	t      *testing.T
	srv    *httptest.Server
	mu     sync.Mutex
	seen   []seen
	routes map[string]http.HandlerFunc
}

func newFake(t *testing.T, routes map[string]http.HandlerFunc) *fake {
	t.Helper()
	f := &fake{t: t, routes: routes}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.seen = append(f.seen, seen{
			Method: r.Method, Path: r.URL.EscapedPath(), RawQuery: r.URL.RawQuery,
			Sudo: r.Header.Get("Sudo"), Auth: r.Header.Get("Authorization"),
			Fingerprint: r.URL.Query().Get("fingerprint"),
		})
		h := f.routes[r.Method+" "+r.URL.EscapedPath()]
		f.mu.Unlock()
		if h == nil {
			http.Error(w, `{"message":"no such route in the fake"}`, http.StatusNotFound)
			return
		}
		h(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fake) requests() []seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seen(nil), f.seen...)
}

func (f *fake) reset() {
	f.mu.Lock()
	f.seen = nil
	f.mu.Unlock()
}

func newTestForge(t *testing.T, url string, c *clocktest.Clock, timeout time.Duration) *Forge {
	t.Helper()
	f, err := New(Options{URL: url, Token: adminToken, Timeout: timeout, Clock: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func jsonBody(v any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
}

func status(code int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}
}

// A fingerprint whose base64 holds both '+' and '/', which must be escaped
// in the query string.
const trickyFP = "SHA256:ab+cd/ef+gh/ij0123456789abcdefghijklmnopqrstu"

func userKey(fp string, id int64, login string, active, prohibited bool) map[string]any {
	return map[string]any{
		"id": 7, "fingerprint": fp, "key_type": "user", "key": "ssh-ed25519 AAAA",
		"user": map[string]any{"id": id, "login": login, "active": active, "prohibit_login": prohibited},
	}
}

func TestUserByKeyRequestAndAnswers(t *testing.T) {
	tests := []struct {
		name    string
		keys    []map[string]any
		want    forge.User
		wantErr error
	}{
		{"one active user key", []map[string]any{userKey(trickyFP, 3, "alice", true, false)}, forge.User{ID: 3, Login: "alice"}, nil},
		{"no key", nil, forge.User{}, forge.ErrNotFound},
		{"owner prohibited from login", []map[string]any{userKey(trickyFP, 3, "frank", true, true)}, forge.User{}, forge.ErrNotFound},
		{"owner not active", []map[string]any{userKey(trickyFP, 3, "ivan", false, false)}, forge.User{}, forge.ErrNotFound},
		{"deploy key only", []map[string]any{{"id": 9, "fingerprint": trickyFP, "key_type": "deploy"}}, forge.User{}, forge.ErrNotFound},
		{"two user keys", []map[string]any{userKey(trickyFP, 3, "alice", true, false), userKey(trickyFP, 4, "bob", true, false)}, forge.User{}, forge.ErrNotFound},
		{"deploy and user key", []map[string]any{{"id": 9, "fingerprint": trickyFP, "key_type": "deploy"}, userKey(trickyFP, 3, "alice", true, false)}, forge.User{ID: 3, Login: "alice"}, nil},
		{"another fingerprint", []map[string]any{userKey("SHA256:other", 3, "alice", true, false)}, forge.User{}, forge.ErrNotFound},
		// A token of a non-admin: Gitea leaves out key_type and owner.
		{"owner not disclosed", []map[string]any{{"id": 7, "fingerprint": trickyFP, "key": "ssh-ed25519 AAAA"}}, forge.User{}, forge.ErrConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys := tt.keys
			if keys == nil {
				keys = []map[string]any{}
			}
			g := newFake(t, map[string]http.HandlerFunc{"GET /api/v1/user/keys": jsonBody(keys)})
			f := newTestForge(t, g.srv.URL, clocktest.New(), time.Second)
			got, err := f.UserByKey(context.Background(), trickyFP)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("user = %+v, want %+v", got, tt.want)
			}
			reqs := g.requests()
			if len(reqs) != 1 {
				t.Fatalf("requests = %+v, want one", reqs)
			}
			r := reqs[0]
			if r.Fingerprint != trickyFP {
				t.Errorf("fingerprint sent = %q, want %q (raw query %q)", r.Fingerprint, trickyFP, r.RawQuery)
			}
			if !strings.Contains(r.RawQuery, "fingerprint=SHA256%3Aab%2Bcd%2Fef%2Bgh%2Fij") {
				t.Errorf("raw query %q does not escape ':', '+' and '/'", r.RawQuery)
			}
			if r.Auth != "token "+adminToken || r.Sudo != "" {
				t.Errorf("auth %q sudo %q, want the admin token and no Sudo", r.Auth, r.Sudo)
			}
		})
	}
}

func TestUserByKeyRejectsMalformedFingerprintWithoutAsking(t *testing.T) {
	g := newFake(t, nil)
	f := newTestForge(t, g.srv.URL, clocktest.New(), time.Second)
	for _, fp := range []string{"", "MD5:aa:bb", "sha256:abc", "SHA256:" + strings.Repeat("a", 200)} {
		if _, err := f.UserByKey(context.Background(), fp); !errors.Is(err, forge.ErrNotFound) {
			t.Errorf("UserByKey(%q) = %v, want ErrNotFound", fp, err)
		}
	}
	if n := len(g.requests()); n != 0 {
		t.Errorf("%d requests for malformed fingerprints", n)
	}
}

// Every failure of Gitea maps onto one sentinel, for every method.
func TestFailuresMapToSentinels(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	slow := func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}
	tests := []struct {
		name    string
		handler http.HandlerFunc
		want    error
		detail  string // a part of the error message
	}{
		{"401", status(401, `{"message":"token is required"}`), forge.ErrConfig, "--gitea-token-file"},
		{"403", status(403, `{"message":"Only administrators allowed to sudo."}`), forge.ErrConfig, "site administrator"},
		{"500", status(500, `{"message":"database is locked"}`), forge.ErrUnavailable, "HTTP 500"},
		{"502 from a proxy", status(502, `<html>Bad Gateway</html>`), forge.ErrUnavailable, "HTTP 502"},
		{"503", status(503, ``), forge.ErrUnavailable, "HTTP 503"},
		{"429", status(429, `{"message":"slow down"}`), forge.ErrUnavailable, "HTTP 429"},
		{"malformed JSON", status(200, `{"id": 1, "full_name": `), forge.ErrUnavailable, "malformed"},
		{"HTML instead of JSON", status(200, `<html>login</html>`), forge.ErrUnavailable, "malformed"},
		{"past the deadline", slow, forge.ErrUnavailable, "deadline"},
	}
	calls := map[string]func(*Forge) error{
		"UserByKey": func(f *Forge) error { _, err := f.UserByKey(context.Background(), trickyFP); return err },
		"Repo":      func(f *Forge) error { _, err := f.Repo(context.Background(), "alice", "acme", "widgets"); return err },
		"Issue": func(f *Forge) error {
			_, err := f.Issue(context.Background(), "alice", "acme", "widgets", 1)
			return err
		},
		"Check": func(f *Forge) error { _, err := f.Check(context.Background()); return err },
		"OpenIssues": func(f *Forge) error {
			_, _, err := f.OpenIssues(context.Background(), "acme", "widgets", forge.IssueFilter{Labels: []string{"bug"}}, 5)
			return err
		},
		"Blocked": func(f *Forge) error { _, err := f.Blocked(context.Background(), "acme", "widgets", 1); return err },
	}
	for _, tt := range tests {
		for name, call := range calls {
			t.Run(tt.name+"/"+name, func(t *testing.T) {
				g := newFake(t, nil)
				g.srv.Config.Handler = tt.handler
				f := newTestForge(t, g.srv.URL, clocktest.New(), 200*time.Millisecond)
				start := time.Now()
				err := call(f)
				if !errors.Is(err, tt.want) {
					t.Fatalf("err = %v, want %v", err, tt.want)
				}
				if !strings.Contains(err.Error(), tt.detail) {
					t.Errorf("err = %q, want it to mention %q", err, tt.detail)
				}
				if d := time.Since(start); d > 5*time.Second {
					t.Errorf("took %v with a 200ms timeout", d)
				}
			})
		}
	}
}

func TestGiteaDownIsUnavailable(t *testing.T) {
	g := newFake(t, nil)
	url := g.srv.URL
	g.srv.Close() // nothing listens there now
	f := newTestForge(t, url, clocktest.New(), time.Second)
	ctx := context.Background()
	errs := map[string]error{}
	_, errs["UserByKey"] = f.UserByKey(ctx, trickyFP)
	_, errs["UserByToken"] = f.UserByToken(ctx, "usertoken")
	_, errs["Repo"] = f.Repo(ctx, "alice", "acme", "widgets")
	_, errs["Repo anonymous"] = f.Repo(ctx, "", "acme", "widgets")
	_, errs["Issue"] = f.Issue(ctx, "alice", "acme", "widgets", 1)
	for name, err := range errs {
		if !errors.Is(err, forge.ErrUnavailable) {
			t.Errorf("%s: err = %v, want ErrUnavailable", name, err)
		}
	}
}

func TestNewNeedsNoGitea(t *testing.T) {
	g := newFake(t, nil)
	if _, err := New(Options{URL: g.srv.URL, Token: adminToken}); err != nil {
		t.Fatal(err)
	}
	if n := len(g.requests()); n != 0 {
		t.Errorf("New made %d requests", n)
	}
	for _, o := range []Options{
		{URL: "", Token: adminToken},
		{URL: "ftp://example.com", Token: adminToken},
		{URL: "example.com", Token: adminToken},
		{URL: g.srv.URL, Token: " "},
	} {
		if _, err := New(o); !errors.Is(err, forge.ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", o, err)
		}
	}
}

// repoRoutes answers the requests of a Repo call for alice and
// acme/widgets.
func repoRoutes(repo map[string]any, mode string, collaborator bool, mine, covering []map[string]any) map[string]http.HandlerFunc {
	collab := status(404, `{"message":"not a collaborator"}`)
	if collaborator {
		collab = status(204, "")
	}
	return map[string]http.HandlerFunc{
		"GET /api/v1/repos/acme/widgets":                                jsonBody(repo),
		"GET /api/v1/repos/acme/widgets/collaborators/alice/permission": jsonBody(map[string]any{"permission": mode}),
		"GET /api/v1/repos/acme/widgets/collaborators/alice":            collab,
		"GET /api/v1/user/teams":                                        jsonBody(mine),
		"GET /api/v1/repos/acme/widgets/teams":                          jsonBody(covering),
	}
}

const acmeID = 2

// widgets is acme/widgets as GET /repos/acme/widgets shows it.
func widgets(admin, push, hasCode bool) map[string]any {
	return map[string]any{
		"id": 42, "name": "widgets", "full_name": "acme/widgets", "private": true,
		"owner":    map[string]any{"id": acmeID, "login": "acme"},
		"has_code": hasCode, "has_issues": true, "internal_tracker": map[string]any{}, "has_pull_requests": true,
		"permissions": map[string]any{"admin": admin, "push": push, "pull": true},
	}
}

func team(id, orgID int64, units map[string]string) map[string]any {
	return map[string]any{"id": id, "name": fmt.Sprint("team", id), "organization": map[string]any{"id": orgID}, "units_map": units}
}

func TestRepoRequests(t *testing.T) {
	issuesTeam := team(5, acmeID, map[string]string{"repo.issues": "write"})
	otherOrgTeam := team(6, 99, map[string]string{"repo.issues": "write", "repo.pulls": "write"})
	uncovered := team(7, acmeID, map[string]string{"repo.pulls": "write"})
	tests := []struct {
		name     string
		routes   map[string]http.HandlerFunc
		want     forge.Repo
		requests map[string]string // path → Sudo header
	}{
		{
			"member of a team with write on issues",
			repoRoutes(widgets(false, false, true), "none", false,
				[]map[string]any{issuesTeam, otherOrgTeam, uncovered}, []map[string]any{issuesTeam}),
			forge.Repo{ID: 42, FullName: "acme/widgets", Private: true, CanRead: true, CanWriteIssues: true, CanReadIssues: true},
			map[string]string{
				"/api/v1/repos/acme/widgets":                                "alice",
				"/api/v1/user/teams":                                        "alice",
				"/api/v1/repos/acme/widgets/collaborators/alice/permission": "",
				"/api/v1/repos/acme/widgets/collaborators/alice":            "",
				"/api/v1/repos/acme/widgets/teams":                          "",
			},
		},
		{
			"in no team of the organization: push tells",
			repoRoutes(widgets(false, true, true), "write", true, []map[string]any{otherOrgTeam}, nil),
			forge.Repo{ID: 42, FullName: "acme/widgets", Private: true, CanRead: true, CanWriteIssues: true, CanWritePulls: true, CanReadIssues: true, CanReadPulls: true},
			map[string]string{
				"/api/v1/repos/acme/widgets": "alice",
				"/api/v1/user/teams":         "alice",
			},
		},
		{
			"in no team, no Code unit: the access mode tells",
			repoRoutes(widgets(false, false, false), "write", true, nil, nil),
			forge.Repo{ID: 42, FullName: "acme/widgets", Private: true, CanRead: true, CanWriteIssues: true, CanWritePulls: true, CanReadIssues: true, CanReadPulls: true},
			map[string]string{
				"/api/v1/repos/acme/widgets":                                "alice",
				"/api/v1/user/teams":                                        "alice",
				"/api/v1/repos/acme/widgets/collaborators/alice/permission": "",
			},
		},
		{
			"repository admin",
			repoRoutes(widgets(true, true, true), "admin", true, []map[string]any{issuesTeam}, nil),
			forge.Repo{ID: 42, FullName: "acme/widgets", Private: true, CanRead: true, CanWriteIssues: true, CanWritePulls: true, CanReadIssues: true, CanReadPulls: true, Admin: true},
			map[string]string{
				"/api/v1/repos/acme/widgets": "alice",
				"/api/v1/user/teams":         "alice",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newFake(t, tt.routes)
			f := newTestForge(t, g.srv.URL, clocktest.New(), time.Second)
			got, err := f.Repo(context.Background(), "alice", "acme", "widgets")
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Repo = %+v, want %+v", got, tt.want)
			}
			// The user's own view and teams go as the user (Sudo); the
			// rest as the administrator.
			reqs := g.requests()
			if len(reqs) != len(tt.requests) {
				t.Errorf("requests = %+v, want %d", reqs, len(tt.requests))
			}
			for _, r := range reqs {
				sudo, ok := tt.requests[r.Path]
				if !ok {
					t.Errorf("unexpected request %+v", r)
					continue
				}
				if r.Sudo != sudo || r.Auth != "token "+adminToken {
					t.Errorf("%s: Sudo %q Authorization %q, want Sudo %q and the admin token", r.Path, r.Sudo, r.Auth, sudo)
				}
			}
		})
	}
}

func TestAnonymousRepo(t *testing.T) {
	g := newFake(t, map[string]http.HandlerFunc{"GET /api/v1/repos/acme/widgets": jsonBody(widgets(false, false, true))})
	f := newTestForge(t, g.srv.URL, clocktest.New(), time.Second)
	got, err := f.Repo(context.Background(), "", "acme", "widgets")
	if err != nil {
		t.Fatal(err)
	}
	if got.CanWriteIssues || got.CanWritePulls || !got.CanRead || got.ID != 42 {
		t.Errorf("anonymous Repo = %+v", got)
	}
	reqs := g.requests()
	if len(reqs) != 1 || reqs[0].Path != "/api/v1/repos/acme/widgets" || reqs[0].Auth != "" || reqs[0].Sudo != "" {
		t.Errorf("anonymous requests = %+v, want one without token or Sudo", reqs)
	}
}

func TestRepoErrors(t *testing.T) {
	tests := []struct {
		name   string
		routes map[string]http.HandlerFunc
		login  string
		want   error
	}{
		{"invisible repository", map[string]http.HandlerFunc{
			"GET /api/v1/repos/acme/widgets":                                status(404, `{"message":"not found"}`),
			"GET /api/v1/repos/acme/widgets/collaborators/alice/permission": jsonBody(map[string]any{"permission": "none"}),
			"GET /api/v1/repos/acme/widgets/collaborators/alice":            status(404, ""),
			"GET /api/v1/user/teams":                                        jsonBody([]any{}),
			"GET /api/v1/repos/acme/widgets/teams":                          jsonBody([]any{}),
		}, "alice", forge.ErrNotFound},
		{"invisible, and the teams request fails", map[string]http.HandlerFunc{
			"GET /api/v1/repos/acme/widgets": status(404, `{"message":"not found"}`),
			"GET /api/v1/user/teams":         status(500, ""),
		}, "alice", forge.ErrUnavailable},
		{"admin token rejected on one request", map[string]http.HandlerFunc{
			"GET /api/v1/repos/acme/widgets":                                jsonBody(widgets(false, false, true)),
			"GET /api/v1/repos/acme/widgets/collaborators/alice/permission": status(403, `{"message":"token does not have at least one of required scope(s)"}`),
			"GET /api/v1/repos/acme/widgets/collaborators/alice":            status(500, ""),
			"GET /api/v1/user/teams":                                        jsonBody([]any{team(5, acmeID, nil)}),
			"GET /api/v1/repos/acme/widgets/teams":                          jsonBody([]any{}),
		}, "alice", forge.ErrConfig},
		{"collaborator check fails", map[string]http.HandlerFunc{
			"GET /api/v1/repos/acme/widgets":                                jsonBody(widgets(false, false, true)),
			"GET /api/v1/repos/acme/widgets/collaborators/alice/permission": jsonBody(map[string]any{"permission": "write"}),
			"GET /api/v1/repos/acme/widgets/collaborators/alice":            status(500, ""),
			"GET /api/v1/user/teams":                                        jsonBody([]any{team(5, acmeID, nil)}),
			"GET /api/v1/repos/acme/widgets/teams":                          jsonBody([]any{}),
		}, "alice", forge.ErrUnavailable},
		{"repository without an owner", map[string]http.HandlerFunc{
			"GET /api/v1/repos/acme/widgets": jsonBody(map[string]any{"id": 42, "full_name": "acme/widgets", "name": "widgets"}),
		}, "", forge.ErrUnavailable},
		{"repository without an id", map[string]http.HandlerFunc{
			"GET /api/v1/repos/acme/widgets": jsonBody(map[string]any{"full_name": "acme/widgets", "name": "widgets"}),
		}, "", forge.ErrUnavailable},
		// A Gitea that requires signing in shows anonymous viewers nothing.
		{"anonymous on a sign-in-only Gitea", map[string]http.HandlerFunc{
			"GET /api/v1/repos/acme/widgets": status(401, `{"message":"unauthorized"}`),
		}, "", forge.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newFake(t, tt.routes)
			f := newTestForge(t, g.srv.URL, clocktest.New(), time.Second)
			if _, err := f.Repo(context.Background(), tt.login, "acme", "widgets"); !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestRepoRejectsImpossibleNamesWithoutAsking(t *testing.T) {
	g := newFake(t, nil)
	f := newTestForge(t, g.srv.URL, clocktest.New(), time.Second)
	for _, c := range [][3]string{
		{"alice", "acme", ""}, {"alice", "", "widgets"}, {"alice", "..", "widgets"},
		{"alice", "acme", "wid/gets"}, {"alice", "acme", "w?x"}, {"al ice", "acme", "widgets"},
		{"alice\r\nX-Evil: 1", "acme", "widgets"}, {"alice", "acme", "wïdgets"},
	} {
		if _, err := f.Repo(context.Background(), c[0], c[1], c[2]); !errors.Is(err, forge.ErrNotFound) {
			t.Errorf("Repo(%q, %q, %q) = %v, want ErrNotFound", c[0], c[1], c[2], err)
		}
		if _, err := f.Issue(context.Background(), c[0], c[1], c[2], 1); !errors.Is(err, forge.ErrNotFound) {
			t.Errorf("Issue(%q, %q, %q) = %v, want ErrNotFound", c[0], c[1], c[2], err)
		}
	}
	if _, err := f.Issue(context.Background(), "alice", "acme", "widgets", 0); !errors.Is(err, forge.ErrNotFound) {
		t.Errorf("Issue #0 = %v, want ErrNotFound", err)
	}
	if n := len(g.requests()); n != 0 {
		t.Errorf("%d requests for impossible names", n)
	}
}

func TestCachesKeepOnlySuccessesForTheirLifetime(t *testing.T) {
	var (
		mu     sync.Mutex
		answer http.HandlerFunc
	)
	set := func(h http.HandlerFunc) { mu.Lock(); answer = h; mu.Unlock() }
	g := newFake(t, nil)
	g.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.seen = append(g.seen, seen{Path: r.URL.Path})
		g.mu.Unlock()
		mu.Lock()
		h := answer
		mu.Unlock()
		if r.URL.Path == "/api/v1/user/keys" || r.URL.Path == "/api/v1/repos/acme/widgets" {
			h(w, r)
			return
		}
		// The other requests of a Repo call: no extra grants.
		switch r.URL.Path {
		case "/api/v1/repos/acme/widgets/collaborators/alice/permission":
			jsonBody(map[string]any{"permission": "write"})(w, r)
		case "/api/v1/repos/acme/widgets/collaborators/alice":
			status(204, "")(w, r)
		default:
			jsonBody([]any{})(w, r)
		}
	})
	c := clocktest.New()
	f := newTestForge(t, g.srv.URL, c, time.Second)
	ctx := context.Background()
	count := func() int { n := len(g.requests()); g.reset(); return n }

	t.Run("key", func(t *testing.T) {
		set(jsonBody([]map[string]any{userKey(trickyFP, 3, "alice", true, false)}))
		if _, err := f.UserByKey(ctx, trickyFP); err != nil {
			t.Fatal(err)
		}
		count()
		set(status(500, ""))
		if u, err := f.UserByKey(ctx, trickyFP); err != nil || u.Login != "alice" {
			t.Fatalf("cached key: %+v %v", u, err)
		}
		if n := count(); n != 0 {
			t.Errorf("cached key made %d requests", n)
		}
		c.Advance(DefaultKeyCacheTTL)
		if _, err := f.UserByKey(ctx, trickyFP); !errors.Is(err, forge.ErrUnavailable) {
			t.Errorf("expired key with Gitea failing: %v, want ErrUnavailable", err)
		}
		set(jsonBody([]any{}))
		if _, err := f.UserByKey(ctx, trickyFP); !errors.Is(err, forge.ErrNotFound) {
			t.Errorf("deleted key: %v, want ErrNotFound", err)
		}
		count()
		set(jsonBody([]map[string]any{userKey(trickyFP, 3, "alice", true, false)}))
		if _, err := f.UserByKey(ctx, trickyFP); err != nil {
			t.Errorf("key added again: %v (a not-found must not be cached)", err)
		}
		if n := count(); n != 1 {
			t.Errorf("key added again: %d requests, want 1", n)
		}
	})

	t.Run("repo", func(t *testing.T) {
		set(status(404, `{"message":"not found"}`))
		if _, err := f.Repo(ctx, "alice", "acme", "widgets"); !errors.Is(err, forge.ErrNotFound) {
			t.Fatalf("err = %v", err)
		}
		count()
		// A "not found" is remembered for DefaultMissTTL: a flood of
		// requests for it asks Gitea once…
		set(jsonBody(widgets(false, true, true)))
		if _, err := f.Repo(ctx, "alice", "acme", "widgets"); !errors.Is(err, forge.ErrNotFound) {
			t.Fatalf("within the miss lifetime: %v, want the remembered not-found", err)
		}
		if n := count(); n != 0 {
			t.Errorf("a remembered not-found made %d requests", n)
		}
		// …and no longer.
		c.Advance(DefaultMissTTL)
		r, err := f.Repo(ctx, "alice", "acme", "widgets")
		if err != nil || !r.CanWriteIssues {
			t.Fatalf("repo after the miss lifetime: %+v %v", r, err)
		}
		count()
		set(status(503, ""))
		if _, err := f.Repo(ctx, "alice", "Acme", "Widgets"); err != nil {
			t.Errorf("cached repo (names differ in case only): %v", err)
		}
		if n := count(); n != 0 {
			t.Errorf("cached repo made %d requests", n)
		}
		c.Advance(DefaultPermCacheTTL)
		if _, err := f.Repo(ctx, "alice", "acme", "widgets"); !errors.Is(err, forge.ErrUnavailable) {
			t.Errorf("expired repo with Gitea failing: %v, want ErrUnavailable", err)
		}
		// Another viewer has an entry of their own.
		set(jsonBody(widgets(false, true, true)))
		if _, err := f.Repo(ctx, "", "acme", "widgets"); err != nil {
			t.Fatal(err)
		}
		count()
		if r, err := f.Repo(ctx, "", "acme", "widgets"); err != nil || r.CanWriteIssues {
			t.Errorf("anonymous: %+v %v", r, err)
		}
		if n := count(); n != 0 {
			t.Errorf("cached anonymous repo made %d requests", n)
		}
	})
}

func TestIssueIsNeverCached(t *testing.T) {
	var (
		mu    sync.Mutex
		state = "open"
	)
	g := newFake(t, map[string]http.HandlerFunc{
		"GET /api/v1/repos/acme/widgets/issues/7": func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			jsonBody(map[string]any{"number": 7, "state": state})(w, r)
		},
		"GET /api/v1/repos/acme/widgets/issues/8": jsonBody(map[string]any{
			"number": 8, "state": "open", "pull_request": map[string]any{"merged": false},
		}),
	})
	f := newTestForge(t, g.srv.URL, clocktest.New(), time.Second)
	ctx := context.Background()
	if is, err := f.Issue(ctx, "alice", "acme", "widgets", 7); err != nil || is != (forge.Issue{Number: 7}) {
		t.Fatalf("open issue: %+v %v", is, err)
	}
	mu.Lock()
	state = "closed"
	mu.Unlock()
	if is, err := f.Issue(ctx, "alice", "acme", "widgets", 7); err != nil || !is.Closed {
		t.Fatalf("closed issue: %+v %v", is, err)
	}
	if is, err := f.Issue(ctx, "", "acme", "widgets", 8); err != nil || !is.IsPull || is.Closed {
		t.Fatalf("pull request: %+v %v", is, err)
	}
	reqs := g.requests()
	if len(reqs) != 3 {
		t.Fatalf("requests = %+v, want 3", reqs)
	}
	if reqs[0].Sudo != "alice" || reqs[0].Auth != "token "+adminToken {
		t.Errorf("issue as alice: Sudo %q Authorization %q", reqs[0].Sudo, reqs[0].Auth)
	}
	if reqs[2].Sudo != "" || reqs[2].Auth != "" {
		t.Errorf("anonymous issue: Sudo %q Authorization %q", reqs[2].Sudo, reqs[2].Auth)
	}
}

func TestUserByToken(t *testing.T) {
	tests := []struct {
		name    string
		answer  http.HandlerFunc
		want    forge.User
		wantErr error
	}{
		{"valid", jsonBody(map[string]any{"id": 3, "login": "alice", "active": true}), forge.User{ID: 3, Login: "alice"}, nil},
		{"invalid token", status(401, `{"message":"token is required"}`), forge.User{}, forge.ErrNotFound},
		{"token without the user scope", status(403, `{"message":"token does not have at least one of required scope(s)"}`), forge.User{}, forge.ErrNotFound},
		{"prohibited user", jsonBody(map[string]any{"id": 3, "login": "frank", "active": true, "prohibit_login": true}), forge.User{}, forge.ErrNotFound},
		{"Gitea failing", status(500, ""), forge.User{}, forge.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newFake(t, map[string]http.HandlerFunc{"GET /api/v1/user": tt.answer})
			f := newTestForge(t, g.srv.URL, clocktest.New(), time.Second)
			got, err := f.UserByToken(context.Background(), "usertoken")
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("user = %+v, want %+v", got, tt.want)
			}
			reqs := g.requests()
			if len(reqs) != 1 || reqs[0].Auth != "token usertoken" || reqs[0].Sudo != "" {
				t.Errorf("requests = %+v, want one with the user's token", reqs)
			}
		})
	}
	g := newFake(t, nil)
	f := newTestForge(t, g.srv.URL, clocktest.New(), time.Second)
	for _, tok := range []string{"", "  ", "a b", "a\r\nb"} {
		if _, err := f.UserByToken(context.Background(), tok); !errors.Is(err, forge.ErrNotFound) {
			t.Errorf("UserByToken(%q) = %v, want ErrNotFound", tok, err)
		}
	}
	if n := len(g.requests()); n != 0 {
		t.Errorf("%d requests for impossible tokens", n)
	}
}

func TestCheck(t *testing.T) {
	g := newFake(t, map[string]http.HandlerFunc{"GET /api/v1/user": jsonBody(map[string]any{"id": 1, "login": "root", "is_admin": false})})
	f := newTestForge(t, g.srv.URL, clocktest.New(), time.Second)
	if _, err := f.Check(context.Background()); !errors.Is(err, forge.ErrConfig) {
		t.Errorf("non-admin token: %v, want ErrConfig", err)
	}
	g.mu.Lock()
	g.routes["GET /api/v1/user"] = jsonBody(map[string]any{"id": 1, "login": "root", "is_admin": true})
	g.mu.Unlock()
	if u, err := f.Check(context.Background()); err != nil || u.Login != "root" {
		t.Errorf("admin token: %+v %v", u, err)
	}
}

// A redirect to another host would drop the token (and Sudo) and give an
// anonymous answer; the default client refuses it.
func TestRedirectToAnotherHostIsRefused(t *testing.T) {
	other := newFake(t, map[string]http.HandlerFunc{
		"GET /api/v1/repos/acme/widgets": jsonBody(widgets(true, true, true)),
	})
	g := newFake(t, map[string]http.HandlerFunc{
		"GET /api/v1/repos/acme/widgets": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, strings.Replace(other.srv.URL, "127.0.0.1", "localhost", 1)+r.URL.Path, http.StatusTemporaryRedirect)
		},
	})
	f := newTestForge(t, g.srv.URL, clocktest.New(), time.Second)
	if _, err := f.Repo(context.Background(), "", "acme", "widgets"); !errors.Is(err, forge.ErrUnavailable) {
		t.Errorf("err = %v, want ErrUnavailable", err)
	}
	if n := len(other.requests()); n != 0 {
		t.Errorf("the other host got %d requests", n)
	}
}

// A redirect that would turn a write into a read (Gitea's 301 for a
// renamed repository) is not followed: the write failed, and is retried,
// rather than taken as done on the strength of a GET's answer.
func TestRedirectOfAWriteIsAFailure(t *testing.T) {
	g := newFake(t, map[string]http.HandlerFunc{
		"PATCH /api/v1/repos/old/widgets/branch_protections/work": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/api/v1/repos/acme/widgets/branch_protections/work", http.StatusMovedPermanently)
		},
		"GET /api/v1/repos/acme/widgets/branch_protections/work": jsonBody(map[string]any{"rule_name": "work"}),
		"GET /api/v1/repos/old/widgets": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/api/v1/repos/acme/widgets", http.StatusMovedPermanently)
		},
		"GET /api/v1/repos/acme/widgets": jsonBody(widgets(true, true, true)),
	})
	f := newTestForge(t, g.srv.URL, clocktest.New(), time.Second)
	_, err := f.EditBranchRule(context.Background(), "old", "widgets", forge.BranchRule{Name: "work"})
	if !errors.Is(err, forge.ErrUnavailable) {
		t.Fatalf("a redirected edit: %v, want ErrUnavailable", err)
	}
	for _, r := range g.requests() {
		if r.Method == http.MethodGet {
			t.Fatalf("the edit was followed as %s %s", r.Method, r.Path)
		}
	}
	// A read still follows it.
	if _, err := f.Repo(context.Background(), "", "old", "widgets"); err != nil {
		t.Fatalf("a redirected read: %v", err)
	}
}

// Answers that parse but make no sense are treated like garbage, not trusted.
func TestNonsenseAnswersAreUnavailable(t *testing.T) {
	g := newFake(t, map[string]http.HandlerFunc{
		"GET /api/v1/repos/acme/widgets/issues/7": jsonBody(map[string]any{"number": 8, "state": "open"}),
		"GET /api/v1/repos/acme/widgets/issues/9": jsonBody(map[string]any{"number": 9, "state": "merged?"}),
		"GET /api/v1/user":                        jsonBody(map[string]any{"active": true}),
	})
	f := newTestForge(t, g.srv.URL, clocktest.New(), time.Second)
	ctx := context.Background()
	for _, n := range []int64{7, 9} {
		if _, err := f.Issue(ctx, "alice", "acme", "widgets", n); !errors.Is(err, forge.ErrUnavailable) {
			t.Errorf("Issue #%d: %v, want ErrUnavailable", n, err)
		}
	}
	if _, err := f.UserByToken(ctx, "usertoken"); !errors.Is(err, forge.ErrUnavailable) {
		t.Errorf("UserByToken: %v, want ErrUnavailable", err)
	}
}

// ClosedSince reads pages of 50 until a short one, and says when it
// stopped at its bound with more to read.
func TestClosedSinceSaysWhenItWasCutShort(t *testing.T) {
	for _, tc := range []struct {
		total, requests int
		complete        bool
	}{{0, 1, true}, {49, 1, true}, {120, 3, true}, {maxClosedPages * 50, maxClosedPages, false}, {maxClosedPages*50 + 1, maxClosedPages, false}} {
		g := newFake(t, map[string]http.HandlerFunc{
			"GET /api/v1/repos/acme/widgets/issues": func(w http.ResponseWriter, r *http.Request) {
				var page int
				fmt.Sscan(r.URL.Query().Get("page"), &page)
				var list []map[string]any
				for n := (page-1)*50 + 1; n <= min(page*50, tc.total); n++ {
					list = append(list, map[string]any{"number": tc.total + 1 - n, "state": "closed"})
				}
				if list == nil {
					list = []map[string]any{}
				}
				jsonBody(list)(w, r)
			},
		})
		f := newTestForge(t, g.srv.URL, clocktest.New(), time.Second)
		closed, requests, complete, err := f.ClosedSince(context.Background(), "acme", "widgets", time.Unix(1e9, 0))
		if err != nil {
			t.Fatal(err)
		}
		if want := min(tc.total, maxClosedPages*50); len(closed) != want || requests != tc.requests || complete != tc.complete {
			t.Errorf("%d closed: got %d, %d requests, complete %v; want %d, %d, %v", tc.total, len(closed), requests, complete, want, tc.requests, tc.complete)
		}
		reqs := g.requests()
		if len(reqs) != tc.requests || !strings.Contains(reqs[0].RawQuery, "state=closed") || !strings.Contains(reqs[0].RawQuery, "since=") {
			t.Errorf("%d closed: requests %+v", tc.total, reqs)
		}
	}
}
