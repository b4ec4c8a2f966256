package contract

import (
	"go/build"
	"testing"
)

// The contract is a leaf: a client imports it without the server's
// database driver or web framework (docs/ARCHITECTURE.md). So is buildinfo, which the
// client imports too. The standard library imports nothing outside itself,
// so checking the direct imports of each package (its tests aside) covers
// everything it pulls in.
func TestImportsOnlyTheStandardLibrary(t *testing.T) {
	for _, dir := range []string{".", "../../buildinfo"} {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(pkg.Imports) == 0 {
			t.Fatalf("%s: no imports found: the check would pass vacuously", pkg.ImportPath)
		}
		for _, path := range pkg.Imports {
			dep, err := build.Import(path, pkg.Dir, build.FindOnly)
			if err != nil {
				t.Errorf("%s: import %s: %v", pkg.Name, path, err)
				continue
			}
			if !dep.Goroot {
				t.Errorf("%s imports %s, which is not in the standard library", pkg.Name, path)
			}
		}
	}
}
