package plugin

import (
	"bytes"
	"errors"
	"fmt"
	"html"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// The installer of Gitea's custom footer: Gitea renders
// $GITEA_CUSTOM/templates/custom/footer.tmpl at the end of every page, and
// the sidecar's script and stylesheet tags live there between two marker
// comments. Everything outside the markers belongs to the admin and is
// kept byte for byte; the markers are Go template comments, so they never
// reach the page.

// FooterFile is the footer template, relative to Gitea's custom directory.
const FooterFile = "templates/custom/footer.tmpl"

const (
	footerBegin = "{{/* collab-lease:begin */}}"
	footerEnd   = "{{/* collab-lease:end */}}"
	// Any text naming a marker counts as one, so a marker that was edited
	// (rather than removed) is seen as damage, not as admin content.
	beginToken = "collab-lease:begin"
	endToken   = "collab-lease:end"
)

// ErrFooterDamaged: the footer holds the markers in a shape the installer
// did not write (one without the other, duplicated, out of order, edited).
// It refuses to touch the file; the admin repairs it by hand.
var ErrFooterDamaged = errors.New("the collab-lease block of the footer template is damaged")

// FooterBlock is the block the installer writes for a sidecar reached by
// browsers at publicURL.
func FooterBlock(publicURL string) (string, error) {
	u, err := url.Parse(strings.TrimRight(publicURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("public URL %q must be an http(s) URL without query or credentials", publicURL)
	}
	base := u.String()
	// The block is template source: text that Gitea's template engine
	// would read as an action must not get in.
	if strings.Contains(base, "{{") || strings.Contains(base, "}}") {
		return "", fmt.Errorf("public URL %q must not contain {{ or }}", publicURL)
	}
	attr := html.EscapeString(base)
	return footerBegin + "\n" +
		"{{/* Written by `collab-sidecar install`; `collab-sidecar install --uninstall` removes it. Edits inside this block are lost. */}}\n" +
		`<link rel="stylesheet" href="` + attr + `/assets/collab-lease.css">` + "\n" +
		`<script src="` + attr + `/assets/collab-lease.js" data-collab-lease-url="` + attr + `" defer></script>` + "\n" +
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
		return 0, 0, false, fmt.Errorf("%w: %d begin and %d end markers, want one of each", ErrFooterDamaged, nb, ne)
	}
	start = bytes.Index(content, []byte(footerBegin))
	e := bytes.Index(content, []byte(footerEnd))
	if start < 0 || e < 0 {
		return 0, 0, false, fmt.Errorf("%w: a marker was edited (want the lines %s and %s)", ErrFooterDamaged, footerBegin, footerEnd)
	}
	if e < start {
		return 0, 0, false, fmt.Errorf("%w: the end marker comes before the begin marker", ErrFooterDamaged)
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

// CheckFooter reports whether InstallFooter would succeed, changing
// nothing: the custom directory exists, the URL makes a block, and the
// footer's markers (if any) are intact.
func CheckFooter(customDir, publicURL string) error {
	path := resolved(filepath.Join(customDir, filepath.FromSlash(FooterFile)))
	if _, err := FooterBlock(publicURL); err != nil {
		return err
	}
	if err := checkCustomDir(customDir); err != nil {
		return err
	}
	old, _, err := readFooter(path)
	if err != nil {
		return err
	}
	if _, _, _, err := findBlock(old); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func checkCustomDir(dir string) error {
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("gitea-custom %s: not a directory (pass --gitea-custom, Gitea's $GITEA_CUSTOM)", dir)
	}
	return nil
}

// InstallFooter writes the block for publicURL into the footer template of
// the Gitea custom directory customDir, creating the file (and its
// directories) if needed. It reports whether the file changed: a second
// run with the same URL writes nothing.
func InstallFooter(customDir, publicURL string) (path string, changed bool, err error) {
	path = filepath.Join(customDir, filepath.FromSlash(FooterFile))
	block, err := FooterBlock(publicURL)
	if err != nil {
		return path, false, err
	}
	if err := checkCustomDir(customDir); err != nil {
		return path, false, err
	}
	path = resolved(path)
	old, mode, err := readFooter(path)
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
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return path, false, err
	}
	if err := WriteFileAtomic(path, next, mode); err != nil {
		return path, false, err
	}
	return path, true, nil
}

// UninstallFooter removes the installer's block from the footer template,
// leaving the admin's bytes exactly as they were. A footer that held
// nothing but the block is removed. It reports whether anything changed.
func UninstallFooter(customDir string) (path string, changed bool, err error) {
	path = resolved(filepath.Join(customDir, filepath.FromSlash(FooterFile)))
	old, mode, err := readFooter(path)
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
		if err := os.Remove(path); err != nil {
			return path, false, err
		}
		return path, true, nil
	}
	return path, true, WriteFileAtomic(path, next, mode)
}

// readFooter returns the footer's bytes (nil if it does not exist) and the
// mode to write it back with.
func readFooter(path string) ([]byte, fs.FileMode, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0o644, nil
	}
	if err != nil {
		return nil, 0, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, 0, err
	}
	if b == nil {
		b = []byte{}
	}
	return b, st.Mode().Perm(), nil
}

// resolved follows a symbolic link, so that an atomic rename replaces the
// file the admin's link points at rather than the link.
func resolved(path string) string {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		return real
	}
	return path
}

// FooterInstalled reports whether the footer holds exactly the block
// InstallFooter would write for publicURL (so Gitea's pages load this
// sidecar's badge script). Damaged markers are an error.
func FooterInstalled(customDir, publicURL string) (bool, error) {
	block, err := FooterBlock(publicURL)
	if err != nil {
		return false, err
	}
	path := resolved(filepath.Join(customDir, filepath.FromSlash(FooterFile)))
	old, _, err := readFooter(path)
	if err != nil {
		return false, err
	}
	next, err := spliceFooter(old, block)
	if err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	return old != nil && bytes.Equal(old, next), nil
}
