package routes

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/lease"
)

// listLeases answers GET /api/v1/repos/{owner}/{repo}/leases with the
// reply of `collab-lease list`, a page at a time (page.go).
func (h *handler) listLeases(c *gin.Context) {
	page, q, err := listQuery(c)
	if err != nil {
		h.fail(c, err)
		return
	}
	v, err := h.viewer(c)
	if err != nil {
		h.fail(c, err)
		return
	}
	out, total, err := h.leases.ListPage(c.Request.Context(), v, c.Param("owner"), c.Param("repo"), q)
	if err != nil {
		h.fail(c, err)
		return
	}
	h.pageHeaders(c, total, page, q.Limit)
	h.reply(c, out)
}

// issueCall answers a request about issue {n} of {owner}/{repo}: the
// issue number and then the viewer, then the one service call, whose
// answer is the reply. Bad input is refused before anyone is asked.
func (h *handler) issueCall(c *gin.Context, call func(ctx context.Context, v lease.Viewer, owner, name string, n int64) (any, error)) {
	n, err := issueNumber(c.Param("n"))
	if err != nil {
		h.fail(c, err)
		return
	}
	v, err := h.viewer(c)
	if err != nil {
		h.fail(c, err)
		return
	}
	out, err := call(c.Request.Context(), v, c.Param("owner"), c.Param("repo"), n)
	if err != nil {
		h.fail(c, err)
		return
	}
	h.reply(c, out)
}

// issueLease answers GET /api/v1/repos/{owner}/{repo}/issues/{n}/lease.
func (h *handler) issueLease(c *gin.Context) {
	h.issueCall(c, func(ctx context.Context, v lease.Viewer, owner, name string, n int64) (any, error) {
		return h.leases.Lease(ctx, v, owner, name, n)
	})
}

// checkLease answers GET …/issues/{n}/lease/check?token=N: 200 with the
// tenure when N is the live tenure's token, 409 with the stale reply
// otherwise (docs/ssh.md, The agent verbs).
func (h *handler) checkLease(c *gin.Context) {
	token, err := queryNumber(c, "token", 1<<63-1, 0)
	if err != nil {
		h.fail(c, err)
		return
	}
	h.issueCall(c, func(ctx context.Context, v lease.Viewer, owner, name string, n int64) (any, error) {
		return h.leases.Check(ctx, v, owner, name, n, token)
	})
}

// leaseHistory answers GET …/issues/{n}/lease/history?limit=N with the
// reply of `collab-lease history`.
func (h *handler) leaseHistory(c *gin.Context) {
	limit, err := queryNumber(c, "limit", contract.MaxHistoryLimit, contract.DefaultHistoryLimit)
	if err != nil {
		h.fail(c, err)
		return
	}
	h.issueCall(c, func(ctx context.Context, v lease.Viewer, owner, name string, n int64) (any, error) {
		return h.leases.History(ctx, v, owner, name, n, int(limit))
	})
}

// forceRelease answers POST …/issues/{n}/lease/force-release, the issue
// page's button for repository admins; a viewer who is not an admin of
// the repository gets 403.
func (h *handler) forceRelease(c *gin.Context) {
	h.buttonCall(c, func(ctx context.Context, v lease.Viewer, owner, name string, n int64) (any, error) {
		return h.leases.ForceRelease(ctx, v, owner, name, n)
	})
}

// claimButton answers POST …/issues/{n}/lease/claim?ttl=D, the issue
// page's Claim button: the viewer's account claims the issue, for D (the
// grammar of --ttl) or, without a ttl, open-ended, as an assignment is.
func (h *handler) claimButton(c *gin.Context) {
	h.buttonCall(c, func(ctx context.Context, v lease.Viewer, owner, name string, n int64) (any, error) {
		var ttl time.Duration
		if s, ok := c.GetQuery("ttl"); ok {
			d, err := h.writeTTL(writeBody{TTL: &s}, false)
			if err != nil {
				return nil, err
			}
			ttl = d
		}
		return h.leases.Acquire(ctx, v, owner, name, n, ttl)
	})
}

