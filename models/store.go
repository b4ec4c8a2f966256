package models

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/mattn/go-sqlite3"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// schemaVersion is stored in SQLite's user_version, and in PostgreSQL's
// table collab_schema: the same numbers on both engines. A database
// written by a newer schema is refused rather than silently misread.
// PostgreSQL ledgers begin at version 6: nothing older was ever written
// there.
//
//   - 1: holders by login.
//   - 2: holders by forge account ID (holder_id; the login is only shown),
//     and the kind (issue or pull request) of each leased number. Rows of
//     schema 1 keep their holder, token and times; their holder_id stays
//     NULL (held by nobody) until ResolveHolder names the account, once.
//   - 3: the forge's state of each issue (issue_states), so acquire and
//     the forge's close are ordered by the ledger, and the webhook
//     deliveries already applied (webhook_deliveries).
//   - 4: open pull requests and the issues they would close
//     (pull_requests, pull_links), for fenced merges.
//   - 5: each account's session epoch (session_epochs), so that signing
//     out of the browser ends the session on the server too.
//   - 6: a partial index of held leases by expiry (idx_leases_held_expiry),
//     so counting the live leases searches them instead of scanning the
//     whole table.
//   - 7: agents: leases.agent and lease_events.agent ("" for the rows
//     before, whose holders are accounts themselves).
//   - 8: an index of leases by holder account (idx_leases_holder), so
//     that the claim caps count an account's leases without a scan.
//   - 9: agent sessions (agent_sessions; leases.session and cap_at,
//     lease_events.session), claims kept alive by their connection.
//   - 10: pull requests' head branches (pull_requests.branch) and the
//     branch protection rules the sidecar made to fence pushes
//     (fence_rules).
//   - 11: merge tickets (merge_tickets): the merge under way into each
//     base branch, which the gate admits; path reservations
//     (reservations).
//   - 12: quarantined issues (quarantines): since when, the tenures a
//     lift no longer counts, and what the forge was told.
const schemaVersion = 12

// maxTTLBound keeps now+ttl far from int64 overflow even without a
// configured maximum (about 292 years in seconds would overflow nanoseconds).
const maxTTLBound = 100 * 365 * 24 * time.Hour

// sqliteBusySlice is how long SQLite's uninterruptible busy handler may wait
// at a time; write retries in Go between slices, watching the context.
const sqliteBusySlice = 50 * time.Millisecond

// openWait bounds how long opening a SQLite ledger waits for the other
// processes opening the same new file (its switch to WAL, its
// migration), when that is longer than the busy timeout: one process's
// migration of a new file takes seconds on a loaded machine, and the
// others wait for it once, not at every write.
const openWait = 30 * time.Second

// Store is the lease ledger on one SQLite file or one PostgreSQL database.
// It is safe for concurrent use by many goroutines, and several Stores (or
// processes) may share one ledger: on SQLite, the write lock taken at BEGIN
// is what serializes decisions; on PostgreSQL, the locks each write takes
// on what it decides about (postgres.go).
type Store struct {
	db *gorm.DB
	pg bool // on PostgreSQL (postgres.go), else SQLite
	// serializable: on PostgreSQL, run writes SERIALIZABLE, retrying on
	// serialization failures, instead of taking their locks (only the
	// benchmark that compares the two sets it; see postgres.go).
	serializable bool
	clock        Clock
	maxTTL       time.Duration
	// lockDelay: after a lease lapses, how many seconds no other holder
	// may claim the issue (WithLockDelay; 0: none).
	lockDelay int64
	// perHolder and perAccount cap the live leases of one holder and of
	// one account (WithClaimCaps; 0: no cap).
	perHolder, perAccount int64
	// reservationCap caps the live reservations of one holder
	// (WithReservationCap; 0: no cap).
	reservationCap int64
	// letExclusivesOverlap is a fault, never set outside the test that
	// shows the linearizability check of reservations catches it
	// (reservations_lin_test.go): Reserve then lets an exclusive glob
	// overlap another holder's exclusive reservation. No Option sets it.
	letExclusivesOverlap bool
	// quarantineAfter: an issue whose last quarantineAfter tenures each
	// ended involuntarily is quarantined (WithQuarantineAfter; 0: never).
	quarantineAfter int64
	// busyTimeout bounds one write's wait for the lock, in total.
	busyTimeout time.Duration
	// writeSlot serializes this process's writers before they reach
	// SQLite, so they queue in Go (cancellable by context) instead of
	// spinning in SQLite's busy handler; whoever holds it commits for the
	// writers queued behind it (group commit, see write). Other processes
	// still meet the file lock and the busy timeout.
	writeSlot chan struct{}
	// chores are the chores (Exclusive) running in this process now, on
	// SQLite.
	chores   sync.Map
	mu       sync.Mutex
	queue    []*writeReq  // writes waiting for the slot, oldest first
	maxBatch int          // writes per transaction at most; 1: no group commit
	txns     atomic.Int64 // write transactions begun, retries included (for tests)
	// highWater is the latest time (Unix seconds) the ledger has used; see
	// clockguard.go. warned is the high water last reported to onStep.
	highWater atomic.Int64
	warned    atomic.Int64
	onStep    func(back time.Duration)
	// dbClock: writes decide by the PostgreSQL server's clock, and offset
	// (nanoseconds) is how far it is ahead of clock (clockguard.go).
	dbClock bool
	offset  atomic.Int64
	// On PostgreSQL: the configuration Changes connects with, the
	// sender of Announce's notifications, and Changes' listening
	// connections lost, with whom to tell of each (notify.go).
	pgCfg        *pgx.ConnConfig
	notes        announcer
	listensLost  atomic.Int64
	onListenLost func(err error)
}

