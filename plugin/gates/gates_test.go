package gates

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	pathpkg "path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The architectural gate of the concurrency discipline: only this package
// writes the ledger. Outside models/ no Go file (tests included) may
//
//  1. import a database driver or ORM (gorm, the SQLite and PostgreSQL
//     drivers, database/sql, or any package of theirs) — without one,
//     nothing else can open the ledger to write it;
//  2. carry SQL text that writes the lease tables (INSERT/UPDATE/DELETE/
//     REPLACE on leases or lease_events), e.g. for an exec of sqlite3;
//
// and models/ itself may not hand its *gorm.DB or *sql.DB out through an
// exported function, method or field, which would be a back door around
// the five operations.
//
// One exception, for tests: models/pgtest, which creates and drops the
// tests' PostgreSQL databases, may import the PostgreSQL driver (pgx) and
// nothing else of the list; it is held to rule 2 like everyone, and only
// test files may import it.

// root is the module's root, from this package's directory; selfFile is
// this file, whose synthetic offending sources the ledger gate skips.
const (
	root     = "../.."
	selfFile = "plugin/gates/gates_test.go"
)

var dbImports = map[string]bool{
	"gorm.io/gorm":                  true,
	"gorm.io/driver/sqlite":         true,
	"github.com/mattn/go-sqlite3":   true,
	"modernc.org/sqlite":            true,
	"github.com/glebarez/sqlite":    true,
	"database/sql":                  true,
	"database/sql/driver":           true,
	"github.com/ncruces/go-sqlite3": true,
	"gorm.io/driver/postgres":       true,
	"github.com/jackc/pgx/v5":       true,
	"github.com/lib/pq":             true,
	"github.com/jmoiron/sqlx":       true,
	"github.com/uptrace/bun":        true,
	"xorm.io/xorm":                  true,
	"zombiezen.com/go/sqlite":       true,
	"crawshaw.io/sqlite":            true,
}

