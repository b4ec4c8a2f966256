package routes

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"net/http"

	"github.com/gin-gonic/gin"
)

// OpenAPIPath serves the OpenAPI 3 document of the HTTP API, openapi.json,
// built into the binary: the description integrators generate clients
// from. openapi_test.go holds it to the handlers: every route is in it,
// and every request and answer of the tests validates against it.
const OpenAPIPath = "/api/v1/openapi.json"

//go:embed openapi.json
var openAPIDoc []byte

// serveOpenAPI answers GET OpenAPIPath: the same bytes for everyone, so
// any cache may keep them a few minutes (an upgraded sidecar is seen soon
// after), then revalidate them by ETag.
func serveOpenAPI() gin.HandlerFunc {
	sum := sha256.Sum256(openAPIDoc)
	etag := `"` + hex.EncodeToString(sum[:16]) + `"`
	return func(c *gin.Context) {
		hd := c.Writer.Header()
		hd.Set("ETag", etag)
		hd.Set("Cache-Control", plainCache)
		hd.Set("X-Content-Type-Options", "nosniff")
		if etagMatch(c.GetHeader("If-None-Match"), etag) {
			c.AbortWithStatus(http.StatusNotModified)
			return
		}
		c.Data(http.StatusOK, "application/json; charset=utf-8", openAPIDoc)
	}
}
