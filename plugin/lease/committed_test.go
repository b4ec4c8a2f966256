package lease

import (
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"testing"
)

// ledgerReads are the Ledger's methods that write nothing, so committed
// need not publish after them. Every other method is a write.
var ledgerReads = map[string]bool{
	"Tenures": true, "Current": true, "List": true, "ListPage": true, "Issue": true,
	"LiveRepos": true, "PullsLinkedTo": true, "PullOf": true, "OpenPulls": true, "Leases": true,
	"SessionEpoch": true,
}

// Every write of the Ledger has its own method in committed.go, so none
// can reach the ledger without its change being published (a write
// added to Ledger alone would be promoted from the embedded Ledger and
// publish nothing).
func TestEveryLedgerWritePublishes(t *testing.T) {
	declared := committedMethods(t)
	writes := 0
	typ := reflect.TypeFor[Ledger]()
	for i := range typ.NumMethod() {
		name := typ.Method(i).Name
		if ledgerReads[name] {
			if declared[name] {
				t.Errorf("committed.go wraps %s, listed here as a read", name)
			}
			continue
		}
		writes++
		if !declared[name] {
			t.Errorf("Ledger.%s is a write (not in ledgerReads) that committed.go does not wrap: its change would be published by nobody", name)
		}
	}
	if writes < 10 {
		t.Fatalf("found %d writes in Ledger; the test is not looking at it", writes)
	}
	for name := range ledgerReads {
		if _, ok := typ.MethodByName(name); !ok {
			t.Errorf("ledgerReads names %s, which Ledger does not have", name)
		}
	}
}

// committedMethods are the methods committed.go declares on committed.
func committedMethods(t *testing.T) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "committed.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Recv == nil || len(fd.Recv.List) != 1 {
			continue
		}
		if id, ok := fd.Recv.List[0].Type.(*ast.Ident); ok && id.Name == "committed" && fd.Name.IsExported() {
			out[fd.Name.Name] = true
		}
	}
	return out
}
