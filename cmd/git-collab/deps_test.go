package main

import (
	"go/build"
	"testing"
)

// The client is a small, pure-Go binary: besides the standard library it
// imports only the contract it shares with the sidecar, which is itself
// standard library only (its own test says so), so none of the server's
// dependencies (gorm, SQLite, gin) can reach it.
func TestImportsOnlyTheContract(t *testing.T) {
	const contractPath = "github.com/collab-lease/collab-lease/plugin/contract"
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	sawContract := false
	for _, path := range pkg.Imports {
		if path == contractPath {
			sawContract = true
			continue
		}
		dep, err := build.Import(path, pkg.Dir, build.FindOnly)
		if err != nil {
			t.Errorf("import %s: %v", path, err)
			continue
		}
		if !dep.Goroot {
			t.Errorf("git-collab imports %s: only the standard library and plugin/contract may be", path)
		}
	}
	if !sawContract {
		t.Errorf("git-collab does not import %s: the check would say nothing about it", contractPath)
	}
}
