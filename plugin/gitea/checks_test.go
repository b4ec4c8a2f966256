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

func TestVersion(t *testing.T) {
	tests := []struct {
		name    string
		answer  http.HandlerFunc
		want    string
		wantErr error
	}{
		{"Gitea", jsonBody(map[string]any{"version": "1.26.0"}), "1.26.0", nil},
		{"no API there", status(404, `404 page not found`), "", forge.ErrConfig},
		{"JSON without a version", jsonBody(map[string]any{}), "", forge.ErrConfig},
		{"a login page", status(200, `<html>sign in</html>`), "", forge.ErrUnavailable},
		{"Gitea failing", status(502, ``), "", forge.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newFake(t, map[string]http.HandlerFunc{"GET /api/v1/version": tt.answer})
			f := newTestForge(t, g.srv.URL, clocktest.New(), time.Second)
			got, err := f.Version(context.Background())
			if got != tt.want || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Errorf("Version = %q, %v; want %q, %v", got, err, tt.want, tt.wantErr)
			}
			if reqs := g.requests(); len(reqs) != 1 || reqs[0].Auth != "" {
				t.Errorf("requests = %+v, want one without a token", reqs)
			}
		})
	}
	g := newFake(t, nil)
	g.srv.Close()
	if _, err := newTestForge(t, g.srv.URL, clocktest.New(), time.Second).Version(context.Background()); !errors.Is(err, forge.ErrUnavailable) {
		t.Errorf("nothing listening: %v, want ErrUnavailable", err)
	}
}

func TestCheckKeySearch(t *testing.T) {
	tests := []struct {
		name    string
		answer  http.HandlerFunc
		wantErr error
	}{
		{"answers", jsonBody([]any{}), nil},
		{"token without read:user", status(403, `{"message":"token does not have at least one of required scope(s)"}`), forge.ErrConfig},
		{"no key search", status(404, ``), forge.ErrConfig},
		{"Gitea failing", status(500, ``), forge.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newFake(t, map[string]http.HandlerFunc{"GET /api/v1/user/keys": tt.answer})
			err := newTestForge(t, g.srv.URL, clocktest.New(), time.Second).CheckKeySearch(context.Background())
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Errorf("CheckKeySearch = %v, want %v", err, tt.wantErr)
			}
			if reqs := g.requests(); len(reqs) != 1 || reqs[0].Auth != "token "+adminToken || !strings.HasPrefix(reqs[0].Fingerprint, "SHA256:") {
				t.Errorf("requests = %+v", reqs)
			}
		})
	}
}

func TestCheckOAuthApp(t *testing.T) {
	app := OAuthApp{ID: 4, ClientID: "client-id", ClientSecret: "s", RedirectURI: "http://sidecar/oauth/callback"}
	registered := func(clientID string, confidential bool, redirects ...string) http.HandlerFunc {
		return jsonBody(map[string]any{"id": 4, "client_id": clientID, "confidential_client": confidential, "redirect_uris": redirects})
	}
	tests := []struct {
		name    string
		answer  http.HandlerFunc
		wantErr error
		detail  string
	}{
		{"as registered", registered("client-id", true, "http://other/cb", app.RedirectURI), nil, ""},
		{"gone", status(404, `{"message":"not found"}`), forge.ErrNotFound, ""},
		{"another application", registered("other-id", true, app.RedirectURI), forge.ErrNotFound, "client ID"},
		{"redirect removed", registered("client-id", true, "http://other/cb"), forge.ErrNotFound, "redirect"},
		{"made public", registered("client-id", false, app.RedirectURI), forge.ErrNotFound, "confidential"},
		{"token without read:user", status(403, `{"message":"token does not have at least one of required scope(s)"}`), forge.ErrConfig, "read:user"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newFake(t, map[string]http.HandlerFunc{"GET /api/v1/user/applications/oauth2/4": tt.answer})
			err := newTestForge(t, g.srv.URL, clocktest.New(), time.Second).CheckOAuthApp(context.Background(), app)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("CheckOAuthApp = %v, want %v", err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), tt.detail) {
				t.Errorf("err = %q, want it to mention %q", err, tt.detail)
			}
			if reqs := g.requests(); len(reqs) != 1 || reqs[0].Auth != "token "+adminToken {
				t.Errorf("requests = %+v", reqs)
			}
		})
	}
}