// releaseButton answers POST …/issues/{n}/lease/release, the issue page's
// Release button: the viewer's account releases its claim, its own or any
// of its agents' (the release of the account itself, as over SSH).
func (h *handler) releaseButton(c *gin.Context) {
	h.buttonCall(c, func(ctx context.Context, v lease.Viewer, owner, name string, n int64) (any, error) {
		return h.leases.Release(ctx, v, owner, name, n)
	})
}

// buttonCall answers a write of one of the issue page's buttons (claim,
// release, force-release), the only writes a session cookie authorizes.
// Browsers send cookies with a cross-site POST, so it is answered only
// for a request whose Origin is Gitea's or the sidecar's own (403
// otherwise, before anything is looked up); an anonymous viewer gets
// 401; what the viewer may do is the lease service's question, as for
// any write.
func (h *handler) buttonCall(c *gin.Context, call func(ctx context.Context, v lease.Viewer, owner, name string, n int64) (any, error)) {
	if !h.ourOrigin(c.GetHeader("Origin")) {
		h.refuseCrossOrigin(c)
		return
	}
	h.issueCall(c, func(ctx context.Context, v lease.Viewer, owner, name string, n int64) (any, error) {
		if v.Anonymous() {
			return nil, errUnauthorized
		}
		return call(ctx, v, owner, name, n)
	})
}

// queryNumber parses the query parameter name as a positive decimal
// number of at most limit; def when it is absent (0: it is required).
func queryNumber(c *gin.Context, name string, limit, def int64) (int64, error) {
	s, ok := c.GetQuery(name)
	if !ok && def > 0 {
		return def, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > limit || strings.HasPrefix(s, "+") {
		return 0, malformed(fmt.Sprintf("%s must be a positive integer of at most %d", name, limit))
	}
	return n, nil
}

// reply sends a viewer-specific JSON answer: to a GET with an ETag
// (replyCached), to a write as one that no cache may keep.
func (h *handler) reply(c *gin.Context, v any) {
	if c.Request.Method == http.MethodGet {
		h.replyCached(c, v)
		return
	}
	h.replyStatus(c, http.StatusOK, v)
}

func (h *handler) replyStatus(c *gin.Context, code int, v any) {
	c.Header("Cache-Control", "no-store")
	c.JSON(code, v)
}

// issueNumber parses a positive decimal issue number.
func issueNumber(s string) (int64, error) { return positiveNumber("issue", s) }

// pullNumber parses a positive decimal pull request number.
func pullNumber(s string) (int64, error) { return positiveNumber("pull request", s) }

// positiveNumber parses the number of an issue or pull request (what
// names it in the error) in the path.
func positiveNumber(what, s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || strings.HasPrefix(s, "+") {
		return 0, malformed(what + " number must be a positive integer")
	}
	return n, nil
}

// viewer names who is asking: the owner of the API token in the
// Authorization header (seeing only what the token's scopes allow), else
// the signed-in account of the session cookie, else anonymous. A token
// that is sent but not valid is refused (401) rather than downgraded to
// anonymous, so a client with a revoked token learns it instead of
// silently seeing less; the refusal does not depend on the repository,
// so it reveals nothing about it.
func (h *handler) viewer(c *gin.Context) (lease.Viewer, error) {
	if auth := c.GetHeader("Authorization"); auth != "" {
		token, ok := apiToken(auth)
		if !ok {
			return lease.Viewer{}, fmt.Errorf("authorization header: %w", errUnauthorized)
		}
		v, err := h.leases.ByToken(c.Request.Context(), token)
		if errors.Is(err, forge.ErrNotFound) {
			return lease.Viewer{}, fmt.Errorf("%w: %w", errUnauthorized, err)
		}
		return v, err
	}
	u, ok, err := h.signedIn(c)
	if err != nil || !ok {
		return lease.Viewer{}, err
	}
	return lease.Viewer{User: u}, nil
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
