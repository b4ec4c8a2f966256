package routes

import "github.com/gin-gonic/gin"

// unquarantine answers POST …/issues/{n}/unquarantine, the HTTP twin of
// `collab-lease unquarantine`: a repository admin lifts the issue's
// quarantine (200 with the unquarantined reply, also when it was not
// quarantined). A token write, as every other: a cookie never
// authorizes it.
func (h *handler) unquarantine(c *gin.Context) {
	w, err := h.writeRequest(c, 0)
	if err != nil {
		h.fail(c, err)
		return
	}
	out, err := h.leases.Unquarantine(c.Request.Context(), w.viewer, c.Param("owner"), c.Param("repo"), w.issue)
	if err != nil {
		h.fail(c, err)
		return
	}
	h.reply(c, out)
}
