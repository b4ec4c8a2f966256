package footer

import (
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/collab-lease/collab-lease/assets"
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
	_, changed, err := Footer{CustomDir: dir, PublicURL: url, Assets: testAssets}.Install()
	if err != nil || changed != wantChanged {
		t.Fatalf("install: changed %v (want %v), %v", changed, wantChanged, err)
	}
}

// testAssets stand for the embedded bundle.
var testAssets = assets.Bundle{
	"collab-lease.js":  assets.New("collab-lease.js", []byte("/* badge */\n")),
	"collab-lease.css": assets.New("collab-lease.css", []byte(".badge{}\n")),
}

func blockFor(publicURL string) (string, error) {
	return Footer{PublicURL: publicURL, Assets: testAssets}.Block()
}

func TestFooterBlock(t *testing.T) {
	b, err := blockFor(pub + "/")
	if err != nil {
		t.Fatal(err)
	}
	js, css := testAssets["collab-lease.js"], testAssets["collab-lease.css"]
	want := "{{/* collab-lease:begin */}}\n" +
		"{{/* Written by `collab-sidecar install`; `collab-sidecar install --uninstall` removes it. Edits inside this block are lost. */}}\n" +
		`<link rel="stylesheet" href="https://git.example/collab/assets/collab-lease.` + css.Hash + `.css" integrity="` + css.Integrity + `" crossorigin="anonymous">` + "\n" +
		`<script src="https://git.example/collab/assets/collab-lease.` + js.Hash + `.js" integrity="` + js.Integrity + `" crossorigin="anonymous" data-collab-lease-url="https://git.example/collab" defer></script>` + "\n" +
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
		if _, err := blockFor(bad); err == nil {
			t.Errorf("Block of %q accepted", bad)
		}
	}
	// Markup or template actions in the URL never reach the template.
	for _, u := range []string{`http://x/"><script>`, "http://x/{{.Secret}}"} {
		if b, err := blockFor(u); err == nil && (strings.Contains(b, `"><script>`) || strings.Contains(b, "{{.Secret")) {
			t.Errorf("%s got into the block: %s", u, b)
		}
	}
}

func TestInstallFreshFooter(t *testing.T) {
	dir := t.TempDir()
	mustInstall(t, dir, pub, true)
	block, _ := blockFor(pub)
	if got := readFooterT(t, dir); got != block {
		t.Fatalf("fresh footer: %q", got)
	}
	st, _ := os.Stat(footerPath(dir))
	if st.Mode().Perm() != 0o644 {
		t.Fatalf("mode %o", st.Mode().Perm())
	}
	mustInstall(t, dir, pub, false)
	// Uninstall leaves no file behind: there was none.
	if _, changed, err := (Footer{CustomDir: dir}).Uninstall(); err != nil || !changed {
		t.Fatalf("uninstall: %v %v", changed, err)
	}
	if _, err := os.Stat(footerPath(dir)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("footer left behind: %v", err)
	}
	if _, changed, err := (Footer{CustomDir: dir}).Uninstall(); err != nil || changed {
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
		block, _ := blockFor(pub)
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
		block2, _ := blockFor("http://127.0.0.1:8787")
		if got := readFooterT(t, dir); got != admin+block2+after {
			t.Fatalf("reinstall with another URL: %q", got)
		}
		mustInstall(t, dir, "http://127.0.0.1:8787", false)

		_, changed, err := Footer{CustomDir: dir}.Uninstall()
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
	block, _ := blockFor(pub)
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
		if _, _, err := (Footer{CustomDir: dir, PublicURL: pub, Assets: testAssets}).Install(); !errors.Is(err, ErrDamaged) {
			t.Errorf("%s: install: %v, want ErrDamaged", name, err)
		}
		if _, _, err := (Footer{CustomDir: dir}).Uninstall(); !errors.Is(err, ErrDamaged) {
			t.Errorf("%s: uninstall: %v, want ErrDamaged", name, err)
		}
		if got := readFooterT(t, dir); got != content {
			t.Errorf("%s: file changed to %q", name, got)
		}
	}
}

func TestUninstallWithoutBlockChangesNothing(t *testing.T) {
	dir := t.TempDir()
	writeFooter(t, dir, "mine", 0o644)
	if _, changed, err := (Footer{CustomDir: dir}).Uninstall(); err != nil || changed {
		t.Fatalf("uninstall: %v %v", changed, err)
	}
	if got := readFooterT(t, dir); got != "mine" {
		t.Fatalf("changed: %q", got)
	}
	if _, changed, err := (Footer{CustomDir: t.TempDir()}).Uninstall(); err != nil || changed {
		t.Fatalf("uninstall without footer: %v %v", changed, err)
	}
}

