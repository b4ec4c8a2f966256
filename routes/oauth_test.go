package routes

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/forge"
)

// fakeSignIn is Gitea's OAuth2 provider as the routes see it (SignIn):
// consent URLs on Gitea's origin, and a code exchange that checks the
// redirect URI and the PKCE verifier, one use per code. fakeGitea serves
// its consent page.
type fakeSignIn struct {
	t    *testing.T
	base string // Gitea's URL
	user forge.User

	mu        sync.Mutex
	codes     map[string]string // code -> code_challenge
	refuse    bool              // every code is refused
	down      bool              // Gitea cannot be reached
	exchanges []exchange        // every Exchange call
}

type exchange struct{ code, verifier, redirectURI string }

var _ SignIn = (*fakeSignIn)(nil)

// newFakeSignIn signs every browser in as user.
func newFakeSignIn(t *testing.T, base string, user forge.User) *fakeSignIn {
	return &fakeSignIn{t: t, base: base, user: user, codes: map[string]string{}}
}

func (s *fakeSignIn) AuthorizeURL(redirectURI, state, challenge string) string {
	q := url.Values{
		"client_id": {"client-id"}, "redirect_uri": {redirectURI}, "response_type": {"code"},
		"state": {state}, "code_challenge": {challenge}, "code_challenge_method": {"S256"},
	}
	return s.base + "/login/oauth/authorize?" + q.Encode()
}

func (s *fakeSignIn) Exchange(ctx context.Context, code, verifier, redirectURI string) (forge.User, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.exchanges = append(s.exchanges, exchange{code, verifier, redirectURI})
	if _, ok := ctx.Deadline(); !ok {
		s.t.Errorf("Exchange without a deadline")
	}
	challenge, known := s.codes[code]
	sum := sha256.Sum256([]byte(verifier))
	switch {
	case s.down:
		return forge.User{}, fmt.Errorf("sign-in: %w", forge.ErrUnavailable)
	case s.refuse || !known:
		return forge.User{}, fmt.Errorf("sign-in: code already used: %w", forge.ErrNotFound)
	case redirectURI != publicURLOf(s.t)+"/oauth/callback":
		return forge.User{}, fmt.Errorf("sign-in: redirect URI %s: %w", redirectURI, forge.ErrNotFound)
	case base64.RawURLEncoding.EncodeToString(sum[:]) != challenge:
		return forge.User{}, fmt.Errorf("sign-in: failed PKCE code challenge: %w", forge.ErrNotFound)
	}
	delete(s.codes, code)
	return s.user, nil
}

// fakeGitea is Gitea's web server as the browser sees it: the consent page
// (signed in as the sign-in's user, granting at once) and any other page.
type fakeGitea struct {
	*fakeSignIn
	srv *httptest.Server

	authorize url.Values // the last authorize request
	issued    int        // codes handed out
}

// newFakeGitea is a Gitea whose consent page has nobody signed in yet;
// set its user.
func newFakeGitea(t *testing.T) *fakeGitea {
	g := &fakeGitea{}
	g.srv = httptest.NewServer(http.HandlerFunc(g.serve))
	t.Cleanup(g.srv.Close)
	g.fakeSignIn = newFakeSignIn(t, g.srv.URL, forge.User{})
	return g
}

func (g *fakeGitea) serve(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch r.URL.Path {
	case "/login/oauth/authorize":
		q := r.URL.Query()
		g.authorize = q
		if q.Get("client_id") != "client-id" || q.Get("response_type") != "code" || q.Get("code_challenge_method") != "S256" {
			http.Error(w, "bad authorize request", 400)
			return
		}
		g.issued++
		code := fmt.Sprintf("code-%d", g.issued)
		g.codes[code] = q.Get("code_challenge")
		back, _ := url.Parse(q.Get("redirect_uri"))
		back.RawQuery = url.Values{"code": {code}, "state": {q.Get("state")}}.Encode()
		http.Redirect(w, r, back.String(), http.StatusSeeOther)
	default:
		_, _ = io.WriteString(w, "a Gitea page: "+r.URL.Path)
	}
}

