package routes

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Pages in Gitea's conventions: limit (default and maximum 50), page,
// X-Total-Count, and Link in Gitea's order (next, last, first, prev) and
// form.
func TestListPagesLikeGitea(t *testing.T) {
	f := newFixture(t)
	for n := int64(1); n <= 7; n++ {
		f.acquire(1, n, "alice", 0)
		f.clock.Advance(time.Second)
	}
	base := publicURL + "/api/v1/repos/acme/widgets/leases"
	for _, c := range []struct {
		query  string
		issues string
		link   string
	}{
		{"", "1,2,3,4,5,6,7", ""},
		{"?limit=100", "1,2,3,4,5,6,7", ""},
		{"?limit=3", "1,2,3", `<` + base + `?limit=3&page=2>; rel="next",<` + base + `?limit=3&page=3>; rel="last"`},
		{"?limit=3&page=2", "4,5,6", `<` + base + `?limit=3&page=3>; rel="next",<` + base + `?limit=3&page=3>; rel="last",` +
			`<` + base + `?limit=3&page=1>; rel="first",<` + base + `?limit=3&page=1>; rel="prev"`},
		{"?limit=3&page=3", "7", `<` + base + `?limit=3&page=1>; rel="first",<` + base + `?limit=3&page=2>; rel="prev"`},
		{"?limit=3&page=9", "", `<` + base + `?limit=3&page=1>; rel="first",<` + base + `?limit=3&page=2>; rel="prev"`},
		{"?issue=7&issue=2&issue=99", "2,7", ""},
		{"?issue=7&issue=2&issue=7&limit=1", "2", `<` + base + `?issue=7&issue=2&issue=7&limit=1&page=2>; rel="next",<` + base + `?issue=7&issue=2&issue=7&limit=1&page=2>; rel="last"`},
	} {
		r := f.do("GET", "/api/v1/repos/acme/widgets/leases"+c.query)
		if r.Code != 200 {
			t.Fatalf("%s: %d %s", c.query, r.Code, r.Body)
		}
		var got []string
		for _, part := range strings.Split(r.Body, `{"issue":`)[1:] {
			got = append(got, strings.SplitN(part, ",", 2)[0])
		}
		if strings.Join(got, ",") != c.issues {
			t.Errorf("%s: issues %v, want %s", c.query, got, c.issues)
		}
		total := "7"
		if strings.Contains(c.query, "issue=") {
			total = "2"
		}
		if r.Header.Get("X-Total-Count") != total || r.Header.Get("Link") != c.link {
			t.Errorf("%s: X-Total-Count %q, Link %q; want %s, %q", c.query, r.Header.Get("X-Total-Count"), r.Header.Get("Link"), total, c.link)
		}
	}
	var many []string
	for n := 1; n <= 51; n++ {
		many = append(many, fmt.Sprintf("issue=%d", n))
	}
	for q, want := range map[string]string{
		"?page=0":                     `{"error":"page must be a positive integer of at most 1048576"}`,
		"?limit=0":                    `{"error":"limit must be a positive integer of at most 2147483647"}`,
		"?limit=x":                    `{"error":"limit must be a positive integer of at most 2147483647"}`,
		"?issue=x":                    `{"error":"issue number must be a positive integer"}`,
		"?" + strings.Join(many, "&"): `{"error":"at most 50 issue numbers"}`,
	} {
		expectReply(t, q, f.do("GET", "/api/v1/repos/acme/widgets/leases"+q), 400, want)
	}
	// Malformed paging is refused before the repository is looked up.
	expectReply(t, "private, bad page", f.do("GET", "/api/v1/repos/acme/secret/leases?page=x"), 400,
		`{"error":"page must be a positive integer of at most 1048576"}`)
}

// A strong ETag of what the viewer sees, and 304 when it has not changed.
func TestListETag(t *testing.T) {
	f := newFixture(t)
	f.acquire(1, 1, "alice", 0)
	path := "/api/v1/repos/acme/widgets/leases?issue=1&issue=2"
	r := f.do("GET", path)
	etag := r.Header.Get("ETag")
	if r.Code != 200 || !strings.HasPrefix(etag, `"`) || r.Header.Get("Cache-Control") != "private, no-cache" {
		t.Fatalf("first answer: %d ETag %q Cache-Control %q", r.Code, etag, r.Header.Get("Cache-Control"))
	}
	for _, inm := range []string{etag, "W/" + etag, `"other", ` + etag, "*"} {
		r := f.do("GET", path, "If-None-Match: "+inm)
		if r.Code != 304 || r.Body != "" || r.Header.Get("ETag") != etag {
			t.Errorf("If-None-Match %s: %d %q ETag %q, want 304", inm, r.Code, r.Body, r.Header.Get("ETag"))
		}
	}
	if r := f.do("GET", path, `If-None-Match: "other"`); r.Code != 200 {
		t.Errorf("another ETag: %d", r.Code)
	}
	// A change of what is seen changes the ETag; so does another viewer's
	// view, and a change elsewhere in the repository does not.
	f.acquire(1, 3, "bob", 0)
	if r := f.do("GET", path, "If-None-Match: "+etag); r.Code != 304 {
		t.Errorf("a lease on another number: %d, want 304", r.Code)
	}
	f.acquire(1, 2, "bob", 0)
	r = f.do("GET", path, "If-None-Match: "+etag)
	if r.Code != 200 || r.Header.Get("ETag") == etag || !strings.Contains(r.Body, `"holder":"bob"`) {
		t.Errorf("after a claim: %d %s ETag %q", r.Code, r.Body, r.Header.Get("ETag"))
	}
	// The other reads carry ETags too; errors do not.
	if r := f.do("GET", "/api/v1/repos/acme/widgets/issues/1/lease"); r.Header.Get("ETag") == "" {
		t.Error("no ETag on one issue's lease")
	}
	if r := f.do("GET", "/api/v1/repos/acme/secret/leases"); r.Code != 404 || r.Header.Get("ETag") != "" {
		t.Errorf("not found: %d ETag %q", r.Code, r.Header.Get("ETag"))
	}
}

// Gitea's page reads the paging headers and ETag of a cross-origin answer.
func TestListHeadersAreExposedToGitea(t *testing.T) {
	f := newFixture(t)
	r := f.do("GET", "/api/v1/repos/acme/widgets/leases", "Origin: "+giteaURL)
	if got := r.Header.Get("Access-Control-Expose-Headers"); got != "ETag, Link, X-Total-Count" {
		t.Fatalf("Access-Control-Expose-Headers %q", got)
	}
}
