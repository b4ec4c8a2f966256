package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"slices"
	"strings"

	sdk "code.gitea.io/sdk/gitea"
)

// The sidecar signs browsers in as an OAuth2 application of Gitea. The
// installer registers it (as the user of the admin token, through
// POST /api/v1/user/applications/oauth2) and keeps its credentials in the
// data directory, where `serve` reads them.

// OAuthAppName is the name of the application in Gitea's settings, and
// what Gitea's consent page shows.
const OAuthAppName = "collab-lease"

// OAuthAppFile is the credentials file, relative to the data directory.
const OAuthAppFile = "oauth2.json"

// OAuthApp is the sidecar's OAuth2 application in Gitea.
type OAuthApp struct {
	GiteaURL     string `json:"gitea_url"` // the Gitea it was registered with
	ID           int64  `json:"id"`
	ClientID     string `json:"client_id"`
	ClientSecret string `json:"client_secret"`
	RedirectURI  string `json:"redirect_uri"`
}

// LoadOAuthApp reads the stored application; nil (and no error) when the
// file does not exist, i.e. `collab-sidecar install` has not run.
func LoadOAuthApp(path string) (*OAuthApp, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the OAuth2 application: %w", err)
	}
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s has mode %04o: others may read the client secret; run chmod 600 %s", path, st.Mode().Perm(), path)
	}
	var app OAuthApp
	if err := json.Unmarshal(b, &app); err != nil || app.ClientID == "" || app.ClientSecret == "" {
		return nil, fmt.Errorf("%s is not an OAuth2 application written by collab-sidecar install (run it again)", path)
	}
	return &app, nil
}

// SaveOAuthApp writes app to path (mode 0600, atomically).
func SaveOAuthApp(path string, app OAuthApp) error {
	b, err := json.MarshalIndent(app, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(path, append(b, '\n'), 0o600)
}

// Registration says what RegisterOAuthApp did.
type Registration string

// Outcomes of RegisterOAuthApp.
const (
	Registered Registration = "registered" // a new application
	Reused     Registration = "reused"     // the stored one, unchanged
	Updated    Registration = "updated"    // the stored one, with a new redirect URI (and so a new secret)
)

// RegisterOptions say where and what to register.
type RegisterOptions struct {
	GiteaURL    string
	Token       string // an admin token with the write:user scope
	RedirectURI string // PublicURL + "/oauth/callback"
	// Stored is what an earlier run registered (nil: nothing).
	Stored     *OAuthApp
	HTTPClient *http.Client // nil: http.DefaultClient
}

const oauthScopeFix = "registering the OAuth2 application needs a Gitea admin token with the write:user scope " +
	"(the application belongs to the token's user); pass such a token to collab-sidecar install"

// RegisterOAuthApp makes sure Gitea has the sidecar's confidential OAuth2
// application with the redirect URI: the stored one if Gitea still has it,
// else a new one. Only a stored application that Gitea says is gone (404)
// is replaced; any other failure is returned, so a flaky Gitea never
// leaves a trail of duplicate applications.
func RegisterOAuthApp(ctx context.Context, o RegisterOptions) (OAuthApp, Registration, error) {
	gitea := strings.TrimRight(o.GiteaURL, "/")
	hc := o.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	c, err := sdk.NewClient(gitea, sdk.SetHTTPClient(hc), sdk.SetContext(ctx), sdk.SetGiteaVersion(""),
		sdk.SetToken(o.Token), sdk.SetUserAgent("collab-lease"))
	if err != nil {
		return OAuthApp{}, "", fmt.Errorf("%w: %w", ErrConfig, err)
	}
	want := sdk.CreateOauth2Option{Name: OAuthAppName, ConfidentialClient: true, RedirectURIs: []string{o.RedirectURI}}

	if s := o.Stored; s != nil && s.ID > 0 && strings.TrimRight(s.GiteaURL, "/") == gitea {
		app, resp, err := c.GetOauth2(s.ID)
		switch {
		case err == nil && app.ClientID == s.ClientID:
			if app.ConfidentialClient && slices.Contains(app.RedirectURIs, o.RedirectURI) {
				out := *s
				out.RedirectURI = o.RedirectURI
				return out, Reused, nil
			}
			// Gitea regenerates the secret on every update.
			want.Name = app.Name
			app, resp, err = c.UpdateOauth2(s.ID, want)
			if err != nil {
				return OAuthApp{}, "", oauthErr("update the OAuth2 application", resp, err)
			}
			return appOf(gitea, app, o.RedirectURI), Updated, nil
		case err == nil, status(resp) == http.StatusNotFound:
			// Gone, or another application now has that ID: register anew.
		default:
			return OAuthApp{}, "", oauthErr("look up the stored OAuth2 application", resp, err)
		}
	}
	app, resp, err := c.CreateOauth2(want)
	if err != nil {
		return OAuthApp{}, "", oauthErr("register the OAuth2 application", resp, err)
	}
	if app.ClientID == "" || app.ClientSecret == "" {
		return OAuthApp{}, "", fmt.Errorf("register the OAuth2 application: %w: Gitea returned no client credentials", ErrUnavailable)
	}
	return appOf(gitea, app, o.RedirectURI), Registered, nil
}

func appOf(gitea string, app *sdk.Oauth2, redirect string) OAuthApp {
	return OAuthApp{GiteaURL: gitea, ID: app.ID, ClientID: app.ClientID, ClientSecret: app.ClientSecret, RedirectURI: redirect}
}

func status(resp *sdk.Response) int {
	if resp == nil || resp.Response == nil {
		return 0
	}
	return resp.StatusCode
}

// oauthErr maps a failed registration request onto the sentinels.
func oauthErr(op string, resp *sdk.Response, err error) error {
	switch code := status(resp); {
	case code == 0 || code >= 500:
		return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return fmt.Errorf("%s: HTTP %d (%v): %w: %s", op, code, err, ErrConfig, oauthScopeFix)
	default:
		return fmt.Errorf("%s: HTTP %d: %w", op, code, err)
	}
}
