// Package models is the lease ledger: the gorm models of leases and their
// tenure history, and the only code that writes them.
//
// Every lease decision (who holds an issue, whether a claim is live, which
// fencing token a tenure gets) is made here, inside one transaction that
// nothing else can overtake between its reads and its writes: on SQLite,
// one that takes the write lock at BEGIN (write.go); on PostgreSQL, one
// that first locks what it decides about (postgres.go). Callers pass in
// identities that have already been checked with the forge; this package
// makes no network calls but to its own database, and knows nothing about
// SSH, HTTP or Gitea. The clock it decides by is a parameter (clock.go);
// the sentinel errors its callers map onto their own answers are in
// errors.go. docs/ARCHITECTURE.md names the rest of its files.
package models
