package routes

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/lease"
)

// The gate's endpoint, on the admin listener only (cmd/collab-gate-hook
// asks it about every push Gitea receives; docs/operating.md, The gate).
// Only a caller with the gate's secret learns anything: every other
// request gets the same 401, before its body is read. The question's
// account and repository are taken as Gitea gave them to the hook, which
// is what the secret vouches for.

// gateAnswerer answers a question (lease.Service.Gate, with the metrics
// around it).
type gateAnswerer func(ctx context.Context, q contract.GateQuestion) (contract.GateAnswer, error)

type gate struct {
	answer gateAnswerer
	secret []byte
}

// authorized reports whether the request carries the gate's secret.
func (g *gate) authorized(c *gin.Context) bool {
	got := c.GetHeader(contract.GateSecretHeader)
	if got == "" || len(g.secret) == 0 || subtle.ConstantTimeCompare([]byte(got), g.secret) != 1 {
		c.Header("Cache-Control", "no-store")
		c.AbortWithStatusJSON(http.StatusUnauthorized, gin.H{"error": "unauthorized"})
		return false
	}
	return true
}

func (g *gate) ping(c *gin.Context) {
	if g.authorized(c) {
		c.Status(http.StatusNoContent)
	}
}

func (g *gate) push(c *gin.Context) {
	if !g.authorized(c) {
		return
	}
	c.Header("Cache-Control", "no-store")
	var q contract.GateQuestion
	// Fields this sidecar does not know are skipped: a newer hook (one a
	// newer replica installed) still gets its answer during an upgrade.
	dec := json.NewDecoder(http.MaxBytesReader(c.Writer, c.Request.Body, contract.MaxGateQuestion))
	if err := dec.Decode(&q); err != nil {
		c.AbortWithStatusJSON(http.StatusBadRequest, gin.H{"error": "the gate's question is not one: " + err.Error()})
		return
	}
	a, err := g.answer(c.Request.Context(), q)
	switch {
	case errors.Is(err, lease.ErrInvalid):
		c.AbortWithStatusJSON(http.StatusBadRequest, gin.H{"error": err.Error()})
	case err != nil:
		// The hook does what --gate-unreachable says.
		c.AbortWithStatusJSON(http.StatusServiceUnavailable, gin.H{"error": "the ledger did not answer"})
	default:
		if a.Lines == nil {
			a.Lines = []string{}
		}
		c.JSON(http.StatusOK, a)
	}
}
