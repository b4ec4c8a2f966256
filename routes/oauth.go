package routes

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/gin-gonic/gin"
)

// Sign-in through Gitea's OAuth2 provider (authorization code flow with
// PKCE). This file holds the sidecar's side of it: the state, verifier,
// return URL and expiry carried in a signed cookie from /oauth/login to
// /oauth/callback (and nowhere else: the server keeps no record of started
// sign-ins, so starting and abandoning them costs it nothing that lasts),
// the session cookie, and where the browser may return. What is said to Gitea
// is behind SignIn (plugin/gitea implements it).

// The sign-in's paths under the public URL. Gitea knows the callback (install
// registers RedirectURI), so it is written only here.
const (
	loginPath    = "/oauth/login"
	CallbackPath = "/oauth/callback"
	logoutPath   = "/oauth/logout"
)

// RedirectURI is the OAuth2 redirect URI of a sidecar whose public URL is
// publicURL: where Gitea sends the browser back after sign-in.
func RedirectURI(publicURL string) string { return strings.TrimRight(publicURL, "/") + CallbackPath }

// SignIn is Gitea's OAuth2 provider as the sign-in uses it.
type SignIn interface {
	// AuthorizeURL is where to send the browser to ask the user for
	// consent; Gitea sends it back to redirectURI with a code and state.
	// challenge is the PKCE S256 challenge of the verifier Exchange gets.
	AuthorizeURL(redirectURI, state, challenge string) string
	// Exchange trades an authorization code and its PKCE verifier for
	// the account that granted it. forge.ErrNotFound: Gitea refused the
	// code, or the account may not log in.
	Exchange(ctx context.Context, code, verifier, redirectURI string) (forge.User, error)
}

// sessionView is the reply of GET /api/v1/session: who the sidecar's
// session cookie says the browser is (null: nobody), and where to send the
// browser to sign in (null: sign-in is not configured).
type sessionView struct {
	Login     *string `json:"login"`
	SignInURL *string `json:"sign_in_url"`
}

func (h *handler) session(c *gin.Context) {
	u, ok, err := h.signedIn(c)
	switch {
	case err != nil:
		h.fail(c, err)
	case !ok:
		h.reply(c, h.sessionView(nil))
	default:
		h.reply(c, h.sessionView(&u.Login))
	}
}

// signedIn returns the account of the request's session cookie if the
// cookie is valid, unexpired and of its account's current session epoch
// (a session ended by logout signs nobody in). An error: the ledger could
// not tell the epoch.
func (h *handler) signedIn(c *gin.Context) (forge.User, bool, error) {
	return h.sessionOf(c.Request)
}

// sessionOf is signedIn for the request r (within r's context).
func (h *handler) sessionOf(r *http.Request) (forge.User, bool, error) {
	u, epoch, ok := h.cookies.session(r, h.now())
	if !ok {
		return forge.User{}, false, nil
	}
	current, err := h.leases.SessionEpoch(r.Context(), u)
	if err != nil {
		return forge.User{}, false, fmt.Errorf("session of %s: %w", u.Login, err)
	}
	return u, epoch == current, nil
}

func (h *handler) sessionView(login *string) sessionView {
	v := sessionView{Login: login}
	if h.signIn != nil {
		u := h.public.String() + loginPath
		v.SignInURL = &u
	}
	return v
}

// login starts a sign-in: GET /oauth/login?return_to=<url>.
func (h *handler) login(c *gin.Context) {
	if h.signIn == nil {
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
	c.Header("Cache-Control", "no-store")
	c.Redirect(http.StatusFound, h.signIn.AuthorizeURL(h.redirectURI(), state, base64.RawURLEncoding.EncodeToString(challenge[:])))
}

// callback finishes a sign-in: Gitea sends the browser back here with a
// code (or an error) and the state.
func (h *handler) callback(c *gin.Context) {
	if h.signIn == nil {
		notFound(c)
		return
	}
	c.Header("Cache-Control", "no-store")
	s, err := h.cookies.signIn(c.Request, h.now())
	// The sign-in cookie is good for this one callback, whatever happens.
	h.cookies.clear(c.Writer, signInCookie, h.cookies.signInPath())
	state := c.Query("state")
	switch {
	case err != nil:
		h.fail(c, fmt.Errorf("callback: %w", err))
		return
	case state == "" || subtle.ConstantTimeCompare([]byte(state), []byte(s.State)) != 1:
		h.fail(c, fmt.Errorf("callback: %w", errSignInState))
		return
	}
	// Nothing about the sign-in is kept on the server, so nothing here
	// can be flooded: a replayed callback (a copy of the cookie and the
	// URL) gets no further than Gitea, which takes each code once, and
	// only with the PKCE verifier sealed in that cookie.
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
	u, err := h.signIn.Exchange(c.Request.Context(), code, s.Verifier, h.redirectURI())
	if errors.Is(err, forge.ErrNotFound) {
		err = fmt.Errorf("%w: %w", errSignIn, err)
	}
	if err != nil {
		h.fail(c, err)
		return
	}
	epoch, err := h.leases.SessionEpoch(c.Request.Context(), u)
	if err != nil {
		h.fail(c, fmt.Errorf("sign-in of %s: %w", u.Login, err))
		return
	}
	h.cookies.setSession(c.Writer, u, epoch, h.now())
	h.log.Info("signed in", "login", u.Login)
	c.Redirect(http.StatusFound, returnTo)
}

// logout ends the session: POST /oauth/logout. Clearing the cookie is not
// enough (a copy of it would still sign in), so the account's session
// epoch moves on first, which ends this session and the account's others
// on the server. Another site's page could post a form here with the
// cookie and sign the user out of every browser: a request naming another
// Origin is refused (one without, from a program, is answered).
func (h *handler) logout(c *gin.Context) {
	if o := c.GetHeader("Origin"); o != "" && !h.ourOrigin(o) {
		h.refuseCrossOrigin(c)
		return
	}
	u, ok, err := h.signedIn(c)
	if err == nil && ok {
		err = h.leases.EndSessions(c.Request.Context(), u)
	}
	if err != nil {
		// The cookie stays: it is what a retry names the account by.
		h.fail(c, fmt.Errorf("logout: %w", err))
		return
	}
	if ok {
		h.log.Info("signed out", "login", u.Login)
		h.streams.endSessions(u.ID)
	}
	h.cookies.clear(c.Writer, sessionCookie, h.cookies.path)
	h.reply(c, h.sessionView(nil))
}

func (h *handler) redirectURI() string { return RedirectURI(h.public.String()) }

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
