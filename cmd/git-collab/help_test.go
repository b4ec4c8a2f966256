package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The help texts, byte for byte. The synopses and the options' placeholders
// are made from the contract's grammar; this holds them to the text they
// had when they were written out by hand, and shows any change to them in
// the golden file's diff (go test -run HelpIsTheGoldenText -update
// rewrites it).
func TestHelpIsTheGoldenText(t *testing.T) {
	var b strings.Builder
	b.WriteString("== git collab -h\n" + mainHelp())
	for _, v := range verbs {
		b.WriteString("== git collab " + v.name + " -h\n" + verbHelp(&v))
	}
	b.WriteString("== git collab help --man\n" + manPage())
	checkGolden(t, "help.txt", []byte(b.String()), "HelpIsTheGoldenText")
}

// checkGolden compares got with testdata/name, after writing it there
// under -update; test is the -run pattern that rewrites it.
func checkGolden(t *testing.T, name string, got []byte, test string) {
	t.Helper()
	golden := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test -run %s -update writes it)", err, test)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from what git collab makes; if that is meant, run go test -run %s -update and review the diff\n%s",
			golden, test, got)
	}
}
