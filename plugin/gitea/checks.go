package gitea

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/collab-lease/collab-lease/plugin/forge"
)

// Checks of how the sidecar is wired to Gitea, for `collab-sidecar doctor`
// (Check, of the admin token, is in forge.go: /readyz uses it too). Each
// answers with the forge's sentinel errors; saying what to fix is the
// caller's.

// Version is Gitea's version, from its unauthenticated GET /api/v1/version.
// forge.ErrUnavailable: nothing answers there, or not properly;
// forge.ErrConfig: what answers is not Gitea's API.
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
		return "", fmt.Errorf("GET %s/api/v1/version: %w: the answer names no version", f.base, forge.ErrConfig)
	case errors.Is(err, forge.ErrNotFound):
		// A 404, 401 or 403 there: a web server, but not Gitea's API.
		return "", fmt.Errorf("%w: %w", forge.ErrConfig, err)
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
	if errors.Is(err, forge.ErrNotFound) {
		return fmt.Errorf("%w: Gitea has no key search by fingerprint: %w", forge.ErrConfig, err)
	}
	return err
}

const oauthReadFix = "reading the OAuth2 application needs a token with the read:user scope of the user who registered it"

// CheckOAuthApp checks that Gitea still has the application app as it was
// registered (same client ID, confidential, with app's redirect URI), among
// the applications of the admin token's user. forge.ErrNotFound: it is
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
		return fmt.Errorf("OAuth2 application %d has client ID %s, not %s: %w", app.ID, got.ClientID, app.ClientID, forge.ErrNotFound)
	case !got.ConfidentialClient || !slices.Contains(got.RedirectURIs, app.RedirectURI):
		return fmt.Errorf("OAuth2 application %d is no longer a confidential client with redirect %s: %w", app.ID, app.RedirectURI, forge.ErrNotFound)
	}
	return nil
}

// maxFencedRepoPages bounds the pages (of 50 repositories) FencedRepos
// reads: doctor says when it stopped short.
const maxFencedRepoPages = 20

// FencedRepos lists the repositories (as "owner/name (branch)") whose
// branch protection requires the status context, among the first
// maxFencedRepoPages pages of all repositories as the admin sees them;
// truncated says there were more repositories than that. A rule's
// required contexts may be glob patterns, as Gitea allows.
func (f *Forge) FencedRepos(ctx context.Context, context string) (fenced []string, truncated bool, err error) {
	ctx, cancel := f.within(ctx)
	defer cancel()
	for page := 1; page <= maxFencedRepoPages; page++ {
		var found struct {
			Data []struct {
				FullName string `json:"full_name"`
			} `json:"data"`
		}
		q := url.Values{"limit": {"50"}, "page": {strconv.Itoa(page)}}
		if err := f.send(ctx, f.asAdmin(), http.MethodGet, "/api/v1/repos/search", q, nil, &found); err != nil {
			return nil, false, err
		}
		for _, r := range found.Data {
			var rules []struct {
				RuleName          string   `json:"rule_name"`
				EnableStatusCheck bool     `json:"enable_status_check"`
				Contexts          []string `json:"status_check_contexts"`
			}
			err := f.send(ctx, f.asAdmin(), http.MethodGet, "/api/v1/repos/"+r.FullName+"/branch_protections", nil, nil, &rules)
			if errors.Is(err, forge.ErrNotFound) {
				continue // gone meanwhile, or no code unit
			}
			if err != nil {
				return nil, false, err
			}
			for _, rule := range rules {
				if rule.EnableStatusCheck && slices.ContainsFunc(rule.Contexts, func(c string) bool {
					ok, _ := path.Match(c, context)
					return c == context || ok
				}) {
					fenced = append(fenced, fmt.Sprintf("%s (%s)", r.FullName, rule.RuleName))
				}
			}
		}
		if len(found.Data) < 50 {
			return fenced, false, nil
		}
	}
	return fenced, true, nil
}

// CheckBranchRules checks that the admin token may manage branch
// protection, as the push fence does, without changing anything: it asks
// to edit a rule no repository has, on the first repository it sees,
// which Gitea answers 404 to a token that may (and 403 to one without
// write:repository or a repository admin's rights: forge.ErrConfig).
// forge.ErrNotFound: Gitea has no repository to ask about.
func (f *Forge) CheckBranchRules(ctx context.Context) (string, error) {
	ctx, cancel := f.within(ctx)
	defer cancel()
	var found struct {
		Data []struct {
			FullName string `json:"full_name"`
		} `json:"data"`
	}
	q := url.Values{"limit": {"1"}, "archived": {"false"}}
	if err := f.send(ctx, f.asAdmin(), http.MethodGet, "/api/v1/repos/search", q, nil, &found); err != nil {
		return "", err
	}
	if len(found.Data) == 0 {
		return "", fmt.Errorf("no repository to ask about: %w", forge.ErrNotFound)
	}
	repo := found.Data[0].FullName
	// An edit that names no setting changes nothing, even of a rule that
	// happens to have the probe's name.
	err := f.send(ctx, f.asAdmin(), http.MethodPatch, "/api/v1/repos/"+repo+"/branch_protections/collab-lease-doctor-probe", nil, map[string]any{}, nil)
	if err == nil || errors.Is(err, forge.ErrNotFound) {
		return repo, nil
	}
	return "", fmt.Errorf("%s: %w", repo, err)
}
