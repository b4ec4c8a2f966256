package models

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// The ledger on PostgreSQL. The operations, their SQL and their decisions
// are SQLite's; what differs is how a decision is kept safe from the
// others, and what makes a write durable.
//
// SQLite has one writer at a time, so every decision is safe, and the
// cost is the fsync of each COMMIT, which group commit shares (write.go).
// PostgreSQL runs many transactions at once, from this process and from
// others. What serializes decisions is an explicit lock on what each
// operation decides about (its scope), taken before anything is read,
// inside the transaction that decides it, which it may share with the
// other writes that arrived together (group commit, pgbatch.go: one
// transaction per write costs a COMMIT and its round trips per write):
//
//   - an issue (Acquire, Renew, Release, the forge's close and reopen,
//     a pull request's record): an exclusive transaction-level advisory
//     lock on (repository, number), and the repository's lock shared;
//   - a whole repository (next, which decides over many candidates, and
//     the forge's deletion of the repository): the repository's lock,
//     exclusive;
//   - an account's session epoch: the account's lock.
//
// The transaction runs READ COMMITTED, so each statement after the lock
// sees everything committed before it: the lock holder reads the latest
// rows, decides, writes and commits before the next holder reads. Locks
// are taken in one order (repository, then issue, then account), and a
// transaction that already holds some never waits for more (pgbatch.go),
// so no two writes can each wait for the other.
//
// Why advisory locks rather than SELECT … FOR UPDATE on the lease row: an
// issue never claimed has no row to lock (it would need a row inserted
// first, left behind by a refusal or a mere read), the decision of an
// acquire reads two tables (the issue's state and its lease), and next
// decides over up to a thousand candidates, which one repository lock
// covers and a thousand row locks would not (PostgreSQL's lock table is
// sized for dozens per transaction).
//
// The alternative, SERIALIZABLE transactions retried on serialization
// failure, needs no locks at all and is kept for comparison
// (Store.serializable, set only by BenchmarkPostgres and its test in
// postgres_test.go). Measured with it
// (go test -bench Postgres ./models/, 2 cores): 64 writers on issues of
// their own, 3,250 operations/s with locks against 860 serializable,
// which began 3.4 transactions per operation: PostgreSQL's predicate
// locks on an index cover its pages, not rows, so writes to neighbouring
// issues look like conflicts; next and a release, 630/s against 430/s (next
// reads a whole repository's leases, and conflicts with any write in
// it). Only twenty writers on one issue favour serializable (7,050/s
// against 2,320/s): the refusals read and leave instead of queuing for
// the lock; a claim storm on one issue is brief, busy repositories are
// not. Locks it is.
//
// A failure is retried only when it proves nothing was committed: a
// serialization failure or deadlock (40001, 40P01), or a connection that
// broke before COMMIT was sent (a pooled connection that the server
// closed meanwhile, as a restart closes them all; not one that could not
// be made). Otherwise it is mapped once (mapDBError): a lock wait or a
// wait for a connection past the deadline is ErrBusy; a server that
// cannot be reached is ErrUnreachable; both answer "try again", never a
// wrong outcome.

// pgMaxConns bounds the connections one Store opens; every replica of the
// sidecar has its own pool, and the server's max_connections (100 by
// default) bounds their sum.
const pgMaxConns = 16

// pgSessionDefaults are set on the ledger's connections unless the URL
// sets them: a COMMIT returns only once flushed, whatever the server's
// default (an acknowledged write survives a crash of the server); and a
// session that sits in a transaction, which the ledger never does on
// purpose (no network call inside a transaction), is ended by the server,
// so that a client cut off by the network does not hold its locks for
// as long as TCP takes to notice.
var pgSessionDefaults = map[string]string{
	"synchronous_commit":                  "on",
	"idle_in_transaction_session_timeout": "30s",
	"application_name":                    "collab-sidecar",
}

// Advisory lock classes: the first key of PostgreSQL's two-key advisory
// locks, so that the ledger's locks are apart from any other user of the
// database's (the one-key form is a separate key space).
const (
	lockMigrate int32 = 0x434c0000 + iota // "CL" and a class
	lockRepo
	lockIssue
	lockAccount
	lockChore // a task one replica at a time does (Exclusive), by number
)