// The sidecar's public URL differs per test (its own httptest server).
var publicURLs sync.Map

func publicURLOf(t *testing.T) string {
	v, _ := publicURLs.Load(t.Name())
	s, _ := v.(string)
	return s
}

// oauthWorld is a sidecar (on a real listener) signing in against a fake
// Gitea, and a browser: a client with a cookie jar that follows redirects.
type oauthWorld struct {
	*fixture
	gitea   *fakeGitea
	sidecar *httptest.Server
	browser *http.Client
}

func newOAuthWorld(t *testing.T, mod ...func(o *Options)) *oauthWorld {
	w := &oauthWorld{gitea: newFakeGitea(t)}
	var h http.Handler
	w.sidecar = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { h.ServeHTTP(rw, r) }))
	t.Cleanup(w.sidecar.Close)
	publicURLs.Store(t.Name(), w.sidecar.URL)
	w.fixture = newFixture(t, append([]func(o *Options){func(o *Options) {
		o.GiteaURL = w.gitea.srv.URL
		o.PublicURL = w.sidecar.URL
		o.SignIn = w.gitea
	}}, mod...)...)
	h = w.h
	// Gitea signs the browser in as the forge's alice.
	w.gitea.user = w.forge.User("alice")
	jar, _ := cookiejar.New(nil)
	w.browser = &http.Client{Jar: jar, Timeout: 10 * time.Second}
	return w
}

func (w *oauthWorld) get(u string) (*http.Response, string) {
	w.t.Helper()
	resp, err := w.browser.Get(u)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func (w *oauthWorld) login() string {
	_, body := w.get(w.sidecar.URL + "/api/v1/session")
	var v struct{ Login *string }
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		w.t.Fatalf("session: %s", body)
	}
	if v.Login == nil {
		return ""
	}
	return *v.Login
}

