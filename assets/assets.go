package assets

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"path"
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
}

// Bundle is every embedded asset, by file name ("collab-lease.js").
type Bundle map[string]Asset

// Load reads and prepares the embedded files. It cannot fail at run time
// unless the binary was built without them, which the tests catch.
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
		var gz bytes.Buffer
		w, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
		_, _ = w.Write(body)
		_ = w.Close()
		sum := sha256.Sum256(body)
		h := hex.EncodeToString(sum[:])
		name := path.Base(p)
		ct := mime.TypeByExtension(path.Ext(name))
		if ct == "" {
			ct = "application/octet-stream"
		}
		b[name] = Asset{Name: name, Body: body, Gzip: gz.Bytes(), ETag: `"` + h[:32] + `"`, Hash: h[:12], ContentType: ct}
		return nil
	})
	return b, err
}
