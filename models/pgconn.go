package models

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"

	"gorm.io/gorm"
)

// The connection shim a member's decision runs on inside a batch
// (pgbatch.go): gorm's ConnPool, holding back its writes for the batch's
// round trips and answering its issue's reads from the batch's first one.

// memberConn is the batch's connection as one member's decision uses it.
// Its writes (execSQL's: their result is not read) wait in the batch's
// pending statements, to go with a later round trip. Its issue's rows,
// read with its locks (right after them, so under them) or after the
// writes of the members before it, answer load and loadIssue until it
// writes them. Any other
// statement goes to the server at once, after everything pending.
type memberConn struct {
	b                      *pgBatch
	member                 int
	key                    Key
	lease                  leaseRow
	issue                  issueRow
	fetch, read            bool // its rows: asked for, and read
	leaseFound, issued     bool // issued: issue found
	wroteLease, wroteIssue bool // since its rows were read
	saved, sent            bool // its savepoint: pending, sent
	start                  int  // where its statements not sent yet begin in the pending ones
	failed                 error
}

// prefetched returns m's rows of k, if it has them and the one asked
// for (issue: the issue's state; otherwise its lease) is current.
func prefetched(tx *gorm.DB, k Key, issue bool) (*memberConn, bool) {
	m, ok := tx.Statement.ConnPool.(*memberConn)
	return m, ok && m.read && m.key == k && !(issue && m.wroteIssue || !issue && m.wroteLease)
}

// save opens m's savepoint, before its first statement.
func (m *memberConn) save() {
	if !m.saved {
		m.saved = true
		m.b.pend = slices.Insert(m.b.pend, m.start, pgReq{sql: pgSave, member: m.member})
	}
}

// queue adds a write of m's to the pending statements.
func (m *memberConn) queue(q stmt, args []any) {
	switch q {
	case insertIssueSQL, updateIssueSQL:
		m.wroteIssue = true
	case recordSQL: // the history only
	default:
		m.wroteLease, m.wroteIssue = true, true
	}
	if m.b.careful {
		m.save()
	}
	m.b.pend = append(m.b.pend, pgReq{sql: q.postgres, args: args, member: m.member})
}

// live sends what is pending, so that a statement of m's can go to the
// server on its own: it reads what the members before wrote, and its
// own writes so far. An error means it must not be sent.
func (m *memberConn) live() error {
	if m.b.broken != nil {
		return m.b.broken
	}
	m.save()
	err := m.b.flush(m.member)
	m.sent, m.start = true, len(m.b.pend)
	if m.failed != nil {
		return m.failed
	}
	return err
}

func (m *memberConn) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	m.wroteLease, m.wroteIssue = true, true
	if err := m.live(); err != nil {
		return nil, err
	}
	return m.b.c.ExecContext(ctx, q, args...)
}

// QueryContext is what gorm's writes use too (RETURNING).
func (m *memberConn) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	m.wroteLease, m.wroteIssue = true, true
	if err := m.live(); err != nil {
		return nil, err
	}
	return m.b.c.QueryContext(ctx, q, args...)
}

func (m *memberConn) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	// If live failed, the statement fails too (the transaction is
	// aborted, or the connection broke), and the member's outcome is
	// live's error (settle).
	_ = m.live()
	return m.b.c.QueryRowContext(ctx, q, args...)
}

func (m *memberConn) PrepareContext(ctx context.Context, q string) (*sql.Stmt, error) {
	if err := m.live(); err != nil {
		return nil, err
	}
	return m.b.c.PrepareContext(ctx, q)
}

var _ gorm.ConnPool = (*memberConn)(nil)

// reads is the statement that reads m's issue's rows after its locks:
// its lease and its state, in one row whose halves are null for a row
// that is missing.
func (m *memberConn) reads() pgReq {
	return pgReq{sql: loadBothSQL, args: []any{m.key.RepoID, m.key.Issue}, member: m.member, scan: func(r pgRow) error {
		if r.values == nil {
			return errors.New("no row for an issue's rows")
		}
		lease, issue := r.cols(0, leaseFields), r.cols(leaseFields, len(r.values))
		m.leaseFound, m.issued = !lease.null(0), !issue.null(0)
		if m.leaseFound {
			if err := lease.Scan(m.lease.fields()...); err != nil {
				return err
			}
		}
		if m.issued {
			i := &m.issue
			return issue.Scan(&i.RepoID, &i.Issue, &i.Kind, &i.Closed, &i.Deleted, &i.Version, &i.CheckedAt)
		}
		return nil
	}}
}

// loadBothSQL is loadSQL's row then loadIssueSQL's, of one issue.
var loadBothSQL = "SELECT " + prefixed("l.", leaseColumns) + ", " + prefixed("i.", issueColumns) +
	" FROM (SELECT $1::bigint AS repo_id, $2::bigint AS issue) AS k" +
	" LEFT JOIN leases AS l ON l.repo_id = k.repo_id AND l.issue = k.issue" +
	" LEFT JOIN issue_states AS i ON i.repo_id = k.repo_id AND i.issue = k.issue"

// leaseFields is how many columns leaseColumns has.
var leaseFields = len(strings.Split(leaseColumns, ","))

// prefixed is columns (a, b, …) as p+a, p+b, ….
func prefixed(p, columns string) string {
	cs := strings.Split(columns, ", ")
	for i := range cs {
		cs[i] = p + cs[i]
	}
	return strings.Join(cs, ", ")
}