// scope is what one write decides about. SQLite's write lock covers the
// whole ledger, so only PostgreSQL uses it (see the top of this file).
type scope struct {
	repo    int64 // the repository: shared, or exclusive if issue is 0
	issue   int64
	account int64 // a forge account (session epochs; with repo, a claim under a cap)
	// keys: several issues, each locked as issueScope locks it, in the
	// order of (repository, issue), so that two such writes never wait
	// for each other crosswise (an agent session's, agentsessions.go).
	keys []Key
}

// issueScope is the scope of a decision about one issue (or pull request).
func issueScope(k Key) scope { return scope{repo: k.RepoID, issue: k.Issue} }

// repoScope is the scope of a decision about a whole repository.
func repoScope(repoID int64) scope { return scope{repo: repoID} }

// accountScope is the scope of a decision about an account.
func accountScope(id int64) scope { return scope{account: id} }

// lockKey folds an ID (or two) into the second key of an advisory lock.
// Two IDs folding alike only makes their writes wait for each other.
func lockKey(a, b int64) int32 {
	x := uint64(a)*0x9e3779b97f4a7c15 + uint64(b)
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	return int32(uint32(x) ^ uint32(x>>32))
}

// lock takes sc's locks in tx, waiting for them within tx's deadline,
// held until COMMIT or ROLLBACK, and then reads the server's clock (Unix
// microseconds; see lockSQL).
func lock(tx *gorm.DB, sc scope) (int64, error) {
	c, ctx := conn(tx)
	deadline, _ := ctx.Deadline()
	q, args := lockSQL(sc.locks(), true, deadline)
	var micros int64
	err := c.QueryRowContext(ctx, q, args...).Scan(&micros)
	return micros, err
}

// writePostgres is a write on PostgreSQL alone: fn in a transaction of its
// own, after sc's locks, within the busy timeout. Writes that lock
// something run in batches instead (pgbatch.go).
func (s *Store) writePostgres(ctx context.Context, sc scope, fn func(tx *gorm.DB, now int64) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.busyTimeout)
	defer cancel()
	opts := &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	if s.serializable {
		opts.Isolation = sql.LevelSerializable
	}
	broken := 0
	for delay := time.Millisecond; ; delay = min(2*delay, 32*time.Millisecond) {
		committing := false
		s.txns.Add(1)
		err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			var now int64
			if s.serializable {
				now = s.guard(s.Clock().Now().Unix())
			} else {
				sent := s.clock.Now()
				micros, err := lock(tx, sc)
				if err != nil {
					return err
				}
				if s.dbClock {
					s.sampleOffset(micros, sent, s.clock.Now())
					now = s.guard(time.UnixMicro(micros).Unix())
				} else {
					now = s.now()
				}
			}
			err := fn(tx, now)
			committing = err == nil
			return err
		}, opts)
		switch {
		case err == nil || isRefusal(err):
			return err
		case pgRetry(err):
		case !committing && brokenConn(err) && broken < pgMaxConns && ctx.Err() == nil:
			broken++ // the pool drops it; after a restart of the server, every pooled one may be broken
		default:
			return mapDBError(err)
		}
		select {
		case <-time.After(delay/2 + rand.N(delay)):
		case <-ctx.Done():
			return mapDBError(err)
		}
	}
}

// brokenConn: a connection that worked broke (the server ended it, or the
// network did), as opposed to one that could not be made.
func brokenConn(err error) bool {
	var ce *pgconn.ConnectError
	return pgUnreachable(err) && !errors.As(err, &ce)
}

