package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// pagingIssues and pagingLimit: enough issues for three pages, the last
// one short.
const (
	pagingIssues = 7
	pagingLimit  = 3
)

// The lease list pages as Gitea's own issue list does: in a repository of
// 7 open issues, all claimed, GET …/leases?page=P&limit=3 answers the same
// X-Total-Count, the same number of items and the same Link relations
// (next, last, first, prev, with the same page and limit) as Gitea's
// GET …/issues?state=open&type=issues&page=P&limit=3, for every page and
// past the last; and so does a limit over the maximum of both.
func TestListPagesLikeGiteaAgainstGitea(t *testing.T) {
	s, w := newSidecar(t)
	g, _, _ := shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	repo := Repo{Owner: w.Org, Name: "paging-" + randomHex(4)}
	var created struct{ ID int64 }
	if err := g.Admin().Do(ctx, "POST", "/orgs/"+w.Org+"/repos", map[string]any{"name": repo.Name}, &created); err != nil {
		t.Fatalf("create %s: %v", repo.FullName(), err)
	}
	repo.ID = created.ID
	leases := s.HTTPURL + "/api/v1/repos/" + repo.FullName()
	admin := "Authorization: token " + w.Admin.Token
	for i := range pagingIssues {
		var is struct{ Number int64 }
		if err := g.Admin().Do(ctx, "POST", "/repos/"+repo.FullName()+"/issues", map[string]any{"title": fmt.Sprintf("Page me %d", i+1)}, &is); err != nil {
			t.Fatal(err)
		}
		if code, body := apiDo(t, "POST", fmt.Sprintf("%s/issues/%d/lease", leases, is.Number), "", admin); code != http.StatusCreated {
			t.Fatalf("claim #%d: %d %s", is.Number, code, body)
		}
	}

	limit := fmt.Sprintf("limit=%d", pagingLimit)
	for _, query := range []string{
		"page=1&" + limit, "page=2&" + limit, "page=3&" + limit, // the last page is short
		"page=4&" + limit, "page=9&" + limit, // past the last
		limit,             // no page: the first
		"page=2&limit=51", // a limit over 50 is cut to 50: one page, and page 2 is past it
	} {
		var giteaItems []json.RawMessage
		hdr, err := g.Admin().DoHeader(ctx, "GET", "/repos/"+repo.FullName()+"/issues?state=open&type=issues&"+query, nil, &giteaItems)
		if err != nil {
			t.Fatal(err)
		}
		gitea := pagingOf(t, hdr, len(giteaItems))

		code, sideHdr, body := apiGet(t, nil, leases+"/leases?"+query, admin)
		var l listReply
		if code != http.StatusOK || json.Unmarshal([]byte(body), &l) != nil {
			t.Fatalf("sidecar ?%s: %d %s", query, code, body)
		}
		sidecar := pagingOf(t, sideHdr, len(l.Leases))

		t.Logf("?%s: Gitea %s", query, gitea)
		if gitea.String() != sidecar.String() {
			t.Errorf("?%s:\n  Gitea:   %s\n  sidecar: %s\n  (Gitea's Link: %s; the sidecar's: %s)", query, gitea, sidecar, hdr.Get("Link"), sideHdr.Get("Link"))
		}
		if gitea.total != pagingIssues {
			t.Errorf("?%s: Gitea counts %d open issues, want %d", query, gitea.total, pagingIssues)
		}
	}
}

// paging is what a list answer says about its page.
type paging struct {
	total int               // X-Total-Count
	items int               // on this page
	links map[string]string // rel → "page=P&limit=L" of its URL
}

func (p paging) String() string {
	var rels []string
	for _, rel := range slices.Sorted(maps.Keys(p.links)) {
		rels = append(rels, rel+":"+p.links[rel])
	}
	return fmt.Sprintf("X-Total-Count %d, %d items, Link {%s}", p.total, p.items, strings.Join(rels, " "))
}

// pagingOf reads X-Total-Count and Link (`<url>; rel="next",…`), keeping of
// each URL only its page and limit: hosts and other parameters differ.
func pagingOf(t *testing.T, h http.Header, items int) paging {
	t.Helper()
	p := paging{items: items, links: map[string]string{}}
	if _, err := fmt.Sscan(h.Get("X-Total-Count"), &p.total); err != nil {
		t.Fatalf("X-Total-Count %q: %v", h.Get("X-Total-Count"), err)
	}
	link := h.Get("Link")
	if link == "" {
		return p
	}
	for _, part := range strings.Split(link, ",") {
		target, params, ok := strings.Cut(strings.TrimSpace(part), ";")
		rel, found := strings.CutPrefix(strings.TrimSpace(params), "rel=")
		if !ok || !found || !strings.HasPrefix(target, "<") || !strings.HasSuffix(target, ">") {
			t.Fatalf("malformed Link %q", link)
		}
		u, err := url.Parse(strings.Trim(target, "<>"))
		if err != nil {
			t.Fatalf("Link %q: %v", link, err)
		}
		rel = strings.Trim(rel, `"`)
		if _, dup := p.links[rel]; dup {
			t.Fatalf("Link %q has rel %q twice", link, rel)
		}
		p.links[rel] = "page=" + u.Query().Get("page") + "&limit=" + u.Query().Get("limit")
	}
	return p
}
