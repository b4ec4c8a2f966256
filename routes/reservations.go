package routes

import (
	"fmt"

	"github.com/gin-gonic/gin"

	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/lease"
)

// Path reservations, the HTTP twins of reserve, unreserve and
// reservations over SSH (docs/ssh.md, Reserving paths): GET of
// …/reservations lists them for readers; POST (reserve) and DELETE
// (unreserve) are writes, authorized as the others are (writes.go).
// Over HTTP there is no session: a reserve lives with a claim (issue)
// or for its own ttl.

const reservationsPath = "/api/v1/repos/:owner/:repo/reservations"

// reserveExample is the body a reserve's errors show.
const reserveExample = `{"globs":["src/auth/**"],"ttl":"30m"}`

// listReservations answers GET /api/v1/repos/{owner}/{repo}/reservations
// with the reply of `collab-lease reservations`; ?path= keeps those whose
// glob matches that path.
func (h *handler) listReservations(c *gin.Context) {
	path, ok := c.GetQuery("path")
	if ok {
		if _, err := contract.ParsePath(path); err != nil {
			h.fail(c, queryError(err, "--path", "path"))
			return
		}
	}
	v, err := h.viewer(c)
	if err != nil {
		h.fail(c, err)
		return
	}
	out, err := h.leases.Reservations(c.Request.Context(), v, c.Param("owner"), c.Param("repo"), path)
	if err != nil {
		h.fail(c, err)
		return
	}
	h.reply(c, out)
}

// reserve answers POST …/reservations, body
// {"globs":["src/auth/**"],"shared":false,"issue":42,"ttl":"30m","agent":"agent-7"}:
// 200 with the reserved reply.
func (h *handler) reserve(c *gin.Context) {
	w, err := h.writeOf(c, fieldTTL|fieldReserve)
	var r lease.ReserveRequest
	if err == nil {
		r, err = reserveRequest(w)
	}
	if err != nil {
		h.fail(c, err)
		return
	}
	out, err := h.leases.Reserve(c.Request.Context(), w.viewer, c.Param("owner"), c.Param("repo"), r)
	if err != nil {
		h.fail(c, err)
		return
	}
	h.reply(c, out)
}

// reserveRequest is the reserve a bound request asks for, its fields
// held to the grammar of the SSH verb: 1 to contract.MaxReserveGlobs
// globs (a repeat read once), a positive issue, and exactly one of issue
// and ttl.
func reserveRequest(w write) (lease.ReserveRequest, error) {
	b := w.body
	r := lease.ReserveRequest{TTL: w.ttl}
	if len(b.Globs) == 0 {
		return r, unprocessable("globs is required: 1 to 64 path globs, e.g. " + reserveExample)
	}
	var err error
	if r.Globs, err = readGlobs(b.Globs); err != nil {
		return r, bodyError(err, "glob", "glob")
	}
	if b.Shared != nil {
		r.Shared = *b.Shared
	}
	switch {
	case b.Issue != nil && *b.Issue < 1:
		return r, unprocessable(fmt.Sprintf("issue must be a positive number, got %d", *b.Issue))
	case b.Issue != nil && b.TTL != nil:
		return r, unprocessable("issue and ttl both given: a reservation of a claim lives as long as the claim")
	case b.Issue == nil && b.TTL == nil:
		return r, unprocessable("a reservation needs issue (a claim it lives with) or ttl, e.g. " + reserveExample)
	case b.Issue != nil:
		r.Issue = *b.Issue
	}
	return r, nil
}

// unreserve answers DELETE …/reservations?glob=…&issue=N&force=true,
// every parameter optional (no glob: all of the caller's), body
// {"agent":"agent-7"} optional: 200 with the unreserved reply.
func (h *handler) unreserve(c *gin.Context) {
	globs, err := readGlobs(c.QueryArray("glob"))
	if err != nil {
		h.fail(c, queryError(err, "glob", "glob"))
		return
	}
	var issue int64
	if _, ok := c.GetQuery("issue"); ok {
		if issue, err = queryNumber(c, "issue", 1<<63-1, 0); err != nil {
			h.fail(c, err)
			return
		}
	}
	var force bool
	switch c.Query("force") {
	case "", "false":
	case "true":
		force = true
	default:
		h.fail(c, malformed("force must be true or false"))
		return
	}
	w, err := h.writeOf(c, 0)
	if err != nil {
		h.fail(c, err)
		return
	}
	out, err := h.leases.Unreserve(c.Request.Context(), w.viewer, c.Param("owner"), c.Param("repo"), globs, issue, force)
	if err != nil {
		h.fail(c, err)
		return
	}
	h.reply(c, out)
}

// readGlobs reads globs as the grammar does (contract.AddGlob): the
// usage error of the first that is not one.
func readGlobs(globs []string) (out []string, err error) {
	for _, g := range globs {
		if out, err = contract.AddGlob(out, g); err != nil {
			return nil, err
		}
	}
	return out, nil
}