// dbImport says whether path is a package of dbImports (or one of them).
func dbImport(path string) bool {
	for p := range dbImports {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

// pgtestDir is the tests' PostgreSQL helper, and pgxModule the one
// driver it may import.
const (
	pgtestDir = "models/pgtest"
	pgxModule = "github.com/jackc/pgx/v5"
)

// ledgerTables are the tables only models/ may change.
const ledgerTables = `(leases|lease_events|issue_states|webhook_deliveries|pull_requests|pull_links|session_epochs|fence_rules|collab_schema)`

// leaseWriteSQL matches SQL that changes a ledger table, with or without a
// schema name ("main.leases") or quotes around it.
var leaseWriteSQL = regexp.MustCompile(`(?is)\b(insert\s+(or\s+\w+\s+)?into|replace\s+into|update(\s+or\s+\w+)?|delete\s+from|drop\s+table(\s+if\s+exists)?|alter\s+table|create\s+(unique\s+)?(index|trigger)[^;]*?\s+on)\s+(["'\x60\[]?\w+["'\x60\]]?\.)?["'\x60\[]?` + ledgerTables + `\b`)

type violation struct {
	pos  string
	what string
}

// scanFile reports the gate's violations in one parsed file, at rel (its
// slash-separated path in the module).
func scanFile(fset *token.FileSet, f *ast.File, rel string) []violation {
	var out []violation
	add := func(n ast.Node, what string) {
		out = append(out, violation{pos: fset.Position(n.Pos()).String(), what: what})
	}
	dir := pathpkg.Dir(rel)
	if dir != "models" {
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			switch {
			case dir == pgtestDir && (path == pgxModule || strings.HasPrefix(path, pgxModule+"/")):
				// creates and drops the tests' databases
			case dbImport(path):
				add(imp, "imports "+path+": only models/ may touch the ledger's database")
			case path == modulePath+"/"+pgtestDir && !strings.HasSuffix(rel, "_test.go"):
				add(imp, "imports "+path+" outside a test: it is the tests' helper")
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BasicLit:
				if s, ok := stringLit(n); ok && leaseWriteSQL.MatchString(s) {
					add(n, "SQL that writes the lease tables: "+strings.TrimSpace(s))
				}
			case *ast.BinaryExpr:
				// SQL split across literals: "UPDATE " + "leases …".
				if s, ok := concatenated(n); ok && leaseWriteSQL.MatchString(s) {
					add(n, "SQL that writes the lease tables, split across literals: "+strings.TrimSpace(s))
					return false
				}
			case *ast.CallExpr:
				// SQL built by fmt: Sprintf("UPDATE %s SET …", "leases").
				if s, ok := formatted(n); ok {
					switch {
					case leaseWriteSQL.MatchString(s):
						add(n, "SQL that writes the lease tables, built by fmt: "+strings.TrimSpace(s))
						return false
					case writeSomeTable.MatchString(s):
						add(n, "SQL that writes a table named at run time, built by fmt: "+strings.TrimSpace(s))
						return false
					}
				}
			}
			return true
		})
		return out
	}
	// The names this file imports the database packages under (an
	// import may rename them: g "gorm.io/gorm").
	names := map[string]string{}
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		name := pathpkg.Base(path)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		names[name] = path
	}
	leaks := func(expr ast.Expr) bool {
		found := false
		ast.Inspect(expr, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			id, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			switch names[id.Name] {
			case "gorm.io/gorm":
				found = found || sel.Sel.Name == "DB" || sel.Sel.Name == "ConnPool"
			case "database/sql":
				found = found || sel.Sel.Name == "DB" || sel.Sel.Name == "Tx" || sel.Sel.Name == "Conn"
			}
			return true
		})
		return found
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Name.IsExported() && d.Type.Results != nil {
				for _, r := range d.Type.Results.List {
					if leaks(r.Type) {
						add(d, "exported "+d.Name.Name+" hands out the database handle")
					}
				}
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				if vs, ok := spec.(*ast.ValueSpec); ok && vs.Type != nil && leaks(vs.Type) {
					for _, name := range vs.Names {
						if name.IsExported() {
							add(vs, "exported variable "+name.Name+" hands out the database handle")
						}
					}
				}
				ts, ok := spec.(*ast.TypeSpec)
				if !ok {
					continue
				}
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				for _, fld := range st.Fields.List {
					if len(fld.Names) == 0 && leaks(fld.Type) {
						// An embedded *gorm.DB is an exported field DB.
						add(fld, "embedded field of "+ts.Name.Name+" hands out the database handle")
					}
					for _, name := range fld.Names {
						if name.IsExported() && leaks(fld.Type) {
							add(fld, "exported field "+ts.Name.Name+"."+name.Name+" hands out the database handle")
						}
					}
				}
			}
		}
	}
	return out
}

// writeSomeTable matches write SQL whose table is left to a formatting
// verb: outside models/ nothing may write a table named at run time.
var writeSomeTable = regexp.MustCompile(`(?is)\b(insert\s+(or\s+\w+\s+)?into|replace\s+into|update(\s+or\s+\w+)?|delete\s+from|drop\s+table(\s+if\s+exists)?|alter\s+table)\s+(["'\x60\[]?\w+["'\x60\]]?\.)?["'\x60\[]?\x00`)

