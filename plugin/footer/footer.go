package footer

import (
	"bytes"
	"errors"
	"fmt"
	"html"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/collab-lease/collab-lease/assets"
)

// The installer of Gitea's custom footer: Gitea renders
// $GITEA_CUSTOM/templates/custom/footer.tmpl at the end of every page, and
// the sidecar's script and stylesheet tags live there between two marker
// comments. Everything outside the markers belongs to the admin and is
// kept byte for byte; the markers are Go template comments, so they never
// reach the page.

// File is the footer template, relative to Gitea's custom directory.
const File = "templates/custom/footer.tmpl"

const (
	footerBegin = "{{/* collab-lease:begin */}}"
	footerEnd   = "{{/* collab-lease:end */}}"
	// Any text naming a marker counts as one, so a marker that was edited
	// (rather than removed) is seen as damage, not as admin content.
	beginToken = "collab-lease:begin"
	endToken   = "collab-lease:end"
)

// ErrDamaged: the footer holds the markers in a shape the installer
// did not write (one without the other, duplicated, out of order, edited).
// It refuses to touch the file; the admin repairs it by hand.
var ErrDamaged = errors.New("the collab-lease block of the footer template is damaged")

// The badge files the footer loads, by their names in the bundle.
const (
	footerScript = "collab-lease.js"
	footerStyle  = "collab-lease.css"
)

