package routes

import (
	"bytes"
	"compress/gzip"
	"crypto/sha512"
	"encoding/base64"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/collab-lease/collab-lease/assets"
	"github.com/collab-lease/collab-lease/plugin/footer"
)

func testAsset(name string, body []byte, ct string) assets.Asset {
	a := assets.New(name, body)
	a.ContentType = ct
	return a
}

func TestAssetsPlainName(t *testing.T) {
	f := newFixture(t)
	js := f.opts.Assets["collab-lease.js"]
	r := f.do("GET", "/assets/collab-lease.js")
	if r.Code != 200 || r.Body != string(js.Body) {
		t.Fatalf("plain: %d %q", r.Code, r.Body)
	}
	want := map[string]string{
		"Content-Type":           "text/javascript; charset=utf-8",
		"Cache-Control":          plainCache,
		"ETag":                   js.ETag,
		"Content-Length":         strconv.Itoa(len(js.Body)),
		"X-Content-Type-Options": "nosniff",
		"Content-Encoding":       "",
	}
	for k, v := range want {
		if got := r.Header.Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	if !strings.Contains(strings.Join(r.Header.Values("Vary"), ","), "Accept-Encoding") {
		t.Errorf("Vary: %q", r.Header.Values("Vary"))
	}
	css := f.do("GET", "/assets/collab-lease.css")
	if css.Code != 200 || css.Header.Get("Content-Type") != "text/css; charset=utf-8" {
		t.Fatalf("css: %d %q", css.Code, css.Header.Get("Content-Type"))
	}

	// Revalidation: the ETag (or a proxy's weakened copy) gives a 304
	// without a body.
	for _, inm := range []string{js.ETag, "W/" + js.ETag, `"other", ` + js.ETag, "*"} {
		r := f.do("GET", "/assets/collab-lease.js", "If-None-Match: "+inm)
		if r.Code != 304 || r.Body != "" || r.Header.Get("ETag") == "" || r.Header.Get("Cache-Control") != plainCache {
			t.Errorf("If-None-Match %s: %d %q %v", inm, r.Code, r.Body, r.Header)
		}
	}
	if r := f.do("GET", "/assets/collab-lease.js", `If-None-Match: "stale"`); r.Code != 200 {
		t.Errorf("stale ETag: %d", r.Code)
	}
	if r := f.do("HEAD", "/assets/collab-lease.js"); r.Code != 200 || r.Body != "" || r.Header.Get("Content-Length") != strconv.Itoa(len(js.Body)) {
		t.Errorf("HEAD: %d %q %v", r.Code, r.Body, r.Header)
	}
}

func TestAssetsGzip(t *testing.T) {
	f := newFixture(t)
	js := f.opts.Assets["collab-lease.js"]
	for _, ae := range []string{"gzip", "gzip, deflate, br", "br;q=1.0, gzip;q=0.8", "*"} {
		r := f.do("GET", "/assets/collab-lease.js", "Accept-Encoding: "+ae)
		if r.Code != 200 || r.Header.Get("Content-Encoding") != "gzip" || r.Header.Get("Content-Length") != strconv.Itoa(len(js.Gzip)) {
			t.Fatalf("Accept-Encoding %q: %d %v", ae, r.Code, r.Header)
		}
		zr, err := gzip.NewReader(strings.NewReader(r.Body))
		if err != nil {
			t.Fatal(err)
		}
		plain, _ := io.ReadAll(zr)
		if !bytes.Equal(plain, js.Body) {
			t.Fatalf("gzip body does not decompress to the script")
		}
		gzTag := r.Header.Get("ETag")
		if gzTag == js.ETag || gzTag == "" {
			t.Fatalf("gzip ETag %q must differ from the identity one %q", gzTag, js.ETag)
		}
		if r := f.do("GET", "/assets/collab-lease.js", "Accept-Encoding: "+ae, "If-None-Match: "+gzTag); r.Code != 304 {
			t.Fatalf("gzip revalidation: %d", r.Code)
		}
	}
	for _, ae := range []string{"", "identity", "gzip;q=0", "br", "*;q=0", "gzip;q=0, *"} {
		r := f.do("GET", "/assets/collab-lease.js", "Accept-Encoding: "+ae)
		if r.Code != 200 || r.Header.Get("Content-Encoding") != "" || r.Body != string(js.Body) {
			t.Fatalf("Accept-Encoding %q: %d %v", ae, r.Code, r.Header)
		}
	}
}

func TestAssetsHashedNames(t *testing.T) {
	f := newFixture(t)
	js := f.opts.Assets["collab-lease.js"]
	r := f.do("GET", "/assets/collab-lease."+js.Hash+".js")
	if r.Code != 200 || r.Body != string(js.Body) || r.Header.Get("Cache-Control") != hashedCache {
		t.Fatalf("hashed: %d %v", r.Code, r.Header)
	}
	for _, name := range []string{"collab-lease.000000000000.js", "collab-lease." + js.Hash + ".css", "other.js", "collab-lease.js.map", "..%2fassets.go"} {
		expectReply(t, name, f.do("GET", "/assets/"+name), 404, notFoundBody)
	}
}

// The real embedded bundle is served with the right types.
func TestAssetsOfTheEmbeddedBundle(t *testing.T) {
	b, err := assets.Load()
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(o *Options) { o.Assets = b })
	for name, ct := range map[string]string{"collab-lease.js": "text/javascript", "collab-lease.css": "text/css"} {
		r := f.do("GET", "/assets/"+name)
		if r.Code != 200 || !strings.HasPrefix(r.Header.Get("Content-Type"), ct) || r.Body != string(b[name].Body) {
			t.Errorf("%s: %d %q", name, r.Code, r.Header.Get("Content-Type"))
		}
	}
}