// formatted is the text of a call to fmt's Sprintf, Sprint, Fprintf,
// Printf, Appendf or Errorf family with literal arguments substituted for
// their verbs; a verb whose argument is no literal stands as "\x00".
func formatted(call *ast.CallExpr) (string, bool) {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return "", false
	}
	if id, ok := sel.X.(*ast.Ident); !ok || id.Name != "fmt" {
		return "", false
	}
	args := call.Args
	switch sel.Sel.Name {
	case "Sprintf", "Printf", "Errorf":
	case "Fprintf", "Appendf":
		if len(args) == 0 {
			return "", false
		}
		args = args[1:]
	case "Sprint", "Sprintln":
		var parts []string
		for _, a := range args {
			if lit, ok := a.(*ast.BasicLit); ok {
				if v, ok := stringLit(lit); ok {
					parts = append(parts, v)
					continue
				}
			}
			parts = append(parts, "\x00")
		}
		return strings.Join(parts, ""), true
	default:
		return "", false
	}
	if len(args) == 0 {
		return "", false
	}
	lit, ok := args[0].(*ast.BasicLit)
	if !ok {
		return "", false
	}
	format, ok := stringLit(lit)
	if !ok {
		return "", false
	}
	rest := args[1:]
	verb := regexp.MustCompile(`%[-+# 0-9.*]*[a-zA-Z%]`)
	return verb.ReplaceAllStringFunc(format, func(v string) string {
		if v == "%%" {
			return "%"
		}
		if len(rest) == 0 {
			return "\x00"
		}
		a := rest[0]
		rest = rest[1:]
		if lit, ok := a.(*ast.BasicLit); ok {
			if s, ok := stringLit(lit); ok {
				return s
			}
			return lit.Value // a number
		}
		return "\x00"
	}), true
}

