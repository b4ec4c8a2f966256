package models

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"gorm.io/gorm"
)

// Quarantine (docs/operating.md, Quarantine): an issue whose last n
// tenures (WithQuarantineAfter) each ended involuntarily, expired or
// session_lost (one that expired and was taken over lapsed too), is one
// agents keep failing at. From the instant the nth of them ended, acquire
// refuses it (*QuarantinedError) unless forced by a repository admin,
// and AcquireFirst skips it, until it is lifted (LiftQuarantine): then
// only the tenures after the lift count.
//
// An involuntary ending is always a lapse, which the ledger notices
// lazily: the row keeps its holder and its past expiry until the next
// write about it. So the quarantine is worked out from the history and
// the row (quarantineIn) by whoever decides about the issue, at the
// instant of the lapse and not later; and it is recorded in the ledger
// (a row of quarantines, by RecordQuarantine) by the first reader that
// notices it, which is the sidecar's quarantine worker at the expiry
// instant. The record is what next reads of a whole repository at once,
// what lifting clears, and where the forge's side (the label and the one
// comment) is marked done (MarkQuarantineForged), so that of several
// replicas only one tells the forge.

// quarantineRow is an issue's quarantine, current or lifted.
type quarantineRow struct {
	RepoID int64 `gorm:"primaryKey;autoIncrement:false"`
	Issue  int64 `gorm:"primaryKey;autoIncrement:false"`
	// Since is the instant the last of the tenures counted ended; nil:
	// lifted.
	Since *int64
	// Token is the last tenure counted; Cleared the last tenure of the
	// latest lift (the tenures up to it no longer count).
	Token   int64 `gorm:"not null"`
	Cleared int64 `gorm:"not null;default:0"`
	// Forged is the Token of the quarantine whose label and comment the
	// forge has (0: none yet); Labeled, that the sidecar put the label
	// on and has not seen it removed.
	Forged  int64 `gorm:"not null;default:0"`
	Labeled bool  `gorm:"not null;default:false"`
}

func (quarantineRow) TableName() string { return "quarantines" }

// ErrQuarantined: the issue is quarantined and the acquire was not
// forced. The error is a *QuarantinedError.
var ErrQuarantined = errors.New("issue quarantined")

// QuarantinedError says since when an issue is quarantined.
type QuarantinedError struct {
	Since time.Time
}

func (e *QuarantinedError) Error() string {
	return "quarantined since " + e.Since.UTC().Format(time.RFC3339)
}

// Is makes errors.Is(err, ErrQuarantined) true.
func (e *QuarantinedError) Is(target error) bool { return target == ErrQuarantined }

// Quarantine is an issue's quarantine as the ledger has it.
type Quarantine struct {
	Key
	// Since: quarantined since then; nil: not quarantined.
	Since *time.Time
	// Recorded: the quarantine is in the ledger, not only worked out.
	Recorded bool
	// Token is the last tenure the quarantine counts.
	Token int64
	// Tenures are the tenures that quarantined it, newest first (only
	// while quarantined).
	Tenures []Tenure
	// Forged: the forge has this quarantine's label and comment.
	Forged bool
	// Labeled: the sidecar put the label on, and has not seen it go.
	Labeled bool
	// Expires is the expiry of the issue's live lease (nil: none, or
	// open-ended), whose lapse may quarantine it.
	Expires *time.Time
}

// lapsed says whether a tenure ending counts towards quarantine: its
// holder let it lapse (a force-release is an admin's doing, not a
// failure of the work).
func lapsed(e Ending) bool {
	return e == EndExpired || e == EndSessionLost || e == EndTakenOver
}

// quarantined is what quarantineIn found.
type quarantined struct {
	q       quarantineRow
	found   bool   // q is in the ledger
	since   *int64 // quarantined since (nil: not)
	token   int64  // the last tenure counted
	tenures []Tenure
}

