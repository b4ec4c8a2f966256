package routes

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/collab-lease/collab-lease/plugin"
)

// Sign-in through Gitea's OAuth2 provider (authorization code flow). The
// sidecar is a confidential client of Gitea 1.26 (routers/web/auth/
// oauth2_provider.go), which
//   - takes client_id and client_secret in the token request's form body
//     (or HTTP Basic) and requires the secret of a confidential client;
//   - accepts PKCE (S256) from confidential clients too, and then checks
//     the verifier at the token endpoint: we always send it, so a code
//     that leaks from the redirect is useless without this browser's
//     sign-in cookie;
//   - matches redirect_uri exactly against the registered ones;
//   - reduces the access token to the requested scopes: "read:user" is all
//     the sidecar needs, for GET /api/v1/user;
//   - asks the user to grant access once, then redirects straight back.
//
// The sidecar keeps only the login it learns; Gitea's access token is
// dropped after that one request.

// oauthScope is what the sidecar asks Gitea for.
const oauthScope = "read:user"

// sessionView is the reply of GET /api/v1/session: who the sidecar's
// session cookie says the browser is (null: nobody), and where to send the
// browser to sign in (null: sign-in is not configured).
type sessionView struct {
	Login     *string `json:"login"`
	SignInURL *string `json:"sign_in_url"`
}

func (h *handler) session(c *gin.Context) {
	login, ok := h.cookies.session(c.Request, h.now())
	if !ok {
		h.reply(c, h.sessionView(nil))
		return
	}
	h.reply(c, h.sessionView(&login))
}

func (h *handler) sessionView(login *string) sessionView {
	v := sessionView{Login: login}
	if h.oauth != nil {
		u := h.public.String() + "/oauth/login"
		v.SignInURL = &u
	}
	return v
}

// login starts a sign-in: GET /oauth/login?return_to=<url>.
func (h *handler) login(c *gin.Context) {
	if h.oauth == nil {
		notFound(c)
		return
	}
	state, err1 := h.random()
	verifier, err2 := h.random()
	if err := errors.Join(err1, err2); err != nil {
		h.fail(c, fmt.Errorf("start sign-in: %w", err))
		return
	}
	now := h.now()
	h.cookies.setSignIn(c.Writer, signInClaims{
		State: state, Verifier: verifier,
		ReturnTo: h.safeReturn(c.Query("return_to")),
		Expires:  now.Add(signInTTL).Unix(),
	}, now)
	challenge := sha256.Sum256([]byte(verifier))
	q := url.Values{
		"client_id":             {h.oauth.ClientID},
		"redirect_uri":          {h.redirectURI()},
		"response_type":         {"code"},
		"scope":                 {oauthScope},
		"state":                 {state},
		"code_challenge":        {base64.RawURLEncoding.EncodeToString(challenge[:])},
		"code_challenge_method": {"S256"},
	}
	c.Header("Cache-Control", "no-store")
	c.Redirect(http.StatusFound, h.gitea.String()+"/login/oauth/authorize?"+q.Encode())
}

// callback finishes a sign-in: Gitea sends the browser back here with a
// code (or an error) and the state.
func (h *handler) callback(c *gin.Context) {
	if h.oauth == nil {
		notFound(c)
		return
	}
	c.Header("Cache-Control", "no-store")
	now := h.now()
	s, ok := h.cookies.signIn(c.Request, now)
	// The sign-in cookie is good for this one callback, whatever happens.
	h.cookies.clear(c.Writer, signInCookie, h.cookies.signInPath())
	state := c.Query("state")
	switch {
	case !ok:
		h.fail(c, fmt.Errorf("callback without a valid sign-in cookie: %w", errSignIn))
		return
	case state == "" || subtle.ConstantTimeCompare([]byte(state), []byte(s.State)) != 1:
		h.fail(c, fmt.Errorf("callback state does not match the sign-in cookie: %w", errSignIn))
		return
	case !h.spent.use(s.State, s.Expires, now):
		h.fail(c, fmt.Errorf("callback state already used: %w", errSignIn))
		return
	}
	returnTo := h.safeReturn(s.ReturnTo)
	if e := c.Query("error"); e != "" {
		// The user declined (or Gitea refused): back where they were,
		// still signed out.
		h.log.Info("sign-in not granted", "error", e)
		c.Redirect(http.StatusFound, returnTo)
		return
	}
	code := c.Query("code")
	if code == "" {
		h.fail(c, fmt.Errorf("callback without a code: %w", errSignIn))
		return
	}
	ctx := c.Request.Context()
	token, err := h.exchange(ctx, code, s.Verifier)
	if err != nil {
		h.fail(c, err)
		return
	}
	login, err := h.oauthUser(ctx, token)
	if err != nil {
		h.fail(c, err)
		return
	}
	h.cookies.setSession(c.Writer, login, h.now())
	h.log.Info("signed in", "login", login)
	c.Redirect(http.StatusFound, returnTo)
}

