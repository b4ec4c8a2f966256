package routes

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"html"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/lease"
)

// The board, for people (docs/http.md, The board): GET /{owner}/{repo}/claims
// and GET /-/claims (every repository the viewer may read that has live
// claims), an HTML page rendered here, whole, so it answers without
// script; its script (assets/static/board.js) counts down the expiries,
// sorts the rows, and keeps the page current from the live events the
// badges use. It shows the viewer what the API shows them: a repository
// they may not read answers 404 exactly as one that does not exist, with
// a link to sign in. html/template escapes every value the forge, the
// ledger or the request gave.

const (
	boardPath    = "/:owner/:repo/claims"
	allBoardPath = "/-/claims"
)

//go:embed board.html
var boardHTML string

var boardTemplate = template.Must(template.New("board").Funcs(template.FuncMap{
	"ms":   func(t any) int64 { return timeOf(t).UnixMilli() },
	"span": func(to, from any) string { return span(timeOf(to).Sub(timeOf(from))) },
	"left": expiryClass,
	"who":  who,
	"how":  func(s string) string { return strings.ReplaceAll(s, "_", " ") },
}).Parse(boardHTML))

// timeOf takes a time or a pointer to one (the template passes both).
func timeOf(v any) time.Time {
	switch t := v.(type) {
	case time.Time:
		return t
	case *time.Time:
		return *t
	case *contract.Time:
		return time.Time(*t)
	}
	return time.Time{}
}

// span renders a duration as the board's script does (board.js): the
// two largest units.
func span(d time.Duration) string {
	s := max(int64(d/time.Second), 0)
	m, h := s/60, s/3600
	switch days := h / 24; {
	case days > 0:
		return fmt.Sprintf("%dd %dh", days, h%24)
	case h > 0:
		return fmt.Sprintf("%dh %02dm", h, m%60)
	case m > 0:
		return fmt.Sprintf("%dm %02ds", m, s%60)
	}
	return fmt.Sprintf("%ds", s)
}

// expiryClass marks an expiry within five minutes, as board.js does.
func expiryClass(now time.Time, at *time.Time) string {
	switch left := at.Sub(now); {
	case left <= 0:
		return "cl-over"
	case left < 5*time.Minute:
		return "cl-soon"
	}
	return ""
}

func who(holder, agent string) string {
	if agent == "" {
		return holder
	}
	return holder + " · " + agent
}

// boardPage is what the template shows.
type boardPage struct {
	Title, Theme, ThemeQuery string
	CSS, JS                  string
	Gitea, Home              string
	Login, SignIn            string
	NotFound, All            bool
	// More and Unchecked: the board of all shows MaxBoardRepos
	// repositories and there are more; this many were left out because
	// Gitea did not answer for them.
	More      bool
	Unchecked int
	Sort      string
	Sorts     []sortLink
	Boards    []boardView
	Now       time.Time
	query     url.Values
}

type sortLink struct {
	Key, Name, Href string
	Current, Desc   bool
}

// boardView is one repository's board with its links.
type boardView struct {
	lease.Board
	RepoURL, BoardURL string
	Page, Pages       int
	Prev, Next        string
	Pushes            bool // a column of the last pushes
	// Rows are the claims' rows, rendered by claimRow.
	Rows []template.HTML
}

// IssueURL is the forge's page of an issue or pull request.
func (b boardView) IssueURL(is lease.BoardIssue) string {
	kind := "issues"
	if is.Pull {
		kind = "pulls"
	}
	return fmt.Sprintf("%s/%s/%d", b.RepoURL, kind, is.Number)
}

// NumberURL is the forge's page of number n (Gitea sends a pull
// request's number on to it).
func (b boardView) NumberURL(n *int64) string { return fmt.Sprintf("%s/issues/%d", b.RepoURL, *n) }

// SortHref is the link that sorts by key: the reverse of the current
// order when it is key's.
func (p *boardPage) SortHref(key string) string {
	q := url.Values{}
	for k, v := range p.query {
		q[k] = v
	}
	q.Del("page")
	if p.Sort == key {
		key = "-" + key
	}
	q.Set("sort", key)
	return "?" + q.Encode()
}