var (
	loadQuarantineSQL   = sqlStmt("SELECT since, token, cleared, forged, labeled FROM quarantines WHERE repo_id = ? AND issue = ?")
	insertQuarantineSQL = sqlStmt("INSERT INTO quarantines (repo_id, issue, since, token, cleared, forged, labeled) VALUES (?, ?, ?, ?, ?, ?, ?)")
	updateQuarantineSQL = sqlStmt("UPDATE quarantines SET since = ?, token = ?, cleared = ?, forged = ?, labeled = ? WHERE repo_id = ? AND issue = ?")
	quarantinedSQL      = sqlStmt("SELECT issue FROM quarantines WHERE repo_id = ? AND since IS NOT NULL")
	toForgeSQL          = sqlStmt("SELECT repo_id, issue FROM quarantines WHERE (since IS NOT NULL AND forged <> token) OR (since IS NULL AND labeled)")
	// lapsedSQL: the rows whose last tenure lapsed and that n more
	// involuntary endings since the last lift could quarantine, not
	// quarantined yet.
	lapsedSQL = sqlStmt("SELECT l.repo_id, l.issue FROM leases l LEFT JOIN quarantines q ON q.repo_id = l.repo_id AND q.issue = l.issue" +
		" WHERE l.holder IS NOT NULL AND l.expires_at IS NOT NULL AND l.expires_at <= ? AND q.since IS NULL AND l.token - COALESCE(q.cleared, 0) >= ?")
)

func loadQuarantine(tx *gorm.DB, k Key) (quarantineRow, bool, error) {
	q := quarantineRow{RepoID: k.RepoID, Issue: k.Issue}
	err := queryRow(tx, loadQuarantineSQL, k.RepoID, k.Issue).Scan(&q.Since, &q.Token, &q.Cleared, &q.Forged, &q.Labeled)
	if errors.Is(err, sql.ErrNoRows) {
		return q, false, nil
	}
	return q, err == nil, err
}

func storeQuarantine(tx *gorm.DB, q quarantineRow, found bool) error {
	if !found {
		return execSQL(tx, insertQuarantineSQL, q.RepoID, q.Issue, q.Since, q.Token, q.Cleared, q.Forged, q.Labeled)
	}
	return execSQL(tx, updateQuarantineSQL, q.Since, q.Token, q.Cleared, q.Forged, q.Labeled, q.RepoID, q.Issue)
}

// quarantineIn works out, at now, whether the issue of row (its lease
// row) is quarantined after n involuntary endings: recorded so, or its
// last n tenures, all after the last lift, each ended involuntarily. A
// live tenure has not ended, so an issue whose lease is live is
// quarantined only if recorded so (a forced acquire).
func quarantineIn(tx *gorm.DB, row leaseRow, n, now int64) (quarantined, error) {
	k := Key{RepoID: row.RepoID, Issue: row.Issue}
	q, found, err := loadQuarantine(tx, k)
	out := quarantined{q: q, found: found}
	switch {
	case err != nil:
		return out, err
	case found && q.Since != nil:
		out.since, out.token = q.Since, q.Token
		return out, nil
	case n <= 0 || row.live(now) || row.Token-q.Cleared < n:
		return out, nil
	}
	var evs []Event
	if err := tx.Where("repo_id = ? AND issue = ? AND token > ?", k.RepoID, k.Issue, row.Token-n).Order("id").Find(&evs).Error; err != nil {
		return out, err
	}
	ts := tenures(row, evs, now)
	if int64(len(ts)) < n {
		return out, nil
	}
	ts = ts[:n]
	for i, t := range ts {
		if t.Token != row.Token-int64(i) || !lapsed(t.EndedBy) || t.EndedAt == nil {
			return out, nil
		}
	}
	since := ts[0].EndedAt.Unix()
	out.since, out.token, out.tenures = &since, row.Token, ts
	return out, nil
}

// quarantinedIssues adds to taken the issues of the repository whose
// quarantine is recorded.
func quarantinedIssues(tx *gorm.DB, repoID int64, taken map[int64]bool) error {
	c, ctx := conn(tx)
	rows, err := c.QueryContext(ctx, quarantinedSQL.in(tx), repoID)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var n int64
		if err := rows.Scan(&n); err != nil {
			return err
		}
		taken[n] = true
	}
	return rows.Err()
}

