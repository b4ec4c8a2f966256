// Package gates holds the repository's architectural gates: tests that
// read every Go file of the module (go/ast) and fail when code crosses a
// line the design draws, each with a test that proves it can fail on a
// synthetic offending source. docs/ARCHITECTURE.md's invariant table
// names each gate.
//
//   - Only models/ writes the ledger (no other package imports a
//     database driver or carries SQL that writes the lease tables).
//   - Only plugin/gitea speaks HTTP to Gitea.
//   - The transports (ssh/, routes/) reach the ledger only through the
//     lease service (plugin/lease).
//   - Only the lease service's committed ledger publishes committed
//     changes on the change bus (plugin/changes): no call site fans out
//     by hand.
//   - docs/ARCHITECTURE.md and the package docs stay true: every file of
//     a package is named in one of them, and every file and Go name
//     ARCHITECTURE names exists (docs_test.go).
//
// It has no code of its own.
package gates