// board answers GET /{owner}/{repo}/claims.
func (h *handler) board(c *gin.Context) {
	h.boardOf(c, false)
}

// allBoards answers GET /-/claims.
func (h *handler) allBoards(c *gin.Context) {
	h.boardOf(c, true)
}

func (h *handler) boardOf(c *gin.Context, all bool) {
	sort, ok := lease.ParseSort(c.Query("sort"))
	if !ok {
		h.fail(c, malformed("sort must be one of expiry, holder, issue, age, each maybe with a leading -"))
		return
	}
	pageNo := 1
	if s := c.Query("page"); s != "" && !all {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1<<20 {
			h.fail(c, malformed("page must be a positive integer"))
			return
		}
		pageNo = n
	}
	v, err := h.viewer(c)
	if err != nil {
		h.fail(c, err)
		return
	}
	p := h.boardPage(c, v, sort)
	q := lease.BoardQuery{Sort: sort, Offset: (pageNo - 1) * lease.BoardPage}
	ctx := c.Request.Context()
	if all {
		p.All, p.Title = true, "Claims"
		all, err := h.leases.Boards(ctx, v, q)
		if err != nil {
			h.fail(c, err)
			return
		}
		for _, b := range all.Boards {
			p.Boards = append(p.Boards, h.boardView(c, b, 1))
		}
		p.More, p.Unchecked = all.More, all.Unchecked
		h.render(c, http.StatusOK, p)
		return
	}
	owner, name := c.Param("owner"), c.Param("repo")
	b, err := h.leases.Board(ctx, v, owner, name, q)
	if errors.Is(err, lease.ErrRepoNotFound) {
		p.NotFound, p.Title = true, "Not found"
		h.render(c, http.StatusNotFound, p)
		return
	}
	if err != nil {
		h.fail(c, err)
		return
	}
	p.Title = b.Repo + " · Claims"
	p.Boards = []boardView{h.boardView(c, b, pageNo)}
	h.render(c, http.StatusOK, p)
}

// boardPage is the page's frame for viewer v: where its assets are, who
// is signed in, or where to sign in.
func (h *handler) boardPage(c *gin.Context, v lease.Viewer, sort string) *boardPage {
	home := h.public.String()
	p := &boardPage{Gitea: h.gitea.String(), Home: home, Login: v.Login, Sort: sort, Now: h.now(), query: c.Request.URL.Query()}
	switch theme := c.Query("theme"); {
	case strings.Contains(theme, "dark"):
		p.Theme = "dark"
	case strings.Contains(theme, "light"):
		p.Theme = "light"
	}
	if p.Theme != "" {
		p.ThemeQuery = "?theme=" + p.Theme
	}
	if css, ok := h.assets["board.css"]; ok {
		p.CSS = home + "/assets/" + css.HashedName()
	}
	if js, ok := h.assets["board.js"]; ok {
		p.JS = home + "/assets/" + js.HashedName()
	}
	if v.Anonymous() && h.signIn != nil {
		here := home + c.Request.URL.RequestURI()
		p.SignIn = home + loginPath + "?return_to=" + url.QueryEscape(here)
	}
	for _, s := range []struct{ key, name string }{{lease.SortExpiry, "expiry"}, {lease.SortHolder, "holder"}, {lease.SortIssue, "issue"}, {lease.SortAge, "age"}} {
		cur := strings.TrimPrefix(sort, "-") == s.key
		p.Sorts = append(p.Sorts, sortLink{Key: s.key, Name: s.name, Href: p.SortHref(s.key), Current: cur, Desc: cur && strings.HasPrefix(sort, "-")})
	}
	return p
}

