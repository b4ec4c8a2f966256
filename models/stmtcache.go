package models

import (
	"context"
	"database/sql"
	"strings"
	"sync"

	"gorm.io/gorm"
)

// The SQLite ledger prepares each statement once per connection, not once
// per use. Preparing is SQLite's costliest step for the short statements
// a lease decision runs (a profile of 64 writers had sqlite3_prepare_v2 at
// a third of the write leader's CPU), and the leader is the ledger's one
// serial section: every write waits for it.
//
// gorm's own PrepareStmt does not help here: a statement first met inside
// a transaction is prepared on that transaction and dies with it, and
// every write runs inside one. So the pool below prepares on the *sql.DB,
// and a transaction uses the statement through Tx.StmtContext, which
// reuses what its connection prepared before (database/sql keeps a
// statement per connection).

// maxStmts bounds the statements kept: the ledger's queries are a fixed
// set, and a query past the bound (an IN list of a new length) runs as
// it would without the cache.
const maxStmts = 512

// stmtPool is the SQLite ledger's connection pool as gorm sees it.
type stmtPool struct {
	*sql.DB
	mu    sync.RWMutex
	stmts map[string]*sql.Stmt
	limit int // maxStmts
}

func newStmtPool(db *sql.DB) *stmtPool {
	return &stmtPool{DB: db, stmts: map[string]*sql.Stmt{}, limit: maxStmts}
}

// GetDBConn is for gorm's DB().
func (p *stmtPool) GetDBConn() (*sql.DB, error) { return p.DB, nil }

// stmt is query prepared on the pool, or nil to run it unprepared: a
// query that is not a lease operation's (PRAGMA, DDL), one past the
// bound, or one that failed to prepare (it then fails as it would have).
func (p *stmtPool) stmt(ctx context.Context, query string) *sql.Stmt {
	p.mu.RLock()
	st := p.stmts[query]
	p.mu.RUnlock()
	if st != nil || !cacheable(query) {
		return st
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if st := p.stmts[query]; st != nil {
		return st
	}
	if p.stmts == nil || len(p.stmts) >= p.limit {
		return nil
	}
	st, err := p.DB.PrepareContext(ctx, query)
	if err != nil {
		return nil
	}
	p.stmts[query] = st
	return st
}

// cacheable says whether query is one of a lease operation's statements.
func cacheable(query string) bool {
	q := strings.TrimLeft(query, " \t\n")
	for _, verb := range []string{"SELECT", "INSERT", "UPDATE", "DELETE", "WITH", "SAVEPOINT", "RELEASE", "ROLLBACK TO"} {
		if len(q) >= len(verb) && strings.EqualFold(q[:len(verb)], verb) {
			return true
		}
	}
	return false
}

func (p *stmtPool) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := p.stmt(ctx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return p.DB.ExecContext(ctx, query, args...)
}

func (p *stmtPool) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := p.stmt(ctx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return p.DB.QueryContext(ctx, query, args...)
}

func (p *stmtPool) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := p.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return p.DB.QueryRowContext(ctx, query, args...)
}

// BeginTx makes gorm's transactions stmtTxs.
func (p *stmtPool) BeginTx(ctx context.Context, opts *sql.TxOptions) (gorm.ConnPool, error) {
	tx, err := p.DB.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &stmtTx{Tx: tx, p: p}, nil
}

// Close closes the statements, then the database.
func (p *stmtPool) Close() error {
	p.mu.Lock()
	for _, st := range p.stmts {
		_ = st.Close()
	}
	p.stmts = nil
	p.mu.Unlock()
	return p.DB.Close()
}

// stmtTx is a transaction of a stmtPool.
type stmtTx struct {
	*sql.Tx
	p *stmtPool
}

func (t *stmtTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := t.p.stmt(ctx, query); st != nil {
		return t.Tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return t.Tx.ExecContext(ctx, query, args...)
}

func (t *stmtTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := t.p.stmt(ctx, query); st != nil {
		return t.Tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return t.Tx.QueryContext(ctx, query, args...)
}

func (t *stmtTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := t.p.stmt(ctx, query); st != nil {
		return t.Tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return t.Tx.QueryRowContext(ctx, query, args...)
}
