package routes

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/collab-lease/collab-lease/plugin/forge"
)

// The sidecar's own cookies. Both are HMAC-signed with the session key (a
// purpose string is part of the signed bytes, so one cannot stand in for
// the other), HttpOnly, SameSite=Lax (sent on the top-level redirect back
// from Gitea and on same-site fetches of the badge script) and Secure when
// the public URL is https.
const (
	sessionCookie = "collab_lease_session"
	signInCookie  = "collab_lease_signin"
	// signInTTL bounds how long a started sign-in may take at Gitea.
	signInTTL = 10 * time.Minute
)

type cookieJar struct {
	key    []byte
	secure bool
	path   string // the public URL's path + "/"
	ttl    time.Duration
}

// sessionClaims is what the session cookie says: which account (its ID
// decides, the login is shown), until when, and the account's session
// epoch when it was issued (plugin/lease/identity.go: valid only while the
// account still has it; cookies from before epochs were kept carry none,
// which is epoch 0).
type sessionClaims struct {
	ID      int64  `json:"id"`
	Login   string `json:"login"`
	Expires int64  `json:"exp"`
	Epoch   int64  `json:"epoch,omitempty"`
}

// signInClaims carries a started sign-in from /oauth/login to
// /oauth/callback in the browser that started it.
type signInClaims struct {
	State    string `json:"state"`
	Verifier string `json:"verifier"` // PKCE code verifier
	ReturnTo string `json:"return_to"`
	Expires  int64  `json:"exp"`
}

func (j cookieJar) mac(purpose string, payload []byte) []byte {
	m := hmac.New(sha256.New, j.key)
	m.Write([]byte("collab-lease " + purpose + "\x00"))
	m.Write(payload)
	return m.Sum(nil)
}

// seal renders v as base64url(JSON) "." base64url(HMAC).
func (j cookieJar) seal(purpose string, v any) string {
	payload, _ := json.Marshal(v) // plain structs of strings and ints
	enc := base64.RawURLEncoding
	return enc.EncodeToString(payload) + "." + enc.EncodeToString(j.mac(purpose, payload))
}

// unseal verifies and decodes a value made by seal.
func (j cookieJar) unseal(purpose, s string, v any) bool {
	if len(j.key) < 32 || len(s) > 4096 {
		return false
	}
	p, m, ok := strings.Cut(s, ".")
	if !ok {
		return false
	}
	enc := base64.RawURLEncoding
	payload, err1 := enc.DecodeString(p)
	sum, err2 := enc.DecodeString(m)
	if err1 != nil || err2 != nil || !hmac.Equal(sum, j.mac(purpose, payload)) {
		return false
	}
	return json.Unmarshal(payload, v) == nil
}

// session returns the account of a valid, unexpired session cookie and
// the session epoch it was issued at (whether that epoch is still the
// account's is for the caller to ask). A cookie without an account ID
// (made before sessions carried one) is not valid: its holder signs in
// again.
func (j cookieJar) session(r *http.Request, now time.Time) (forge.User, int64, bool) {
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return forge.User{}, 0, false
	}
	var s sessionClaims
	if !j.unseal(sessionCookie, ck.Value, &s) || s.ID <= 0 || s.Login == "" || now.Unix() >= s.Expires {
		return forge.User{}, 0, false
	}
	return forge.User{ID: s.ID, Login: s.Login}, s.Epoch, true
}

func (j cookieJar) setSession(w http.ResponseWriter, u forge.User, epoch int64, now time.Time) {
	exp := now.Add(j.ttl)
	j.set(w, sessionCookie, j.path, j.seal(sessionCookie, sessionClaims{ID: u.ID, Login: u.Login, Expires: exp.Unix(), Epoch: epoch}), exp, now)
}

// signInPath scopes the sign-in cookie to the sign-in's paths (the
// directory of CallbackPath).
func (j cookieJar) signInPath() string {
	return strings.TrimSuffix(j.path, "/") + path.Dir(CallbackPath) + "/"
}

func (j cookieJar) setSignIn(w http.ResponseWriter, s signInClaims, now time.Time) {
	j.set(w, signInCookie, j.signInPath(), j.seal(signInCookie, s), time.Unix(s.Expires, 0), now)
}

// signIn returns the started sign-in of the request: errSignInCookie if
// it has no sign-in cookie or one this sidecar did not seal (altered, or
// sealed with another key), errSignInExpired once signInTTL has passed.
func (j cookieJar) signIn(r *http.Request, now time.Time) (signInClaims, error) {
	var s signInClaims
	ck, err := r.Cookie(signInCookie)
	if err != nil || !j.unseal(signInCookie, ck.Value, &s) || s.State == "" {
		return signInClaims{}, errSignInCookie
	}
	if now.Unix() >= s.Expires {
		return signInClaims{}, errSignInExpired
	}
	return s, nil
}

func (j cookieJar) set(w http.ResponseWriter, name, path, value string, exp, now time.Time) {
	http.SetCookie(w, &http.Cookie{
		Name: name, Value: value, Path: path,
		Expires: exp.UTC(), MaxAge: int(exp.Sub(now) / time.Second),
		HttpOnly: true, Secure: j.secure, SameSite: http.SameSiteLaxMode,
	})
}

func (j cookieJar) clear(w http.ResponseWriter, name, path string) {
	http.SetCookie(w, &http.Cookie{
		Name: name, Value: "", Path: path, MaxAge: -1,
		HttpOnly: true, Secure: j.secure, SameSite: http.SameSiteLaxMode,
	})
}