// stringLit is the value of a string literal.
func stringLit(lit *ast.BasicLit) (string, bool) {
	if lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// concatenated is the value of a sum of string literals (other operands
// stand as a blank), if it has at least two literals.
func concatenated(e *ast.BinaryExpr) (string, bool) {
	var parts []string
	lits := 0
	var walk func(ast.Expr)
	walk = func(x ast.Expr) {
		switch x := x.(type) {
		case *ast.BinaryExpr:
			if x.Op == token.ADD {
				walk(x.X)
				walk(x.Y)
				return
			}
		case *ast.ParenExpr:
			walk(x.X)
			return
		case *ast.BasicLit:
			if s, ok := stringLit(x); ok {
				parts = append(parts, s)
				lits++
				return
			}
		}
		parts = append(parts, " ")
	}
	if e.Op != token.ADD {
		return "", false
	}
	walk(e)
	return strings.Join(parts, ""), lits >= 2
}

// walkGo parses every Go file of the module (skipping nested modules and
// testdata) and hands each to visit with its slash-separated path relative
// to root.
func walkGo(t *testing.T, root string, visit func(rel string, fset *token.FileSet, f *ast.File)) {
	t.Helper()
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			if path != root {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // a nested module (the Gitea build) is not our code
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		visit(filepath.ToSlash(rel), fset, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// scanTree returns the ledger gate's violations in the module and how many
// files it read.
func scanTree(t *testing.T, root string) ([]violation, int) {
	t.Helper()
	var out []violation
	files := 0
	walkGo(t, root, func(rel string, fset *token.FileSet, f *ast.File) {
		files++
		if rel == selfFile {
			return // its offending sources are the non-vacuity cases' strings
		}
		out = append(out, scanFile(fset, f, rel)...)
	})
	return out, files
}

func TestOnlyModelsWritesTheLedger(t *testing.T) {
	violations, files := scanTree(t, root)
	for _, v := range violations {
		t.Errorf("%s: %s", v.pos, v.what)
	}
	// The gate must have read every Go file the go command builds or
	// tests in this module (it reads those of other build tags too), or
	// it would pass by not looking.
	want := moduleGoFiles(t)
	if files < want {
		t.Fatalf("scanned %d Go files, but go list counts %d in the module", files, want)
	}
	t.Logf("scanned %d Go files; go list counts %d in the module's packages", files, want)
}

// moduleGoFiles counts the Go files go list names in the module's
// packages: sources, cgo sources and tests.
func moduleGoFiles(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{len .GoFiles}} {{len .CgoFiles}} {{len .TestGoFiles}} {{len .XTestGoFiles}} {{len .IgnoredGoFiles}}", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	n := 0
	for _, f := range strings.Fields(string(out)) {
		k, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("go list: %q", out)
		}
		n += k
	}
	if n < 100 {
		t.Fatalf("go list counts only %d Go files: %q", n, out)
	}
	return n
}

// The tree walk itself: it reads files in subdirectories, skips nested
// modules, testdata and hidden directories, and reports what it finds
// where it finds it.
func TestLedgerGateWalksTheTree(t *testing.T) {
	root := t.TempDir()
	write := func(rel, src string) {
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/x\n")
	write("models/store.go", `package models; import "gorm.io/gorm"; type Store struct{ db *gorm.DB }`)
	write("ssh/deep/nested/leak.go", `package nested; var q = "DELETE FROM leases"`)
	write("routes/ok.go", `package routes; var q = "SELECT * FROM leases"`)
	write("integration/giteabin/go.mod", "module example.com/giteabin\n")
	write("integration/giteabin/main.go", `package main; import _ "gorm.io/gorm"`)
	write("cmd/testdata/fixture.go", `package fixture; import _ "database/sql"`)
	write(".hidden/x.go", `package hidden; import _ "database/sql"`)
	violations, files := scanTree(t, root)
	if files != 3 {
		t.Errorf("read %d files, want the 3 outside nested modules, testdata and hidden directories", files)
	}
	if len(violations) != 1 || !strings.Contains(violations[0].pos, filepath.Join("ssh", "deep", "nested", "leak.go")) {
		t.Errorf("violations %v, want the one in ssh/deep/nested/leak.go", violations)
	}
}

// Non-vacuity: the same scanner flags synthetic offending sources, so a
// green gate means "nothing found", not "could not find anything".
func TestLedgerGateFlagsOffendingSources(t *testing.T) {
	cases := []struct {
		name string
		rel  string
		src  string
		want int
	}{
		{"gorm import", "routes/x.go", `package ssh; import "gorm.io/gorm"; var _ *gorm.DB`, 1},
		{"renamed driver import", "routes/x.go", `package routes; import db "database/sql"; var _ *db.DB`, 1},
		{"blank sqlite driver", "routes/x.go", `package ssh; import _ "github.com/mattn/go-sqlite3"`, 1},
		{"update statement", "routes/x.go", "package routes\nvar q = `UPDATE leases SET holder = NULL`", 1},
		{"delete history", "routes/x.go", `package cmd; var q = "delete from lease_events where 1"`, 1},
		{"insert or replace", "routes/x.go", `package cmd; var q = "INSERT OR REPLACE INTO \"leases\" VALUES (1)"`, 1},
		{"exported DB accessor", "models/x.go", `package models; import "gorm.io/gorm"; type Store struct{}; func (s *Store) DB() *gorm.DB { return nil }`, 1},
		{"exported handle field", "models/x.go", `package models; import "database/sql"; type Store struct{ Conn *sql.DB }`, 1},
		{"an alias of gorm", "models/x.go", `package models; import g "gorm.io/gorm"; type Store struct{}; func (s *Store) H() *g.DB { return nil }`, 1},
		{"an embedded handle", "models/x.go", `package models; import "gorm.io/gorm"; type Store struct{ *gorm.DB }`, 1},
		{"an exported variable", "models/x.go", `package models; import "database/sql"; var Handle *sql.DB`, 1},
		{"sqlx", "routes/x.go", `package routes; import "github.com/jmoiron/sqlx"; var _ *sqlx.DB`, 1},
		{"bun", "routes/x.go", `package routes; import "github.com/uptrace/bun"; var _ *bun.DB`, 1},
		{"a schema name", "routes/x.go", `package cmd; var q = "INSERT INTO main.leases VALUES (1)"`, 1},
		{"a quoted schema name", "routes/x.go", "package cmd\nvar q = `UPDATE \"main\".\"lease_events\" SET token = 0`", 1},
		{"drop", "routes/x.go", `package cmd; var q = "DROP TABLE IF EXISTS leases"`, 1},
		{"alter", "routes/x.go", `package cmd; var q = "alter table lease_events add column x"`, 1},
		{"the issue states", "routes/x.go", `package cmd; var q = "UPDATE issue_states SET closed = 0"`, 1},
		{"split across literals", "routes/x.go", `package cmd; var q = "UPDATE " + "leases SET holder = NULL"`, 1},
		{"split around a variable", "routes/x.go", `package cmd; var t = "x"; var q = "DELETE FROM " + ("lease_events" + " WHERE ") + t`, 1},
		{"formatted with the table", "routes/x.go", `package cmd; import "fmt"; var q = fmt.Sprintf("UPDATE %s SET holder = NULL", "leases")`, 1},
		{"formatted with a table named at run time", "routes/x.go", `package cmd; import "fmt"; var t = "leases"; var q = fmt.Sprintf("DELETE FROM %s WHERE 1", t)`, 1},
		{"fmt.Sprint of pieces", "routes/x.go", `package cmd; import "fmt"; var q = fmt.Sprint("INSERT INTO ", "lease_events", " VALUES (1)")`, 1},
		{"formatted reads are fine", "routes/x.go", `package cmd; import "fmt"; var t = "leases"; var q = fmt.Sprintf("SELECT * FROM %s", t); var m = fmt.Sprintf("update %d leases", 3)`, 0},
		{"reads are fine", "routes/x.go", `package routes; var q = "SELECT * FROM leases"; var u = "update your leases"`, 0},
		{"a driver's own package", "routes/x.go", `package routes; import "github.com/jackc/pgx/v5/stdlib"`, 1},
		{"gorm's PostgreSQL driver", "cmd/collab-sidecar/x.go", `package main; import _ "gorm.io/driver/postgres"`, 1},
		{"pgx in the end-to-end tests", "integration/pg_e2e_test.go", `package integration; import "github.com/jackc/pgx/v5"`, 1},
		{"the schema table", "routes/x.go", `package routes; var q = "DELETE FROM collab_schema"`, 1},
		{"pgtest may use pgx", "models/pgtest/pgtest.go", `package pgtest; import "github.com/jackc/pgx/v5"; import "github.com/jackc/pgx/v5/pgconn"`, 0},
		{"pgtest may not use gorm", "models/pgtest/pgtest.go", `package pgtest; import "gorm.io/gorm"`, 1},
		{"pgtest may not write the ledger", "models/pgtest/pgtest.go", `package pgtest; var q = "UPDATE leases SET token = 0"`, 1},
		{"pgtest outside a test", "integration/sidecar.go", `package integration; import "github.com/collab-lease/collab-lease/models/pgtest"`, 1},
		{"pgtest in a test", "integration/pg_e2e_test.go", `package integration; import "github.com/collab-lease/collab-lease/models/pgtest"`, 0},
		{"models may use gorm inside", "models/x.go", `package models; import "gorm.io/gorm"; type Store struct{ db *gorm.DB }; func load(tx *gorm.DB) {}`, 0},
	}
	for _, c := range cases {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, c.name+".go", c.src, 0)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := scanFile(fset, f, c.rel); len(got) != c.want {
			t.Errorf("%s: %d violations %v, want %d", c.name, len(got), got, c.want)
		}
	}
}

// The second gate: all HTTP to Gitea lives in plugin/gitea, where one
// mapping turns Gitea's answers into the forge's errors. No
// other non-test Go file may import the Gitea SDK or use net/http's client
// side: a request (NewRequest), a client (Client, DefaultClient, Get, …) or
// a transport to send one with. Serving HTTP (handlers, Request and
// ResponseWriter, cookies, httptest in tests) is fine. Exempt are the
// test helpers of integration/ (they seed a real Gitea), the benchmark
// programs under bench/ (they seed Gitea, and play agents that use Gitea's
// API as stock Gitea offers it, through a proxy that counts requests),
// cmd/git-collab (the client, which speaks only to the sidecar),
// collab-sidecar's healthcheck (which asks the sidecar's own /healthz) and
// the gate's hook program's one request (cmd/collab-gate-hook/call.go,
// which asks the sidecar's admin listener).

const giteaSDK = "code.gitea.io/sdk/gitea"

// httpClientSide are net/http's names for sending a request.
var httpClientSide = map[string]bool{
	"Get": true, "Head": true, "Post": true, "PostForm": true,
	"NewRequest": true, "NewRequestWithContext": true,
	"Client": true, "DefaultClient": true, "Transport": true, "DefaultTransport": true,
}

// mayRequestGitea says whether the file at rel may speak HTTP to Gitea (or
// elsewhere) without going through plugin/gitea.
func mayRequestGitea(rel string) bool {
	switch {
	case strings.HasSuffix(rel, "_test.go"),
		pathpkg.Dir(rel) == "plugin/gitea",
		strings.HasPrefix(rel, "integration/"),
		strings.HasPrefix(rel, "bench/"),
		strings.HasPrefix(rel, "cmd/git-collab/"),
		rel == "cmd/collab-sidecar/healthcheck.go",
		rel == "cmd/collab-gate-hook/call.go":
		return true
	}
	return false
}

// scanHTTPClient reports the Gitea SDK and net/http's client side in one
// parsed file.
func scanHTTPClient(fset *token.FileSet, f *ast.File) []violation {
	var out []violation
	add := func(n ast.Node, what string) {
		out = append(out, violation{pos: fset.Position(n.Pos()).String(), what: what})
	}
	httpName := ""
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		switch {
		case path == giteaSDK || strings.HasPrefix(path, giteaSDK+"/"):
			add(imp, "imports "+path+": only plugin/gitea speaks to Gitea")
		case path == "net/http" && imp.Name != nil && imp.Name.Name == ".":
			add(imp, "dot-imports net/http, which hides whether it sends requests")
		case path == "net/http" && imp.Name != nil:
			httpName = imp.Name.Name
		case path == "net/http":
			httpName = "http"
		}
	}
	if httpName == "" || httpName == "_" {
		return out
	}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == httpName && httpClientSide[sel.Sel.Name] {
				add(sel, "uses net/http."+sel.Sel.Name+": only plugin/gitea sends HTTP requests to Gitea")
			}
		}
		return true
	})
	return out
}

