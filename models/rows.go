package models

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"

	"gorm.io/gorm"
)

// The hot path's statements, written out. Every acquire, renew and release
// reads the issue's row and writes it and a history row; through gorm's
// reflection and statement building (Take, Create, Updates with a map)
// those cost about 90 of the ~300 allocations of an operation and most of
// the sidecar's garbage under load (bench/README.md, "where the time
// goes"). So they go straight to the transaction gorm opened (its
// connection pool inside a transaction is the *sql.Tx), with the same SQL.

//
// The driver sees them as written, so each is kept in the form of both
// engines: SQLite's ? placeholders and PostgreSQL's $1, $2, …; otherwise
// the SQL is the same.

// conn is the transaction of tx, to run statements on directly.
func conn(tx *gorm.DB) (gorm.ConnPool, context.Context) {
	return tx.Statement.ConnPool, tx.Statement.Context
}

// stmt is one statement written out, for each engine.
type stmt struct{ sqlite, postgres string }

// sqlStmt is q, written with ? placeholders, for both engines.
func sqlStmt(q string) stmt {
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r != '?' {
			b.WriteRune(r)
			continue
		}
		n++
		b.WriteString("$" + strconv.Itoa(n))
	}
	return stmt{sqlite: q, postgres: b.String()}
}

// in is q as tx's engine reads it.
func (q stmt) in(tx *gorm.DB) string {
	if tx.Dialector.Name() == "postgres" {
		return q.postgres
	}
	return q.sqlite
}

// execSQL runs q, whose result nobody reads; in a PostgreSQL batch, it
// goes with the batch's next round trip (memberConn).
func execSQL(tx *gorm.DB, q stmt, args ...any) error {
	c, ctx := conn(tx)
	if m, ok := c.(*memberConn); ok {
		m.queue(q, args)
		return nil
	}
	_, err := c.ExecContext(ctx, q.in(tx), args...)
	return err
}

func queryRow(tx *gorm.DB, q stmt, args ...any) *sql.Row {
	c, ctx := conn(tx)
	return c.QueryRowContext(ctx, q.in(tx), args...)
}

const leaseColumns = "repo_id, issue, holder, holder_id, kind, token, acquired_at, expires_at, agent, session, cap_at"

