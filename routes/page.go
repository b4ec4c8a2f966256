package routes

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/collab-lease/collab-lease/plugin/lease"
	"github.com/gin-gonic/gin"
)

// Listing in Gitea's conventions: ?page= (from 1) and ?limit= (default
// and maximum 50, as Gitea's API: a larger limit is cut to 50), an
// X-Total-Count header and a Link header with rel next, last, first and
// prev, in Gitea's order and form (routers' genAPILinks). ?issue=N,
// repeated (at most 50), asks only for those numbers: the badge of a page
// of Gitea's issue list asks for the numbers it shows.

// Paging limits.
const (
	defaultPageLimit = 50
	maxPageLimit     = 50
	maxPage          = 1 << 20
)

// listQuery binds ?page, ?limit and ?issue.
func listQuery(c *gin.Context) (page int, q lease.ListQuery, err error) {
	p, err := queryNumber(c, "page", maxPage, 1)
	if err != nil {
		return 0, q, err
	}
	limit, err := queryNumber(c, "limit", 1<<31-1, defaultPageLimit)
	if err != nil {
		return 0, q, err
	}
	q.Limit = int(min(limit, maxPageLimit))
	q.Offset = int(p-1) * q.Limit
	seen := map[int64]bool{}
	for _, s := range c.QueryArray("issue") {
		n, err := issueNumber(s)
		if err != nil {
			return 0, q, err
		}
		if !seen[n] {
			seen[n] = true
			q.Issues = append(q.Issues, n)
		}
	}
	if len(q.Issues) > lease.MaxListIssues {
		return 0, q, malformed(fmt.Sprintf("at most %d issue numbers", lease.MaxListIssues))
	}
	return int(p), q, nil
}

// pageHeaders sets X-Total-Count and Link as Gitea does for page of
// total items, limit a page.
func (h *handler) pageHeaders(c *gin.Context, total, page, limit int) {
	c.Header("X-Total-Count", strconv.Itoa(total))
	pages := (total + limit - 1) / limit
	cur := max(min(page, pages), 1) // Gitea's paginator clamps the current page
	link := func(p int, rel string) string {
		q := c.Request.URL.Query()
		q.Set("page", strconv.Itoa(p))
		u := url.URL{Scheme: h.public.Scheme, Host: h.public.Host, Path: h.public.Path + c.Request.URL.Path, RawQuery: q.Encode()}
		return fmt.Sprintf("<%s>; rel=%q", u.String(), rel)
	}
	var links []string
	hasNext := cur*limit < total
	if hasNext {
		links = append(links, link(cur+1, "next"), link(pages, "last"))
	}
	if cur > 1 {
		links = append(links, link(1, "first"), link(cur-1, "prev"))
	}
	if len(links) > 0 {
		c.Header("Link", strings.Join(links, ","))
	}
}

// replyCached answers a GET with its JSON, a strong ETag (a hash of the
// very bytes sent, so it changes exactly when what this viewer sees
// does) and 304 Not Modified when the client already has it.
//
// The answers depend on the viewer, so no shared cache may keep them
// (private); a browser may keep one but must ask again every time
// (no-cache), so a claim shows at once, and what it saves is the body:
// the badge's unchanged answer is a 304. (no-store would forbid keeping
// the body that an If-None-Match revalidates.) Vary names what the
// answer depends on.
func (h *handler) replyCached(c *gin.Context, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		h.fail(c, fmt.Errorf("encode the reply: %w", err))
		return
	}
	sum := sha256.Sum256(body)
	etag := `"` + hex.EncodeToString(sum[:16]) + `"`
	hd := c.Writer.Header()
	hd.Set("ETag", etag)
	hd.Set("Cache-Control", "private, no-cache")
	hd.Add("Vary", "Authorization, Cookie")
	if etagMatch(c.GetHeader("If-None-Match"), etag) {
		c.Status(http.StatusNotModified)
		return
	}
	c.Data(http.StatusOK, "application/json; charset=utf-8", body)
}

// etagMatch is If-None-Match's weak comparison (RFC 9110 13.1.2).
func etagMatch(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == etag {
			return true
		}
	}
	return false
}