func TestOnlyPluginGiteaSpeaksHTTPToGitea(t *testing.T) {
	scanned := map[string]int{}
	walkGo(t, root, func(rel string, fset *token.FileSet, f *ast.File) {
		if mayRequestGitea(rel) {
			return
		}
		scanned[pathpkg.Dir(rel)]++
		for _, v := range scanHTTPClient(fset, f) {
			t.Errorf("%s: %s", v.pos, v.what)
		}
	})
	// Floor: the packages that used to send requests to Gitea were read.
	for _, dir := range []string{"routes", "cmd/collab-sidecar", "plugin/lease", "plugin/live", "plugin/fence", "plugin/footer", "ssh"} {
		if scanned[dir] == 0 {
			t.Errorf("scanned no file of %s/; is the gate looking at the module root?", dir)
		}
	}
}

// Non-vacuity of the HTTP gate.
func TestHTTPGateFlagsOffendingSources(t *testing.T) {
	cases := []struct {
		name, rel, src string
		want           int
	}{
		{"http.Get", "routes/x.go", `package routes; import "net/http"; func f() { http.Get("http://gitea/api/v1/version") }`, 1},
		{"a request with context", "routes/oauth.go", `package routes; import "net/http"; var _, _ = http.NewRequestWithContext(nil, "POST", "/login/oauth/access_token", nil)`, 1},
		{"a renamed client", "cmd/collab-sidecar/doctor.go", `package main; import nethttp "net/http"; var c = &nethttp.Client{}`, 1},
		{"the default client", "plugin/fence/fence.go", `package fence; import "net/http"; var c = http.DefaultClient`, 1},
		{"the Gitea SDK", "plugin/lease/leases.go", `package lease; import sdk "code.gitea.io/sdk/gitea"; var _ sdk.Client`, 1},
		{"dot import", "ssh/x.go", `package ssh; import . "net/http"; var _ = Get`, 1},
		{"serving is fine", "routes/x.go", `package routes; import "net/http"; func h(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", http.StatusNotFound); http.SetCookie(w, &http.Cookie{}) }`, 0},
	}
	for _, c := range cases {
		if mayRequestGitea(c.rel) {
			t.Fatalf("%s: %s is exempt; the case proves nothing", c.name, c.rel)
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, c.rel, c.src, 0)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := scanHTTPClient(fset, f); len(got) != c.want {
			t.Errorf("%s: %d violations %v, want %d", c.name, len(got), got, c.want)
		}
	}
	for _, rel := range []string{"plugin/gitea/client.go", "integration/gitea_api.go", "cmd/git-collab/remote.go",
		"cmd/collab-sidecar/healthcheck.go", "cmd/collab-gate-hook/call.go", "routes/oauth_test.go", "bench/fleet/proxy.go"} {
		if !mayRequestGitea(rel) {
			t.Errorf("%s should be exempt", rel)
		}
	}
	for _, rel := range []string{"plugin/gitea/sub/x.go", "plugin/fence/fence.go", "plugin/live/hub.go", "cmd/collab-sidecar/doctor.go", "cmd/collab-gate-hook/ask.go"} {
		if mayRequestGitea(rel) {
			t.Errorf("%s should not be exempt", rel)
		}
	}
}