// Quarantined returns the issues of the repository whose quarantine is
// recorded (none while quarantine is off), in order (the board's list;
// an issue whose nth lapse the quarantine worker has not recorded yet
// joins within its second).
func (s *Store) Quarantined(ctx context.Context, repoID int64) ([]int64, error) {
	if s.quarantineAfter <= 0 {
		return nil, nil // off: next and acquire skip none of them
	}
	taken := map[int64]bool{}
	if err := quarantinedIssues(s.db.WithContext(ctx), repoID, taken); err != nil {
		return nil, fmt.Errorf("quarantined issues of %d: %w", repoID, mapDBError(err))
	}
	return slices.Sorted(maps.Keys(taken)), nil
}

// QuarantineOf reads k's quarantine, as quarantineIn works it out now
// (with the tenures that quarantined it, even when recorded).
func (s *Store) QuarantineOf(ctx context.Context, k Key) (Quarantine, error) {
	if k.RepoID <= 0 || k.Issue <= 0 {
		return Quarantine{}, fmt.Errorf("quarantine of %d#%d: %w: bad key", k.RepoID, k.Issue, ErrInvalid)
	}
	now := s.now()
	if s.dbClock {
		var err error
		if now, err = s.readNowValue(ctx); err != nil {
			return Quarantine{}, fmt.Errorf("quarantine of %d#%d: %w", k.RepoID, k.Issue, err)
		}
	}
	var out Quarantine
	err := s.db.WithContext(ctx).Connection(func(tx *gorm.DB) error {
		var err error
		out, err = s.quarantineOf(tx, k, now)
		return err
	})
	if err != nil {
		return Quarantine{}, fmt.Errorf("quarantine of %d#%d: %w", k.RepoID, k.Issue, mapDBError(err))
	}
	return out, nil
}

func (s *Store) quarantineOf(tx *gorm.DB, k Key, now int64) (Quarantine, error) {
	out := Quarantine{Key: k}
	row, found, err := load(tx, k)
	if err != nil || !found {
		return out, err
	}
	if row.live(now) {
		out.Expires = unixPtr(row.ExpiresAt)
	}
	st, err := quarantineIn(tx, row, s.quarantineAfter, now)
	if err != nil {
		return out, err
	}
	out.Recorded, out.Labeled = st.found && st.q.Since != nil, st.q.Labeled
	if st.since == nil {
		return out, nil
	}
	out.Since, out.Token, out.Tenures = unixPtr(st.since), st.token, st.tenures
	out.Forged = st.found && st.q.Forged == st.token
	if out.Recorded && len(out.Tenures) == 0 {
		// The tenures it counted, from the history: the last ones up
		// to its token.
		var evs []Event
		n := max(s.quarantineAfter, 1)
		if err := tx.Where("repo_id = ? AND issue = ? AND token > ? AND token <= ?", k.RepoID, k.Issue, st.token-n, st.token).
			Order("id").Find(&evs).Error; err != nil {
			return out, err
		}
		ts := tenures(row, evs, now)
		for _, t := range ts {
			if t.Token <= st.token {
				out.Tenures = append(out.Tenures, t)
			}
		}
	}
	return out, nil
}

// RecordQuarantine records k's quarantine if quarantineIn works one out
// that is not recorded yet, and returns it (recorded: by this call).
func (s *Store) RecordQuarantine(ctx context.Context, k Key) (q Quarantine, recorded bool, err error) {
	if k.RepoID <= 0 || k.Issue <= 0 {
		return Quarantine{}, false, fmt.Errorf("record quarantine of %d#%d: %w: bad key", k.RepoID, k.Issue, ErrInvalid)
	}
	err = s.write(ctx, issueScope(k), func(tx *gorm.DB, now int64) error {
		recorded = false
		row, found, err := load(tx, k)
		if err != nil || !found {
			return err
		}
		st, err := quarantineIn(tx, row, s.quarantineAfter, now)
		if err != nil || st.since == nil || (st.found && st.q.Since != nil) {
			return err
		}
		r := st.q
		r.Since, r.Token = st.since, st.token
		recorded = true
		return storeQuarantine(tx, r, st.found)
	})
	if err != nil {
		return Quarantine{}, false, fmt.Errorf("record quarantine of %d#%d: %w", k.RepoID, k.Issue, err)
	}
	q, err = s.QuarantineOf(ctx, k)
	return q, recorded, err
}

