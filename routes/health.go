package routes

import (
	"context"
	"net/http"
	"sync"

	"github.com/gin-gonic/gin"

	"github.com/collab-lease/collab-lease/plugin/lease"
)

// healthz says the process is up: it touches nothing.
func (h *handler) healthz(c *gin.Context) {
	c.Header("Cache-Control", "no-store")
	c.String(http.StatusOK, "ok\n")
}

// readyView is the reply of /readyz: each check's outcome ("ok" or what
// went wrong), and on failure the error field of the one error shape.
type readyView struct {
	Error  string            `json:"error,omitempty"`
	Status string            `json:"status,omitempty"`
	Checks map[string]string `json:"checks"`
}

// readyz says whether requests can be served: the ledger answers and
// Gitea answers. Both checks run at once, within the request's deadline.
func (h *handler) readyz(c *gin.Context) {
	ctx := c.Request.Context()
	checks := map[string]func(context.Context) error{"database": h.database}
	if h.ready != nil {
		checks["gitea"] = h.ready
	}
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		out = readyView{Checks: map[string]string{}}
	)
	for name, check := range checks {
		wg.Go(func() {
			res := "ok"
			if err := check(ctx); err != nil {
				h.log.Warn("not ready", "check", name, "err", err)
				res = problem(err)
			}
			mu.Lock()
			out.Checks[name] = res
			mu.Unlock()
		})
	}
	wg.Wait()
	c.Header("Cache-Control", "no-store")
	for _, res := range out.Checks {
		if res != "ok" {
			out.Error = "not ready"
			c.JSON(http.StatusServiceUnavailable, out)
			return
		}
	}
	out.Status = "ready"
	c.JSON(http.StatusOK, out)
}

// problem names what is wrong in a few public words, as lease.Classify
// classifies err (its Health); the detail (host names, paths) goes to the
// log only.
func problem(err error) string {
	if health := lease.Classify(err).Health; health != "" {
		return health
	}
	return "failing (see the sidecar's log)"
}
