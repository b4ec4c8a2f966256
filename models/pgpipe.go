package models

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/stdlib"
)

// A round trip to PostgreSQL: statements sent together in one pipeline,
// ended by one Sync, and answered in order (pgbatch.go sends a batch's
// statements this way). Every statement is one prepared once per
// connection (in the pipeline that first sends it, right before it) and
// then only bound and run, its answer described anew each time, the same
// way for all: pgx's batches, which mix statements described beforehand
// with others, can pair an answer with the wrong statement once one of
// them failed, and a batch's first round trip is built to fail when a
// member's locks are taken. Arguments go as text, which the server reads
// as the types it inferred when preparing: they need no description from
// a round trip before. The statements so prepared are the batch's own,
// a few dozen fixed texts; everything else goes through database/sql as
// usual.

// pgReq is one statement of a round trip.
type pgReq struct {
	sql    string
	args   []any
	member int // the batch member whose statement it is; -1: the batch's own
	// scan reads the statement's first row (Scan gives pgx.ErrNoRows if
	// it has none); nil: it has none worth reading.
	scan func(pgRow) error
}

// pgPreparedKey is where a connection keeps what it prepared for round
// trips (pgconn's CustomData).
const pgPreparedKey = "collab-lease.prepared"

// pgPrepared are the statements prepared on one connection for round
// trips: their names by text, and the number the next one's name takes
// (a name is never reused: a pipeline that failed may have prepared some
// statements, which it did not read the answers of).
type pgPrepared struct {
	names map[string]string
	next  int
}

// roundTrip runs reqs on c in one round trip. failed is the index of
// the statement the server refused, whose error err is (a
// *pgconn.PgError): it ran none of those after it, and the transaction
// is aborted until a ROLLBACK (TO SAVEPOINT). Any other error (failed
// -1) is the connection's, and what ran of reqs is unknown.
func roundTrip(ctx context.Context, c *sql.Conn, reqs []pgReq) (failed int, err error) {
	failed = -1
	err = c.Raw(func(dc any) error {
		pc := dc.(*stdlib.Conn).Conn()
		pp, _ := pc.PgConn().CustomData()[pgPreparedKey].(*pgPrepared)
		if pp == nil {
			pp = &pgPrepared{names: map[string]string{}}
			pc.PgConn().CustomData()[pgPreparedKey] = pp
		}
		tm := pc.TypeMap()
		p := pc.PgConn().StartPipeline(ctx)
		fresh := map[string]string{}      // prepared in this pipeline, by text
		parsed := make([]bool, len(reqs)) // reqs[i] is prepared right before it
		var eqb pgx.ExtendedQueryBuilder
		for i, r := range reqs {
			name, ok := pp.names[r.sql]
			if !ok {
				if name, ok = fresh[r.sql]; !ok {
					name = "collab_" + strconv.Itoa(pp.next)
					pp.next++
					fresh[r.sql], parsed[i] = name, true
					p.SendPrepare(name, r.sql, nil)
				}
			}
			if err := eqb.Build(tm, nil, r.args); err != nil {
				// A statement that cannot be encoded is a bug of the
				// ledger's, not the server's: end the pipeline.
				p.SendPipelineSync()
				_ = p.Flush()
				_ = p.Close()
				return fmt.Errorf("%.40s…: %w", r.sql, err)
			}
			p.SendQueryPrepared(name, eqb.ParamValues, eqb.ParamFormats, nil)
		}
		if err := p.Sync(); err != nil {
			return err
		}
		var refused error
		for i, r := range reqs {
			if parsed[i] {
				res, err := p.GetResults()
				if refused = asPgError(err); refused != nil {
					failed = i
					break
				} else if err != nil {
					return err
				}
				if _, ok := res.(*pgconn.StatementDescription); !ok {
					_ = p.Close()
					return fmt.Errorf("pipeline: %T for a preparation", res)
				}
				pp.names[r.sql] = fresh[r.sql]
			}
			res, err := p.GetResults()
			if refused = asPgError(err); refused != nil {
				failed = i
				break
			} else if err != nil {
				return err
			}
			rr, ok := res.(*pgconn.ResultReader)
			if !ok {
				_ = p.Close()
				return fmt.Errorf("pipeline: %T for statement %d", res, i)
			}
			var scanErr error
			if r.scan != nil {
				row := pgRow{tm: tm}
				if rr.NextRow() {
					row.fields, row.values = rr.FieldDescriptions(), rr.Values()
				}
				scanErr = r.scan(row)
			}
			_, err = rr.Close()
			if refused = asPgError(err); refused != nil {
				failed = i
				break
			} else if err != nil {
				return err
			}
			if scanErr != nil {
				_ = p.Close()
				return scanErr
			}
		}
		// The server skips what follows a refusal until the Sync, whose
		// answer Close reads.
		if err := p.Close(); err != nil && refused == nil {
			return err
		}
		return refused
	})
	if failed < 0 && err != nil {
		return -1, err
	}
	return failed, err
}

// asPgError is err if the server sent it, else nil.
func asPgError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return err
	}
	return nil
}

// pgRow is the row of one statement of a round trip.
type pgRow struct {
	tm     *pgtype.Map
	fields []pgconn.FieldDescription
	values [][]byte // nil: no row
}

func (r pgRow) Scan(dest ...any) error {
	if r.values == nil {
		return pgx.ErrNoRows
	}
	return pgx.ScanRow(r.tm, r.fields, r.values, dest...)
}

// cols is the row's columns from to to.
func (r pgRow) cols(from, to int) pgRow {
	return pgRow{tm: r.tm, fields: r.fields[from:to], values: r.values[from:to]}
}

// null: column i is NULL.
func (r pgRow) null(i int) bool { return r.values[i] == nil }