// Option configures Open.
type Option func(*options)

type options struct {
	clock        Clock
	clockSet     bool // by WithClock: decide by it on PostgreSQL too
	busyTimeout  time.Duration
	maxTTL       time.Duration
	lockDelay    time.Duration
	perHolder    int
	perAccount   int
	reservations int
	quarantine   int
	onStep       func(back time.Duration)
	onListenLost func(err error)
}

// WithClock sets the clock every decision reads (default: the wall clock;
// on PostgreSQL, the database server's clock for writes, see
// clockguard.go).
func WithClock(c Clock) Option { return func(o *options) { o.clock, o.clockSet = c, true } }

// WithDatabaseClock is, on PostgreSQL, the default way of telling time
// (writes decide by the database server's clock) with local as this
// process's own clock, which reads correct by its measured offset from the
// server's (default: the wall clock). On SQLite it is WithClock(local).
func WithDatabaseClock(local Clock) Option {
	return func(o *options) { o.clock, o.clockSet = local, false }
}

// WithBusyTimeout bounds how long an operation waits for another writer
// before failing with ErrBusy (default 5 s).
func WithBusyTimeout(d time.Duration) Option { return func(o *options) { o.busyTimeout = d } }

// WithMaxTTL sets the largest ttl acquire and renew accept (default: no
// limit beyond about a century).
func WithMaxTTL(d time.Duration) Option { return func(o *options) { o.maxTTL = d } }

// MaxLockDelay is the longest lock-delay WithLockDelay accepts.
const MaxLockDelay = 5 * time.Minute

// WithClaimCaps caps how many live leases one holder (an account and an
// agent) and one account (all its agents) may hold at once, over every
// repository: a new tenure beyond a cap is a *LimitError, decided in the
// acquire's own transaction, so the cap holds exactly under any race. A
// re-acquire or renew of a lease already held never counts. 0: no cap.
func WithClaimCaps(perHolder, perAccount int) Option {
	return func(o *options) { o.perHolder, o.perAccount = perHolder, perAccount }
}

// WithReservationCap caps how many live reservations (globs) one holder
// (an account and an agent) may hold at once, over every repository: a
// reserve beyond it is a *LimitError of Scope "reservations". A reserve
// of a glob the holder already holds never counts it twice. 0: no cap.
func WithReservationCap(n int) Option { return func(o *options) { o.reservations = n } }

// WithLockDelay sets the lock-delay: after a lease ends involuntarily
// (it lapsed), for d no other holder may acquire the issue or get it from
// AcquireFirst, so that a frozen holder that has not noticed gets time to
// stop; the holder whose lease lapsed may claim it again at once. Whole
// seconds, at most MaxLockDelay; 0 (the default) is none.
func WithLockDelay(d time.Duration) Option { return func(o *options) { o.lockDelay = d } }

// MaxQuarantineAfter is the largest count WithQuarantineAfter accepts.
const MaxQuarantineAfter = 100

// WithQuarantineAfter quarantines an issue whose last n tenures each
// ended involuntarily (expired or session_lost, quarantine.go): acquire
// refuses it with a *QuarantinedError unless forced, and AcquireFirst
// skips it, from the instant the nth of them ended. 0 (the default):
// never; at most MaxQuarantineAfter.
func WithQuarantineAfter(n int) Option { return func(o *options) { o.quarantine = n } }

