package gitea

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/collab-lease/collab-lease/plugin/forge"
)

// fakeApps is Gitea's /api/v1/user/applications/oauth2 for one user.
type fakeApps struct {
	mu       sync.Mutex
	apps     map[int64]*fakeApp
	next     int64
	status   int // if set, every request fails with it
	requests []string
}

type fakeApp struct {
	name, clientID, secret string
	redirects              []string
	confidential           bool
}

func newFakeApps(t *testing.T) (*fakeApps, *httptest.Server) {
	f := &fakeApps{apps: map[int64]*fakeApp{}, next: 1}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeApps) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, r.Method+" "+r.URL.Path)
	if f.status != 0 {
		w.WriteHeader(f.status)
		_, _ = w.Write([]byte(`{"message":"token does not have at least one of required scope(s): [write:user]"}`))
		return
	}
	if r.Header.Get("Authorization") != "token admin-token" {
		w.WriteHeader(401)
		return
	}
	var in struct {
		Name         string   `json:"name"`
		Confidential bool     `json:"confidential_client"`
		RedirectURIs []string `json:"redirect_uris"`
	}
	_ = json.NewDecoder(r.Body).Decode(&in)
	render := func(id int64, a *fakeApp, withSecret bool) {
		out := map[string]any{"id": id, "name": a.name, "client_id": a.clientID, "redirect_uris": a.redirects, "confidential_client": a.confidential}
		if withSecret {
			out["client_secret"] = a.secret
		}
		_ = json.NewEncoder(w).Encode(out)
	}
	const prefix = "/api/v1/user/applications/oauth2"
	switch {
	case r.Method == "POST" && r.URL.Path == prefix:
		id := f.next
		f.next++
		a := &fakeApp{name: in.Name, clientID: fmt.Sprint("client-", id), secret: fmt.Sprint("secret-", id, "-1"), redirects: in.RedirectURIs, confidential: in.Confidential}
		f.apps[id] = a
		w.WriteHeader(201)
		render(id, a, true)
	case r.Method == "GET" && r.URL.Path == prefix:
		// Pages of two, in ID order, as if MAX_RESPONSE_ITEMS were 2.
		page, _ := strconv.Atoi(r.URL.Query().Get("page"))
		var ids []int64
		for id := range f.apps {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		out := []map[string]any{}
		for i, id := range ids {
			if a := f.apps[id]; i >= (page-1)*2 && i < page*2 {
				out = append(out, map[string]any{"id": id, "name": a.name, "client_id": a.clientID, "redirect_uris": a.redirects, "confidential_client": a.confidential})
			}
		}
		_ = json.NewEncoder(w).Encode(out)
	case strings.HasPrefix(r.URL.Path, prefix+"/"):
		id, _ := strconv.ParseInt(strings.TrimPrefix(r.URL.Path, prefix+"/"), 10, 64)
		a, ok := f.apps[id]
		if !ok {
			w.WriteHeader(404)
			return
		}
		switch r.Method {
		case "GET":
			render(id, a, false)
		case "PATCH":
			a.name, a.redirects, a.confidential = in.Name, in.RedirectURIs, in.Confidential
			a.secret += "+"
			render(id, a, true)
		case "DELETE":
			delete(f.apps, id)
			w.WriteHeader(204)
		}
	default:
		w.WriteHeader(404)
	}
}

func register(t *testing.T, srv *httptest.Server, redirect string, stored *OAuthApp) (OAuthApp, Registration, error) {
	t.Helper()
	f, err := New(Options{URL: srv.URL + "/", Token: "admin-token"})
	if err != nil {
		t.Fatal(err)
	}
	return f.RegisterOAuthApp(context.Background(), redirect, stored)
}

func TestRegisterOAuthApp(t *testing.T) {
	f, srv := newFakeApps(t)
	const cb = "http://127.0.0.1:8787/oauth/callback"
	app, how, err := register(t, srv, cb, nil)
	if err != nil || how != Registered || app.ClientID != "client-1" || app.ClientSecret != "secret-1-1" || app.ID != 1 || app.GiteaURL != srv.URL || app.RedirectURI != cb {
		t.Fatalf("first: %+v %s %v", app, how, err)
	}
	if a := f.apps[1]; a.name != "collab-lease" || !a.confidential || len(a.redirects) != 1 || a.redirects[0] != cb {
		t.Fatalf("registered as %+v", a)
	}

	// Again with what was stored: reused, nothing written in Gitea.
	n := len(f.requests)
	again, how, err := register(t, srv, cb, &app)
	if err != nil || how != Reused || again != app || len(f.requests) != n+1 || f.requests[n] != "GET /api/v1/user/applications/oauth2/1" {
		t.Fatalf("second: %+v %s %v %v", again, how, err, f.requests[n:])
	}

	// The public URL moved: the application follows, with a new secret.
	moved, how, err := register(t, srv, "https://git.example/collab/oauth/callback", &app)
	if err != nil || how != Updated || moved.ID != 1 || moved.ClientSecret == app.ClientSecret || f.apps[1].redirects[0] != "https://git.example/collab/oauth/callback" {
		t.Fatalf("moved: %+v %s %v", moved, how, err)
	}

	// Someone deleted it in Gitea: registered anew.
	delete(f.apps, 1)
	fresh, how, err := register(t, srv, cb, &moved)
	if err != nil || how != Registered || fresh.ID != 2 {
		t.Fatalf("after deletion: %+v %s %v", fresh, how, err)
	}

	// Stored for another Gitea: not looked up there, registered here.
	other := fresh
	other.GiteaURL = "http://elsewhere:3000"
	if _, how, err := register(t, srv, cb, &other); err != nil || how != Registered {
		t.Fatalf("other Gitea: %s %v", how, err)
	}
}

