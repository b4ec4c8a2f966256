package routes

import (
	"strings"
	"testing"
)

func TestCORSOnlyForGiteaOrigin(t *testing.T) {
	f := newFixture(t)
	varyOrigin := func(r reply) bool {
		return strings.Contains(strings.Join(r.Header.Values("Vary"), ","), "Origin")
	}
	for _, path := range []string{"/api/v1/repos/acme/widgets/leases", "/api/v1/session", "/api/v1/repos/acme/secret/leases"} {
		r := f.do("GET", path, "Origin: http://gitea.example:3000")
		if r.Header.Get("Access-Control-Allow-Origin") != "http://gitea.example:3000" ||
			r.Header.Get("Access-Control-Allow-Credentials") != "true" || !varyOrigin(r) {
			t.Errorf("%s from Gitea: %v", path, r.Header)
		}
		for _, other := range []string{"http://evil.example", "http://gitea.example:8787", "https://gitea.example:3000", "null", "http://gitea.example:3000.evil.example"} {
			r := f.do("GET", path, "Origin: "+other)
			if r.Header.Get("Access-Control-Allow-Origin") != "" || r.Header.Get("Access-Control-Allow-Credentials") != "" || !varyOrigin(r) {
				t.Errorf("%s from %s: %v", path, other, r.Header)
			}
		}
	}

	// Preflight.
	calls := f.forge.Calls("")
	r := f.do("OPTIONS", "/api/v1/repos/acme/widgets/leases", "Origin: http://gitea.example:3000",
		"Access-Control-Request-Method: GET", "Access-Control-Request-Headers: authorization")
	if r.Code != 204 || r.Header.Get("Access-Control-Allow-Origin") != "http://gitea.example:3000" ||
		!strings.Contains(r.Header.Get("Access-Control-Allow-Methods"), "GET") ||
		!strings.Contains(strings.ToLower(r.Header.Get("Access-Control-Allow-Headers")), "authorization") ||
		r.Header.Get("Access-Control-Allow-Credentials") != "true" {
		t.Errorf("preflight from Gitea: %d %v", r.Code, r.Header)
	}
	r = f.do("OPTIONS", "/api/v1/repos/acme/widgets/leases", "Origin: http://evil.example", "Access-Control-Request-Method: GET")
	if r.Header.Get("Access-Control-Allow-Origin") != "" || r.Header.Get("Access-Control-Allow-Methods") != "" {
		t.Errorf("preflight from elsewhere: %d %v", r.Code, r.Header)
	}
	if f.forge.Calls("") != calls {
		t.Errorf("a preflight asked the forge")
	}
}

// Browsers leave default ports out of Origin.
func TestCORSOriginWithDefaultPort(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.GiteaURL = "HTTPS://Git.Example:443/gitea/" })
	r := f.do("GET", "/api/v1/session", "Origin: https://git.example")
	if r.Header.Get("Access-Control-Allow-Origin") != "https://git.example" {
		t.Fatalf("default port: %v", r.Header)
	}
}
