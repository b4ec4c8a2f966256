//go:build unix

package main

import (
	"os"
	"path/filepath"
	"testing"
)

// A command rides run's session only through a directory of its own
// user's that nobody else may enter, never through a link to one.
func TestPrivateDir(t *testing.T) {
	base := t.TempDir()
	mk := func(name string, mode os.FileMode) string {
		p := filepath.Join(base, name)
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	private, open, group := mk("private", 0o700), mk("open", 0o755), mk("group", 0o710)
	link := filepath.Join(base, "link")
	if err := os.Symlink(private, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]bool{private: true, open: false, group: false, link: false, file: false,
		filepath.Join(base, "missing"): false} {
		if got := privateDir(dir); got != want {
			t.Errorf("privateDir(%s) = %v, want %v", filepath.Base(dir), got, want)
		}
	}
}

// A run answers a check of its own claim only: its repository, its
// issue, the verb check.
func TestRunClaimIsCheckedOnlyByACheckOfIt(t *testing.T) {
	c := runClaim{repo: "acme/widgets", issue: 42}
	for line, want := range map[string]bool{
		"check acme/widgets 42 --token 3":               true,
		"check acme/widgets 42 --token 3 --agent a1":    true,
		"check acme/widgets 43 --token 3":               false,
		"check acme/gadgets 42 --token 3":               false,
		"history acme/widgets 42":                       false,
		"acquire acme/widgets 42":                       false,
		"check acme/widgets 42":                         false, // no token: not a check
		"check acme/widgets 42 --token 3\nrelease x 42": false,
	} {
		if got := c.checkedBy(line); got != want {
			t.Errorf("checkedBy(%q) = %v, want %v", line, got, want)
		}
	}
}
