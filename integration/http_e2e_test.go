package integration

import (
	"context"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/assets"
)

// apiGet sends GET url with the given headers ("Name: value") and returns
// the status and body.
func apiGet(t *testing.T, c *http.Client, u string, headers ...string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	if c == nil {
		c = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

type listReply struct {
	Repo   string `json:"repo"`
	Leases []struct {
		Issue  int64  `json:"issue"`
		Holder string `json:"holder"`
		Token  int64  `json:"token"`
	} `json:"leases"`
}

// The HTTP API of a real sidecar process against the real Gitea: what SSH
// claims, HTTP shows, to exactly the viewers who may read the repository.
func TestHTTPLeasesAgainstGitea(t *testing.T) {
	s, w := newSidecar(t)
	expect(t, run(t, s, w.Alice, lease("acquire", w.Widgets, w.OpenIssue, "--ttl", "30m")), 0, "acquire widgets")
	expect(t, run(t, s, w.Alice, lease("acquire", w.Secret, w.SecretIssue)), 0, "acquire secret")
	api := s.HTTPURL + "/api/v1/repos/"

	code, hdr, body := apiGet(t, nil, api+w.Widgets.FullName()+"/leases")
	var l listReply
	if code != 200 || json.Unmarshal([]byte(body), &l) != nil || l.Repo != "acme/widgets" || len(l.Leases) != 1 ||
		l.Leases[0].Holder != "alice" || l.Leases[0].Issue != w.OpenIssue || l.Leases[0].Token != 1 {
		t.Fatalf("public leases, anonymous: %d %s", code, body)
	}
	if hdr.Get("Content-Type") != "application/json; charset=utf-8" {
		t.Fatalf("Content-Type %q", hdr.Get("Content-Type"))
	}
	// SSH `list` and HTTP give the same JSON.
	r := run(t, s, w.Carol, "collab-lease list "+w.Widgets.FullName())
	expect(t, r, 0, "ssh list")
	if strings.TrimSpace(r.Stdout) != body {
		t.Fatalf("ssh list %q differs from HTTP %q", r.Stdout, body)
	}
	code, _, body = apiGet(t, nil, api+w.Widgets.FullName()+"/issues/"+itoa(w.OpenIssue)+"/lease")
	if code != 200 || !strings.HasPrefix(body, `{"lease":{"issue":`+itoa(w.OpenIssue)+`,"holder":"alice","agent":null,"token":1,`) {
		t.Fatalf("issue lease: %d %s", code, body)
	}
	code, _, body = apiGet(t, nil, api+w.Widgets.FullName()+"/issues/"+itoa(w.ClosedIssue)+"/lease")
	if code != 200 || body != `{"lease":null}` {
		t.Fatalf("unclaimed issue: %d %s", code, body)
	}

	// Private: the same 404 as a repository that does not exist, unless
	// the viewer may read it.
	unknownCode, _, unknown := apiGet(t, nil, api+"acme/does-not-exist/leases")
	if unknownCode != 404 || unknown != `{"error":"not found"}` {
		t.Fatalf("unknown repository: %d %s", unknownCode, unknown)
	}
	for _, c := range []struct {
		name, path, auth string
		visible          bool
	}{
		{"anonymous", w.Secret.FullName() + "/leases", "", false},
		{"anonymous, issue", w.Secret.FullName() + "/issues/" + itoa(w.SecretIssue) + "/lease", "", false},
		{"erin (no access)", w.Secret.FullName() + "/leases", w.Erin.Token, false},
		{"bob (widgets only)", w.Secret.FullName() + "/leases", w.Bob.Token, false},
		{"bob on alice's notes", w.Notes.FullName() + "/leases", w.Bob.Token, false},
		{"carol (read collaborator)", w.Secret.FullName() + "/leases", w.Carol.Token, true},
		{"dave (issues team)", w.Secret.FullName() + "/leases", w.Dave.Token, true},
		{"alice (owner of notes)", w.Notes.FullName() + "/leases", w.Alice.Token, true},
		{"admin", w.Secret.FullName() + "/leases", w.Admin.Token, true},
	} {
		var headers []string
		if c.auth != "" {
			headers = append(headers, "Authorization: token "+c.auth)
		}
		code, _, body := apiGet(t, nil, api+c.path, headers...)
		switch {
		case c.visible && code != 200:
			t.Errorf("%s: %d %s, want 200", c.name, code, body)
		case !c.visible && (code != unknownCode || body != unknown):
			t.Errorf("%s: %d %s, want the unknown repository's reply", c.name, code, body)
		}
	}
	code, _, body = apiGet(t, nil, api+w.Secret.FullName()+"/leases", "Authorization: token "+w.Carol.Token)
	if !strings.Contains(body, `"holder":"alice"`) || !strings.Contains(body, `"repo":"acme/secret"`) {
		t.Fatalf("carol on secret: %d %s", code, body)
	}
	code, _, body = apiGet(t, nil, api+w.Widgets.FullName()+"/leases", "Authorization: token 0123456789abcdef0123456789abcdef01234567")
	if code != 401 || body != `{"error":"invalid token"}` {
		t.Fatalf("invalid token: %d %s", code, body)
	}

	// CORS for Gitea's origin only.
	_, hdr, _ = apiGet(t, nil, api+w.Widgets.FullName()+"/leases", "Origin: "+fixture.g.URL)
	if hdr.Get("Access-Control-Allow-Origin") != fixture.g.URL || hdr.Get("Access-Control-Allow-Credentials") != "true" {
		t.Fatalf("CORS for Gitea: %v", hdr)
	}
	_, hdr, _ = apiGet(t, nil, api+w.Widgets.FullName()+"/leases", "Origin: http://evil.example")
	if hdr.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("CORS for another origin: %v", hdr)
	}

	// Health, readiness, assets.
	if code, _, body := apiGet(t, nil, s.HTTPURL+"/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("healthz: %d %s", code, body)
	}
	if code, _, body := apiGet(t, nil, s.AdminURL+"/readyz"); code != 200 || !strings.Contains(body, `"gitea":"ok"`) {
		t.Fatalf("readyz: %d %s", code, body)
	}
	// The operators' endpoints are not on the public address: it answers
	// them as any unknown path.
	for _, p := range []string{"/readyz", "/metrics"} {
		if code, _, body := apiGet(t, nil, s.HTTPURL+p); code != 404 || body != `{"error":"not found"}` {
			t.Fatalf("public %s: %d %s", p, code, body)
		}
	}
	if code, _, body := apiGet(t, nil, s.AdminURL+"/metrics"); code != 200 || !strings.Contains(body, "collab_lease_live_leases ") {
		t.Fatalf("admin /metrics: %d %.300s", code, body)
	}
	code, hdr, _ = apiGet(t, nil, s.HTTPURL+"/assets/collab-lease.js")
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/javascript") || hdr.Get("ETag") == "" {
		t.Fatalf("script: %d %v", code, hdr)
	}
	if code, _, _ := apiGet(t, nil, s.HTTPURL+"/assets/collab-lease.js", "If-None-Match: "+hdr.Get("ETag")); code != 304 {
		t.Fatalf("script revalidation: %d", code)
	}
	// The content-addressed URL the footer names: the bytes its integrity
	// pins, readable from any origin without credentials.
	bundle, err := assets.Load()
	if err != nil {
		t.Fatal(err)
	}
	js := bundle["collab-lease.js"]
	code, hdr, body = apiGet(t, nil, s.HTTPURL+"/assets/"+js.HashedName(), "Origin: http://gitea.example")
	sum := sha512.Sum384([]byte(body))
	if code != 200 || "sha384-"+base64.StdEncoding.EncodeToString(sum[:]) != js.Integrity ||
		hdr.Get("Access-Control-Allow-Origin") != "*" || hdr.Get("Access-Control-Allow-Credentials") != "" {
		t.Fatalf("hashed script: %d %v", code, hdr)
	}
}

