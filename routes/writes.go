package routes

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/lease"
)

// Writes for token holders: POST (acquire), PATCH (renew) and DELETE
// (release) of …/issues/{n}/lease, the HTTP twins of the SSH verbs, with
// the same service calls and the same JSON. They are authorized only by
// "Authorization: token …": a browser sends the session cookie with any
// cross-site request, so a cookie never authorizes a write (CSRF); a
// request without a token is 401 before anything is looked up. What the
// token may write is the service's question (the token's scopes, through
// the forge's TokenRepo): without write:issue it is 403.

// maxWriteBody bounds the JSON body of a write; {"ttl":"…"} is tiny.
const maxWriteBody = 4 << 10

// writeBody is the optional JSON body of a write: the ttl (POST, PATCH)
// and which of the token's account's agents writes (--agent over SSH).
type writeBody struct {
	TTL   *string `json:"ttl"`
	Agent *string `json:"agent"`
	To    *string `json:"to"` // handoff: "login" or "login/agent"
}

// acquireLease answers POST …/issues/{n}/lease: 201 with the acquired
// tenure (a re-acquire by the holder too: the reply is the same
// "acquired" tenure as over SSH).
func (h *handler) acquireLease(c *gin.Context) {
	w, err := h.writeRequest(c, fieldTTL)
	if err != nil {
		h.fail(c, err)
		return
	}
	out, err := h.leases.Acquire(c.Request.Context(), w.viewer, c.Param("owner"), c.Param("repo"), w.issue, w.ttl)
	if err != nil {
		h.fail(c, err)
		return
	}
	c.Header("Location", c.Request.URL.Path)
	h.replyStatus(c, http.StatusCreated, out)
}

// renewLease answers PATCH …/issues/{n}/lease; the body's ttl is required.
func (h *handler) renewLease(c *gin.Context) {
	w, err := h.writeRequest(c, fieldTTL|fieldTTLRequired)
	if err != nil {
		h.fail(c, err)
		return
	}
	out, err := h.leases.Renew(c.Request.Context(), w.viewer, c.Param("owner"), c.Param("repo"), w.issue, w.ttl)
	if err != nil {
		h.fail(c, err)
		return
	}
	h.reply(c, out)
}

// handoffLease answers POST …/issues/{n}/lease/handoff, body
// {"to":"login[/agent]"}: 200 with the handed_off reply.
func (h *handler) handoffLease(c *gin.Context) {
	w, err := h.writeRequest(c, fieldTo)
	if err != nil {
		h.fail(c, err)
		return
	}
	if w.body.To == nil {
		h.fail(c, unprocessable(`to is required, e.g. {"to":"bob/agent-8"}`))
		return
	}
	login, agent, err := contract.ParseTo(*w.body.To)
	if err != nil {
		h.fail(c, bodyError(err, "--to", "to"))
		return
	}
	out, err := h.leases.Handoff(c.Request.Context(), w.viewer, c.Param("owner"), c.Param("repo"), w.issue, login, agent)
	if err != nil {
		h.fail(c, err)
		return
	}
	h.reply(c, out)
}

// releaseLease answers DELETE …/issues/{n}/lease; releasing nothing
// succeeds, as over SSH.
func (h *handler) releaseLease(c *gin.Context) {
	w, err := h.writeRequest(c, 0)
	if err != nil {
		h.fail(c, err)
		return
	}
	out, err := h.leases.Release(c.Request.Context(), w.viewer, c.Param("owner"), c.Param("repo"), w.issue)
	if err != nil {
		h.fail(c, err)
		return
	}
	h.reply(c, out)
}

// fields are the body fields a write takes besides agent, which all do.
type fields uint8

const (
	fieldTTL         fields = 1 << iota // ttl, optional
	fieldTTLRequired                    // ttl, required
	fieldTo                             // to (handoff)
)

// write is a bound write request.
type write struct {
	viewer lease.Viewer
	issue  int64
	ttl    time.Duration // 0: none given (acquire: open-ended)
	body   writeBody
}

// writeRequest binds a write: the issue number (400), a token (401: never
// a cookie alone), and the body (422), in that order, so that nothing
// about the repository is looked up for a request that cannot succeed.
func (h *handler) writeRequest(c *gin.Context, f fields) (write, error) {
	n, err := issueNumber(c.Param("n"))
	if err != nil {
		return write{}, err
	}
	if c.GetHeader("Authorization") == "" {
		return write{}, errTokenRequired
	}
	v, err := h.viewer(c)
	if err != nil {
		return write{}, err
	}
	b, err := readWriteBody(c)
	if err != nil {
		return write{}, err
	}
	switch {
	case b.TTL != nil && f&fieldTTL == 0:
		return write{}, unprocessable("this write takes no ttl")
	case b.To != nil && f&fieldTo == 0:
		return write{}, unprocessable("only a handoff takes to")
	}
	ttl, err := h.writeTTL(b, f&fieldTTLRequired != 0)
	if err != nil {
		return write{}, err
	}
	if b.Agent != nil {
		agent, err := contract.ParseAgent(*b.Agent)
		if err != nil {
			return write{}, bodyError(err, "--agent", "agent")
		}
		v.Agent = agent
	}
	return write{viewer: v, issue: n, ttl: ttl, body: b}, nil
}

// readWriteBody reads the optional JSON body of a write.
func readWriteBody(c *gin.Context) (writeBody, error) {
	var b writeBody
	raw, err := io.ReadAll(io.LimitReader(c.Request.Body, maxWriteBody+1))
	if err != nil {
		return b, fmt.Errorf("read the body: %w", err)
	}
	if len(raw) > maxWriteBody {
		return b, unprocessable(fmt.Sprintf("the body is larger than %d bytes", maxWriteBody))
	}
	if len(bytes.TrimSpace(raw)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&b); err != nil || dec.More() {
			return b, unprocessable(`the body must be a JSON object like {"ttl":"30m"}`)
		}
	}
	return b, nil
}

// writeTTL parses the body's ttl with the grammar of --ttl
// (contract.ParseTTL) and the sidecar's maximum.
func (h *handler) writeTTL(b writeBody, required bool) (time.Duration, error) {
	if b.TTL == nil {
		if required {
			return 0, unprocessable(`ttl is required, e.g. {"ttl":"30m"}`)
		}
		return 0, nil
	}
	ttl, err := contract.ParseTTL(*b.TTL, h.maxTTL)
	return ttl, bodyError(err, "--ttl", "ttl")
}

// bodyError says a usage error of the grammar's flag in the body's words
// (the field for the flag); other errors pass unchanged.
func bodyError(err error, flag, field string) error {
	var usage *contract.UsageError
	if errors.As(err, &usage) {
		return unprocessable(strings.Replace(usage.Detail, flag, field, 1))
	}
	return err
}
