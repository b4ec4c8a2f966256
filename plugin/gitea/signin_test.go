package gitea

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/clocktest"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

var testApp = OAuthApp{ID: 4, ClientID: "client-id", ClientSecret: "client-secret"}

func TestAuthorizeURL(t *testing.T) {
	f, err := New(Options{URL: "https://git.example/gitea/", Token: adminToken})
	if err != nil {
		t.Fatal(err)
	}
	raw := f.OAuthClient(testApp).AuthorizeURL("https://git.example/collab/oauth/callback", "the-state", "the-challenge")
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.Host != "git.example" || u.Path != "/gitea/login/oauth/authorize" {
		t.Fatalf("AuthorizeURL = %s", raw)
	}
	want := url.Values{
		"client_id": {"client-id"}, "redirect_uri": {"https://git.example/collab/oauth/callback"},
		"response_type": {"code"}, "scope": {"read:user"}, "state": {"the-state"},
		"code_challenge": {"the-challenge"}, "code_challenge_method": {"S256"},
	}
	if got := u.Query(); got.Encode() != want.Encode() {
		t.Errorf("query = %v, want %v", got, want)
	}
}

// tokenEndpoint answers the code exchange after checking the form the
// sidecar sends; answer writes the reply.
func tokenEndpoint(t *testing.T, answer http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			t.Errorf("token request: %v", err)
		}
		want := url.Values{
			"grant_type": {"authorization_code"}, "code": {"the-code"}, "code_verifier": {"the-verifier"},
			"redirect_uri": {"http://sidecar/oauth/callback"}, "client_id": {"client-id"}, "client_secret": {"client-secret"},
		}
		if got := r.PostForm.Encode(); got != want.Encode() {
			t.Errorf("token request form = %s, want %s", got, want.Encode())
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/x-www-form-urlencoded" {
			t.Errorf("token request Content-Type %q", ct)
		}
		answer(w, r)
	}
}

func TestExchange(t *testing.T) {
	granted := jsonBody(map[string]any{"access_token": "gta.jwt.token", "token_type": "bearer", "expires_in": 3600})
	alice := jsonBody(map[string]any{"id": 3, "login": "alice", "active": true})
	tests := []struct {
		name          string
		token, user   http.HandlerFunc
		want          forge.User
		wantErr       error
		detail        string
		userRequested bool
	}{
		{"granted", granted, alice, forge.User{ID: 3, Login: "alice"}, nil, "", true},
		{"code refused", status(400, `{"error":"invalid_grant","error_description":"authorization code already used"}`), alice,
			forge.User{}, forge.ErrNotFound, "invalid_grant: authorization code already used", false},
		{"secret refused", status(400, `{"error":"unauthorized_client","error_description":"invalid client secret"}`), alice,
			forge.User{}, forge.ErrNotFound, "invalid client secret", false},
		{"Gitea failing", status(500, `{"error":"server_error"}`), alice, forge.User{}, forge.ErrUnavailable, "HTTP 500", false},
		{"no access token", jsonBody(map[string]any{"token_type": "bearer"}), alice, forge.User{}, forge.ErrUnavailable, "no access token", false},
		{"not JSON", status(200, `<html>`), alice, forge.User{}, forge.ErrUnavailable, "malformed", false},
		{"access token refused", granted, status(401, `{"message":"invalid token"}`), forge.User{}, forge.ErrNotFound, "invalid token", true},
		{"account may not log in", granted, jsonBody(map[string]any{"id": 3, "login": "frank", "active": true, "prohibit_login": true}),
			forge.User{}, forge.ErrNotFound, "frank may not log in", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newFake(t, map[string]http.HandlerFunc{
				"POST /login/oauth/access_token": tokenEndpoint(t, tt.token),
				"GET /api/v1/user":               tt.user,
			})
			f := newTestForge(t, g.srv.URL, clocktest.New(), time.Second)
			got, err := f.OAuthClient(testApp).Exchange(context.Background(), "the-code", "the-verifier", "http://sidecar/oauth/callback")
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), tt.detail) {
				t.Errorf("err = %q, want it to mention %q", err, tt.detail)
			}
			if got != tt.want {
				t.Errorf("user = %+v, want %+v", got, tt.want)
			}
			reqs := g.requests()
			if reqs[0].Auth != "" || reqs[0].Sudo != "" {
				t.Errorf("token request sent Authorization %q, Sudo %q", reqs[0].Auth, reqs[0].Sudo)
			}
			if !tt.userRequested {
				if len(reqs) != 1 {
					t.Errorf("requests = %+v, want only the token request", reqs)
				}
				return
			}
			if len(reqs) != 2 || reqs[1].Auth != "token gta.jwt.token" || reqs[1].Sudo != "" {
				t.Errorf("requests = %+v, want the user asked with the access token", reqs)
			}
		})
	}
}

func TestExchangeWithGiteaDown(t *testing.T) {
	g := newFake(t, nil)
	g.srv.Close()
	f := newTestForge(t, g.srv.URL, clocktest.New(), time.Second)
	if _, err := f.OAuthClient(testApp).Exchange(context.Background(), "c", "v", "http://sidecar/oauth/callback"); !errors.Is(err, forge.ErrUnavailable) {
		t.Errorf("err = %v, want ErrUnavailable", err)
	}
}
