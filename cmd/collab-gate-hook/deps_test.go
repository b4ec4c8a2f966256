package main

import (
	"debug/buildinfo"
	"debug/elf"
	"go/build"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

const (
	contractPath  = "github.com/collab-lease/collab-lease/plugin/contract"
	buildinfoPath = "github.com/collab-lease/collab-lease/buildinfo"
)

// The hook runs inside Gitea's environment, perhaps Gitea's container,
// where none of the sidecar's libraries are: besides the standard library
// it imports only the contract it shares with the sidecar and buildinfo
// (for --version), which are standard library only themselves (their own
// test says so). So nothing of the server (gorm, SQLite, cgo) reaches it.
func TestImportsOnlyTheStandardLibraryAndTheContract(t *testing.T) {
	allowed := map[string]bool{contractPath: true, buildinfoPath: true}
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	sawContract := false
	for _, path := range pkg.Imports {
		if allowed[path] {
			sawContract = sawContract || path == contractPath
			continue
		}
		dep, err := build.Import(path, pkg.Dir, build.FindOnly)
		if err != nil {
			t.Errorf("import %s: %v", path, err)
			continue
		}
		if !dep.Goroot {
			t.Errorf("collab-gate-hook imports %s: only the standard library, plugin/contract and buildinfo may be", path)
		}
	}
	if !sawContract {
		t.Errorf("collab-gate-hook does not import %s: the check would say nothing about it", contractPath)
	}
}

// It builds with CGO_ENABLED=0, as make build and the Dockerfile build
// it, into a binary that needs no dynamic loader: it runs on whatever
// system Gitea runs on.
func TestBuildsStatically(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the program")
	}
	bin := filepath.Join(t.TempDir(), "collab-gate-hook")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build with CGO_ENABLED=0: %v\n%s", err, out)
	}
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range info.Settings {
		if s.Key == "CGO_ENABLED" && s.Value != "0" {
			t.Errorf("built with CGO_ENABLED=%s", s.Value)
		}
	}
	if runtime.GOOS != "linux" {
		return
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the binary asks for a dynamic loader")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs shared libraries: %s", strings.Join(libs, ", "))
	}
}
