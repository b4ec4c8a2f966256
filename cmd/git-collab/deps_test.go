package main

import (
	"go/build"
	"testing"
)

// The client is a small, pure-Go binary: besides the standard library it
// imports only the contract it shares with the sidecar and buildinfo (for
// --version), which are themselves standard library only (their own tests
// say so), so none of the server's dependencies (gorm, SQLite, gin) can
// reach it.
func TestImportsOnlyTheContract(t *testing.T) {
	const contractPath = "github.com/collab-lease/collab-lease/plugin/contract"
	leaves := map[string]bool{contractPath: true, "github.com/collab-lease/collab-lease/buildinfo": true}
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	sawContract := false
	for _, path := range pkg.Imports {
		if leaves[path] {
			sawContract = sawContract || path == contractPath
			continue
		}
		dep, err := build.Import(path, pkg.Dir, build.FindOnly)
		if err != nil {
			t.Errorf("import %s: %v", path, err)
			continue
		}
		if !dep.Goroot {
			t.Errorf("git-collab imports %s: only the standard library, plugin/contract and buildinfo may be", path)
		}
	}
	if !sawContract {
		t.Errorf("git-collab does not import %s: the check would say nothing about it", contractPath)
	}
}
