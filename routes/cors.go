package routes

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
)

// CORS: the badge script runs on Gitea's pages and calls the sidecar with
// credentials (its session cookie). Only Gitea's origin gets the CORS
// headers; to any other origin the replies stay opaque. The answer depends
// on the Origin header, so every reply says Vary: Origin.

func (h *handler) allowedOrigin(o string) bool {
	return o != "" && strings.EqualFold(o, h.giteaOrig)
}

func (h *handler) cors(c *gin.Context) {
	hd := c.Writer.Header()
	hd.Add("Vary", "Origin")
	if o := c.GetHeader("Origin"); h.allowedOrigin(o) {
		hd.Set("Access-Control-Allow-Origin", o)
		hd.Set("Access-Control-Allow-Credentials", "true")
		hd.Set("Access-Control-Expose-Headers", "ETag, Link, X-Total-Count")
	}
	c.Next()
}

// preflight answers OPTIONS on any path; the CORS headers proper come from
// cors, for Gitea's origin only.
func (h *handler) preflight(c *gin.Context) {
	hd := c.Writer.Header()
	hd.Set("Allow", "GET, HEAD, POST, PATCH, DELETE, OPTIONS")
	if h.allowedOrigin(c.GetHeader("Origin")) && c.GetHeader("Access-Control-Request-Method") != "" {
		hd.Set("Access-Control-Allow-Methods", "GET, POST, PATCH, DELETE")
		hd.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, If-None-Match, Last-Event-ID")
		hd.Set("Access-Control-Max-Age", "600")
	}
	c.AbortWithStatus(http.StatusNoContent)
}

// ourOrigin: o is the origin of Gitea's pages or of the sidecar's own, the
// only pages whose POSTs with the sign-in cookie are answered (browsers
// send cookies with a cross-site form's POST too, and say its Origin).
func (h *handler) ourOrigin(o string) bool {
	return h.allowedOrigin(o) || strings.EqualFold(o, h.publicOrig)
}

// refuseCrossOrigin answers 403 to a POST from another site's page.
func (h *handler) refuseCrossOrigin(c *gin.Context) {
	c.AbortWithStatusJSON(http.StatusForbidden, errorBody{Error: "cross-origin request refused"})
}
