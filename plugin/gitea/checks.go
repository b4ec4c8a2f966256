package gitea

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/collab-lease/collab-lease/plugin"
)

// Checks of how the sidecar is wired to Gitea, for `collab-sidecar doctor`
// (Check, of the admin token, is in forge.go: /readyz uses it too). Each
// answers with the forge's sentinel errors; saying what to fix is the
// caller's.

// Version is Gitea's version, from its unauthenticated GET /api/v1/version.
// plugin.ErrUnavailable: nothing answers there, or not properly;
// plugin.ErrConfig: what answers is not Gitea's API.
func (f *Forge) Version(ctx context.Context) (string, error) {
	ctx, cancel := f.within(ctx)
	defer cancel()
	var v struct {
		Version string `json:"version"`
	}
	err := f.send(ctx, identity{}, http.MethodGet, "/api/v1/version", nil, nil, &v)
	switch {
	case err == nil && v.Version != "":
		return v.Version, nil
	case err == nil:
		return "", fmt.Errorf("GET %s/api/v1/version: %w: the answer names no version", f.base, plugin.ErrConfig)
	case errors.Is(err, plugin.ErrNotFound):
		// A 404, 401 or 403 there: a web server, but not Gitea's API.
		return "", fmt.Errorf("%w: %w", plugin.ErrConfig, err)
	}
	return "", err
}

// CheckKeySearch checks that Gitea answers the key search by fingerprint
// for the admin token, which needs its read:user scope: it looks for a
// fingerprint no key has.
func (f *Forge) CheckKeySearch(ctx context.Context) error {
	ctx, cancel := f.within(ctx)
	defer cancel()
	_, err := f.keysByFingerprint(ctx, "SHA256:"+strings.Repeat("A", 43))
	if errors.Is(err, plugin.ErrNotFound) {
		return fmt.Errorf("%w: Gitea has no key search by fingerprint: %w", plugin.ErrConfig, err)
	}
	return err
}

const oauthReadFix = "reading the OAuth2 application needs a token with the read:user scope of the user who registered it"

// CheckOAuthApp checks that Gitea still has the application app as it was
// registered (same client ID, confidential, with app's redirect URI), among
// the applications of the admin token's user. plugin.ErrNotFound: it is
// gone, or is not that application any more.
func (f *Forge) CheckOAuthApp(ctx context.Context, app OAuthApp) error {
	ctx, cancel := f.within(ctx)
	defer cancel()
	id := identity{token: f.token, fix: oauthReadFix}
	got, resp, err := f.sdk(ctx, id).GetOauth2(app.ID)
	if err := sdkErr(fmt.Sprintf("GET /api/v1/user/applications/oauth2/%d", app.ID), id, resp, err); err != nil {
		return err
	}
	switch {
	case got.ClientID != app.ClientID:
		return fmt.Errorf("OAuth2 application %d has client ID %s, not %s: %w", app.ID, got.ClientID, app.ClientID, plugin.ErrNotFound)
	case !got.ConfidentialClient || !slices.Contains(got.RedirectURIs, app.RedirectURI):
		return fmt.Errorf("OAuth2 application %d is no longer a confidential client with redirect %s: %w", app.ID, app.RedirectURI, plugin.ErrNotFound)
	}
	return nil
}