// The third gate: the transports make no ledger call except through the
// lease service (plugin/lease), which decides who may do what
// (docs/ARCHITECTURE.md). No non-test Go file of ssh/ or routes/ may
// import models/ at all: without it they can name neither the ledger nor
// its keys, so every lease read or write has to go through lease.Service.
var transports = []string{"ssh", "routes"}

// scanTransport reports the imports of the ledger in one parsed file of a
// transport.
func scanTransport(fset *token.FileSet, f *ast.File) []violation {
	var out []violation
	for _, imp := range f.Imports {
		if path, _ := strconv.Unquote(imp.Path.Value); path == modulePath+"/models" || strings.HasPrefix(path, modulePath+"/models/") {
			out = append(out, violation{pos: fset.Position(imp.Pos()).String(),
				what: "imports " + path + ": transports reach the ledger only through lease.Service"})
		}
	}
	return out
}

const modulePath = "github.com/collab-lease/collab-lease"

// isTransport says whether rel is a non-test Go file of a transport.
func isTransport(rel string) bool {
	if strings.HasSuffix(rel, "_test.go") {
		return false
	}
	for _, dir := range transports {
		if strings.HasPrefix(rel, dir+"/") {
			return true
		}
	}
	return false
}

func TestTransportsReachTheLedgerOnlyThroughTheService(t *testing.T) {
	scanned := map[string]int{}
	walkGo(t, root, func(rel string, fset *token.FileSet, f *ast.File) {
		if !isTransport(rel) {
			return
		}
		scanned[strings.SplitN(rel, "/", 2)[0]]++
		for _, v := range scanTransport(fset, f) {
			t.Errorf("%s: %s", v.pos, v.what)
		}
	})
	for _, dir := range transports {
		if scanned[dir] < 3 {
			t.Errorf("scanned %d files of %s/; is the gate looking at the module root?", scanned[dir], dir)
		}
	}
}

