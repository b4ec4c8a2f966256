package plugin

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"text/template"
)

const pub = "https://git.example/collab"

func footerPath(dir string) string { return filepath.Join(dir, "templates", "custom", "footer.tmpl") }

func writeFooter(t *testing.T, dir, content string, mode fs.FileMode) {
	t.Helper()
	p := footerPath(dir)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func readFooterT(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(footerPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mustInstall(t *testing.T, dir, url string, wantChanged bool) {
	t.Helper()
	_, changed, err := InstallFooter(dir, url)
	if err != nil || changed != wantChanged {
		t.Fatalf("install: changed %v (want %v), %v", changed, wantChanged, err)
	}
}

func TestFooterBlock(t *testing.T) {
	b, err := FooterBlock(pub + "/")
	if err != nil {
		t.Fatal(err)
	}
	want := "{{/* collab-lease:begin */}}\n" +
		"{{/* Written by `collab-sidecar install`; `collab-sidecar install --uninstall` removes it. Edits inside this block are lost. */}}\n" +
		`<link rel="stylesheet" href="https://git.example/collab/assets/collab-lease.css">` + "\n" +
		`<script src="https://git.example/collab/assets/collab-lease.js" data-collab-lease-url="https://git.example/collab" defer></script>` + "\n" +
		"{{/* collab-lease:end */}}\n"
	if b != want {
		t.Fatalf("block:\n%s\nwant:\n%s", b, want)
	}
	// It is a valid template that renders the tags alone.
	tpl, err := template.New("footer").Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := tpl.Execute(&out, nil); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "collab-lease:") || !strings.Contains(out.String(), "<script src=") {
		t.Fatalf("rendered: %q", out.String())
	}
	for _, bad := range []string{"ftp://x", "https://u:p@x", "http://x/?q=1", "not a url", "http://x#f"} {
		if _, err := FooterBlock(bad); err == nil {
			t.Errorf("FooterBlock(%q) accepted", bad)
		}
	}
	// Markup or template actions in the URL never reach the template.
	for _, u := range []string{`http://x/"><script>`, "http://x/{{.Secret}}"} {
		if b, err := FooterBlock(u); err == nil && (strings.Contains(b, `"><script>`) || strings.Contains(b, "{{.Secret")) {
			t.Errorf("%s got into the block: %s", u, b)
		}
	}
}

func TestInstallFreshFooter(t *testing.T) {
	dir := t.TempDir()
	mustInstall(t, dir, pub, true)
	block, _ := FooterBlock(pub)
	if got := readFooterT(t, dir); got != block {
		t.Fatalf("fresh footer: %q", got)
	}
	st, _ := os.Stat(footerPath(dir))
	if st.Mode().Perm() != 0o644 {
		t.Fatalf("mode %o", st.Mode().Perm())
	}
	mustInstall(t, dir, pub, false)
	// Uninstall leaves no file behind: there was none.
	if _, changed, err := UninstallFooter(dir); err != nil || !changed {
		t.Fatalf("uninstall: %v %v", changed, err)
	}
	if _, err := os.Stat(footerPath(dir)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("footer left behind: %v", err)
	}
	if _, changed, err := UninstallFooter(dir); err != nil || changed {
		t.Fatalf("second uninstall: %v %v", changed, err)
	}
}

func TestInstallKeepsTheAdminsBytes(t *testing.T) {
	for _, admin := range []string{
		"<!-- analytics -->\n<script src=\"/assets/mine.js\"></script>\n",
		"no trailing newline {{template \"x\" .}}",
		"\r\nwindows\r\nline endings\r\n",
		"\n\n\n",
		"",
	} {
		dir := t.TempDir()
		writeFooter(t, dir, admin, 0o640)
		mustInstall(t, dir, pub, true)
		got := readFooterT(t, dir)
		block, _ := FooterBlock(pub)
		if got != admin+block {
			t.Fatalf("install after %q: %q", admin, got)
		}
		mustInstall(t, dir, pub, false)
		if st, _ := os.Stat(footerPath(dir)); st.Mode().Perm() != 0o640 {
			t.Fatalf("mode changed to %o", st.Mode().Perm())
		}

		// The admin adds more after our block; a new public URL
		// replaces the block in place.
		after := "<footer>mine, after</footer>\n"
		writeFooter(t, dir, got+after, 0o640)
		mustInstall(t, dir, "http://127.0.0.1:8787", true)
		block2, _ := FooterBlock("http://127.0.0.1:8787")
		if got := readFooterT(t, dir); got != admin+block2+after {
			t.Fatalf("reinstall with another URL: %q", got)
		}
		mustInstall(t, dir, "http://127.0.0.1:8787", false)

		_, changed, err := UninstallFooter(dir)
		if err != nil || !changed {
			t.Fatalf("uninstall: %v %v", changed, err)
		}
		if got := readFooterT(t, dir); got != admin+after {
			t.Fatalf("uninstall: %q, want %q", got, admin+after)
		}
	}
}

func TestSecondInstallDoesNotTouchTheFile(t *testing.T) {
	dir := t.TempDir()
	writeFooter(t, dir, "mine\n", 0o644)
	mustInstall(t, dir, pub, true)
	st1, _ := os.Stat(footerPath(dir))
	// Make any write visible through the modification time.
	old := st1.ModTime().Add(-3600e9)
	if err := os.Chtimes(footerPath(dir), old, old); err != nil {
		t.Fatal(err)
	}
	mustInstall(t, dir, pub+"/", false)
	st2, _ := os.Stat(footerPath(dir))
	if !st2.ModTime().Equal(old) {
		t.Fatalf("second install rewrote the file")
	}
	entries, _ := os.ReadDir(filepath.Dir(footerPath(dir)))
	if len(entries) != 1 {
		t.Fatalf("left temporary files: %v", entries)
	}
}

func TestDamagedMarkersAreRefused(t *testing.T) {
	block, _ := FooterBlock(pub)
	lines := strings.SplitAfter(block, "\n")
	begin, end := lines[0], lines[len(lines)-2]
	cases := map[string]string{
		"begin only":       "mine\n" + begin + "<script></script>\n",
		"end only":         "mine\n" + end,
		"end before begin": end + "mine\n" + begin,
		"two blocks":       block + "mine\n" + block,
		"begin twice":      begin + begin + end,
		"edited begin":     "{{/* collab-lease:begin (keep) */}}\n" + end,
		"edited end":       begin + "<!-- collab-lease:end -->\n",
	}
	for name, content := range cases {
		dir := t.TempDir()
		writeFooter(t, dir, content, 0o644)
		if _, _, err := InstallFooter(dir, pub); !errors.Is(err, ErrFooterDamaged) {
			t.Errorf("%s: install: %v, want ErrFooterDamaged", name, err)
		}
		if _, _, err := UninstallFooter(dir); !errors.Is(err, ErrFooterDamaged) {
			t.Errorf("%s: uninstall: %v, want ErrFooterDamaged", name, err)
		}
		if got := readFooterT(t, dir); got != content {
			t.Errorf("%s: file changed to %q", name, got)
		}
	}
}

func TestUninstallWithoutBlockChangesNothing(t *testing.T) {
	dir := t.TempDir()
	writeFooter(t, dir, "mine", 0o644)
	if _, changed, err := UninstallFooter(dir); err != nil || changed {
		t.Fatalf("uninstall: %v %v", changed, err)
	}
	if got := readFooterT(t, dir); got != "mine" {
		t.Fatalf("changed: %q", got)
	}
	if _, changed, err := UninstallFooter(t.TempDir()); err != nil || changed {
		t.Fatalf("uninstall without footer: %v %v", changed, err)
	}
}

func TestInstallFollowsASymlinkedFooter(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(t.TempDir(), "real-footer.tmpl")
	if err := os.WriteFile(real, []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(footerPath(dir)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, footerPath(dir)); err != nil {
		t.Fatal(err)
	}
	mustInstall(t, dir, pub, true)
	if fi, _ := os.Lstat(footerPath(dir)); fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatal("the link was replaced by a file")
	}
	if b, _ := os.ReadFile(real); !strings.HasPrefix(string(b), "mine\n{{/* collab-lease:begin */}}") {
		t.Fatalf("target: %q", b)
	}
}

func TestInstallNeedsTheCustomDirectory(t *testing.T) {
	if _, _, err := InstallFooter(filepath.Join(t.TempDir(), "missing"), pub); err == nil {
		t.Fatal("installed into a missing custom directory")
	}
}