// With Force, a linked footer is the admin's choice: the block goes into
// the link's target, and uninstall takes it out again.
func TestForceFollowsASymlinkedFooter(t *testing.T) {
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
	forced := Footer{CustomDir: dir, PublicURL: pub, Assets: testAssets, Force: true}
	if _, changed, err := forced.Install(); err != nil || !changed {
		t.Fatalf("install: %v %v", changed, err)
	}
	if fi, _ := os.Lstat(footerPath(dir)); fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatal("the link was replaced by a file")
	}
	if b, _ := os.ReadFile(real); !strings.HasPrefix(string(b), "mine\n{{/* collab-lease:begin */}}") {
		t.Fatalf("target: %q", b)
	}
	if _, changed, err := forced.Uninstall(); err != nil || !changed || readT(t, real) != "mine\n" {
		t.Fatalf("uninstall: %v %v, target %q", changed, err, readT(t, real))
	}
}

func TestInstallNeedsTheCustomDirectory(t *testing.T) {
	if _, _, err := (Footer{CustomDir: filepath.Join(t.TempDir(), "missing"), PublicURL: pub, Assets: testAssets}).Install(); err == nil {
		t.Fatal("installed into a missing custom directory")
	}
}

// outsideFile is a file outside the custom directory that a link may try
// to redirect the installer to.
func outsideFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "outside.tmpl")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func readT(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A footer.tmpl that is a symbolic link is refused, by install and
// uninstall alike: its target is neither written nor removed.
func TestInstallRefusesASymlinkedFooter(t *testing.T) {
	block, _ := blockFor(pub)
	for _, target := range []string{"mine\n", "mine\n" + block, block} {
		dir := t.TempDir()
		outside := outsideFile(t, target)
		if err := os.MkdirAll(filepath.Dir(footerPath(dir)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, footerPath(dir)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := (Footer{CustomDir: dir, PublicURL: pub, Assets: testAssets}).Install(); err == nil || !strings.Contains(err.Error(), "symbolic link") {
			t.Errorf("install through a link to %q: %v", target, err)
		}
		if _, _, err := (Footer{CustomDir: dir}).Uninstall(); err == nil || !strings.Contains(err.Error(), "symbolic link") {
			t.Errorf("uninstall through a link to %q: %v", target, err)
		}
		if got := readT(t, outside); got != target {
			t.Errorf("the link's target changed to %q", got)
		}
		if fi, err := os.Lstat(footerPath(dir)); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			t.Errorf("the link was replaced: %v", err)
		}
	}
}

// A symbolic link as templates/ or templates/custom/ is refused: nothing
// is written where it points.
func TestInstallRefusesSymlinkedDirectories(t *testing.T) {
	for _, link := range []string{"templates", filepath.Join("templates", "custom")} {
		dir, outside := t.TempDir(), t.TempDir()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, link)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := (Footer{CustomDir: dir, PublicURL: pub, Assets: testAssets}).Install(); err == nil || !strings.Contains(err.Error(), "symbolic link") {
			t.Errorf("install with %s a link: %v", link, err)
		}
		if entries, _ := os.ReadDir(outside); len(entries) != 0 {
			t.Errorf("install with %s a link wrote %v where it points", link, entries)
		}
		// --force follows the link.
		if _, changed, err := (Footer{CustomDir: dir, PublicURL: pub, Assets: testAssets, Force: true}).Install(); err != nil || !changed {
			t.Errorf("forced install with %s a link: %v %v", link, changed, err)
		}
		if entries, _ := os.ReadDir(outside); len(entries) != 1 {
			t.Errorf("forced install with %s a link: %v where it points", link, entries)
		}
	}
}

// A footer.tmpl with another hard link is refused: its bytes may be any
// file's on the same file system, and they would end up in Gitea's pages.
func TestInstallRefusesAHardLinkedFooter(t *testing.T) {
	dir := t.TempDir()
	writeFooter(t, dir, "secret\n", 0o600)
	other := filepath.Join(t.TempDir(), "other")
	if err := os.Link(footerPath(dir), other); err != nil {
		t.Skipf("no hard link across temporary directories: %v", err)
	}
	if _, _, err := (Footer{CustomDir: dir, PublicURL: pub, Assets: testAssets}).Install(); err == nil || !strings.Contains(err.Error(), "hard link") {
		t.Fatalf("install: %v", err)
	}
	if got := readFooterT(t, dir); got != "secret\n" {
		t.Fatalf("footer changed: %q", got)
	}
	// --force takes the footer's bytes; the other name keeps its own.
	mustForce(t, dir)
	if got := readT(t, other); got != "secret\n" {
		t.Fatalf("the other link changed: %q", got)
	}
}

func mustForce(t *testing.T, dir string) {
	t.Helper()
	if _, changed, err := (Footer{CustomDir: dir, PublicURL: pub, Assets: testAssets, Force: true}).Install(); err != nil || !changed {
		t.Fatalf("forced install: %v %v", changed, err)
	}
}

// As root, the installer refuses a directory or a footer owned by anyone
// but the custom directory's owner or root.
func TestInstallRefusesForeignOwners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files away")
	}
	const stranger = 4242
	for _, owned := range []string{"templates", filepath.Join("templates", "custom"), File} {
		dir := t.TempDir()
		writeFooter(t, dir, "mine\n", 0o644)
		if err := os.Lchown(filepath.Join(dir, filepath.FromSlash(owned)), stranger, stranger); err != nil {
			t.Fatal(err)
		}
		if _, _, err := (Footer{CustomDir: dir, PublicURL: pub, Assets: testAssets}).Install(); err == nil || !strings.Contains(err.Error(), "owned by") {
			t.Errorf("install with %s owned by %d: %v", owned, stranger, err)
		}
		if got := readFooterT(t, dir); got != "mine\n" {
			t.Errorf("footer changed: %q", got)
		}
		mustForce(t, dir)
	}
	// Root's own files and directories are accepted.
	dir := t.TempDir()
	writeFooter(t, dir, "mine\n", 0o644)
	if err := os.Chown(dir, stranger, stranger); err != nil {
		t.Fatal(err)
	}
	mustInstall(t, dir, pub, true)
}

