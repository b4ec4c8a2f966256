package routes

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin"
	"github.com/collab-lease/collab-lease/plugin/contract"
)

// listLeases answers GET /api/v1/repos/{owner}/{repo}/leases with the
// reply of `collab-lease list`.
func (h *handler) listLeases(c *gin.Context) {
	login, repo, err := h.visibleRepo(c)
	if err != nil {
		h.fail(c, err)
		return
	}
	leases, err := h.ledger.List(c.Request.Context(), repo.ID)
	if err != nil {
		h.fail(c, fmt.Errorf("leases of %s: %w", repo.FullName, err))
		return
	}
	numbers := make([]int64, len(leases))
	for i, l := range leases {
		numbers[i] = l.Issue
	}
	seen, err := plugin.Visible(c.Request.Context(), h.forge, login, repo, numbers)
	if err != nil {
		h.fail(c, err)
		return
	}
	shown := leases[:0]
	for _, l := range leases {
		if seen[l.Issue] {
			shown = append(shown, l)
		}
	}
	out := contract.List{Repo: repo.FullName, Leases: make([]contract.LeaseView, len(shown))}
	for i, l := range shown {
		out.Leases[i] = leaseView(l)
	}
	h.reply(c, out)
}

// issueLease answers GET /api/v1/repos/{owner}/{repo}/issues/{n}/lease.
// Like renew, release and list over SSH it reads the ledger alone and does
// not ask whether the issue exists: an unknown issue has no lease.
func (h *handler) issueLease(c *gin.Context) {
	n, err := issueNumber(c.Param("n"))
	if err != nil {
		h.fail(c, err)
		return
	}
	login, repo, err := h.visibleRepo(c)
	if err != nil {
		h.fail(c, err)
		return
	}
	l, err := h.ledger.Current(c.Request.Context(), models.Key{RepoID: repo.ID, Issue: n})
	if err != nil {
		h.fail(c, fmt.Errorf("lease of %s#%d: %w", repo.FullName, n, err))
		return
	}
	if l != nil {
		seen, err := plugin.Visible(c.Request.Context(), h.forge, login, repo, []int64{n})
		if err != nil {
			h.fail(c, err)
			return
		}
		if !seen[n] {
			l = nil
		}
	}
	out := contract.IssueLease{}
	if l != nil {
		v := leaseView(*l)
		out.Lease = &v
	}
	h.reply(c, out)
}

// leaseView renders a ledger row in the contract's shape.
func leaseView(l models.Lease) contract.LeaseView {
	return contract.LeaseView{Issue: l.Issue, Holder: l.Holder, Token: l.Token,
		AcquiredAt: contract.Time(l.AcquiredAt), ExpiresAt: contract.TimePtr(l.ExpiresAt)}
}

// reply sends a viewer-specific JSON answer that no cache may keep.
func (h *handler) reply(c *gin.Context, v any) {
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, v)
}

// issueNumber parses a positive decimal issue number.
func issueNumber(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || strings.HasPrefix(s, "+") {
		return 0, &badRequestError{msg: "issue number must be a positive integer"}
	}
	return n, nil
}

// visibleRepo is the one visibility check of the API: the repository of
// the path as seen by the request's viewer. Whether the repository does
// not exist or the viewer may not read it, the error is plugin.ErrNotFound.
func (h *handler) visibleRepo(c *gin.Context) (string, plugin.Repo, error) {
	login, err := h.viewer(c)
	if err != nil {
		return "", plugin.Repo{}, err
	}
	repo, err := h.forge.Repo(c.Request.Context(), login, c.Param("owner"), c.Param("repo"))
	if err != nil {
		return "", plugin.Repo{}, err
	}
	if !repo.CanRead {
		return "", plugin.Repo{}, fmt.Errorf("repository %s: %w", repo.FullName, plugin.ErrNotFound)
	}
	return login, repo, nil
}

// viewer names who is asking: the owner of the API token in the
// Authorization header, else the signed-in user of the session cookie,
// else "" (anonymous). A token that is sent but not valid is refused
// (401) rather than downgraded to anonymous, so a client with a revoked
// token learns it instead of silently seeing less; the refusal does not
// depend on the repository, so it reveals nothing about it.
func (h *handler) viewer(c *gin.Context) (string, error) {
	if auth := c.GetHeader("Authorization"); auth != "" {
		token, ok := apiToken(auth)
		if !ok {
			return "", fmt.Errorf("authorization header: %w", errUnauthorized)
		}
		u, err := h.forge.UserByToken(c.Request.Context(), token)
		if err != nil {
			if errors.Is(err, plugin.ErrNotFound) {
				return "", fmt.Errorf("%w: %w", errUnauthorized, err)
			}
			return "", err
		}
		return u.Login, nil
	}
	if login, ok := h.cookies.session(c.Request, h.now()); ok {
		return login, nil
	}
	return "", nil
}

// apiToken extracts the token of "token <t>" or "Bearer <t>", the two
// forms Gitea itself accepts.
func apiToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	token = strings.TrimSpace(token)
	if !ok || token == "" || strings.ContainsAny(token, " \t") {
		return "", false
	}
	switch strings.ToLower(scheme) {
	case "token", "bearer":
		return token, true
	}
	return "", false
}
