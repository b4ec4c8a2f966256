package assets

import (
	"bytes"
	"compress/gzip"
	"crypto/sha512"
	"encoding/base64"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadPreparesEveryAsset(t *testing.T) {
	b, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	for name, ct := range map[string]string{"collab-lease.js": "text/javascript", "collab-lease-claim.js": "text/javascript", "collab-lease.css": "text/css"} {
		a, ok := b[name]
		if !ok {
			t.Fatalf("%s missing from the bundle", name)
		}
		if !strings.HasPrefix(a.ContentType, ct) {
			t.Errorf("%s: content type %q", name, a.ContentType)
		}
		if len(a.Body) < 500 || strings.Contains(string(a.Body), "placeholder") {
			t.Errorf("%s looks like a stub (%d bytes)", name, len(a.Body))
		}
		zr, err := gzip.NewReader(bytes.NewReader(a.Gzip))
		if err != nil {
			t.Fatal(err)
		}
		plain, _ := io.ReadAll(zr)
		if !bytes.Equal(plain, a.Body) || len(a.Gzip) >= len(a.Body) {
			t.Errorf("%s: gzip copy wrong or not smaller (%d vs %d)", name, len(a.Gzip), len(a.Body))
		}
		if len(a.ETag) != 34 || a.ETag[0] != '"' || len(a.Hash) != 12 || !strings.Contains(a.ETag, a.Hash) {
			t.Errorf("%s: etag %s hash %s", name, a.ETag, a.Hash)
		}
		sum := sha512.Sum384(a.Body)
		if a.Integrity != "sha384-"+base64.StdEncoding.EncodeToString(sum[:]) {
			t.Errorf("%s: integrity %s", name, a.Integrity)
		}
		if want := strings.Replace(name, ".", "."+a.Hash+".", 1); a.HashedName() != want {
			t.Errorf("%s: hashed name %s, want %s", name, a.HashedName(), want)
		}
	}
	// Small enough to add to every Gitea page: the script within 4 KiB
	// gzipped (the live badges included), script and style within 8. The
	// buttons' script, loaded on an issue page for a writer only, within
	// 3 KiB, and all three within 8 there too.
	if js := len(b["collab-lease.js"].Gzip); js > 4*1024 {
		t.Errorf("gzipped script is %d bytes; keep it within 4 KiB", js)
	}
	total := len(b["collab-lease.js"].Gzip) + len(b["collab-lease.css"].Gzip)
	if total > 8*1024 {
		t.Errorf("gzipped bundle is %d bytes; keep it under 8 KiB", total)
	}
	claim := len(b["collab-lease-claim.js"].Gzip)
	if claim > 3*1024 {
		t.Errorf("gzipped buttons' script is %d bytes; keep it within 3 KiB", claim)
	}
	if total+claim > 8*1024 {
		t.Errorf("gzipped bundle of a writer's issue page is %d bytes; keep it under 8 KiB", total+claim)
	}
}

// The badge script names the buttons' script by its content-addressed
// name and its integrity, so that the footer's pin on the one covers the
// other; and Load refuses a badge script that does not name it once.
func TestBadgeScriptPinsTheButtonsScript(t *testing.T) {
	b, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	claim := b[claimScript]
	ref := "['" + claim.HashedName() + "', '" + claim.Integrity + "']"
	if badge := string(b[badgeScript].Body); strings.Count(badge, ref) != 1 || strings.Contains(badge, claimRef) {
		t.Fatalf("the badge script does not name %s once, as %s", claimScript, ref)
	}
	if b[badgeScript].Integrity != New(badgeScript, b[badgeScript].Body).Integrity {
		t.Fatal("the badge script's integrity is not that of its linked bytes")
	}
	for name, body := range map[string]string{
		"no reference":  "console.log(1)\n",
		"two of them":   claimRef + claimRef,
		"no claim file": claimRef,
	} {
		bad := Bundle{badgeScript: New(badgeScript, []byte(body)), claimScript: claim}
		if name == "no claim file" {
			delete(bad, claimScript)
		}
		if err := bad.linkClaim(); err == nil {
			t.Errorf("%s: linked", name)
		}
	}
}

// The scripts are served without their whole-line comments, and still
// parse (with node, where there is one); they have no template literal,
// a line of which stripComments could take for a comment.
func TestScriptIsServedWithoutItsComments(t *testing.T) {
	for _, name := range []string{badgeScript, claimScript} {
		t.Run(name, func(t *testing.T) { servedWithoutComments(t, name) })
	}
}

func servedWithoutComments(t *testing.T, name string) {
	b, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	src, err := static.ReadFile("static/" + name)
	if err != nil {
		t.Fatal(err)
	}
	js := b[name].Body
	if bytes.ContainsRune(src, '`') {
		t.Fatal("the script has a template literal: stripComments may not drop its lines")
	}
	for line := range bytes.Lines(js) {
		if bytes.HasPrefix(bytes.TrimSpace(line), []byte("//")) {
			t.Fatalf("a comment line is served: %s", line)
		}
	}
	if len(js) >= len(src) || !bytes.Contains(js, []byte("'use strict'")) {
		t.Fatalf("served %d bytes of %d", len(js), len(src))
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node to parse the script with")
	}
	f := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(f, js, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(node, "--check", f).CombinedOutput(); err != nil {
		t.Fatalf("the served script does not parse: %v\n%s", err, out)
	}
}
