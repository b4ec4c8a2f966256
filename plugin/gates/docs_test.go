package gates

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	pathpkg "path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The documentation gate: docs/ARCHITECTURE.md and the package docs say
// where things are, and a statement that names a file or a function the
// tree lacks, or a file nobody names, is how they drift. So:
//
//  1. every non-test Go file of a package is named in its package doc,
//     in its row of ARCHITECTURE's table of packages, or anywhere in
//     ARCHITECTURE by its path;
//  2. every Go file ARCHITECTURE names (`plugin/lease/wait.go`, or
//     `wait.go` in plugin/lease's row) exists;
//  3. every Go name ARCHITECTURE names in backquotes (`Store.Acquire`,
//     `lease.WithClock`, `cachedOrAsk`, `Options.FencePushes`: a name with
//     a dot, or with an upper-case letter after its first) is declared in
//     the module, tests included, as a function, method, type, field,
//     constant or variable.

// archPath is ARCHITECTURE's path from the module's root.
const archPath = "docs/ARCHITECTURE.md"

// goTree is what the gate reads of the module: each Go file's contents,
// by its path from the root (with forward slashes).
type goTree map[string][]byte

// readGoTree reads every Go file of the module.
func readGoTree(t *testing.T) goTree {
	t.Helper()
	tree := goTree{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "vendor") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(name, ".go") {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		tree[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// packageRows are the rows of ARCHITECTURE's table of packages, by the
// package's directory (the first cell, without its trailing slash).
func packageRows(arch string) map[string]string {
	rows := map[string]string{}
	for _, line := range strings.Split(arch, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cell, _, ok := strings.Cut(line[3:], "`")
		if !ok || strings.ContainsAny(cell, " ") {
			continue
		}
		rows[strings.TrimSuffix(cell, "/")] = line
	}
	return rows
}

var (
	backquoted = regexp.MustCompile("`([^`\n]+)`")
	goFileRef  = regexp.MustCompile(`^[A-Za-z0-9_./-]+\.go$`)
	goNameRef  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?(\(\))?$`)
)

// declared is every name the module declares: functions, types,
// constants and variables by their name and as pkg.Name (pkg the
// package's name), methods and fields as Type.Name.
type declared map[string]bool

func (d declared) add(tree goTree, t *testing.T) {
	fset := token.NewFileSet()
	for p, src := range tree {
		f, err := parser.ParseFile(fset, p, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		pkg := f.Name.Name
		name := func(n string) { d[n], d[pkg+"."+n] = true, true }
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if decl.Recv == nil || len(decl.Recv.List) == 0 {
					name(decl.Name.Name)
					continue
				}
				d[recvType(decl.Recv.List[0].Type)+"."+decl.Name.Name] = true
				d[decl.Name.Name] = true
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					switch spec := spec.(type) {
					case *ast.TypeSpec:
						name(spec.Name.Name)
						d.fields(spec.Name.Name, spec.Type)
					case *ast.ValueSpec:
						for _, n := range spec.Names {
							name(n.Name)
						}
					}
				}
			}
		}
	}
}

// fields adds typ's fields and interface methods as owner.Name.
func (d declared) fields(owner string, typ ast.Expr) {
	var list *ast.FieldList
	switch typ := typ.(type) {
	case *ast.StructType:
		list = typ.Fields
	case *ast.InterfaceType:
		list = typ.Methods
	default:
		return
	}
	for _, f := range list.List {
		for _, n := range f.Names {
			d[owner+"."+n.Name] = true
		}
		if len(f.Names) == 0 { // embedded: its name is the type's
			d[owner+"."+recvType(f.Type)] = true
		}
	}
}

// recvType is the name of a receiver's (or embedded field's) type.
func recvType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvType(e.X)
	case *ast.IndexExpr:
		return recvType(e.X)
	case *ast.IndexListExpr:
		return recvType(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// checkDocs returns what is wrong with arch (ARCHITECTURE's text) and
// the package docs of tree, one line each, sorted.
func checkDocs(t *testing.T, tree goTree, arch string) []string {
	var problems []string
	rows := packageRows(arch)
	// Package docs, by directory; the files that carry them.
	docs := map[string]string{}
	carriers := map[string]bool{}
	fset := token.NewFileSet()
	for p, src := range tree {
		f, err := parser.ParseFile(fset, p, src, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if f.Doc != nil && !strings.HasSuffix(p, "_test.go") {
			docs[pathpkg.Dir(p)] += f.Doc.Text()
			carriers[p] = true
		}
	}
	// 1. Every non-test file named (the file that carries the package
	// doc is named by it).
	for p := range tree {
		if strings.HasSuffix(p, "_test.go") || carriers[p] {
			continue
		}
		dir, base := pathpkg.Dir(p), pathpkg.Base(p)
		if !strings.Contains(docs[dir], base) && !strings.Contains(rows[dir], "`"+base+"`") && !strings.Contains(arch, "`"+p+"`") {
			problems = append(problems, p+": named neither in its package doc nor in "+archPath)
		}
	}
	// 2 and 3. What ARCHITECTURE names exists.
	names := declared{}
	names.add(tree, t)
	rowOf := map[string]string{} // a line of a row → its package
	for dir, row := range rows {
		rowOf[row] = dir
	}
	for _, line := range strings.Split(arch, "\n") {
		for _, m := range backquoted.FindAllStringSubmatch(line, -1) {
			ref := m[1]
			switch {
			case goFileRef.MatchString(ref):
				p := ref
				if !strings.Contains(ref, "/") {
					dir, inRow := rowOf[line]
					if !inRow {
						continue // a file of a package the line does not say
					}
					p = pathpkg.Join(dir, ref)
					// Or of another package the row names.
					for _, m := range backquoted.FindAllStringSubmatch(line, -1) {
						if other := strings.TrimSuffix(m[1], "/"); tree[pathpkg.Join(other, ref)] != nil {
							p = pathpkg.Join(other, ref)
							break
						}
					}
				}
				if _, ok := tree[p]; !ok {
					problems = append(problems, archPath+" names "+p+", which the tree lacks")
				}
			case goNameRef.MatchString(ref) && isGoName(ref) && !notGo[ref]:
				n := strings.TrimSuffix(ref, "()")
				if !names[n] {
					problems = append(problems, archPath+" names `"+ref+"`, which the module does not declare")
				}
			}
		}
	}
	sort.Strings(problems)
	return slicesCompact(problems)
}

// notGo are names ARCHITECTURE may give that are not the module's: the
// browser's, and files that are not Go.
var notGo = map[string]bool{"EventSource": true, "CHANGELOG.md": true, "openapi.json": true}

// isGoName tells a reference to a Go name (a dot, or an upper-case letter
// after the first, and some lower-case) from a word, a flag or a constant
// of the environment (GOGC).
func isGoName(ref string) bool {
	n := strings.TrimSuffix(ref, "()")
	if strings.ToUpper(n) == n {
		return false
	}
	return strings.Contains(n, ".") || strings.ContainsAny(n[1:], "ABCDEFGHIJKLMNOPQRSTUVWXYZ") || strings.HasSuffix(ref, "()")
}

func slicesCompact(s []string) []string {
	out := s[:0]
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}

func TestArchitectureNamesWhatTheTreeHas(t *testing.T) {
	tree := readGoTree(t)
	if len(tree) < 200 {
		t.Fatalf("read %d Go files: not the module", len(tree))
	}
	arch, err := os.ReadFile(filepath.Join(root, archPath))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range checkDocs(t, tree, string(arch)) {
		t.Error(p)
	}
}

// The gate fails on a synthetic tree: a file nobody names, a file and a
// function ARCHITECTURE names that do not exist.
func TestArchitectureGateFlagsWhatDrifted(t *testing.T) {
	tree := goTree{
		"pkg/a/doc.go":   []byte("// Package a: a.go holds Serve.\npackage a\n"),
		"pkg/a/a.go":     []byte("package a\n\ntype Server struct{ Addr string }\n\nfunc (s *Server) Serve() {}\n"),
		"pkg/a/stray.go": []byte("package a\n\nfunc stray() {}\n"),
		"pkg/b/b.go":     []byte("package b\n\nfunc New() {}\n"),
	}
	arch := "| package | job |\n|---|---|\n" +
		"| `pkg/b` | `b.go`, `gone.go`: `b.New`, `Server.Serve`, `Server.Addr`, `missingFunc`, `Server.Stop`, `--flag`, `GOGC` |\n" +
		"See `pkg/a/moved.go`.\n"
	got := checkDocs(t, tree, arch)
	want := []string{
		archPath + " names `Server.Stop`, which the module does not declare",
		archPath + " names `missingFunc`, which the module does not declare",
		archPath + " names pkg/a/moved.go, which the tree lacks",
		archPath + " names pkg/b/gone.go, which the tree lacks",
		"pkg/a/stray.go: named neither in its package doc nor in " + archPath,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the gate found:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
