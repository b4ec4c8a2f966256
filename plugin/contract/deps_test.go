package contract

import (
	"go/build"
	"testing"
)

// The contract is a leaf: a client imports it without the server's
// database driver or web framework (SPEC §8.1). The standard library
// imports nothing outside itself, so checking the direct imports of the
// package (its tests aside) covers everything it pulls in.
func TestImportsOnlyTheStandardLibrary(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkg.Imports) == 0 {
		t.Fatal("no imports found: the check would pass vacuously")
	}
	for _, path := range pkg.Imports {
		dep, err := build.Import(path, pkg.Dir, build.FindOnly)
		if err != nil {
			t.Errorf("import %s: %v", path, err)
			continue
		}
		if !dep.Goroot {
			t.Errorf("plugin/contract imports %s, which is not in the standard library", path)
		}
	}
}