// footerTags are the src/href and integrity of the footer's script and
// stylesheet tags.
var footerTags = regexp.MustCompile(`<(?:script src|link rel="stylesheet" href)="([^"]+)"([^>]*)>`)

// The integrity the footer gives each tag is the SHA-384 of the bytes the
// sidecar serves at the tag's URL, gzip or not, and those answers let any
// origin read them without credentials (crossorigin="anonymous").
func TestFooterIntegrityMatchesTheServedBytes(t *testing.T) {
	bundle, err := assets.Load()
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(o *Options) { o.Assets = bundle })
	block, err := footer.Footer{PublicURL: publicURL, Assets: bundle}.Block()
	if err != nil {
		t.Fatal(err)
	}
	tags := footerTags.FindAllStringSubmatch(block, -1)
	if len(tags) != 2 {
		t.Fatalf("tags in the block: %q", tags)
	}
	for _, tag := range tags {
		src, attrs := tag[1], tag[2]
		m := regexp.MustCompile(` integrity="sha384-([^"]+)"`).FindStringSubmatch(attrs)
		if m == nil || !strings.Contains(attrs, ` crossorigin="anonymous"`) {
			t.Fatalf("%s: no integrity or crossorigin in %q", src, attrs)
		}
		path, ok := strings.CutPrefix(src, publicURL)
		if !ok {
			t.Fatalf("%s is not on the sidecar", src)
		}
		for i, enc := range []string{"", "gzip"} {
			origin := []string{giteaURL, "https://elsewhere.example"}[i]
			r := f.do("GET", path, "Accept-Encoding: "+enc, "Origin: "+origin)
			body := []byte(r.Body)
			if r.Header.Get("Content-Encoding") == "gzip" {
				zr, err := gzip.NewReader(bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				if body, err = io.ReadAll(zr); err != nil {
					t.Fatal(err)
				}
			}
			sum := sha512.Sum384(body)
			if r.Code != 200 || base64.StdEncoding.EncodeToString(sum[:]) != m[1] {
				t.Errorf("%s (%q): %d, sha384 %s, footer says %s", path, enc, r.Code, base64.StdEncoding.EncodeToString(sum[:]), m[1])
			}
			if r.Header.Get("Access-Control-Allow-Origin") != "*" || r.Header.Get("Access-Control-Allow-Credentials") != "" {
				t.Errorf("%s: CORS %v", path, r.Header)
			}
		}
	}
}
