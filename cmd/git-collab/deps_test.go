package main

import (
	"go/build"
	"os/exec"
	"strings"
	"testing"
)

const (
	clientPath    = "github.com/collab-lease/collab-lease/cmd/git-collab"
	contractPath  = "github.com/collab-lease/collab-lease/plugin/contract"
	buildinfoPath = "github.com/collab-lease/collab-lease/buildinfo"
	mcpPath       = "github.com/modelcontextprotocol/go-sdk/mcp"
)

// The client is a small, pure-Go binary: besides the standard library it
// imports the contract it shares with the sidecar and buildinfo (for
// --version), which are themselves standard library only (their own tests
// say so), and, for git collab mcp, the official MCP SDK and the JSON
// Schema package its API is written in. So none of the server's
// dependencies (gorm, SQLite, gin) can reach it.
func TestImportsOnlyTheContractAndTheMCPSDK(t *testing.T) {
	allowed := map[string]bool{contractPath: true, buildinfoPath: true, mcpPath: true, "github.com/google/jsonschema-go/jsonschema": true}
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
			t.Errorf("git-collab imports %s: only the standard library, plugin/contract, buildinfo and the MCP SDK may be", path)
		}
	}
	if !sawContract {
		t.Errorf("git-collab does not import %s: the check would say nothing about it", contractPath)
	}
}

// Whatever else it depends on is the MCP SDK's own: nothing more of this
// module, and no cgo outside the standard library (the
// integration tests build it with CGO_ENABLED=0).
func TestDependsOnNothingButTheMCPSDKs(t *testing.T) {
	deps := func(pkg string) map[string]string {
		t.Helper()
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{.Standard}} {{len .CgoFiles}}", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		m := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			path, rest, _ := strings.Cut(line, " ")
			m[path] = rest
		}
		return m
	}
	sdk := deps(mcpPath)
	ours := deps(".")
	if _, ok := ours[mcpPath]; !ok {
		t.Fatalf("git-collab does not depend on %s: the check would say nothing about it", mcpPath)
	}
	for path, rest := range ours {
		standard, cgoFiles, _ := strings.Cut(rest, " ")
		if standard == "true" {
			continue
		}
		if cgoFiles != "0" {
			t.Errorf("%s uses cgo", path)
		}
		if _, viaSDK := sdk[path]; !viaSDK && path != contractPath && path != buildinfoPath && path != clientPath {
			t.Errorf("git-collab depends on %s, which the MCP SDK does not bring", path)
		}
	}
}
