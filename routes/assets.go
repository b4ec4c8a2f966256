package routes

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/collab-lease/collab-lease/assets"
)

// Badge assets: GET /assets/collab-lease.<hash>.js (content-addressed, the
// name Gitea's footer links with its integrity: cached for a year, readable
// by any origin; an outdated hash is a 404) and GET /assets/collab-lease.js
// (the plain name, which footers written before the integrity linked:
// short cache, then revalidation by ETag).
const (
	plainCache  = "public, max-age=300, must-revalidate"
	hashedCache = "public, max-age=31536000, immutable"
)

var hashedName = regexp.MustCompile(`^(.+)\.([0-9a-f]{12})(\.[a-z0-9]+)$`)

// lookupAsset finds the asset of a plain or hashed name.
func (h *handler) lookupAsset(name string) (a assets.Asset, hashed, ok bool) {
	if a, ok := h.assets[name]; ok {
		return a, false, true
	}
	m := hashedName.FindStringSubmatch(name)
	if m == nil {
		return assets.Asset{}, false, false
	}
	a, ok = h.assets[m[1]+m[3]]
	if !ok || a.Hash != m[2] {
		return assets.Asset{}, false, false
	}
	return a, true, true
}

func (h *handler) asset(c *gin.Context) {
	a, hashed, ok := h.lookupAsset(c.Param("name"))
	if !ok {
		notFound(c)
		return
	}
	hd := c.Writer.Header()
	hd.Add("Vary", "Accept-Encoding")
	if hashed {
		hd.Set("Cache-Control", hashedCache)
		// Gitea's footer loads the hashed URLs with an integrity and
		// crossorigin="anonymous", so the browser must be let read the
		// bytes to check them. They are public and static: any origin,
		// and no credentials (which "*" rules out anyway).
		hd.Set("Access-Control-Allow-Origin", "*")
		hd.Del("Access-Control-Allow-Credentials")
		hd.Del("Access-Control-Expose-Headers")
	} else {
		hd.Set("Cache-Control", plainCache)
	}
	hd.Set("X-Content-Type-Options", "nosniff")
	// The gzip copy is another representation, so it has its own ETag;
	// either one validates a cached copy of the same content.
	gzTag := gzipETag(a.ETag)
	if tag, ok := noneMatch(c.GetHeader("If-None-Match"), a.ETag, gzTag); ok {
		hd.Set("ETag", tag)
		c.AbortWithStatus(http.StatusNotModified)
		return
	}
	body, tag := a.Body, a.ETag
	if len(a.Gzip) > 0 && len(a.Gzip) < len(a.Body) && acceptsGzip(c.GetHeader("Accept-Encoding")) {
		body, tag = a.Gzip, gzTag
		hd.Set("Content-Encoding", "gzip")
	}
	hd.Set("ETag", tag)
	hd.Set("Content-Type", a.ContentType)
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	c.Status(http.StatusOK)
	if c.Request.Method != http.MethodHead {
		_, _ = c.Writer.Write(body)
	}
}

// gzipETag turns "\"abc\"" into "\"abc-gz\"".
func gzipETag(tag string) string {
	return strings.TrimSuffix(tag, `"`) + `-gz"`
}

// noneMatch reports which of tags an If-None-Match header names (weak
// comparison: a proxy may have weakened our tag to W/"…").
func noneMatch(header string, tags ...string) (string, bool) {
	if header == "" {
		return "", false
	}
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == "*" {
			return tags[0], true
		}
		for _, want := range tags {
			if t == want {
				return want, true
			}
		}
	}
	return "", false
}

// acceptsGzip reports whether an Accept-Encoding header allows gzip: named
// (or covered by "*") with a non-zero quality.
func acceptsGzip(header string) bool {
	star, gzip := false, false
	for _, part := range strings.Split(header, ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		ok := true
		if q, found := strings.CutPrefix(strings.TrimSpace(params), "q="); found {
			v, err := strconv.ParseFloat(q, 64)
			ok = err == nil && v > 0
		}
		switch strings.ToLower(strings.TrimSpace(coding)) {
		case "gzip", "x-gzip":
			if !ok {
				return false
			}
			gzip = true
		case "*":
			star = ok
		}
	}
	return gzip || star
}