// pgRetry: PostgreSQL rolled the transaction back so that it can be run
// again (serialization failure, deadlock).
func pgRetry(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// pgBusy: PostgreSQL gave up waiting, or was told to (a lock wait, a
// statement cancelled at the deadline), or could not serialize the
// transaction in time.
func pgBusy(err error) bool {
	var pe *pgconn.PgError
	return pgRetry(err) || errors.As(err, &pe) && (pe.Code == "55P03" || pe.Code == "57014")
}

// pgUnreachable: no answer from the PostgreSQL server, or a refusal to
// work now: a connection that failed or broke, a server shutting down or
// starting, too many connections, or a standby that takes no writes (a
// failover in progress). Errors the server reports about the request
// itself (a missing database, a wrong password) are not, nor is a
// statement that the deadline interrupted (busy).
func pgUnreachable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "57P01", "57P02", "57P03", "53300", "25006":
			return true
		}
		return strings.HasPrefix(pe.Code, "08") // connection exception
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	if pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, sql.ErrConnDone) || errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// IsPostgres says whether db names a PostgreSQL database (a postgres:// or
// postgresql:// URL) rather than a SQLite file.
func IsPostgres(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}

// Redact returns db as it may be shown (in logs, messages, doctor's
// report): a PostgreSQL URL without its passwords; a file path as it is.
func Redact(db string) string {
	if !IsPostgres(db) {
		return db
	}
	scheme, _, _ := strings.Cut(db, "://")
	u, err := url.Parse(db)
	if err != nil {
		return scheme + "://(a URL that does not parse)"
	}
	if _, set := u.User.Password(); set {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	q := u.Query()
	for _, k := range []string{"password", "sslpassword"} {
		if q.Has(k) {
			q.Set(k, "xxxxx")
		}
	}
	if u.RawQuery != "" {
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// CheckDB says whether db can name a ledger, without connecting: a
// PostgreSQL URL must parse, with a database name; a file path is checked
// when Open creates it. The error is one line and shows no password.
func CheckDB(db string) error {
	if !IsPostgres(db) {
		if db == "" {
			return errors.New("empty ledger path")
		}
		return nil
	}
	_, err := pgConfig(db)
	return err
}

// pgConfig parses a PostgreSQL URL into the configuration of the ledger's
// connections (with pgSessionDefaults).
func pgConfig(db string) (*pgx.ConnConfig, error) {
	u, err := url.Parse(db)
	if err != nil {
		// url.Parse quotes what it could not parse, which may be (a part
		// of) the password: say only what to look at.
		return nil, fmt.Errorf("%s: not a URL: check the port, and percent-encode @ : / ? # %% in the user name and password", Redact(db))
	}
	if strings.Trim(u.Path, "/") == "" {
		return nil, fmt.Errorf("%s: no database name: give the database of the ledger, e.g. postgres://collab@db.example.com/collab", Redact(db))
	}
	cfg, err := pgx.ParseConfig(db)
	if err != nil {
		var pe *pgconn.ParseConfigError
		msg := err.Error()
		if errors.As(err, &pe) && pe.Unwrap() != nil {
			msg = pe.Unwrap().Error()
		}
		return nil, fmt.Errorf("%s: %s", Redact(db), scrub(msg, db))
	}
	for k, v := range pgSessionDefaults {
		if _, set := cfg.RuntimeParams[k]; !set {
			cfg.RuntimeParams[k] = v
		}
	}
	return cfg, nil
}

// scrub removes the passwords of db, a URL that parses, from msg.
func scrub(msg, db string) string {
	var secrets []string
	if u, err := url.Parse(db); err == nil {
		if pw, set := u.User.Password(); set {
			secrets = append(secrets, pw)
		}
		for _, k := range []string{"password", "sslpassword"} {
			secrets = append(secrets, u.Query()[k]...)
		}
	}
	for _, s := range secrets {
		if s == "" {
			continue
		}
		msg = strings.ReplaceAll(msg, s, "xxxxx")
		msg = strings.ReplaceAll(msg, url.QueryEscape(s), "xxxxx")
		msg = strings.ReplaceAll(msg, url.PathEscape(s), "xxxxx")
	}
	return msg
}

// openPostgres opens the ledger in the PostgreSQL database db (which must
// exist: the sidecar's user needs to create tables in it, not databases)
// and migrates its schema.
func openPostgres(db string, o options) (*Store, error) {
	name := Redact(db)
	cfg, err := pgConfig(db)
	if err != nil {
		return nil, fmt.Errorf("open ledger %w", err)
	}
	sqlDB := stdlib.OpenDB(*cfg)
	sqlDB.SetMaxOpenConns(pgMaxConns)
	sqlDB.SetMaxIdleConns(pgMaxConns)
	sqlDB.SetConnMaxIdleTime(time.Minute)
	gdb, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), &gorm.Config{
		Logger:                 logger.Default.LogMode(logger.Silent),
		SkipDefaultTransaction: true, // every write is already in our own transaction
		DisableAutomaticPing:   true, // pinged below, within a deadline
		NowFunc:                func() time.Time { return o.clock.Now().UTC() },
	})
	if err != nil {
		_ = sqlDB.Close()
		return nil, fmt.Errorf("open ledger %s: %w", name, err)
	}
	s := &Store{db: gdb, pg: true, clock: o.clock, maxTTL: o.maxTTL, lockDelay: int64(o.lockDelay / time.Second),
		perHolder: int64(o.perHolder), perAccount: int64(o.perAccount), reservationCap: int64(o.reservations), busyTimeout: o.busyTimeout,
		quarantineAfter: int64(o.quarantine), writeSlot: make(chan struct{}, pgLeaders), maxBatch: pgMaxBatch, onStep: o.onStep, onListenLost: o.onListenLost, pgCfg: cfg, dbClock: !o.clockSet}
	ctx, cancel := context.WithTimeout(context.Background(), max(o.busyTimeout, 10*time.Second))
	defer cancel()
	if s.dbClock {
		if err := s.measureOffset(ctx); err != nil {
			_ = sqlDB.Close()
			return nil, fmt.Errorf("open ledger %s: %w", name, err)
		}
	}
	if err := s.migratePostgres(ctx); err != nil {
		_ = sqlDB.Close()
		return nil, fmt.Errorf("open ledger %s: %w", name, mapDBError(err))
	}
	if err := s.loadHighWater(ctx); err != nil {
		_ = sqlDB.Close()
		return nil, fmt.Errorf("open ledger %s: %w", name, mapDBError(err))
	}
	return s, nil
}

// migratePostgres brings the database to schemaVersion, recorded in
// collab_schema. A database at the current version is left alone, so a
// replica that starts takes no lock that the others' writes would wait
// for; otherwise the migration runs in one transaction under a lock of
// its own, so replicas starting together migrate once.
func (s *Store) migratePostgres(ctx context.Context) error {
	version, err := pgSchemaVersion(s.db.WithContext(ctx))
	if err != nil {
		return mapDBError(err)
	}
	if version == schemaVersion {
		return nil
	}
	return mapDBError(s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec("SELECT pg_advisory_xact_lock(?, 0)", lockMigrate).Error; err != nil {
			return err
		}
		version, err := pgSchemaVersion(tx)
		switch {
		case err != nil:
			return err
		case version > schemaVersion:
			return fmt.Errorf("the database has schema version %d, newer than this program's %d: upgrade collab-sidecar", version, schemaVersion)
		case version == schemaVersion:
			return nil // another process migrated it meanwhile
		}
		if err := tx.AutoMigrate(ledgerModels()...); err != nil {
			return err
		}
		return errors.Join(
			tx.Exec("CREATE TABLE IF NOT EXISTS collab_schema (version integer NOT NULL)").Error,
			tx.Exec("DELETE FROM collab_schema").Error,
			tx.Exec("INSERT INTO collab_schema (version) VALUES (?)", schemaVersion).Error)
	}))
}

// pgSchemaVersion reads the version recorded in collab_schema; 0 for a
// database without it (a new one).
func pgSchemaVersion(db *gorm.DB) (int, error) {
	var exists bool
	if err := db.Raw("SELECT to_regclass('collab_schema') IS NOT NULL").Scan(&exists).Error; err != nil || !exists {
		return 0, err
	}
	var version *int
	if err := db.Raw("SELECT max(version) FROM collab_schema").Scan(&version).Error; err != nil || version == nil {
		return 0, err
	}
	return *version, nil
}