// boardView adds its links to b, the board of page pageNo.
func (h *handler) boardView(c *gin.Context, b lease.Board, pageNo int) boardView {
	bv := boardView{Board: b, RepoURL: h.gitea.String() + "/" + b.Repo, BoardURL: h.public.String() + "/" + b.Repo + "/claims",
		Page: pageNo, Pages: max(1, (b.Total+lease.BoardPage-1)/lease.BoardPage)}
	link := func(n int) string {
		q := c.Request.URL.Query()
		q.Set("page", strconv.Itoa(n))
		return "?" + q.Encode()
	}
	if pageNo > 1 {
		bv.Prev = link(pageNo - 1)
	}
	if pageNo < bv.Pages {
		bv.Next = link(pageNo + 1)
	}
	for _, cl := range b.Claims {
		bv.Pushes = bv.Pushes || cl.Push != nil
	}
	now := h.now()
	for _, cl := range b.Claims {
		bv.Rows = append(bv.Rows, bv.claimRow(cl, now))
	}
	return bv
}

// claimRow renders one claim's row. It is written out here rather than
// in the template: a board page holds up to a hundred of them, and the
// template's reflection costs most of the page's time. Every value is
// escaped.
func (b boardView) claimRow(c lease.BoardClaim, now time.Time) template.HTML {
	var w strings.Builder
	e := html.EscapeString
	ms := func(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }
	w.WriteString(`<tr data-issue="` + strconv.FormatInt(c.Number, 10) + `" data-holder="` + e(who(c.Holder, c.Agent)) + `" data-expires="`)
	if c.ExpiresAt != nil {
		w.WriteString(ms(*c.ExpiresAt))
	}
	w.WriteString(`" data-since="` + ms(c.AcquiredAt) + `">` + "\n")
	w.WriteString(`<td><a href="` + e(b.IssueURL(c.BoardIssue)) + `">#` + strconv.FormatInt(c.Number, 10) + `</a>`)
	if c.Pull {
		w.WriteString(` <span class="cl-label">pull</span>`)
	}
	w.WriteString(` <span class="cl-title">` + e(c.Title) + "</span></td>\n")
	w.WriteString(`<td data-label="Holder">` + e(c.Holder))
	if c.Agent != "" {
		w.WriteString(` <span class="cl-agent">· ` + e(c.Agent) + `</span>`)
	}
	w.WriteString("</td>\n" + `<td data-label="Token"><code>` + strconv.FormatInt(c.Token, 10) + "</code></td>\n")
	w.WriteString(`<td data-label="Claimed for"><span data-age="` + ms(c.AcquiredAt) + `">` + span(now.Sub(c.AcquiredAt)) + "</span></td>\n")
	if c.ExpiresAt != nil {
		w.WriteString(`<td data-label="Expires in"><span data-left="` + ms(*c.ExpiresAt) + `" class="` + expiryClass(now, c.ExpiresAt) + `">` +
			span(c.ExpiresAt.Sub(now)) + "</span></td>\n")
	} else {
		w.WriteString(`<td data-label="Expires in"><span class="cl-muted">open-ended</span></td>` + "\n")
	}
	w.WriteString(`<td data-label="Waiting">`)
	if c.Waiters > 0 {
		w.WriteString(strconv.Itoa(c.Waiters))
	}
	w.WriteString("</td>")
	if b.Pushes {
		w.WriteString("\n" + `<td data-label="Last push">`)
		if p := c.Push; p != nil {
			w.WriteString(`<code title="` + e(p.Commit) + `">` + e(p.Commit[:min(len(p.Commit), 10)]) + `</code> to ` +
				e(strings.TrimPrefix(p.Ref, "refs/heads/")) + `, <span data-ago="` + ms(p.At) + `">` + span(now.Sub(p.At)) + `</span> ago`)
		}
		w.WriteString("</td>")
	}
	w.WriteString("\n</tr>")
	return template.HTML(w.String()) // every value above is escaped
}

// render writes the page: HTML that no cache keeps (it is the viewer's),
// and that no other site may frame.
func (h *handler) render(c *gin.Context, code int, p *boardPage) {
	var buf bytes.Buffer
	if err := boardTemplate.Execute(&buf, p); err != nil {
		h.fail(c, fmt.Errorf("render the board: %w", err))
		return
	}
	hd := c.Writer.Header()
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	c.Data(code, "text/html; charset=utf-8", buf.Bytes())
}