// While Gitea is down the API answers 503 (retryable), never 404, and
// readiness fails; both recover when Gitea is back.
func TestHTTPWhileGiteaIsDown(t *testing.T) {
	s, w := newSidecar(t, "--perm-cache-ttl", "0")
	g := fixture.g
	stopGitea(t, g)
	for _, p := range []string{w.Widgets.FullName() + "/leases", w.Secret.FullName() + "/leases", "acme/does-not-exist/leases"} {
		code, hdr, body := apiGet(t, nil, s.HTTPURL+"/api/v1/repos/"+p)
		if code != 503 || body != `{"error":"temporarily unavailable, try again"}` || hdr.Get("Retry-After") == "" {
			t.Fatalf("%s with Gitea down: %d %s", p, code, body)
		}
	}
	if code, _, body := apiGet(t, nil, s.AdminURL+"/readyz"); code != 503 || !strings.Contains(body, `"gitea":"unreachable"`) {
		t.Fatalf("readyz with Gitea down: %d %s", code, body)
	}
	startGitea(t, g)
	if code, _, body := apiGet(t, nil, s.HTTPURL+"/api/v1/repos/"+w.Widgets.FullName()+"/leases"); code != 200 {
		t.Fatalf("after Gitea is back: %d %s", code, body)
	}
}

