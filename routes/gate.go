package routes

import (
	"context"
	"crypto/subtle"
	"encoding/json"
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
	if err != nil {
		// Classified as every error of the transports is; whatever the
		// class, the hook does what --gate-unreachable says.
		info := lease.Classify(err)
		status, line := http.StatusServiceUnavailable, "the ledger did not answer"
		if info.Class == lease.Invalid || info.Class == lease.Usage {
			status, line = http.StatusBadRequest, err.Error()
		}
		c.AbortWithStatusJSON(status, gin.H{"error": line})
		return
	}
	if a.Lines == nil {
		a.Lines = []string{}
	}
	c.JSON(http.StatusOK, a)
}