// Non-vacuity of the transport gate.
func TestTransportGateFlagsOffendingSources(t *testing.T) {
	cases := []struct {
		name, rel, src string
		want           int
	}{
		{"models", "ssh/dispatch.go", `package ssh; import "github.com/collab-lease/collab-lease/models"; var _ models.Key`, 1},
		{"renamed models", "routes/leases.go", `package routes; import m "github.com/collab-lease/collab-lease/models"; var _ m.Lease`, 1},
		{"a models subpackage", "routes/x.go", `package routes; import "github.com/collab-lease/collab-lease/models/leasemodel"`, 1},
		{"the service is fine", "ssh/dispatch.go", `package ssh; import "github.com/collab-lease/collab-lease/plugin/lease"; var _ *lease.Service`, 0},
	}
	for _, c := range cases {
		if !isTransport(c.rel) {
			t.Fatalf("%s: %s is not a transport file; the case proves nothing", c.name, c.rel)
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, c.rel, c.src, 0)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := scanTransport(fset, f); len(got) != c.want {
			t.Errorf("%s: %d violations %v, want %d", c.name, len(got), got, c.want)
		}
	}
	if isTransport("ssh/server_test.go") || isTransport("plugin/lease/leases.go") {
		t.Error("tests and the service itself are not transports")
	}
}

