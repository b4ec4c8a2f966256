package gitea

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	sdk "code.gitea.io/sdk/gitea"
	"github.com/collab-lease/collab-lease/internal/osfile"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// The sidecar signs browsers in as an OAuth2 application of Gitea. The
// installer registers it (as the user of the admin token, through
// POST /api/v1/user/applications/oauth2) and keeps its credentials in the
// data directory, where `serve` reads them.

// OAuthAppName is the name of the application in Gitea's settings, and
// what Gitea's consent page shows.
const OAuthAppName = "collab-lease"

// OAuthApp is the sidecar's OAuth2 application in Gitea, as its
// credentials file stores it.
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
	return osfile.WriteFileAtomic(path, append(b, '\n'), 0o600)
}

// Registration says what RegisterOAuthApp or RegisterWebhook did.
type Registration string

// Outcomes of RegisterOAuthApp and RegisterWebhook.
const (
	Registered Registration = "registered" // a new application or webhook
	Reused     Registration = "reused"     // the existing one, unchanged
	// Updated: the stored application, with a new redirect URI (and so a
	// new secret); the webhook, with a new URL, events or active flag, or
	// without its duplicates.
	Updated Registration = "updated"
	// Replaced: the webhook, deleted and made anew because Gitea cannot
	// change its secret.
	Replaced Registration = "replaced"
)

const oauthScopeFix = "registering the OAuth2 application needs a Gitea admin token with the write:user scope " +
	"(the application belongs to the token's user); pass such a token to collab-sidecar install"

// asAppOwner is the Forge's token as the owner of the OAuth2 application:
// a refusal means it lacks the write:user scope.
func (f *Forge) asAppOwner() identity { return identity{token: f.token, fix: oauthScopeFix} }

// RegisterOAuthApp makes sure Gitea has the sidecar's confidential OAuth2
// application with redirectURI, owned by the user of the Forge's token
// (which needs the write:user scope): the stored one if Gitea still has
// it, else a new one. Only a stored application that Gitea says is gone
// (404) is replaced; any other failure is returned, so a flaky Gitea never
// leaves a trail of duplicate applications.
func (f *Forge) RegisterOAuthApp(ctx context.Context, redirectURI string, stored *OAuthApp) (OAuthApp, Registration, error) {
	ctx, cancel := f.within(ctx)
	defer cancel()
	id := f.asAppOwner()
	c := f.sdk(ctx, id)
	gitea := f.base.String()
	want := sdk.CreateOauth2Option{Name: OAuthAppName, ConfidentialClient: true, RedirectURIs: []string{redirectURI}}

	if s := stored; s != nil && s.ID > 0 && strings.TrimRight(s.GiteaURL, "/") == gitea {
		app, resp, err := c.GetOauth2(s.ID)
		err = sdkErr(fmt.Sprintf("look up the stored OAuth2 application %d", s.ID), id, resp, err)
		switch {
		case err == nil && app.ClientID == s.ClientID:
			if app.ConfidentialClient && slices.Contains(app.RedirectURIs, redirectURI) {
				out := *s
				out.RedirectURI = redirectURI
				return out, Reused, nil
			}
			// Gitea regenerates the secret on every update.
			want.Name = app.Name
			app, resp, err = c.UpdateOauth2(s.ID, want)
			if err := sdkErr("update the OAuth2 application", id, resp, err); err != nil {
				return OAuthApp{}, "", err
			}
			return appOf(gitea, app, redirectURI), Updated, nil
		case err == nil, errors.Is(err, forge.ErrNotFound):
			// Gone, or another application now has that ID: register anew.
		default:
			return OAuthApp{}, "", err
		}
	}
	app, resp, err := c.CreateOauth2(want)
	if err := sdkErr("register the OAuth2 application", id, resp, err); err != nil {
		return OAuthApp{}, "", err
	}
	if app.ClientID == "" || app.ClientSecret == "" {
		return OAuthApp{}, "", fmt.Errorf("register the OAuth2 application: %w: Gitea returned no client credentials", forge.ErrUnavailable)
	}
	return appOf(gitea, app, redirectURI), Registered, nil
}

func appOf(gitea string, app *sdk.Oauth2, redirect string) OAuthApp {
	return OAuthApp{GiteaURL: gitea, ID: app.ID, ClientID: app.ClientID, ClientSecret: app.ClientSecret, RedirectURI: redirect}
}

// maxAppPages bounds the listing of the token user's applications.
const maxAppPages = 100

// RemoveOAuthApp deletes the sidecar's OAuth2 application from Gitea: the
// stored one (if it was registered with this Gitea and still has its
// client ID) and any other named OAuthAppName with redirectURI, among the
// applications of the Forge's token's user (the token needs write:user).
// It says how many it deleted; none is no error.
func (f *Forge) RemoveOAuthApp(ctx context.Context, redirectURI string, stored *OAuthApp) (int, error) {
	ctx, cancel := f.within(ctx)
	defer cancel()
	id := f.asAppOwner()
	c := f.sdk(ctx, id)
	gitea := f.base.String()
	isStored := func(a *sdk.Oauth2) bool {
		s := stored
		return s != nil && strings.TrimRight(s.GiteaURL, "/") == gitea && a.ID == s.ID && a.ClientID == s.ClientID
	}
	var doomed []int64
	for page := 1; ; page++ {
		if page > maxAppPages {
			return 0, fmt.Errorf("list the OAuth2 applications: %w: more than %d pages", forge.ErrUnavailable, maxAppPages)
		}
		apps, resp, err := c.ListOauth2(sdk.ListOauth2Option{ListOptions: sdk.ListOptions{Page: page, PageSize: 50}})
		if err := sdkErr("list the OAuth2 applications", id, resp, err); err != nil {
			return 0, err
		}
		for _, a := range apps {
			if a != nil && (isStored(a) || (a.Name == OAuthAppName && slices.Contains(a.RedirectURIs, redirectURI))) {
				doomed = append(doomed, a.ID)
			}
		}
		if len(apps) == 0 {
			// Until an empty page: Gitea sends no Link header here, and
			// may cap the page size below what is asked for.
			break
		}
	}
	for i, appID := range doomed {
		resp, err := c.DeleteOauth2(appID)
		if err := sdkErr(fmt.Sprintf("delete the OAuth2 application %d", appID), id, resp, err); err != nil && !errors.Is(err, forge.ErrNotFound) {
			return i, err
		}
	}
	return len(doomed), nil
}