// noRedirects sends one request with the browser's cookies and returns
// the answer without following it.
func (w *oauthWorld) noRedirects(u string) (*http.Response, string) {
	w.t.Helper()
	c := *w.browser
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Get(u)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func cookieNamed(resp *http.Response, name string) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func TestSignInFlow(t *testing.T) {
	w := newOAuthWorld(t)
	w.acquire(2, 5, "alice", 0)
	if l := w.login(); l != "" {
		t.Fatalf("signed in before signing in: %q", l)
	}
	_, body := w.get(w.sidecar.URL + "/api/v1/session")
	if body != `{"login":null,"sign_in_url":"`+w.sidecar.URL+`/oauth/login"}` {
		t.Fatalf("session before: %s", body)
	}
	resp, _ := w.get(w.sidecar.URL + "/api/v1/repos/acme/secret/leases")
	if resp.StatusCode != 404 {
		t.Fatalf("private before sign-in: %d", resp.StatusCode)
	}

	returnTo := w.gitea.srv.URL + "/acme/secret/issues?state=open"
	resp, body = w.get(w.sidecar.URL + "/oauth/login?return_to=" + url.QueryEscape(returnTo))
	if resp.Request.URL.String() != returnTo || body != "a Gitea page: /acme/secret/issues" {
		t.Fatalf("ended at %s: %s", resp.Request.URL, body)
	}
	if l := w.login(); l != "alice" {
		t.Fatalf("after sign-in: login %q", l)
	}
	resp, body = w.get(w.sidecar.URL + "/api/v1/repos/acme/secret/leases")
	if resp.StatusCode != 200 || !strings.Contains(body, `"holder":"alice"`) {
		t.Fatalf("private after sign-in: %d %s", resp.StatusCode, body)
	}

	a := w.gitea.authorize
	if a.Get("redirect_uri") != w.sidecar.URL+"/oauth/callback" || len(a.Get("state")) < 40 || len(a.Get("code_challenge")) != 43 {
		t.Fatalf("authorize request: %v", a)
	}
	if ex := w.gitea.exchanges; len(ex) != 1 || len(ex[0].verifier) != 43 || ex[0].redirectURI != w.sidecar.URL+"/oauth/callback" {
		t.Fatalf("exchanges: %+v", ex)
	}

	// The session lasts 12 hours, then the browser is anonymous again.
	w.clock.Advance(DefaultSessionTTL - time.Second)
	if l := w.login(); l != "alice" {
		t.Fatalf("just before expiry: %q", l)
	}
	w.clock.Advance(time.Second)
	if l := w.login(); l != "" {
		t.Fatalf("after expiry: %q", l)
	}
}

func TestSignInCookieFlags(t *testing.T) {
	for _, c := range []struct {
		public string
		secure bool
		path   string
	}{
		{"http://127.0.0.1:8787", false, "/"},
		{"https://git.example/collab/", true, "/collab/"},
	} {
		f := newFixture(t, func(o *Options) { o.PublicURL = c.public })
		r := f.do("GET", "/oauth/login?return_to=x")
		req := &http.Response{Header: r.Header}
		st := cookieNamed(req, signInCookie)
		if r.Code != 302 || st == nil || !st.HttpOnly || st.SameSite != http.SameSiteLaxMode || st.Secure != c.secure ||
			st.Path != c.path+"oauth/" || st.MaxAge != int(signInTTL/time.Second) {
			t.Fatalf("%s: sign-in cookie %+v (%d)", c.public, st, r.Code)
		}
		loc, _ := url.Parse(r.Header.Get("Location"))
		if loc.Scheme+"://"+loc.Host != giteaURL || loc.Path != "/login/oauth/authorize" ||
			loc.Query().Get("redirect_uri") != strings.TrimRight(c.public, "/")+"/oauth/callback" {
			t.Fatalf("%s: Location %s", c.public, loc)
		}

		rec := httptest.NewRecorder()
		f.hd.cookies.setSession(rec, f.user("alice"), 0, f.clock.Now())
		ss := cookieNamed(rec.Result(), sessionCookie)
		if !ss.HttpOnly || ss.SameSite != http.SameSiteLaxMode || ss.Secure != c.secure || ss.Path != c.path ||
			ss.MaxAge != int(DefaultSessionTTL/time.Second) || !ss.Expires.Equal(f.clock.Now().Add(DefaultSessionTTL)) {
			t.Fatalf("%s: session cookie %+v", c.public, ss)
		}
	}
}

// callbackURL starts a sign-in in the browser and returns the callback URL
// Gitea would send it back to (without visiting it).
func (w *oauthWorld) callbackURL(returnTo string) *url.URL {
	w.t.Helper()
	resp, _ := w.noRedirects(w.sidecar.URL + "/oauth/login?return_to=" + url.QueryEscape(returnTo))
	resp, _ = w.noRedirects(resp.Header.Get("Location"))
	u, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || u.Path != "/oauth/callback" {
		w.t.Fatalf("Gitea sent the browser to %s", resp.Header.Get("Location"))
	}
	return u
}

func TestCallbackRefusesAForeignState(t *testing.T) {
	w := newOAuthWorld(t)
	cb := w.callbackURL(w.gitea.srv.URL + "/")
	q := cb.Query()
	q.Set("state", "someone-elses-state")
	cb.RawQuery = q.Encode()
	resp, body := w.noRedirects(cb.String())
	if resp.StatusCode != 400 || body != `{"error":"sign-in does not match the one this browser started: start again from Gitea"}` || cookieNamed(resp, sessionCookie) != nil {
		t.Fatalf("foreign state: %d %s %v", resp.StatusCode, body, resp.Cookies())
	}
	// The attempt used up the sign-in: the right state does not work
	// after it either (the cookie is gone).
	if c := cookieNamed(resp, signInCookie); c == nil || c.MaxAge >= 0 {
		t.Fatalf("sign-in cookie not cleared: %v", resp.Cookies())
	}
	if l := w.login(); l != "" {
		t.Fatalf("signed in as %q", l)
	}
	if len(w.gitea.exchanges) != 0 {
		t.Fatalf("a code was exchanged despite the state mismatch")
	}
}

func TestCallbackWithoutSignInCookie(t *testing.T) {
	w := newOAuthWorld(t)
	cb := w.callbackURL(w.gitea.srv.URL + "/")
	// Another browser (no cookie) follows the link: a login CSRF.
	resp, err := http.Get(cb.String())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 || cookieNamed(resp, sessionCookie) != nil {
		t.Fatalf("callback without cookie: %d", resp.StatusCode)
	}
}

// TestCallbackCannotBeReplayed: a copy of the sign-in cookie and the
// callback URL signs nobody in a second time.
func TestCallbackCannotBeReplayed(t *testing.T) {
	w := newOAuthWorld(t)
	cb := w.callbackURL(w.gitea.srv.URL + "/")
	u, _ := url.Parse(w.sidecar.URL)
	var signIn *http.Cookie
	for _, c := range w.browser.Jar.Cookies(&url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/oauth/"}) {
		if c.Name == signInCookie {
			signIn = c
		}
	}
	if signIn == nil {
		t.Fatal("no sign-in cookie in the jar")
	}
	if resp, _ := w.noRedirects(cb.String()); resp.StatusCode != 302 || cookieNamed(resp, sessionCookie) == nil {
		t.Fatalf("first callback: %d", resp.StatusCode)
	}
	req, _ := http.NewRequest("GET", cb.String(), nil)
	req.AddCookie(signIn)
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 || cookieNamed(resp, sessionCookie) != nil {
		t.Fatalf("replayed callback: %d", resp.StatusCode)
	}
	// The sidecar keeps no record of used states: Gitea, which takes
	// each code once, is what refused the replay.
	if ex := w.gitea.exchanges; len(ex) != 2 || ex[1].code != ex[0].code {
		t.Fatalf("exchanges: %+v", ex)
	}
}

func TestSignInExpires(t *testing.T) {
	w := newOAuthWorld(t)
	cb := w.callbackURL(w.gitea.srv.URL + "/")
	w.clock.Advance(signInTTL)
	if resp, body := w.noRedirects(cb.String()); resp.StatusCode != 400 ||
		body != `{"error":"sign-in took longer than 10 minutes and expired: start again from Gitea"}` {
		t.Fatalf("callback after the sign-in expired: %d %s", resp.StatusCode, body)
	}
}

// TestCallbackRefusesBadSignInCookies: a callback is finished only with
// the sign-in cookie this sidecar sealed for that very state, unexpired.
// Everything else is one line telling the user to start again, sets no
// session and never reaches Gitea's token endpoint.
func TestCallbackRefusesBadSignInCookies(t *testing.T) {
	w := newOAuthWorld(t)
	// start begins a sign-in as a fresh browser would and returns the
	// callback's query and the sign-in cookie's value.
	start := func() (url.Values, string) {
		r := w.do("GET", "/oauth/login?return_to="+url.QueryEscape(w.gitea.srv.URL+"/acme/widgets"))
		ck := cookieNamed(&http.Response{Header: r.Header}, signInCookie)
		loc, err := url.Parse(r.Header.Get("Location"))
		if r.Code != 302 || ck == nil || err != nil {
			t.Fatalf("login: %d %v", r.Code, r.Header)
		}
		return url.Values{"code": {"code-x"}, "state": {loc.Query().Get("state")}}, ck.Value
	}
	const (
		invalid  = `{"error":"sign-in was not started in this browser, or its cookie is invalid: start again from Gitea"}`
		expired  = `{"error":"sign-in took longer than 10 minutes and expired: start again from Gitea"}`
		mismatch = `{"error":"sign-in does not match the one this browser started: start again from Gitea"}`
	)
	// reseal changes the sealed claims and keeps the old signature.
	reseal := func(value string, change func(*signInClaims)) string {
		p, sig, _ := strings.Cut(value, ".")
		raw, _ := base64.RawURLEncoding.DecodeString(p)
		var c signInClaims
		if err := json.Unmarshal(raw, &c); err != nil {
			t.Fatal(err)
		}
		change(&c)
		raw, _ = json.Marshal(c)
		return base64.RawURLEncoding.EncodeToString(raw) + "." + sig
	}
	other := cookieJar{key: []byte(strings.Repeat("k", 32))}
	for _, c := range []struct {
		name string
		make func() (url.Values, string) // the callback's query and the cookie sent with it
		want string
	}{
		{"tampered return URL", func() (url.Values, string) {
			q, v := start()
			return q, reseal(v, func(c *signInClaims) { c.ReturnTo = "https://evil.example/" })
		}, invalid},
		{"tampered expiry", func() (url.Values, string) {
			q, v := start()
			return q, reseal(v, func(c *signInClaims) { c.Expires += 3600 })
		}, invalid},
		{"another sidecar's key", func() (url.Values, string) {
			q, _ := start()
			return q, other.seal(signInCookie, signInClaims{State: q.Get("state"), Verifier: "v", Expires: w.clock.Now().Add(time.Minute).Unix()})
		}, invalid},
		{"a session cookie's value", func() (url.Values, string) {
			q, _ := start()
			return q, w.hd.cookies.seal(sessionCookie, sessionClaims{ID: 1, Login: "alice", Expires: w.clock.Now().Add(time.Hour).Unix()})
		}, invalid},
		{"garbage", func() (url.Values, string) { q, _ := start(); return q, "x.y" }, invalid},
		{"no cookie", func() (url.Values, string) { q, _ := start(); return q, "" }, invalid},
		{"expired", func() (url.Values, string) {
			q, v := start()
			w.clock.Advance(signInTTL)
			return q, v
		}, expired},
		{"swapped: another browser's cookie", func() (url.Values, string) {
			q, _ := start()
			_, v := start()
			return q, v
		}, mismatch},
		{"no state", func() (url.Values, string) {
			q, v := start()
			q.Del("state")
			return q, v
		}, mismatch},
	} {
		t.Run(c.name, func(t *testing.T) {
			q, value := c.make()
			var hdr []string
			if value != "" {
				hdr = append(hdr, "Cookie: "+signInCookie+"="+value)
			}
			r := w.do("GET", "/oauth/callback?"+q.Encode(), hdr...)
			if r.Code != 400 || r.Body != c.want || cookieNamed(&http.Response{Header: r.Header}, sessionCookie) != nil {
				t.Fatalf("%d %s %v, want 400 %s", r.Code, r.Body, r.Header.Values("Set-Cookie"), c.want)
			}
			if n := len(w.gitea.exchanges); n != 0 {
				t.Fatalf("%d codes exchanged", n)
			}
		})
	}
}

func TestSignInRefusesOpenRedirects(t *testing.T) {
	w := newOAuthWorld(t)
	home := w.gitea.srv.URL + "/"
	g, _ := url.Parse(w.gitea.srv.URL)
	for _, rt := range []string{
		"https://evil.example/",
		"//evil.example/x",
		"/acme/widgets",
		"javascript:alert(1)",
		"http://" + g.Host + "@evil.example/",
		"http://evil.example\\@" + g.Host + "/",
		"http://" + g.Host + ".evil.example/",
		"https://" + g.Host + "/", // other scheme, other origin
		"http://" + g.Host + "/\nx",
		"",
	} {
		cb := w.callbackURL(rt)
		resp, _ := w.noRedirects(cb.String())
		if resp.StatusCode != 302 || resp.Header.Get("Location") != home {
			t.Errorf("return_to %q: %d to %q, want Gitea's home %q", rt, resp.StatusCode, resp.Header.Get("Location"), home)
		}
	}
	for _, rt := range []string{w.gitea.srv.URL + "/acme/widgets/issues/4#c", w.sidecar.URL + "/healthz"} {
		if got := w.hd.safeReturn(rt); got != rt {
			t.Errorf("safeReturn(%q) = %q", rt, got)
		}
	}
}

func TestSignInDeclinedOrRefused(t *testing.T) {
	w := newOAuthWorld(t)
	returnTo := w.gitea.srv.URL + "/acme/widgets"
	cb := w.callbackURL(returnTo)
	q := url.Values{"error": {"access_denied"}, "error_description": {"the request is denied"}, "state": {cb.Query().Get("state")}}
	cb.RawQuery = q.Encode()
	resp, _ := w.noRedirects(cb.String())
	if resp.StatusCode != 302 || resp.Header.Get("Location") != returnTo || cookieNamed(resp, sessionCookie) != nil {
		t.Fatalf("declined: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}

	w.gitea.mu.Lock()
	w.gitea.refuse = true
	w.gitea.mu.Unlock()
	resp, body := w.noRedirects(w.callbackURL(returnTo).String())
	if resp.StatusCode != 400 || body != `{"error":"sign-in failed or expired: start again from Gitea"}` {
		t.Fatalf("refused code: %d %s", resp.StatusCode, body)
	}

	// Gitea unreachable during the exchange: retryable, not a sign-in
	// failure.
	cb = w.callbackURL(returnTo)
	w.gitea.mu.Lock()
	w.gitea.down = true
	w.gitea.mu.Unlock()
	resp, body = w.noRedirects(cb.String())
	if resp.StatusCode != 503 || body != `{"error":"temporarily unavailable, try again"}` {
		t.Fatalf("Gitea down: %d %s", resp.StatusCode, body)
	}
}

func TestLogout(t *testing.T) {
	w := newOAuthWorld(t)
	w.get(w.sidecar.URL + "/oauth/login")
	if l := w.login(); l != "alice" {
		t.Fatalf("login %q", l)
	}
	resp, err := w.browser.Post(w.sidecar.URL+"/oauth/logout", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if c := cookieNamed(resp, sessionCookie); resp.StatusCode != 200 || c == nil || c.MaxAge >= 0 ||
		string(b) != `{"login":null,"sign_in_url":"`+w.sidecar.URL+`/oauth/login"}` {
		t.Fatalf("logout: %d %s %v", resp.StatusCode, b, resp.Cookies())
	}
	if l := w.login(); l != "" {
		t.Fatalf("after logout: %q", l)
	}
}

func TestSignInDisabled(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.SignIn = nil })
	expectReply(t, "session", f.do("GET", "/api/v1/session"), 200, `{"login":null,"sign_in_url":null}`)
	expectReply(t, "login", f.do("GET", "/oauth/login"), 404, notFoundBody)
	expectReply(t, "callback", f.do("GET", "/oauth/callback?code=x&state=y"), 404, notFoundBody)
}

// TestSignInFloodKeepsNoState: starting sign-ins and abandoning them at
// the callback (an error, without ever reaching Gitea's token endpoint)
// costs the sidecar nothing that lasts. 100,000 of them from one address
// neither lock out a real sign-in afterwards nor grow the heap: the
// sign-in lives in its signed cookie only. (-short: 20,000.)
func TestSignInFloodKeepsNoState(t *testing.T) {
	w := newOAuthWorld(t)
	flood := 100_000
	if testing.Short() {
		flood = 20_000
	}
	start := heapInUse()
	for i := range flood {
		r := w.do("GET", "/oauth/login?return_to="+url.QueryEscape(w.gitea.srv.URL+"/"))
		loc, err := url.Parse(r.Header.Get("Location"))
		ck := cookieNamed(&http.Response{Header: r.Header}, signInCookie)
		if r.Code != 302 || err != nil || ck == nil {
			t.Fatalf("login %d: %d %s", i, r.Code, r.Body)
		}
		cb := w.do("GET", "/oauth/callback?error=x&state="+url.QueryEscape(loc.Query().Get("state")), "Cookie: "+signInCookie+"="+ck.Value)
		if cb.Code != 302 {
			t.Fatalf("abandoned callback %d: %d %s", i, cb.Code, cb.Body)
		}
	}
	// A record of each abandoned sign-in would be about 80 bytes: 1.5 MiB
	// at the short size.
	if grown := heapInUse() - start; grown > 1<<20 {
		t.Errorf("the heap grew by %d KiB over %d abandoned sign-ins", grown>>10, flood)
	}
	returnTo := w.gitea.srv.URL + "/acme/widgets"
	if resp, body := w.get(w.sidecar.URL + "/oauth/login?return_to=" + url.QueryEscape(returnTo)); resp.Request.URL.String() != returnTo {
		t.Fatalf("sign-in after the flood ended at %s: %s", resp.Request.URL, body)
	}
	if l := w.login(); l != "alice" {
		t.Fatalf("after the flood: signed in as %q", l)
	}
}

// heapInUse is the live heap after a full collection.
func heapInUse() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestLogoutEndsTheSessionOnTheServer: a session cookie copied before
// logout (by a script on the page, from a shared machine, from a
// backup) signs nobody in afterwards, in any of the account's browsers,
// nor after a restart; signing in again works at once.
func TestLogoutEndsTheSessionOnTheServer(t *testing.T) {
	w := newOAuthWorld(t)
	w.acquire(2, 5, "alice", 0)
	w.get(w.sidecar.URL + "/oauth/login")
	stolen := ""
	for _, c := range w.browser.Jar.Cookies(mustURL(t, w.sidecar.URL)) {
		if c.Name == sessionCookie {
			stolen = "Cookie: " + c.Name + "=" + c.Value
		}
	}
	other := w.sessionFor("alice") // alice's session in another browser
	bob := w.sessionFor("bob")
	for _, ck := range []string{stolen, other} {
		expectReply(t, "session before logout", w.do("GET", "/api/v1/session", ck), 200,
			`{"login":"alice","sign_in_url":"`+w.sidecar.URL+`/oauth/login"}`)
	}
	resp, err := w.browser.Post(w.sidecar.URL+"/oauth/logout", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("logout: %d", resp.StatusCode)
	}

	signedOut := `{"login":null,"sign_in_url":"` + w.sidecar.URL + `/oauth/login"}`
	for name, ck := range map[string]string{"replayed": stolen, "another browser": other} {
		expectReply(t, name+" session", w.do("GET", "/api/v1/session", ck), 200, signedOut)
		expectReply(t, name+" private list", w.do("GET", "/api/v1/repos/acme/secret/leases", ck), 404, notFoundBody)
		// A restarted sidecar on the same ledger refuses it too.
		expectReply(t, name+" after a restart", newFixtureOn(t, w.fixture).do("GET", "/api/v1/session", ck), 200, signedOut)
	}
	// Logout is alice's: bob stays signed in.
	expectReply(t, "bob", w.do("GET", "/api/v1/session", bob), 200, `{"login":"bob","sign_in_url":"`+w.sidecar.URL+`/oauth/login"}`)

	// Signing in again, at the same instant, works.
	w.get(w.sidecar.URL + "/oauth/login")
	if l := w.login(); l != "alice" {
		t.Fatalf("signed in again: %q", l)
	}
	if r, body := w.get(w.sidecar.URL + "/api/v1/repos/acme/secret/leases"); r.StatusCode != 200 || !strings.Contains(body, `"holder":"alice"`) {
		t.Fatalf("private list after signing in again: %d %s", r.StatusCode, body)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