// Two installs never interleave their read and write of the footer: while
// one holds the footer directory's lock, another waits for it.
func TestConcurrentInstallsAreSerialised(t *testing.T) {
	if _, err := os.Stat("/proc/locks"); err != nil {
		t.Skip("needs /proc/locks to see a waiting lock")
	}
	dir := t.TempDir()
	writeFooter(t, dir, "mine\n", 0o644)
	held, err := os.Open(filepath.Dir(footerPath(dir)))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := syscall.Flock(int(held.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	st, _ := held.Stat()
	inode := fmt.Sprintf(":%d ", st.Sys().(*syscall.Stat_t).Ino)

	done := make(chan error, 1)
	go func() {
		_, _, err := Footer{CustomDir: dir, PublicURL: pub, Assets: testAssets}.Install()
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for waiting := false; !waiting; {
		select {
		case err := <-done:
			t.Fatalf("install went ahead while another held the lock: %v", err)
		default:
		}
		locks, _ := os.ReadFile("/proc/locks")
		for _, l := range strings.Split(string(locks), "\n") {
			waiting = waiting || (strings.Contains(l, "->") && strings.Contains(l, inode))
		}
		if time.Now().After(deadline) {
			t.Fatal("install never waited for the lock")
		}
		time.Sleep(5 * time.Millisecond) // polling the kernel's lock table, not waiting for time
	}
	if got := readFooterT(t, dir); got != "mine\n" {
		t.Fatalf("footer written while the lock was held: %q", got)
	}
	_ = syscall.Flock(int(held.Fd()), syscall.LOCK_UN)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	block, _ := blockFor(pub)
	if got := readFooterT(t, dir); got != "mine\n"+block {
		t.Fatalf("footer: %q", got)
	}
}

// A new bundle (an upgraded sidecar) changes the block: install again
// rewrites the tags with the new names and integrity, in place.
func TestInstallUpdatesTheIntegrityWhenTheAssetsChange(t *testing.T) {
	dir := t.TempDir()
	writeFooter(t, dir, "mine\n", 0o644)
	mustInstall(t, dir, pub, true)
	upgraded := assets.Bundle{
		"collab-lease.js":  assets.New("collab-lease.js", []byte("/* badge, version 2 */\n")),
		"collab-lease.css": testAssets["collab-lease.css"],
	}
	f := Footer{CustomDir: dir, PublicURL: pub, Assets: upgraded}
	if ok, err := f.Installed(); ok || err != nil {
		t.Fatalf("the old block counts as installed for the new bundle: %v %v", ok, err)
	}
	if _, changed, err := f.Install(); err != nil || !changed {
		t.Fatalf("install of the new bundle: %v %v", changed, err)
	}
	sum := sha512.Sum384([]byte("/* badge, version 2 */\n"))
	got := readFooterT(t, dir)
	if !strings.Contains(got, `integrity="sha384-`+base64.StdEncoding.EncodeToString(sum[:])+`"`) ||
		!strings.Contains(got, upgraded["collab-lease.js"].HashedName()) ||
		strings.Contains(got, testAssets["collab-lease.js"].Integrity) || strings.Count(got, "collab-lease:begin") != 1 {
		t.Fatalf("footer after the upgrade:\n%s", got)
	}
	if ok, err := f.Installed(); !ok || err != nil {
		t.Fatalf("installed: %v %v", ok, err)
	}
	if _, err := (Footer{PublicURL: pub}).Block(); err == nil {
		t.Fatal("a block without the bundle")
	}
}