// Open opens the ledger db and migrates its schema: a PostgreSQL database
// if db is a postgres:// or postgresql:// URL (IsPostgres; the database
// must exist, see openPostgres), else a SQLite file at that path, created
// if needed.
func Open(db string, opts ...Option) (*Store, error) {
	o := options{clock: SystemClock{}, busyTimeout: 5 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	if o.maxTTL <= 0 || o.maxTTL > maxTTLBound {
		o.maxTTL = maxTTLBound
	}
	if o.perHolder < 0 || o.perAccount < 0 || o.reservations < 0 {
		return nil, fmt.Errorf("open ledger: %w: caps %d, %d and %d must not be negative", ErrInvalid, o.perHolder, o.perAccount, o.reservations)
	}
	if o.lockDelay < 0 || o.lockDelay > MaxLockDelay || o.lockDelay%time.Second != 0 {
		return nil, fmt.Errorf("open ledger: %w: lock-delay %s is not whole seconds from 0 to %s", ErrInvalid, o.lockDelay, MaxLockDelay)
	}
	if o.quarantine < 0 || o.quarantine > MaxQuarantineAfter {
		return nil, fmt.Errorf("open ledger: %w: quarantine after %d endings is not from 0 to %d", ErrInvalid, o.quarantine, MaxQuarantineAfter)
	}
	if IsPostgres(db) {
		return openPostgres(db, o)
	}
	return openSQLite(db, o)
}

// openSQLite opens (creating if needed) the SQLite ledger at path. The
// connection runs in WAL mode with synchronous=FULL, so an acknowledged
// write survives a crash, and takes the write lock at BEGIN (BEGIN
// IMMEDIATE), so a transaction that reads and then writes cannot be
// overtaken between the two.
func openSQLite(path string, o options) (*Store, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	}
	if st, err := os.Stat(filepath.Dir(abs)); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("open ledger %s: directory %s does not exist", path, filepath.Dir(abs))
	}
	q := url.Values{}
	q.Set("_txlock", "immediate")
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "FULL")
	q.Set("_busy_timeout", fmt.Sprint(min(o.busyTimeout, sqliteBusySlice).Milliseconds()))
	dsn := "file:" + (&url.URL{Path: abs}).EscapedPath() + "?" + q.Encode()

	// gorm's dialect asks the first connection for SQLite's version; a new
	// file's first connection switches it to WAL, which waits for the
	// others opening it at the same moment (busy): within openWait (or
	// the busy timeout, if longer), it tries again.
	ctx, cancel := context.WithTimeout(context.Background(), max(o.busyTimeout, openWait))
	defer cancel()
	var db *gorm.DB
	for delay := time.Millisecond; ; delay = min(2*delay, 20*time.Millisecond) {
		db, err = gorm.Open(sqlite.Open(dsn), &gorm.Config{
			Logger:                 logger.Default.LogMode(logger.Silent),
			SkipDefaultTransaction: true, // every write is already in our own transaction
			NowFunc:                func() time.Time { return o.clock.Now().UTC() },
		})
		if err == nil || !errors.Is(mapDBError(err), ErrBusy) || ctx.Err() != nil {
			break
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open ledger %s: %w", path, mapDBError(err))
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	}
	sqlDB.SetMaxOpenConns(8)
	sqlDB.SetConnMaxIdleTime(time.Minute)
	s := &Store{db: db, clock: o.clock, maxTTL: o.maxTTL, lockDelay: int64(o.lockDelay / time.Second),
		perHolder: int64(o.perHolder), perAccount: int64(o.perAccount), reservationCap: int64(o.reservations), busyTimeout: o.busyTimeout,
		quarantineAfter: int64(o.quarantine), writeSlot: make(chan struct{}, 1), maxBatch: defaultMaxBatch, onStep: o.onStep}
	if err := s.migrate(); err != nil {
		_ = sqlDB.Close()
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	}
	if err := s.loadHighWater(context.Background()); err != nil {
		_ = sqlDB.Close()
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	}
	return s, nil
}

// ledgerModels are the ledger's tables, as migrations create them on both
// engines.
func ledgerModels() []any {
	return []any{&leaseRow{}, &Event{}, &issueRow{}, &deliveryRow{}, &pullRow{}, &pullLinkRow{}, &sessionEpochRow{}, &agentSessionRow{}, &fenceRuleRow{}, &mergeTicketRow{}, &reservationRow{}, &quarantineRow{}}
}