// installSidecar runs `collab-sidecar install` against the shared Gitea
// for a sidecar that browsers reach at public, with its data in dataDir.
func installSidecar(t *testing.T, dataDir, public, custom string, extra ...string) string {
	t.Helper()
	g, _, bin := shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := Install(ctx, SidecarOptions{Binary: bin, Gitea: g, DataDir: dataDir}, public, custom, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// signInSidecar is a sidecar whose public URL is its own HTTP address,
// installed (OAuth2 application registered) in the shared Gitea, with a
// custom directory of its own: this test needs the application, not
// Gitea's footer.
func signInSidecar(t *testing.T) (*Sidecar, *World) {
	t.Helper()
	g, w, bin := shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := StartInstalled(ctx, SidecarOptions{Binary: bin, Gitea: g, DataDir: filepath.Join(t.TempDir(), "data")}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	stopAtEnd(t, s)
	if !strings.Contains(s.Logs(), `msg="sign-in enabled"`) {
		t.Fatalf("sign-in not enabled:\n%s", s.Logs())
	}
	return s, w
}

// signInBrowser is a cookie-keeping HTTP client that follows redirects, as a
// web browser would (minus JavaScript).
type signInBrowser struct {
	t testing.TB
	c *http.Client
}

func newSignInBrowser(t testing.TB) *signInBrowser {
	jar, _ := cookiejar.New(nil)
	return &signInBrowser{t: t, c: &http.Client{Jar: jar, Timeout: 30 * time.Second}}
}

func (b *signInBrowser) get(u string) (*http.Response, string) {
	b.t.Helper()
	resp, err := b.c.Get(u)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func (b *signInBrowser) post(u string, form url.Values) (*http.Response, string) {
	b.t.Helper()
	resp, err := b.c.PostForm(u, form)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// signInToGitea logs the signInBrowser in through Gitea's own sign-in form.
func (b *signInBrowser) signInToGitea(g *Gitea, u *User) {
	b.t.Helper()
	resp, body := b.post(g.URL+"/user/login", url.Values{"user_name": {u.Login}, "password": {u.Password}})
	if resp.StatusCode != 200 || resp.Request.URL.Path == "/user/login" {
		b.t.Fatalf("Gitea sign-in as %s: %d at %s\n%.500s", u.Login, resp.StatusCode, resp.Request.URL, body)
	}
}

var grantFormInput = regexp.MustCompile(`<input type="hidden" name="(\w+)" value="([^"]*)">`)

// signInToSidecar follows the sidecar's sign-in from the page returnTo,
// granting the application on Gitea's consent page if Gitea shows it. It
// returns where the signInBrowser ended up and whether consent was asked.
func (b *signInBrowser) signInToSidecar(s *Sidecar, g *Gitea, returnTo string) (*url.URL, bool) {
	b.t.Helper()
	resp, body := b.get(s.HTTPURL + "/oauth/login?return_to=" + url.QueryEscape(returnTo))
	asked := false
	if resp.Request.URL.Path == "/login/oauth/authorize" {
		asked = true
		form := url.Values{"granted": {"true"}}
		for _, m := range grantFormInput.FindAllStringSubmatch(body, -1) {
			form.Set(m[1], html.UnescapeString(m[2]))
		}
		if form.Get("client_id") == "" || form.Get("state") == "" || form.Get("scope") != "read:user" {
			b.t.Fatalf("consent page without the grant form (%v):\n%.2000s", form, body)
		}
		resp, body = b.post(g.URL+"/login/oauth/grant", form)
	}
	if resp.StatusCode != 200 {
		b.t.Fatalf("sign-in ended at %s with %d:\n%.1000s", resp.Request.URL, resp.StatusCode, body)
	}
	return resp.Request.URL, asked
}

func (b *signInBrowser) sessionLogin(s *Sidecar) string {
	b.t.Helper()
	_, body := b.get(s.HTTPURL + "/api/v1/session")
	var v struct {
		Login     *string `json:"login"`
		SignInURL *string `json:"sign_in_url"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil || v.SignInURL == nil || *v.SignInURL != s.HTTPURL+"/oauth/login" {
		b.t.Fatalf("session: %s", body)
	}
	if v.Login == nil {
		return ""
	}
	return *v.Login
}

// The real sign-in: a signInBrowser signed in to Gitea follows the sidecar's
// sign-in link, grants the application on Gitea's consent page, comes
// back to the Gitea page it started from, and from then on sees the
// leases of the private repositories it may read, and only those.
func TestSignInThroughGiteaAgainstGitea(t *testing.T) {
	s, w := signInSidecar(t)
	g := fixture.g
	expect(t, run(t, s, w.Alice, lease("acquire", w.Secret, w.SecretIssue)), 0, "acquire secret")
	secret := s.HTTPURL + "/api/v1/repos/" + w.Secret.FullName() + "/leases"
	_, _, unknown := apiGet(t, nil, s.HTTPURL+"/api/v1/repos/acme/does-not-exist/leases")

	carol := newSignInBrowser(t)
	if login := carol.sessionLogin(s); login != "" {
		t.Fatalf("signed in before signing in: %q", login)
	}
	if resp, body := carol.get(secret); resp.StatusCode != 404 || body != unknown {
		t.Fatalf("secret before sign-in: %d %s", resp.StatusCode, body)
	}
	carol.signInToGitea(g, w.Carol)
	returnTo := g.URL + "/" + w.Secret.FullName() + "/issues"
	ended, asked := carol.signInToSidecar(s, g, returnTo)
	if ended.String() != returnTo || !asked {
		t.Fatalf("carol ended at %s (consent asked: %v), want %s", ended, asked, returnTo)
	}
	if login := carol.sessionLogin(s); login != "carol" {
		t.Fatalf("session after sign-in: %q", login)
	}
	resp, body := carol.get(secret)
	if resp.StatusCode != 200 || !strings.Contains(body, `"holder":"alice"`) {
		t.Fatalf("secret after sign-in: %d %s", resp.StatusCode, body)
	}
	// Erin may read nothing private: signed in, she still gets the reply
	// of a repository that does not exist.
	erin := newSignInBrowser(t)
	erin.signInToGitea(g, w.Erin)
	erin.signInToSidecar(s, g, g.URL+"/")
	if login := erin.sessionLogin(s); login != "erin" {
		t.Fatalf("erin's session: %q", login)
	}
	if resp, body := erin.get(secret); resp.StatusCode != 404 || body != unknown {
		t.Fatalf("secret for erin: %d %s", resp.StatusCode, body)
	}

	// A second sign-in of a user who granted access already goes
	// straight back, without the consent page.
	again := newSignInBrowser(t)
	again.signInToGitea(g, w.Carol)
	if ended, asked := again.signInToSidecar(s, g, returnTo); asked || ended.String() != returnTo {
		t.Fatalf("second sign-in: consent asked %v, ended at %s", asked, ended)
	}
	if login := again.sessionLogin(s); login != "carol" {
		t.Fatalf("second sign-in: %q", login)
	}

	// Sign-in may not send the signInBrowser off-site.
	ended, _ = again.signInToSidecar(s, g, "https://evil.example/phish")
	if ended.String() != g.URL+"/" {
		t.Fatalf("open redirect: ended at %s", ended)
	}

	// Logout ends the session on the server: a copy of its cookie taken
	// before signs nobody in afterwards, and neither does carol's other
	// browser; erin stays signed in.
	hu, _ := url.Parse(s.HTTPURL)
	copied := newSignInBrowser(t)
	copied.c.Jar.SetCookies(hu, again.c.Jar.Cookies(hu))
	if login := copied.sessionLogin(s); login != "carol" {
		t.Fatalf("copied session before logout: %q", login)
	}
	resp, err := again.c.Post(s.HTTPURL+"/oauth/logout", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	for name, b := range map[string]*signInBrowser{"logged out": again, "copied cookie": copied, "carol's other browser": carol} {
		if login := b.sessionLogin(s); login != "" {
			t.Fatalf("%s after logout: %q", name, login)
		}
		if resp, body := b.get(secret); resp.StatusCode != 404 || body != unknown {
			t.Fatalf("%s: secret after logout: %d %s", name, resp.StatusCode, body)
		}
	}
	if login := erin.sessionLogin(s); login != "erin" {
		t.Fatalf("erin after carol's logout: %q", login)
	}
	// Signing in again works at once.
	if ended, _ := again.signInToSidecar(s, g, returnTo); ended.String() != returnTo {
		t.Fatalf("sign-in after logout ended at %s", ended)
	}
	if login := again.sessionLogin(s); login != "carol" {
		t.Fatalf("sign-in after logout: %q", login)
	}
}

// `collab-sidecar install` against the real Gitea: the OAuth2 application
// is really registered (and reused on a second run), its credentials are
// stored 0600, the footer lands in Gitea's custom directory next to the
// admin's own content, Gitea renders the tags (and not the markers) after
// a restart, and --uninstall gives the admin's file back byte for byte.
func TestInstallAgainstGitea(t *testing.T) {
	g, _, _ := shared(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	const public = "http://127.0.0.1:18787"
	footer := filepath.Join(g.Custom, "templates", "custom", "footer.tmpl")
	before, beforeErr := os.ReadFile(footer)
	admin := string(before) + "<div id=\"admin-footer\">the admin's own footer line</div>\n"
	if err := os.MkdirAll(filepath.Dir(footer), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(footer, []byte(admin), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Leave the shared Gitea's footer as it was.
		if beforeErr != nil {
			_ = os.Remove(footer)
		} else {
			_ = os.WriteFile(footer, before, 0o644)
		}
	})

	out := installSidecar(t, dataDir, public, g.Custom)
	if !strings.Contains(out, "registered") || !strings.Contains(out, "restart Gitea once") {
		t.Fatalf("install output:\n%s", out)
	}
	appFile := filepath.Join(dataDir, "oauth2.json")
	st, err := os.Stat(appFile)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("oauth2.json: %v %v", st, err)
	}
	var app struct {
		ID          int64  `json:"id"`
		ClientID    string `json:"client_id"`
		RedirectURI string `json:"redirect_uri"`
	}
	b, _ := os.ReadFile(appFile)
	if err := json.Unmarshal(b, &app); err != nil || app.ClientID == "" || app.RedirectURI != public+"/oauth/callback" {
		t.Fatalf("oauth2.json: %s", b)
	}
	var inGitea struct {
		Name         string   `json:"name"`
		ClientID     string   `json:"client_id"`
		Confidential bool     `json:"confidential_client"`
		RedirectURIs []string `json:"redirect_uris"`
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := g.Admin().Do(ctx, "GET", "/user/applications/oauth2/"+itoa(app.ID), nil, &inGitea); err != nil {
		t.Fatal(err)
	}
	if inGitea.Name != "collab-lease" || inGitea.ClientID != app.ClientID || !inGitea.Confidential ||
		len(inGitea.RedirectURIs) != 1 || inGitea.RedirectURIs[0] != public+"/oauth/callback" {
		t.Fatalf("application in Gitea: %+v", inGitea)
	}
	t.Cleanup(func() {
		_ = g.Admin().Do(context.Background(), "DELETE", "/user/applications/oauth2/"+itoa(app.ID), nil, nil)
	})
	bundle, err := assets.Load()
	if err != nil {
		t.Fatal(err)
	}
	js, css := bundle["collab-lease.js"], bundle["collab-lease.css"]
	scriptTag := `<script src="` + public + `/assets/` + js.HashedName() + `" integrity="` + js.Integrity + `" crossorigin="anonymous"`
	styleTag := `<link rel="stylesheet" href="` + public + `/assets/` + css.HashedName() + `" integrity="` + css.Integrity + `" crossorigin="anonymous">`
	installed, _ := os.ReadFile(footer)
	if !strings.HasPrefix(string(installed), admin+"{{/* collab-lease:begin */}}\n") ||
		!strings.Contains(string(installed), scriptTag) || !strings.Contains(string(installed), styleTag) {
		t.Fatalf("footer after install:\n%s", installed)
	}

	// Second run: same application, footer untouched.
	out = installSidecar(t, dataDir, public, g.Custom)
	if !strings.Contains(out, "reused") || !strings.Contains(out, "left unchanged") {
		t.Fatalf("second install output:\n%s", out)
	}
	if again, _ := os.ReadFile(footer); string(again) != string(installed) {
		t.Fatal("second install changed the footer")
	}
	if b2, _ := os.ReadFile(appFile); string(b2) != string(b) {
		t.Fatal("second install changed oauth2.json")
	}

	// Gitea renders the tags in its pages, and the template comments
	// (markers) not at all.
	if err := g.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	code, _, page := apiGet(t, nil, g.URL+"/explore/repos")
	if code != 200 || !strings.Contains(page, scriptTag) || !strings.Contains(page, styleTag) ||
		!strings.Contains(page, "the admin's own footer line") || strings.Contains(page, "collab-lease:begin") {
		t.Fatalf("Gitea's page after install and restart: %d\n%s", code, tail(page, 40))
	}

	// The stored application deleted in Gitea: install registers anew.
	if err := g.Admin().Do(ctx, "DELETE", "/user/applications/oauth2/"+itoa(app.ID), nil, nil); err != nil {
		t.Fatal(err)
	}
	out = installSidecar(t, dataDir, public, g.Custom)
	if !strings.Contains(out, "registered") {
		t.Fatalf("install after deletion:\n%s", out)
	}
	b, _ = os.ReadFile(appFile)
	var app2 struct {
		ID int64 `json:"id"`
	}
	if err := json.Unmarshal(b, &app2); err != nil || app2.ID == app.ID {
		t.Fatalf("re-registered: %s", b)
	}
	t.Cleanup(func() {
		_ = g.Admin().Do(context.Background(), "DELETE", "/user/applications/oauth2/"+itoa(app2.ID), nil, nil)
	})

	// Uninstall: the admin's bytes, exactly.
	out = installSidecar(t, dataDir, public, g.Custom, "--uninstall")
	if !strings.Contains(out, "removed") {
		t.Fatalf("uninstall output:\n%s", out)
	}
	if got, _ := os.ReadFile(footer); string(got) != admin {
		t.Fatalf("footer after uninstall: %q, want %q", got, admin)
	}
	if err := g.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, page := apiGet(t, nil, g.URL+"/explore/repos"); strings.Contains(page, "collab-lease.js") {
		t.Fatal("Gitea still includes the script after uninstall and restart")
	}
}

// Identity (docs/ssh.md, Your account, not your login) through the sidecar's HTTP API against the real Gitea: an API
// token is honoured within its scopes. Carol may read acme/secret; tokens
// of hers that lack read:repository or read:issue, or are public-only,
// get the unknown repository's reply there (never the admin's Sudo view).
func TestHTTPTokenScopesAgainstGitea(t *testing.T) {
	s, w := newSidecar(t)
	g, _, _ := shared(t)
	expect(t, run(t, s, w.Alice, lease("acquire", w.Secret, w.SecretIssue)), 0, "acquire secret")
	api := s.HTTPURL + "/api/v1/repos/"
	unknownCode, _, unknown := apiGet(t, nil, api+"acme/does-not-exist/leases")
	token := func(scopes ...string) string {
		t.Helper()
		return userToken(t, g, w.Carol, scopes...)
	}
	for _, c := range []struct {
		name    string
		scopes  []string
		repo    Repo
		visible bool
	}{
		{"read scopes", []string{"read:user", "read:repository", "read:issue"}, w.Secret, true},
		{"read:user only", []string{"read:user"}, w.Secret, false},
		{"no read:repository", []string{"read:user", "read:issue"}, w.Secret, false},
		{"public-only, private repository", []string{"read:user", "read:repository", "read:issue", "public-only"}, w.Secret, false},
		{"public-only, public repository", []string{"read:user", "read:repository", "read:issue", "public-only"}, w.Widgets, true},
	} {
		code, _, body := apiGet(t, nil, api+c.repo.FullName()+"/leases", "Authorization: token "+token(c.scopes...))
		switch {
		case c.visible && code != 200:
			t.Errorf("%s on %s: %d %s, want 200", c.name, c.repo.FullName(), code, body)
		case c.visible && c.repo == w.Secret && !strings.Contains(body, `"holder":"alice"`):
			t.Errorf("%s on %s: %s, want alice's lease", c.name, c.repo.FullName(), body)
		case !c.visible && (code != unknownCode || body != unknown):
			t.Errorf("%s on %s: %d %s, want the unknown repository's reply", c.name, c.repo.FullName(), code, body)
		}
	}
	// read:repository without read:issue: the repository, but no lease.
	code, _, body := apiGet(t, nil, api+w.Secret.FullName()+"/leases", "Authorization: token "+token("read:user", "read:repository"))
	if code != 200 || body != `{"repo":"acme/secret","leases":[]}` {
		t.Fatalf("a token without read:issue: %d %s, want the repository without leases", code, body)
	}
}
