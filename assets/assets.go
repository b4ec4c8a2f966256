package assets

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"crypto/sha512"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io/fs"
	"mime"
	"path"
	"strings"
)

//go:embed static
var static embed.FS

// Asset is one embedded file, ready to serve: its bytes, a gzip copy, a
// strong ETag of the content and its content type.
type Asset struct {
	Name        string
	Body        []byte
	Gzip        []byte
	ETag        string // quoted, e.g. "\"3f2a…\""
	Hash        string // first 12 hex digits of SHA-256, for cache-busting URLs
	ContentType string
	// Integrity is the Subresource Integrity of Body ("sha384-" and the
	// base64 digest): a page that names it runs or applies the file only
	// if the bytes it gets are these.
	Integrity string
}

// New prepares one file: its gzip copy, hashes and content type.
func New(name string, body []byte) Asset {
	var gz bytes.Buffer
	w, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	_, _ = w.Write(body)
	_ = w.Close()
	sum := sha256.Sum256(body)
	h := hex.EncodeToString(sum[:])
	sri := sha512.Sum384(body)
	ct := mime.TypeByExtension(path.Ext(name))
	if ct == "" {
		ct = "application/octet-stream"
	}
	return Asset{Name: name, Body: body, Gzip: gz.Bytes(), ETag: `"` + h[:32] + `"`, Hash: h[:12], ContentType: ct,
		Integrity: "sha384-" + base64.StdEncoding.EncodeToString(sri[:])}
}

// HashedName is the content-addressed name the asset is also served
// under: "collab-lease.js" becomes "collab-lease.<Hash>.js".
func (a Asset) HashedName() string {
	ext := path.Ext(a.Name)
	return strings.TrimSuffix(a.Name, ext) + "." + a.Hash + ext
}

// Bundle is every embedded asset, by file name ("collab-lease.js").
type Bundle map[string]Asset

// Load reads and prepares the embedded files, the scripts without their
// whole-line comments (stripComments). The badge script names the claim
// buttons' script by its content-addressed name and its integrity
// (linkClaim), so that the footer's pin on the badge script covers both.
// It cannot fail at run time unless the binary was built without them,
// which the tests catch.
func Load() (Bundle, error) {
	b := Bundle{}
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		if path.Ext(p) == ".js" {
			body = stripComments(body)
		}
		b[path.Base(p)] = New(path.Base(p), body)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return b, b.linkClaim()
}

// The badge script loads the claim buttons' script, for a viewer who may
// claim on an issue's page only, from the names in claimRef.
const (
	badgeScript = "collab-lease.js"
	claimScript = "collab-lease-claim.js"
	claimRef    = "['" + claimScript + "', '']"
)

// linkClaim puts the claim script's hashed name and integrity in place
// of claimRef, which the badge script holds once, and prepares the badge
// script anew.
func (b Bundle) linkClaim() error {
	badge, okBadge := b[badgeScript]
	claim, okClaim := b[claimScript]
	if !okBadge || !okClaim || bytes.Count(badge.Body, []byte(claimRef)) != 1 {
		return fmt.Errorf("assets: %s must name %s once, as %s", badgeScript, claimScript, claimRef)
	}
	ref := "['" + claim.HashedName() + "', '" + claim.Integrity + "']"
	b[badgeScript] = New(badgeScript, bytes.Replace(badge.Body, []byte(claimRef), []byte(ref), 1))
	return nil
}

// stripComments drops the lines of a script that hold only a "//"
// comment: they are for the script's readers, and every Gitea page would
// load them. Such a line is never code (the script has no template
// literal a line of which could start so), so the script runs the same.
func stripComments(js []byte) []byte {
	var out []byte
	for line := range bytes.Lines(js) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("//")) {
			out = append(out, line...)
		}
	}
	return out
}
