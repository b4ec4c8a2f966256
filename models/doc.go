// Package models is the lease ledger: the gorm models of leases and their
// tenure history, and the only code that writes them.
//
// Every lease decision (who holds an issue, whether a claim is live, which
// fencing token a tenure gets) is made here, inside one SQLite transaction
// that takes the write lock at BEGIN. Callers pass in identities that have
// already been checked with the forge; this package makes no network calls
// and knows nothing about SSH, HTTP or Gitea.
package models
