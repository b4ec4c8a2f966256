package routes

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"

	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/gin-gonic/gin"
)

// WebhookPath is where Gitea delivers its system webhook (docs/operating.md, When issues close),
// under the sidecar's public URL or the --webhook-url base.
const WebhookPath = "/hooks/gitea"

// maxDeliveryBytes bounds a delivery's body: Gitea's payloads of the events
// the sidecar asks for are a few kilobytes.
const maxDeliveryBytes = 1 << 20

// Webhook configures the receiver of Gitea's deliveries.
type Webhook struct {
	// Secret is what Gitea signs each delivery with (HMAC-SHA256 of the
	// raw body, hex in X-Gitea-Signature).
	Secret []byte
	// Parse reads a delivery (plugin/gitea.ParseDelivery): the event, or
	// false for one that changes no lease.
	Parse func(event, delivery string, body []byte) (forge.Event, bool, error)
	// Observe, if set, is told the outcome of every delivery (for
	// metrics): applied, duplicate, ignored, bad_signature, too_large,
	// malformed, failed.
	Observe func(outcome string)
	// RepoCreated, if set, is told of a repository created (its
	// "owner/name"), at once: serve --gate puts its hook into it.
	RepoCreated func(repo string)
}

// deliveryView is the answer to a delivery, for Gitea's delivery log.
type deliveryView struct {
	Outcome string `json:"outcome"`
	Ended   int    `json:"ended"`
}

// webhook answers POST /hooks/gitea. Only a delivery signed with the
// secret has an effect; it is checked before anything else is read from
// it. The work is one ledger transaction, so Gitea gets its answer fast.
func (h *handler) webhook(c *gin.Context) {
	observe := func(outcome string) {
		if h.hook.Observe != nil {
			h.hook.Observe(outcome)
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, maxDeliveryBytes))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		observe("too_large")
		c.AbortWithStatusJSON(http.StatusRequestEntityTooLarge, errorBody{Error: "delivery too large"})
		return
	case err != nil:
		observe("malformed")
		badRequest(c, "unreadable delivery")
		return
	}
	if !validSignature(h.hook.Secret, body, c.GetHeader("X-Gitea-Signature")) {
		observe("bad_signature")
		h.log.Warn("webhook delivery refused: bad or missing signature", "remote", c.ClientIP(),
			"delivery", c.GetHeader("X-Gitea-Delivery"))
		c.AbortWithStatusJSON(http.StatusForbidden, errorBody{Error: "bad signature"})
		return
	}
	e, relevant, err := h.hook.Parse(c.GetHeader("X-Gitea-Event"), c.GetHeader("X-Gitea-Delivery"), body)
	switch {
	case err != nil:
		observe("malformed")
		h.log.Warn("webhook delivery not understood", "err", err)
		badRequest(c, "delivery not understood")
		return
	case !relevant:
		observe("ignored")
		c.JSON(http.StatusOK, deliveryView{Outcome: "ignored"})
		return
	}
	if e.Kind == forge.EventRepoCreated {
		outcome := "ignored"
		if h.hook.RepoCreated != nil && e.Repo != "" {
			h.hook.RepoCreated(e.Repo)
			outcome = "applied"
		}
		observe(outcome)
		c.JSON(http.StatusOK, deliveryView{Outcome: outcome})
		return
	}
	applied, err := h.leases.Apply(c.Request.Context(), e)
	if err != nil {
		observe("failed")
		h.fail(c, err)
		return
	}
	out := deliveryView{Outcome: "applied", Ended: len(applied.Leases)}
	if applied.Duplicate {
		out.Outcome = "duplicate"
	}
	observe(out.Outcome)
	h.log.Info("webhook delivery", "event", string(e.Kind), "repo_id", e.RepoID, "issue", e.Number,
		"outcome", out.Outcome, "ended", out.Ended, "delivery", e.Delivery)
	c.JSON(http.StatusOK, out)
}

// validSignature checks the hex HMAC-SHA256 of body with secret, in
// constant time. No secret, no valid signature.
func validSignature(secret, body []byte, signature string) bool {
	got, err := hex.DecodeString(signature)
	if len(secret) == 0 || err != nil || len(got) != sha256.Size {
		return false
	}
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return hmac.Equal(got, m.Sum(nil))
}