// The fourth gate: a change is published once, after COMMIT, by the one
// place that sees every ledger write of the lease service
// (plugin/lease/committed.go); the bus itself publishes expiries, and
// its Follow what other replicas announce. No other non-test Go file may
// call Publish on a bus: a verb that told the waiters, the live feeds or
// the fence worker of its change by hand would be the habit the bus
// replaced, and the first write to forget it would go untold.
const changesPath = modulePath + "/plugin/changes"

// mayPublish says whether the file at rel may publish on the bus.
func mayPublish(rel string) bool {
	return strings.HasSuffix(rel, "_test.go") || pathpkg.Dir(rel) == "plugin/changes" || rel == "plugin/lease/committed.go"
}

// scanPublish reports the calls of a method named Publish in a file that
// imports the bus's package (the bus is the only thing there with one).
func scanPublish(fset *token.FileSet, f *ast.File) []violation {
	imports := false
	for _, imp := range f.Imports {
		if path, _ := strconv.Unquote(imp.Path.Value); path == changesPath {
			imports = true
		}
	}
	if !imports {
		return nil
	}
	var out []violation
	ast.Inspect(f, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok {
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Publish" {
				out = append(out, violation{pos: fset.Position(call.Pos()).String(),
					what: "publishes on the change bus: only plugin/lease/committed.go publishes committed changes"})
			}
		}
		return true
	})
	return out
}

func TestOnlyTheCommittedLedgerPublishes(t *testing.T) {
	scanned := 0
	walkGo(t, root, func(rel string, fset *token.FileSet, f *ast.File) {
		if mayPublish(rel) {
			return
		}
		scanned++
		for _, v := range scanPublish(fset, f) {
			t.Errorf("%s: %s", v.pos, v.what)
		}
	})
	if scanned < 100 {
		t.Errorf("scanned %d files; is the gate looking at the module root?", scanned)
	}
}

// Non-vacuity of the bus gate.
func TestBusGateFlagsOffendingSources(t *testing.T) {
	cases := []struct {
		name, rel, src string
		want           int
	}{
		{"a verb fanning out", "plugin/lease/leases.go", `package lease; import "github.com/collab-lease/collab-lease/plugin/changes"; func f(b *changes.Bus) { b.Publish(changes.Set{}) }`, 1},
		{"a renamed import", "plugin/fence/fence.go", `package fence; import ch "github.com/collab-lease/collab-lease/plugin/changes"; func f(b *ch.Bus, s ch.Set) { b.Publish(s) }`, 1},
		{"subscribing is fine", "plugin/live/hub.go", `package live; import "github.com/collab-lease/collab-lease/plugin/changes"; func f(b *changes.Bus) { b.Subscribe(nil); b.ExpireAt(changes.Change{}.Key, t0) }`, 0},
	}
	for _, c := range cases {
		if mayPublish(c.rel) {
			t.Fatalf("%s: %s may publish; the case proves nothing", c.name, c.rel)
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, c.rel, c.src, 0)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := scanPublish(fset, f); len(got) != c.want {
			t.Errorf("%s: %d violations %v, want %d", c.name, len(got), got, c.want)
		}
	}
	if !mayPublish("plugin/lease/committed.go") || !mayPublish("plugin/changes/bus.go") || mayPublish("plugin/lease/events.go") {
		t.Error("the bus gate's exemptions are not the committed ledger and the bus")
	}
}