// LiftQuarantine lifts k's quarantine, recorded or only worked out: the
// tenures so far no longer count. labelGone: the forge's label is gone
// already (removed by hand), so nobody need remove it. It reports
// whether k was quarantined.
func (s *Store) LiftQuarantine(ctx context.Context, k Key, labelGone bool) (bool, error) {
	if k.RepoID <= 0 || k.Issue <= 0 {
		return false, fmt.Errorf("lift quarantine of %d#%d: %w: bad key", k.RepoID, k.Issue, ErrInvalid)
	}
	var lifted bool
	err := s.write(ctx, issueScope(k), func(tx *gorm.DB, now int64) error {
		lifted = false
		row, found, err := load(tx, k)
		if err != nil || !found {
			return err
		}
		st, err := quarantineIn(tx, row, s.quarantineAfter, now)
		if err != nil {
			return err
		}
		r := st.q
		if st.since == nil {
			if !labelGone || !r.Labeled {
				return nil
			}
			r.Labeled = false
			return storeQuarantine(tx, r, st.found)
		}
		lifted = true
		r.Since, r.Token, r.Cleared = nil, st.token, row.Token
		r.Labeled = r.Labeled && !labelGone
		return storeQuarantine(tx, r, st.found)
	})
	if err != nil {
		return false, fmt.Errorf("lift quarantine of %d#%d: %w", k.RepoID, k.Issue, err)
	}
	return lifted, nil
}

// MarkQuarantineForged records what the forge has of k's quarantine: the
// label and comment of the quarantine whose last tenure is token (0:
// none), and whether the label is on.
func (s *Store) MarkQuarantineForged(ctx context.Context, k Key, token int64, labeled bool) error {
	err := s.write(ctx, issueScope(k), func(tx *gorm.DB, _ int64) error {
		r, found, err := loadQuarantine(tx, k)
		if err != nil || !found {
			return err
		}
		r.Forged, r.Labeled = token, labeled
		return storeQuarantine(tx, r, true)
	})
	if err != nil {
		return fmt.Errorf("mark quarantine of %d#%d: %w", k.RepoID, k.Issue, err)
	}
	return nil
}

// QuarantinesToForge returns the issues whose quarantine the forge has
// not been told of yet, or whose lifted quarantine's label is still on.
func (s *Store) QuarantinesToForge(ctx context.Context) ([]Key, error) {
	return s.keys(ctx, "quarantines to tell the forge of", toForgeSQL)
}

// LapsedUnquarantined returns the issues whose last tenure lapsed and
// that are not quarantined yet, though enough tenures ended since the
// last lift that they could be (the quarantine worker looks at each
// once when it starts, for lapses while no sidecar ran).
func (s *Store) LapsedUnquarantined(ctx context.Context) ([]Key, error) {
	if s.quarantineAfter <= 0 {
		return nil, nil
	}
	now := s.now()
	if s.dbClock {
		var err error
		if now, err = s.readNowValue(ctx); err != nil {
			return nil, fmt.Errorf("lapsed leases: %w", err)
		}
	}
	return s.keys(ctx, "lapsed leases", lapsedSQL, now, s.quarantineAfter)
}

// keys reads the keys q selects (repo_id, issue); what names them in
// its error.
func (s *Store) keys(ctx context.Context, what string, q stmt, args ...any) ([]Key, error) {
	var keys []Key
	err := s.db.WithContext(ctx).Connection(func(tx *gorm.DB) error {
		c, ctx := conn(tx)
		rows, err := c.QueryContext(ctx, q.in(tx), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k Key
			if err := rows.Scan(&k.RepoID, &k.Issue); err != nil {
				return err
			}
			keys = append(keys, k)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, mapDBError(err))
	}
	return keys, nil
}
