package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// apiDo sends method url with body (if not "") and headers ("Name:
// value") and returns the status and body.
func apiDo(t *testing.T, method, u, body string, headers ...string) (int, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, r)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// userToken creates an API token of u with these scopes.
func userToken(t *testing.T, g *Gitea, u *User, scopes ...string) string {
	t.Helper()
	var tok struct {
		SHA1 string `json:"sha1"`
	}
	basic := &API{URL: g.URL, User: u.Login, Password: u.Password}
	if err := basic.Do(context.Background(), "POST", "/users/"+u.Login+"/tokens", map[string]any{
		"name": "scopes-" + randomHex(4), "scopes": scopes,
	}, &tok); err != nil {
		t.Fatalf("create a token of %s with %v: %v", u.Login, scopes, err)
	}
	return tok.SHA1
}

// A token with write:issue claims through HTTP, and an SSH client then
// sees the issue held by the token's user; a token with the read scopes
// only is refused writes (403), and a cookie-less, token-less write 401.
func TestHTTPWritesWithATokenAgainstGitea(t *testing.T) {
	s, w := newSidecar(t)
	g, _, _ := shared(t)
	writer := "Authorization: token " + userToken(t, g, w.Alice, "read:user", "read:repository", "write:issue")
	reader := "Authorization: token " + userToken(t, g, w.Alice, "read:user", "read:repository", "read:issue")
	u := fmt.Sprintf("%s/api/v1/repos/%s/issues/%d/lease", s.HTTPURL, w.Widgets.FullName(), w.OpenIssue)

	if code, body := apiDo(t, "POST", u, `{"ttl":"30m"}`, reader); code != http.StatusForbidden {
		t.Fatalf("acquire with a read-only token: %d %s, want 403", code, body)
	}
	if code, body := apiDo(t, "POST", u, `{"ttl":"30m"}`); code != http.StatusUnauthorized {
		t.Fatalf("acquire without a token: %d %s, want 401", code, body)
	}
	code, body := apiDo(t, "POST", u, `{"ttl":"30m"}`, writer, "Content-Type: application/json")
	if code != http.StatusCreated || !strings.Contains(body, `"status":"acquired"`) || !strings.Contains(body, `"holder":"alice"`) {
		t.Fatalf("acquire with a write:issue token: %d %s, want 201 acquired by alice", code, body)
	}

	r := run(t, s, w.Bob, lease("acquire", w.Widgets, w.OpenIssue))
	expect(t, r, 4, "bob's acquire over SSH")
	if !strings.Contains(r.Stdout, `"status":"held"`) || !strings.Contains(r.Stdout, `"holder":"alice"`) {
		t.Fatalf("bob's acquire: %s, want held by alice", r.Stdout)
	}

	if code, body := apiDo(t, "PATCH", u, `{"ttl":"1h"}`, reader); code != http.StatusForbidden {
		t.Fatalf("renew with a read-only token: %d %s, want 403", code, body)
	}
	if code, body := apiDo(t, "PATCH", u, `{"ttl":"1h"}`, writer); code != http.StatusOK || !strings.Contains(body, `"status":"renewed"`) {
		t.Fatalf("renew: %d %s", code, body)
	}
	if code, body := apiDo(t, "DELETE", u, "", reader); code != http.StatusForbidden {
		t.Fatalf("release with a read-only token: %d %s, want 403", code, body)
	}
	if code, body := apiDo(t, "DELETE", u, "", writer); code != http.StatusOK || !strings.Contains(body, `"status":"released"`) {
		t.Fatalf("release: %d %s", code, body)
	}
	expect(t, run(t, s, w.Bob, lease("acquire", w.Widgets, w.OpenIssue)), 0, "bob's acquire after the release")
}