// logout ends the session: POST /oauth/logout.
func (h *handler) logout(c *gin.Context) {
	h.cookies.clear(c.Writer, sessionCookie, h.cookies.path)
	h.reply(c, h.sessionView(nil))
}

func (h *handler) redirectURI() string { return h.public.String() + "/oauth/callback" }

// random returns 32 random bytes, base64url-encoded (43 characters: also a
// valid PKCE verifier).
func (h *handler) random() (string, error) {
	b := make([]byte, 32)
	if _, err := io.ReadFull(h.rand, b); err != nil {
		return "", fmt.Errorf("random: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// safeReturn is where a sign-in may send the browser afterwards: an
// absolute URL on Gitea's origin or on the sidecar's own, anything else is
// replaced by Gitea's home page (no open redirect).
func (h *handler) safeReturn(raw string) string {
	home := h.gitea.String() + "/"
	if raw == "" || len(raw) > 2048 {
		return home
	}
	for _, r := range raw {
		// Browsers read "\" as "/" and drop tabs and newlines: refuse
		// anything they might parse differently from us.
		if r < 0x21 || r == 0x7f || r == '\\' {
			return home
		}
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Opaque != "" || u.User != nil || u.Host == "" {
		return home
	}
	if o := origin(u); o != h.giteaOrig && o != h.publicOrig {
		return home
	}
	return u.String()
}

// maxOAuthBody bounds what is read from Gitea's OAuth2 answers.
const maxOAuthBody = 1 << 20

// exchange trades the authorization code for an access token at Gitea.
func (h *handler) exchange(ctx context.Context, code, verifier string) (string, error) {
	form := url.Values{
		"grant_type":    {"authorization_code"},
		"code":          {code},
		"redirect_uri":  {h.redirectURI()},
		"client_id":     {h.oauth.ClientID},
		"client_secret": {h.oauth.ClientSecret},
		"code_verifier": {verifier},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.gitea.String()+"/login/oauth/access_token", strings.NewReader(form.Encode()))
	if err != nil {
		return "", fmt.Errorf("token request: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	var out struct {
		AccessToken string `json:"access_token"`
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
	code2, err := h.doJSON(req, &out)
	switch {
	case err != nil:
		return "", fmt.Errorf("token request: %w", err)
	case code2 == http.StatusBadRequest || code2 == http.StatusUnauthorized:
		return "", fmt.Errorf("token request: Gitea refused the code (%s: %s): %w", out.Error, out.Description, errSignIn)
	case code2 != http.StatusOK || out.AccessToken == "":
		return "", fmt.Errorf("token request: HTTP %d: %w", code2, plugin.ErrUnavailable)
	}
	return out.AccessToken, nil
}

// oauthUser asks Gitea whom an access token belongs to.
func (h *handler) oauthUser(ctx context.Context, token string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.gitea.String()+"/api/v1/user", nil)
	if err != nil {
		return "", fmt.Errorf("user request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	var u struct {
		Login string `json:"login"`
	}
	code, err := h.doJSON(req, &u)
	switch {
	case err != nil:
		return "", fmt.Errorf("user request: %w", err)
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return "", fmt.Errorf("user request: HTTP %d: %w", code, errSignIn)
	case code != http.StatusOK || u.Login == "":
		return "", fmt.Errorf("user request: HTTP %d: %w", code, plugin.ErrUnavailable)
	}
	return u.Login, nil
}

// doJSON sends req and decodes a JSON body into out (whatever the status;
// error answers carry JSON too). A failure to reach Gitea, or a 2xx answer
// that is not JSON, is plugin.ErrUnavailable.
func (h *handler) doJSON(req *http.Request, out any) (int, error) {
	req.Header.Set("User-Agent", "collab-lease")
	resp, err := h.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", plugin.ErrUnavailable, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxOAuthBody))
	if err != nil {
		return 0, fmt.Errorf("%w: %w", plugin.ErrUnavailable, err)
	}
	if err := json.Unmarshal(body, out); err != nil && resp.StatusCode/100 == 2 {
		return 0, fmt.Errorf("%w: malformed answer: %w", plugin.ErrUnavailable, err)
	}
	return resp.StatusCode, nil
}
