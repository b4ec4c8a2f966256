package routes

import (
	"context"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/assets"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// boardFixture serves the real board assets.
func boardFixture(t *testing.T) *fixture {
	t.Helper()
	b, err := assets.Load()
	if err != nil {
		t.Fatal(err)
	}
	return newFixture(t, func(o *Options) { o.Assets = b })
}

var rowIssue = regexp.MustCompile(`<tr data-issue="(\d+)"`)

// rows are the issue numbers of a board's claims, in the page's order.
func rows(body string) string {
	var out []string
	for _, m := range rowIssue.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return strings.Join(out, " ")
}

// The board of a repository: its claims, escaped, in the order asked,
// as HTML no cache keeps and no other site frames.
func TestBoardPage(t *testing.T) {
	f := boardFixture(t)
	f.forge.SetTitle("acme/widgets", 1, `<script>alert("x")</script> & more`)
	f.acquire(1, 1, "alice", time.Hour)
	f.acquire(1, 2, "bob", 10*time.Minute)
	f.acquire(1, 3, "carol", 0)

	r := f.do("GET", "/acme/widgets/claims")
	if r.Code != 200 || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("board: %d %s", r.Code, r.Header.Get("Content-Type"))
	}
	for _, h := range []string{"Cache-Control: no-store", "X-Frame-Options: DENY"} {
		k, v, _ := strings.Cut(h, ": ")
		if r.Header.Get(k) != v {
			t.Errorf("%s: %q", k, r.Header.Get(k))
		}
	}
	if !strings.Contains(r.Header.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Errorf("CSP: %q", r.Header.Get("Content-Security-Policy"))
	}
	if strings.Contains(r.Body, `<script>alert`) || !strings.Contains(r.Body, `&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; more`) {
		t.Fatalf("the title is not escaped:\n%s", r.Body)
	}
	for _, want := range []string{`href="http://gitea.example:3000/acme/widgets/issues/1"`, ">alice<", "open-ended", "/assets/board.", `data-base="http://gitea.example:8787"`, `href="http://gitea.example:8787/oauth/login?return_to=http%3A%2F%2Fgitea.example%3A8787%2Facme%2Fwidgets%2Fclaims"`} {
		if !strings.Contains(r.Body, want) {
			t.Errorf("the board lacks %s", want)
		}
	}
	for sort, want := range map[string]string{"": "2 1 3", "expiry": "2 1 3", "-expiry": "3 1 2", "holder": "1 2 3", "-holder": "3 2 1", "issue": "1 2 3", "age": "1 2 3"} {
		if got := rows(f.do("GET", "/acme/widgets/claims?sort="+sort).Body); got != want {
			t.Errorf("sort=%s: %s, want %s", sort, got, want)
		}
	}
	if r := f.do("GET", "/acme/widgets/claims?sort=whim"); r.Code != 400 {
		t.Errorf("an unknown order: %d", r.Code)
	}
	if r := f.do("GET", "/acme/widgets/claims?theme=gitea-dark"); !strings.Contains(r.Body, `<html lang="en" data-theme="dark">`) {
		t.Error("the dark theme asked for is not the page's")
	}
}

// A private repository's board answers an anonymous viewer as a missing
// repository's does, with a link to sign in; a reader signed in sees it.
func TestBoardOfAPrivateRepository(t *testing.T) {
	f := boardFixture(t)
	f.acquire(2, 7, "alice", time.Hour)
	private := f.do("GET", "/acme/secret/claims")
	missing := f.do("GET", "/acme/nothing/claims")
	if private.Code != 404 || missing.Code != 404 {
		t.Fatalf("anonymous: %d and %d, want 404", private.Code, missing.Code)
	}
	if strings.ReplaceAll(missing.Body, "nothing", "secret") != private.Body {
		t.Fatalf("a private repository's 404 differs from a missing one's:\n%s\n---\n%s", private.Body, missing.Body)
	}
	if !strings.Contains(private.Body, "/oauth/login?return_to="+url.QueryEscape(publicURL+"/acme/secret/claims")) || strings.Contains(private.Body, "#7") {
		t.Fatalf("the 404: %s", private.Body)
	}
	r := f.do("GET", "/acme/secret/claims", f.sessionFor("carol"))
	if r.Code != 200 || rows(r.Body) != "7" || !strings.Contains(r.Body, "Signed in as carol") || strings.Contains(r.Body, "/oauth/login") {
		t.Fatalf("carol's board: %d %s", r.Code, r.Body)
	}
	if r := f.do("GET", "/acme/secret/claims", f.sessionFor("bob")); r.Code != 404 {
		t.Fatalf("bob, who may not read it: %d", r.Code)
	}
}

// The board of all: the repositories with claims the viewer may read.
func TestBoardOfAll(t *testing.T) {
	f := boardFixture(t)
	f.acquire(1, 1, "alice", time.Hour)
	f.acquire(2, 7, "alice", time.Hour)
	f.acquire(3, 9, "alice", time.Hour)
	sections := regexp.MustCompile(`data-repo="([^"]+)"`)
	repos := func(headers ...string) string {
		r := f.do("GET", "/-/claims", headers...)
		if r.Code != 200 {
			t.Fatalf("/-/claims: %d %s", r.Code, r.Body)
		}
		var out []string
		for _, m := range sections.FindAllStringSubmatch(r.Body, -1) {
			out = append(out, m[1])
		}
		return strings.Join(out, " ")
	}
	if got := repos(); got != "acme/widgets" {
		t.Errorf("anonymous: %s", got)
	}
	if got := repos(f.sessionFor("alice")); got != "acme/secret acme/widgets alice/notes" {
		t.Errorf("alice: %s", got)
	}
	if got := repos(f.sessionFor("carol")); got != "acme/secret acme/widgets" {
		t.Errorf("carol: %s", got)
	}
	// Gitea not answering whether alice may read them leaves the
	// repositories out, says so, and answers all the same.
	f.forge.SetHook(func(_ context.Context, method string) error {
		if method == "Repo" {
			return forge.ErrUnavailable
		}
		return nil
	})
	r := f.do("GET", "/-/claims", f.sessionFor("alice"))
	if r.Code != 200 || sections.MatchString(r.Body) || !strings.Contains(r.Body, "3 repositories with claims could not be checked just now") ||
		strings.Contains(r.Body, "Nothing is claimed") {
		t.Fatalf("with Gitea down: %d %s", r.Code, r.Body)
	}
}

// A page holds 100 claims; the rest are on the next.
func TestBoardPages(t *testing.T) {
	f := boardFixture(t)
	for n := int64(1); n <= 101; n++ {
		f.acquire(1, n, "alice", time.Hour+time.Duration(n)*time.Second)
	}
	first := f.do("GET", "/acme/widgets/claims")
	if strings.Count(first.Body, "<tr data-issue=") != 100 || !strings.Contains(first.Body, "Page 1 of 2") || !strings.Contains(first.Body, `href="?page=2"`) {
		t.Fatalf("page 1: %d rows", strings.Count(first.Body, "<tr data-issue="))
	}
	if got := rows(f.do("GET", "/acme/widgets/claims?page=2").Body); got != "101" {
		t.Fatalf("page 2: %s", got)
	}
	if r := f.do("GET", "/acme/widgets/claims?page=0"); r.Code != 400 {
		t.Fatalf("page 0: %d", r.Code)
	}
}