// migrate brings a SQLite ledger to schemaVersion (migratePostgres is
// PostgreSQL's).
func (s *Store) migrate() error {
	// A new connection switches a new file to WAL, which needs a moment
	// of exclusive access: processes opening one file at once wait for
	// each other here (busy), within openWait (or the busy timeout, if
	// longer).
	ctx, cancel := context.WithTimeout(context.Background(), max(s.busyTimeout, openWait))
	defer cancel()
	var mode string
	if err := s.retryBusy(ctx, func(db *gorm.DB) error { return db.Raw("PRAGMA journal_mode").Scan(&mode).Error }); err != nil {
		return err
	}
	if mode != "wal" {
		return fmt.Errorf("journal mode is %q, want wal (is the file on a filesystem without shared memory?)", mode)
	}
	// Migrate under the write lock so that several processes opening a
	// new file at once do not race to create the same tables.
	return s.retryBusy(ctx, func(db *gorm.DB) error {
		return db.Transaction(func(tx *gorm.DB) error {
			var version int
			if err := tx.Raw("PRAGMA user_version").Scan(&version).Error; err != nil {
				return err
			}
			switch {
			case version > schemaVersion:
				return fmt.Errorf("the database has schema version %d, newer than this program's %d: upgrade collab-sidecar", version, schemaVersion)
			case version == schemaVersion:
				return nil // migrated already, maybe by a process opening it at the same moment
			}
			if err := tx.AutoMigrate(ledgerModels()...); err != nil {
				return err
			}
			return tx.Exec(fmt.Sprintf("PRAGMA user_version = %d", schemaVersion)).Error
		})
	})
}

// Close closes the database.
func (s *Store) Close() error {
	s.stopAnnouncing()
	sqlDB, err := s.db.DB()
	if err != nil {
		return err
	}
	return sqlDB.Close()
}

// Ping checks that the database answers (for readiness probes).
func (s *Store) Ping(ctx context.Context) error {
	var one int
	if err := s.db.WithContext(ctx).Raw("SELECT 1").Scan(&one).Error; err != nil {
		return fmt.Errorf("ping ledger: %w", mapDBError(err))
	}
	return nil
}

// retryBusy runs txn until it does not meet a locked database, or until ctx
// ends. SQLite's own busy handler cannot be interrupted by a context, so it
// waits only briefly (sqliteBusySlice) and this loop does the rest of the
// waiting. A transaction that met SQLITE_BUSY was rolled back, so running
// it again whole is safe.
//
// The statements themselves run with ctx's values but not its deadline:
// given a context that can end, the SQLite driver runs every statement and
// every row on a goroutine of its own so that it could interrupt it, which
// in a batch of 64 writes is hundreds of goroutines started and switched to
// on the ledger's one serial path. Nothing there needs interrupting: a
// statement on the local file runs for microseconds, the only wait inside
// one is the busy handler, bounded by sqliteBusySlice, and ctx is checked
// here between tries and by a batch at each member's turn (runBatch).
func (s *Store) retryBusy(ctx context.Context, txn func(db *gorm.DB) error) error {
	db := s.db.WithContext(context.WithoutCancel(ctx))
	for delay := time.Millisecond; ; delay = min(2*delay, 20*time.Millisecond) {
		err := mapDBError(txn(db))
		if !errors.Is(err, ErrBusy) || ctx.Err() != nil {
			return err
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return err
		}
	}
}

// mapDBError turns the drivers' answers that mean "not now" into the
// sentinels, once, at the storage boundary: SQLite's "locked", a
// PostgreSQL lock wait or serialization failure that outlived the
// deadline, and expired deadlines into ErrBusy; a PostgreSQL server that
// cannot be reached, or is shutting down, into ErrUnreachable (see
// pgUnreachable). Lease outcomes pass unchanged.
func mapDBError(err error) error {
	if err == nil {
		return nil
	}
	var se sqlite3.Error
	if errors.As(err, &se) && (se.Code == sqlite3.ErrBusy || se.Code == sqlite3.ErrLocked) {
		return fmt.Errorf("%w: %v", ErrBusy, err)
	}
	if pgUnreachable(err) {
		return fmt.Errorf("%w: %v", ErrUnreachable, oneLine{err})
	}
	if pgBusy(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("%w: %v", ErrBusy, oneLine{err})
	}
	if strings.Contains(err.Error(), "\n") {
		return oneLine{err}
	}
	return err
}

// oneLine is an error whose message is one line: pgx puts each address
// it tried on a line of its own.
type oneLine struct{ err error }

func (e oneLine) Error() string {
	return strings.NewReplacer(":\n\t", ": ", "\n\t", "; ", "\n", " ").Replace(e.err.Error())
}

func (e oneLine) Unwrap() error { return e.err }