// Block is the block the installer writes for a sidecar reached by
// browsers at PublicURL, serving Assets.
//
// Its tags name the content-addressed URLs of the script and the
// stylesheet, with their Subresource Integrity (the SHA-384 of the bytes
// this binary embeds, which its sidecar serves) and crossorigin
// "anonymous". The script runs on Gitea's origin, with the rights of
// whoever is signed in to Gitea, so it is pinned here: a sidecar that was
// tampered with, or reached over plain http through someone in between,
// cannot run other code there, because the browser refuses bytes that do
// not match. The pin is on the code itself, not on a loader: a loader
// would have to learn the current hash from the sidecar, the very party
// the pin does not trust. The price is that an upgrade that changes these
// files needs install again (the block changes with them; doctor reports
// a block that is not current) and a Gitea restart; until then the old
// URL answers 404 and no badge shows.
func (f Footer) Block() (string, error) {
	u, err := url.Parse(strings.TrimRight(f.PublicURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("public URL %q must be an http(s) URL without query or credentials", f.PublicURL)
	}
	base := u.String()
	// The block is template source: text that Gitea's template engine
	// would read as an action must not get in.
	if strings.Contains(base, "{{") || strings.Contains(base, "}}") {
		return "", fmt.Errorf("public URL %q must not contain {{ or }}", f.PublicURL)
	}
	script, okScript := f.Assets[footerScript]
	style, okStyle := f.Assets[footerStyle]
	if !okScript || !okStyle || script.Integrity == "" || style.Integrity == "" {
		return "", fmt.Errorf("badge assets: %s and %s are missing from the bundle", footerScript, footerStyle)
	}
	attr := html.EscapeString(base)
	return footerBegin + "\n" +
		"{{/* Written by `collab-sidecar install`; `collab-sidecar install --uninstall` removes it. Edits inside this block are lost. */}}\n" +
		`<link rel="stylesheet" href="` + attr + `/assets/` + html.EscapeString(style.HashedName()) +
		`" integrity="` + html.EscapeString(style.Integrity) + `" crossorigin="anonymous">` + "\n" +
		`<script src="` + attr + `/assets/` + html.EscapeString(script.HashedName()) +
		`" integrity="` + html.EscapeString(script.Integrity) + `" crossorigin="anonymous" data-collab-lease-url="` + attr + `" defer></script>` + "\n" +
		footerEnd + "\n", nil
}

// findBlock locates the installer's block in a footer: [start, end) with
// end past the end marker's newline (if it has one). found is false when
// there is no marker at all.
func findBlock(content []byte) (start, end int, found bool, err error) {
	nb, ne := bytes.Count(content, []byte(beginToken)), bytes.Count(content, []byte(endToken))
	if nb == 0 && ne == 0 {
		return 0, 0, false, nil
	}
	if nb != 1 || ne != 1 {
		return 0, 0, false, fmt.Errorf("%w: %d begin and %d end markers, want one of each", ErrDamaged, nb, ne)
	}
	start = bytes.Index(content, []byte(footerBegin))
	e := bytes.Index(content, []byte(footerEnd))
	if start < 0 || e < 0 {
		return 0, 0, false, fmt.Errorf("%w: a marker was edited (want the lines %s and %s)", ErrDamaged, footerBegin, footerEnd)
	}
	if e < start {
		return 0, 0, false, fmt.Errorf("%w: the end marker comes before the begin marker", ErrDamaged)
	}
	end = e + len(footerEnd)
	if end < len(content) && content[end] == '\n' {
		end++
	}
	return start, end, true, nil
}

// spliceFooter returns content with block in place: replacing the
// installer's block where it is, or appended at the end. Appending adds no
// byte of its own, so removing the block gives back content exactly.
func spliceFooter(content []byte, block string) ([]byte, error) {
	start, end, found, err := findBlock(content)
	if err != nil {
		return nil, err
	}
	if !found {
		start, end = len(content), len(content)
	}
	out := make([]byte, 0, len(content)+len(block))
	out = append(out, content[:start]...)
	out = append(out, block...)
	return append(out, content[end:]...), nil
}

// stripFooter returns content without the installer's block.
func stripFooter(content []byte) ([]byte, bool, error) {
	start, end, found, err := findBlock(content)
	if err != nil || !found {
		return content, false, err
	}
	out := append(append([]byte{}, content[:start]...), content[end:]...)
	return out, true, nil
}

// Footer is the installer of one Gitea's footer: where Gitea's custom
// directory is, which sidecar the block loads from, and how careful to be
// about the files it finds there (see fs.go).
type Footer struct {
	CustomDir string        // Gitea's custom directory ($GITEA_CUSTOM)
	PublicURL string        // where browsers reach the sidecar
	Assets    assets.Bundle // what the sidecar serves: the badge script and stylesheet
	// Force follows symbolic links and accepts hard links and foreign
	// owners below CustomDir, for a layout the admin made so on purpose.
	Force bool
}

// Path is the footer template's path as the admin names it.
func (f Footer) Path() string { return filepath.Join(f.CustomDir, filepath.FromSlash(File)) }

// Check reports whether Install would succeed, changing nothing: the
// custom directory exists, the URL makes a block, nothing below the
// custom directory is refused, and the footer's markers (if any) are
// intact.
func (f Footer) Check() error {
	if _, err := f.Block(); err != nil {
		return err
	}
	d, err := f.open(false)
	if err != nil || d == nil {
		return err
	}
	defer d.close()
	old, _, err := d.read()
	if err != nil {
		return err
	}
	if _, _, _, err := findBlock(old); err != nil {
		return fmt.Errorf("%s: %w", d.path, err)
	}
	return nil
}

// Install writes the block into the footer template, creating the file
// (and its directories) if needed, under the footer directory's lock. It
// reports whether the file changed: a second run with the same URL writes
// nothing.
func (f Footer) Install() (path string, changed bool, err error) {
	path = f.Path()
	block, err := f.Block()
	if err != nil {
		return path, false, err
	}
	d, err := f.open(true)
	if err != nil {
		return path, false, err
	}
	defer d.close()
	path = d.path
	if err := d.lock(); err != nil {
		return path, false, err
	}
	old, st, err := d.read()
	if err != nil {
		return path, false, err
	}
	next, err := spliceFooter(old, block)
	if err != nil {
		return path, false, fmt.Errorf("%s: %w", path, err)
	}
	if old != nil && bytes.Equal(old, next) {
		return path, false, nil
	}
	if err := d.write(next, st); err != nil {
		return path, false, err
	}
	return path, true, nil
}

// Uninstall removes the installer's block from the footer template,
// leaving the admin's bytes exactly as they were. A footer that held
// nothing but the block is removed (the name, never what a link points
// at). It reports whether anything changed.
func (f Footer) Uninstall() (path string, changed bool, err error) {
	path = f.Path()
	d, err := f.open(false)
	if err != nil || d == nil {
		return path, false, err
	}
	defer d.close()
	path = d.path
	if err := d.lock(); err != nil {
		return path, false, err
	}
	old, st, err := d.read()
	if err != nil || old == nil {
		return path, false, err
	}
	next, found, err := stripFooter(old)
	if err != nil {
		return path, false, fmt.Errorf("%s: %w", path, err)
	}
	if !found {
		return path, false, nil
	}
	if len(next) == 0 {
		return path, true, d.remove()
	}
	return path, true, d.write(next, st)
}

// Installed reports whether the footer holds exactly the block Install
// would write (so Gitea's pages load this sidecar's badge script).
// Damaged markers, and whatever Install would refuse, are an error.
func (f Footer) Installed() (bool, error) {
	block, err := f.Block()
	if err != nil {
		return false, err
	}
	d, err := f.open(false)
	if err != nil || d == nil {
		return false, err
	}
	defer d.close()
	old, _, err := d.read()
	if err != nil {
		return false, err
	}
	next, err := spliceFooter(old, block)
	if err != nil {
		return false, fmt.Errorf("%s: %w", d.path, err)
	}
	return old != nil && bytes.Equal(old, next), nil
}
