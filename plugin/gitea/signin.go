package gitea

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/collab-lease/collab-lease/plugin/forge"
)

// Sign-in through Gitea's OAuth2 provider (authorization code flow). The
// sidecar is a confidential client of Gitea 1.26 (routers/web/auth/
// oauth2_provider.go), which
//   - takes client_id and client_secret in the token request's form body
//     (or HTTP Basic) and requires the secret of a confidential client;
//   - accepts PKCE (S256) from confidential clients too, and then checks
//     the verifier at the token endpoint: the sidecar always sends it, so
//     a code that leaks from the redirect is useless without the sign-in
//     cookie of the browser that started it;
//   - matches redirect_uri exactly against the registered ones;
//   - answers every refusal at the token endpoint with 400 (invalid_grant,
//     unauthorized_client, …), which classify reads as forge.ErrNotFound;
//   - reduces the access token to the requested scopes
//     (services/oauth2_provider GrantAdditionalScopes; no scope at all
//     would mean "all"): "read:user" is all the sidecar needs, for
//     GET /api/v1/user;
//   - accepts that access token as "Authorization: token …" like an API
//     token (modules/auth/httpauth: "token" and "bearer" are one scheme);
//   - asks the user to grant access once, then redirects straight back.
//
// The sidecar keeps only the account it learns; Gitea's access token is
// dropped after that one request.

// oauthScope is what the sidecar asks Gitea for.
const oauthScope = "read:user"

// OAuthClient is the sidecar as a confidential OAuth2 client of Gitea: what
// a browser's sign-in needs from Gitea's OAuth2 provider. It is safe for
// concurrent use.
type OAuthClient struct {
	forge        *Forge
	clientID     string
	clientSecret string
}

// OAuthClient returns the client of the registered application app.
func (f *Forge) OAuthClient(app OAuthApp) *OAuthClient {
	return &OAuthClient{forge: f, clientID: app.ClientID, clientSecret: app.ClientSecret}
}

// AuthorizeURL is Gitea's consent page for this client, where a browser
// goes to sign in; Gitea sends it back to redirectURI with a code and
// state. challenge is the PKCE S256 challenge of the verifier that
// Exchange will send.
func (c *OAuthClient) AuthorizeURL(redirectURI, state, challenge string) string {
	q := url.Values{
		"client_id":             {c.clientID},
		"redirect_uri":          {redirectURI},
		"response_type":         {"code"},
		"scope":                 {oauthScope},
		"state":                 {state},
		"code_challenge":        {challenge},
		"code_challenge_method": {"S256"},
	}
	u := c.forge.base.JoinPath("/login/oauth/authorize")
	u.RawQuery = q.Encode()
	return u.String()
}

// Exchange trades an authorization code and its PKCE verifier for the
// account that granted it, which must be active and allowed to log in.
// forge.ErrNotFound: Gitea refused the code (expired, used, another
// client's or verifier) or the account may not log in.
func (c *OAuthClient) Exchange(ctx context.Context, code, verifier, redirectURI string) (forge.User, error) {
	ctx, cancel := c.forge.within(ctx)
	defer cancel()
	form := url.Values{
		"grant_type":    {"authorization_code"},
		"code":          {code},
		"redirect_uri":  {redirectURI},
		"client_id":     {c.clientID},
		"client_secret": {c.clientSecret},
		"code_verifier": {verifier},
	}
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	const op = "POST /login/oauth/access_token"
	if err := c.forge.send(ctx, identity{grant: true}, http.MethodPost, "/login/oauth/access_token", nil, form, &tok); err != nil {
		return forge.User{}, fmt.Errorf("sign-in: %w", err)
	}
	if tok.AccessToken == "" {
		return forge.User{}, fmt.Errorf("sign-in: %s: %w: malformed response: no access token", op, forge.ErrUnavailable)
	}
	u, err := c.forge.tokenUser(ctx, tok.AccessToken)
	if err != nil {
		return forge.User{}, fmt.Errorf("sign-in: %w", err)
	}
	if err := mayLogIn(u); err != nil {
		return forge.User{}, fmt.Errorf("sign-in: %w", err)
	}
	return forge.User{ID: u.ID, Login: u.UserName}, nil
}
