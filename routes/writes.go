package routes

import (
	"bytes"
	"context"
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
// (release) of …/issues/{n}/lease, POST of …/lease/handoff, POST of
// …/pulls/{n}/merge, and POST and DELETE of …/reservations
// (reservations.go), the HTTP twins of the SSH verbs, with the same
// service calls and the same JSON. They are authorized only by
// "Authorization: token …": a browser sends the session cookie with any
// cross-site request, so a cookie never authorizes one of them (CSRF); a
// request without a token is 401 before anything is looked up. The
// cookie's only writes are the issue page's buttons (leases.go), which
// check the request's Origin. What the
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
	// A merge's: --token, --style, --delete-branch and --wait over SSH.
	Token        *int64  `json:"token"`
	Style        *string `json:"style"`
	DeleteBranch *bool   `json:"delete_branch"`
	Wait         *string `json:"wait"`
	// A reserve's: the globs, --shared and --issue over SSH.
	Globs  []string `json:"globs"`
	Shared *bool    `json:"shared"`
	Issue  *int64   `json:"issue"`
}

// merges reports whether b carries any of a merge's own fields.
func (b writeBody) merges() bool {
	return b.Token != nil || b.Style != nil || b.DeleteBranch != nil || b.Wait != nil
}

// reserves reports whether b carries any of a reserve's own fields.
func (b writeBody) reserves() bool { return b.Globs != nil || b.Shared != nil || b.Issue != nil }

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

// mergeWriteSlack is the time a merge's answer has to be written once
// the merge is done, as the server's write timeout gives any other.
const mergeWriteSlack = 10 * time.Second

// mergePull answers POST …/pulls/{n}/merge, body
// {"token":3,"style":"squash","delete_branch":true,"wait":"2m","agent":"agent-7"},
// every field optional: 200 with the merged reply. Binding the request is
// bounded as any request's work is; the merge then runs for as long as
// its turn may take (wait) and the merge itself (contract.MergeTicketMax)
// on top of that, a bound the deadline middleware leaves to it.
func (h *handler) mergePull(c *gin.Context) {
	client := c.Request.Context()
	bind, cancel := context.WithTimeout(client, h.timeout)
	c.Request = c.Request.WithContext(bind)
	w, err := h.writeRequest(c, fieldMerge)
	var m lease.MergeRequest
	if err == nil {
		m, err = h.mergeRequest(w)
	}
	cancel()
	if err != nil {
		h.fail(c, err)
		return
	}
	bound := h.timeout + m.Wait + contract.MergeTicketMax
	ctx, cancel := context.WithTimeout(client, bound)
	defer cancel()
	c.Request = c.Request.WithContext(ctx)
	// The server's write timeout, meant for requests bounded by h.timeout,
	// would cut the answer to a merge that waited its turn.
	_ = http.NewResponseController(c.Writer).SetWriteDeadline(time.Now().Add(bound + mergeWriteSlack))
	out, err := h.leases.Merge(ctx, w.viewer, c.Param("owner"), c.Param("repo"), m, nil)
	if err != nil {
		h.fail(c, err)
		return
	}
	h.reply(c, out)
}

// mergeRequest is the merge a bound merge request asks for, its fields
// held to the grammar of the SSH verb's flags: a positive token, one of
// contract.MergeStyles, and a wait as --wait takes it (default
// contract.DefaultMergeWait).
func (h *handler) mergeRequest(w write) (lease.MergeRequest, error) {
	b := w.body
	m := lease.MergeRequest{Pull: w.issue, Wait: contract.DefaultMergeWait}
	if b.Token != nil {
		if *b.Token < 1 {
			return m, unprocessable(fmt.Sprintf("token must be a positive number, got %d", *b.Token))
		}
		m.Token = *b.Token
	}
	if b.Style != nil {
		if !contract.ValidMergeStyle(*b.Style) {
			return m, unprocessable(fmt.Sprintf("style must be one of %s, got %q", strings.Join(contract.MergeStyles(), ", "), *b.Style))
		}
		m.Style = *b.Style
	}
	if b.DeleteBranch != nil {
		m.DeleteBranch = *b.DeleteBranch
	}
	if b.Wait != nil {
		d, err := contract.ParseDuration(*b.Wait, h.maxTTL)
		if err != nil {
			return m, bodyError(err, "duration", "wait")
		}
		m.Wait = d
	}
	return m, nil
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
	fieldMerge                          // token, style, delete_branch, wait (merge); the number is a pull request's
	fieldReserve                        // globs, shared, issue (reserve); no number
)

// write is a bound write request.
type write struct {
	viewer lease.Viewer
	issue  int64
	ttl    time.Duration // 0: none given (acquire: open-ended)
	body   writeBody
}

// writeRequest binds a write of an issue or a pull request: its number
// (400), then as writeOf does, so that nothing about the repository is
// looked up for a request that cannot succeed.
func (h *handler) writeRequest(c *gin.Context, f fields) (write, error) {
	number := issueNumber
	if f&fieldMerge != 0 {
		number = pullNumber
	}
	n, err := number(c.Param("n"))
	if err != nil {
		return write{}, err
	}
	w, err := h.writeOf(c, f)
	w.issue = n
	return w, err
}

// writeOf binds a write: a token (401: never a cookie alone), then the
// body (422), in that order.
func (h *handler) writeOf(c *gin.Context, f fields) (write, error) {
	if c.GetHeader("Authorization") == "" {
		return write{}, errTokenRequired
	}
	v, err := h.viewer(c)
	if err != nil {
		return write{}, err
	}
	example := `{"ttl":"30m"}`
	switch {
	case f&fieldMerge != 0:
		example = `{"style":"squash"}`
	case f&fieldReserve != 0:
		example = reserveExample
	}
	b, err := readWriteBody(c, example)
	if err != nil {
		return write{}, err
	}
	switch {
	case b.TTL != nil && f&fieldTTL == 0:
		return write{}, unprocessable("this write takes no ttl")
	case b.To != nil && f&fieldTo == 0:
		return write{}, unprocessable("only a handoff takes to")
	case b.merges() && f&fieldMerge == 0:
		return write{}, unprocessable("only a merge takes token, style, delete_branch and wait")
	case b.reserves() && f&fieldReserve == 0:
		return write{}, unprocessable("only a reserve takes globs, shared and issue")
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
	return write{viewer: v, ttl: ttl, body: b}, nil
}

// readWriteBody reads the optional JSON body of a write; example is the
// body its error shows.
func readWriteBody(c *gin.Context, example string) (writeBody, error) {
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
			return b, unprocessable("the body must be a JSON object like " + example)
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
// (the field for the flag), as 422; other errors pass unchanged.
func bodyError(err error, flag, field string) error { return inWords(err, flag, field, unprocessable) }

// queryError says a usage error of the grammar's flag in the query's
// words (the parameter for the flag), as a malformed request (400);
// other errors pass unchanged.
func queryError(err error, flag, param string) error { return inWords(err, flag, param, malformed) }

// inWords turns a usage error of the grammar into the refusal as makes
// of its detail, with flag called name in it; other errors pass
// unchanged.
func inWords(err error, flag, name string, as func(msg string) error) error {
	var usage *contract.UsageError
	if errors.As(err, &usage) {
		return as(strings.Replace(usage.Detail, flag, name, 1))
	}
	return err
}