const (
	insertLeaseQ = "INSERT INTO leases (" + leaseColumns + ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
	updateLeaseQ = "UPDATE leases SET holder = ?, holder_id = ?, kind = ?, token = ?, acquired_at = ?, expires_at = ?, agent = ?, session = ?, cap_at = ? WHERE repo_id = ? AND issue = ?"
	recordQ      = "INSERT INTO lease_events (repo_id, issue, action, holder, holder_id, agent, previous, token, at, expires_at, acquired_at, session) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

var (
	loadSQL        = sqlStmt("SELECT " + leaseColumns + " FROM leases WHERE repo_id = ? AND issue = ?")
	insertLeaseSQL = sqlStmt(insertLeaseQ)
	updateLeaseSQL = sqlStmt(updateLeaseQ)
	recordSQL      = sqlStmt(recordQ)
	// The row and its event in one statement, on PostgreSQL: a
	// data-modifying WITH runs whether or not the rest reads it.
	insertRecordSQL = sqlStmt("WITH w AS (" + insertLeaseQ + ") " + recordQ)
	updateRecordSQL = sqlStmt("WITH w AS (" + updateLeaseQ + ") " + recordQ)
)

// load reads k's lease row, if any.
func load(tx *gorm.DB, k Key) (leaseRow, bool, error) {
	if m, ok := prefetched(tx, k, false); ok {
		return m.lease, m.leaseFound, nil
	}
	var r leaseRow
	err := queryRow(tx, loadSQL, k.RepoID, k.Issue).
		Scan(r.fields()...)
	if errors.Is(err, sql.ErrNoRows) {
		return leaseRow{}, false, nil
	}
	return r, err == nil, err
}

// store writes r, the whole row, over what k had (found) or as a new row.
func store(tx *gorm.DB, r leaseRow, found bool) error {
	if !found {
		return execSQL(tx, insertLeaseSQL, r.insertArgs()...)
	}
	return execSQL(tx, updateLeaseSQL, r.updateArgs()...)
}

// record appends ev to the tenure history.
func record(tx *gorm.DB, ev Event) error {
	return execSQL(tx, recordSQL, ev.args()...)
}

// storeRecord is store and then record: on PostgreSQL, one statement, so
// one round trip to the server instead of two.
func storeRecord(tx *gorm.DB, r leaseRow, found bool, ev Event) error {
	if tx.Dialector.Name() != "postgres" {
		if err := store(tx, r, found); err != nil {
			return err
		}
		return record(tx, ev)
	}
	if !found {
		return execSQL(tx, insertRecordSQL, append(r.insertArgs(), ev.args()...)...)
	}
	return execSQL(tx, updateRecordSQL, append(r.updateArgs(), ev.args()...)...)
}

func (r leaseRow) insertArgs() []any {
	return []any{r.RepoID, r.Issue, r.Holder, r.HolderID, r.Kind, r.Token, r.AcquiredAt, r.ExpiresAt, r.Agent, r.Session, r.CapAt}
}

func (r leaseRow) updateArgs() []any {
	return []any{r.Holder, r.HolderID, r.Kind, r.Token, r.AcquiredAt, r.ExpiresAt, r.Agent, r.Session, r.CapAt, r.RepoID, r.Issue}
}

func (ev Event) args() []any {
	return []any{ev.RepoID, ev.Issue, ev.Action, ev.Holder, ev.HolderID, ev.Agent, ev.Previous, ev.Token, ev.At, ev.ExpiresAt, ev.AcquiredAt, ev.Session}
}

// fields are where a row selected as leaseColumns is scanned to.
func (r *leaseRow) fields() []any {
	return []any{&r.RepoID, &r.Issue, &r.Holder, &r.HolderID, &r.Kind, &r.Token, &r.AcquiredAt, &r.ExpiresAt, &r.Agent, &r.Session, &r.CapAt}
}

const issueColumns = "repo_id, issue, kind, closed, deleted, version, checked_at"

var (
	loadIssueSQL   = sqlStmt("SELECT " + issueColumns + " FROM issue_states WHERE repo_id = ? AND issue = ?")
	insertIssueSQL = sqlStmt("INSERT INTO issue_states (" + issueColumns + ") VALUES (?, ?, ?, ?, ?, ?, ?)")
	updateIssueSQL = sqlStmt("UPDATE issue_states SET kind = ?, closed = ?, deleted = ?, version = ?, checked_at = ? WHERE repo_id = ? AND issue = ?")
)

// loadIssue reads what the ledger knows of k's state at the forge, if any.
func loadIssue(tx *gorm.DB, k Key) (issueRow, bool, error) {
	if m, ok := prefetched(tx, k, true); ok {
		return m.issue, m.issued, nil
	}
	var r issueRow
	err := queryRow(tx, loadIssueSQL, k.RepoID, k.Issue).
		Scan(&r.RepoID, &r.Issue, &r.Kind, &r.Closed, &r.Deleted, &r.Version, &r.CheckedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return issueRow{}, false, nil
	}
	return r, err == nil, err
}

// storeIssue writes r, the whole row, over what it had (found) or as new.
func storeIssue(tx *gorm.DB, r issueRow, found bool) error {
	if !found {
		return execSQL(tx, insertIssueSQL,
			r.RepoID, r.Issue, r.Kind, r.Closed, r.Deleted, r.Version, r.CheckedAt)
	}
	return execSQL(tx, updateIssueSQL,
		r.Kind, r.Closed, r.Deleted, r.Version, r.CheckedAt, r.RepoID, r.Issue)
}