func TestRegisterOAuthAppFailures(t *testing.T) {
	f, srv := newFakeApps(t)
	app, _, err := register(t, srv, "http://x/oauth/callback", nil)
	if err != nil {
		t.Fatal(err)
	}
	f.status = 403
	if _, _, err := register(t, srv, "http://x/oauth/callback", nil); !errors.Is(err, forge.ErrConfig) || !strings.Contains(err.Error(), "write:user") {
		t.Fatalf("token without scope: %v", err)
	}
	// A Gitea in trouble while checking the stored application: an
	// error, never a duplicate registration.
	f.status = 502
	n := len(f.apps)
	if _, _, err := register(t, srv, "http://x/oauth/callback", &app); !errors.Is(err, forge.ErrUnavailable) {
		t.Fatalf("Gitea 502: %v", err)
	}
	srv.Close()
	if _, _, err := register(t, srv, "http://x/oauth/callback", &app); !errors.Is(err, forge.ErrUnavailable) {
		t.Fatalf("Gitea down: %v", err)
	}
	if len(f.apps) != n {
		t.Fatalf("registered during a failure")
	}
}

func TestRemoveOAuthApp(t *testing.T) {
	f, srv := newFakeApps(t)
	const cb = "http://127.0.0.1:8787/oauth/callback"
	fg, err := New(Options{URL: srv.URL, Token: "admin-token"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The user's own applications, which stay: another name, and the same
	// name for another redirect URI.
	f.apps[1] = &fakeApp{name: "grafana", clientID: "c1", redirects: []string{cb}}
	f.apps[2] = &fakeApp{name: "collab-lease", clientID: "c2", redirects: []string{"http://elsewhere/oauth/callback"}}
	f.next = 3
	stored, _, err := fg.RegisterOAuthApp(ctx, cb, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A second one for this redirect URI (an install whose oauth2.json was
	// lost), and the stored one moved to another URI since.
	dup, _, err := fg.RegisterOAuthApp(ctx, cb, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.apps[stored.ID].redirects = []string{"http://moved/oauth/callback"}

	if n, err := fg.RemoveOAuthApp(ctx, cb, &stored); err != nil || n != 2 {
		t.Fatalf("remove: %d %v", n, err)
	}
	if len(f.apps) != 2 || f.apps[1] == nil || f.apps[2] == nil || f.apps[dup.ID] != nil {
		t.Fatalf("left: %v", f.apps)
	}
	// Gone already, or stored for another Gitea: nothing to do.
	if n, err := fg.RemoveOAuthApp(ctx, cb, &stored); err != nil || n != 0 {
		t.Fatalf("remove again: %d %v", n, err)
	}
	other := OAuthApp{GiteaURL: "http://elsewhere:3000", ID: 2, ClientID: "c2"}
	if n, err := fg.RemoveOAuthApp(ctx, cb, &other); err != nil || n != 0 || f.apps[2] == nil {
		t.Fatalf("stored for another Gitea: %d %v", n, err)
	}
	f.status = 403
	if _, err := fg.RemoveOAuthApp(ctx, cb, nil); !errors.Is(err, forge.ErrConfig) || !strings.Contains(err.Error(), "write:user") {
		t.Fatalf("token without the scope: %v", err)
	}
}

func TestOAuthAppFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "oauth2.json")
	if app, err := LoadOAuthApp(path); app != nil || err != nil {
		t.Fatalf("missing file: %v %v", app, err)
	}
	want := OAuthApp{GiteaURL: "http://g", ID: 3, ClientID: "c", ClientSecret: "s", RedirectURI: "http://p/oauth/callback"}
	if err := SaveOAuthApp(path, want); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %o", st.Mode().Perm())
	}
	got, err := LoadOAuthApp(path)
	if err != nil || *got != want {
		t.Fatalf("load: %+v %v", got, err)
	}
	_ = os.Chmod(path, 0o644)
	if _, err := LoadOAuthApp(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("readable by others: %v", err)
	}
	_ = os.WriteFile(path, []byte(`{"client_id":""}`), 0o600)
	_ = os.Chmod(path, 0o600)
	if _, err := LoadOAuthApp(path); err == nil {
		t.Fatal("loaded an empty application")
	}
}
