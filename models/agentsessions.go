package models

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"
)

// Agent sessions (collab-lease session): a claim kept alive by its
// holder's connection instead of by renewals. The session is a row of the
// ledger, so every replica sees it: alive_until is the instant it ends
// unless it is heard from again, and each lease it keeps names it
// (leases.session) and has its expiry moved on with it. A session is
// heard from through heartbeats, written by the replica serving its
// connection once per grace/3 whatever the number of its claims
// (Heartbeat); when its connection is lost, the heartbeats stop and its
// claims lapse grace after the last one, or after its last sign of life
// if the replica saw the loss (Heartbeat once more, with what is left).
// A replica that dies writes nothing more: its sessions' claims lapse a
// grace after its last heartbeat, like any lapse, with nothing to clean
// up.
//
// A session is held by one connection at a time, its generation: a
// --resume on another connection moves it on (ResumeSession), and every
// write of the connection before (a heartbeat, a claim, its clean end)
// is refused from then on with ErrSessionMoved, so a connection that only
// seemed lost can neither keep alive nor release what was taken over.
//
// Every decision about a session is a write under the ledger's one write
// primitive: on PostgreSQL the issues it touches are locked as any write
// on them locks them (scope.keys), and the session's own row is locked
// by the conditional UPDATE each decision begins with.

// Sessions' limits.
const (
	MinGrace = 5 * time.Second // the least --grace
	// DefaultGrace is a session's grace when it names none.
	DefaultGrace = 30 * time.Second
	// sessionMemory is how long a lapsed or ended session's row is kept
	// before the next OpenSession of its account deletes it.
	sessionMemory = 24 * time.Hour
)

var (
	// ErrSessionGone: no session of this holder with that id is alive
	// (never opened, ended, or past its grace). Nothing was done.
	ErrSessionGone = errors.New("session gone")
	// ErrSessionMoved: the session is alive, but another connection
	// resumed it; this one may do nothing in its name any more.
	ErrSessionMoved = errors.New("session resumed elsewhere")
	// ErrTooManySessions: the account has as many sessions alive as it
	// may (OpenSession's max). Nothing was done; retry.
	ErrTooManySessions = errors.New("too many sessions for this account")
)

// SessionRef is a session as the connection holding it knows it: which
// session, which generation of it the connection holds, and its grace.
// A Holder with a SessionRef claims in the session's name.
type SessionRef struct {
	ID    string
	Gen   int64
	Grace time.Duration
}

// agentSessionRow is one session.
type agentSessionRow struct {
	ID        string `gorm:"primaryKey;size:32"`
	AccountID int64  `gorm:"not null;index:idx_agent_sessions_account"`
	Login     string `gorm:"size:255;not null"`
	Agent     string `gorm:"size:40;not null;default:''"`
	Grace     int64  `gorm:"not null"` // seconds
	Gen       int64  `gorm:"not null"`
	OpenedAt  int64  `gorm:"not null"`
	// AliveUntil is when the session ends unless heard from again.
	AliveUntil int64 `gorm:"not null"`
	// EndedAt is when it ended cleanly (nil: it did not).
	EndedAt *int64
}

func (agentSessionRow) TableName() string { return "agent_sessions" }

// newSessionID is a session's id: 128 random bits, in hex.
func newSessionID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// ValidSessionID says whether id is of the form session ids take.
func ValidSessionID(id string) bool {
	if len(id) != 32 {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil && strings.ToLower(id) == id
}

var (
	countSessionsSQL = sqlStmt("SELECT count(*) FROM agent_sessions WHERE account_id = ? AND ended_at IS NULL AND alive_until > ?")
	forgetSessionSQL = sqlStmt("DELETE FROM agent_sessions WHERE account_id = ? AND alive_until < ?")
	insertSessionSQL = sqlStmt("INSERT INTO agent_sessions (id, account_id, login, agent, grace, gen, opened_at, alive_until) VALUES (?, ?, ?, ?, ?, 1, ?, ?)")
	// touchSessionSQL is where every decision in a session's name begins:
	// the session is alive, held by that generation and of that holder;
	// it is heard from until the second argument (never earlier than it
	// was). Its row stays locked until COMMIT.
	touchSessionSQL = stmt{
		sqlite:   "UPDATE agent_sessions SET alive_until = MAX(alive_until, ?) WHERE id = ? AND gen = ? AND account_id = ? AND agent = ? AND ended_at IS NULL AND alive_until > ?",
		postgres: "UPDATE agent_sessions SET alive_until = GREATEST(alive_until, $1) WHERE id = $2 AND gen = $3 AND account_id = $4 AND agent = $5 AND ended_at IS NULL AND alive_until > $6",
	}
	resumeSessionSQL = sqlStmt("UPDATE agent_sessions SET gen = gen + 1, alive_until = ? + grace WHERE id = ? AND account_id = ? AND agent = ? AND ended_at IS NULL AND alive_until > ?")
	loadSessionSQL   = sqlStmt("SELECT gen, grace FROM agent_sessions WHERE id = ?")
	endSessionSQL    = sqlStmt("UPDATE agent_sessions SET ended_at = ? WHERE id = ? AND gen = ? AND account_id = ? AND agent = ? AND ended_at IS NULL AND alive_until > ?")
	aliveSessionSQL  = sqlStmt("SELECT count(*) FROM agent_sessions WHERE id = ? AND ended_at IS NULL AND alive_until > ?")
	sessionKeysSQL   = sqlStmt("SELECT repo_id, issue FROM leases WHERE session = ? AND holder IS NOT NULL")
	sessionLeasesSQL = sqlStmt("SELECT " + leaseColumns + " FROM leases WHERE session = ? AND " + liveSQL + " ORDER BY acquired_at, repo_id, issue")
)

// OpenSession opens a session for h (whose Session is ignored) with this
// grace, unless its account has max sessions alive already
// (ErrTooManySessions; max 0: no cap).
func (s *Store) OpenSession(ctx context.Context, h Holder, grace time.Duration, max int) (SessionRef, error) {
	if err := s.validate(Key{RepoID: 1, Issue: 1}, h, 0, false); err != nil {
		return SessionRef{}, fmt.Errorf("open session: %w", err)
	}
	if err := s.validGrace(grace); err != nil {
		return SessionRef{}, fmt.Errorf("open session: %w", err)
	}
	id, err := newSessionID()
	if err != nil {
		return SessionRef{}, fmt.Errorf("open session: %w", err)
	}
	g := int64(grace / time.Second)
	err = s.write(ctx, accountScope(h.ID), func(tx *gorm.DB, now int64) error {
		if err := execSQL(tx, forgetSessionSQL, h.ID, now-int64(sessionMemory/time.Second)); err != nil {
			return err
		}
		if max > 0 {
			var alive int64
			if err := queryRow(tx, countSessionsSQL, h.ID, now).Scan(&alive); err != nil {
				return err
			}
			if alive >= int64(max) {
				return ErrTooManySessions
			}
		}
		return execSQL(tx, insertSessionSQL, id, h.ID, h.Login, h.Agent, g, now, now+g)
	})
	if err != nil {
		return SessionRef{}, fmt.Errorf("open session: %w", err)
	}
	return SessionRef{ID: id, Gen: 1, Grace: grace}, nil
}

func (s *Store) validGrace(grace time.Duration) error {
	switch {
	case grace < MinGrace || grace%time.Second != 0:
		return fmt.Errorf("%w: grace %s is not a whole number of seconds of at least %s", ErrInvalid, grace, MinGrace)
	case grace > s.maxTTL:
		return fmt.Errorf("%w: grace %s is above the maximum %s", ErrInvalid, grace, s.maxTTL)
	}
	return nil
}

// ResumeSession moves session id, alive and h's (same account, same
// agent), on to a new generation held by the caller, and keeps its live
// leases alive a grace from now. It returns the new reference and the
// session's live leases, oldest first. ErrSessionGone if there is no such
// session alive.
func (s *Store) ResumeSession(ctx context.Context, id string, h Holder) (SessionRef, []Lease, error) {
	if !ValidSessionID(id) {
		return SessionRef{}, nil, fmt.Errorf("resume session: %w", ErrSessionGone)
	}
	keys, err := s.sessionKeys(ctx, id)
	if err != nil {
		return SessionRef{}, nil, fmt.Errorf("resume session: %w", err)
	}
	var ref SessionRef
	var out []Lease
	err = s.write(ctx, scope{keys: keys}, func(tx *gorm.DB, now int64) error {
		n, err := execCount(tx, resumeSessionSQL, now, id, h.ID, h.Agent, now)
		switch {
		case err != nil:
			return err
		case n == 0:
			return ErrSessionGone
		}
		var grace int64
		ref = SessionRef{ID: id}
		if err := queryRow(tx, loadSessionSQL, id).Scan(&ref.Gen, &grace); err != nil {
			return err
		}
		ref.Grace = time.Duration(grace) * time.Second
		if err := keepAlive(tx, id, keys, now, now+grace); err != nil {
			return err
		}
		out, err = sessionLeases(tx, id, now)
		return err
	})
	if err != nil {
		return SessionRef{}, nil, fmt.Errorf("resume session: %w", err)
	}
	return ref, out, nil
}

// Heartbeat records that session ref was heard from, left seconds' worth
// of grace ago (left: how much of its grace remains): the session and
// every lease it keeps stay alive until left from now, never less than
// they were, and never past a lease's cap. One write, whatever the number
// of its leases. It returns how many leases it kept alive.
// ErrSessionMoved if another connection resumed it, ErrSessionGone if it
// is no longer alive (its leases lapsed, or it ended).
func (s *Store) Heartbeat(ctx context.Context, ref SessionRef, h Holder, left time.Duration) (int, error) {
	keys, err := s.sessionKeys(ctx, ref.ID)
	if err != nil {
		return 0, fmt.Errorf("heartbeat: %w", err)
	}
	secs := int64((left + time.Second - 1) / time.Second)
	kept := 0
	// A session with more claims than one write should lock (PostgreSQL's
	// lock table is sized for dozens per transaction) is kept alive in
	// several writes of maxBeatKeys claims each.
	for first := true; first || len(keys) > 0; first = false {
		chunk := keys[:min(len(keys), maxBeatKeys)]
		keys = keys[len(chunk):]
		n := 0
		err = s.write(ctx, scope{keys: chunk}, func(tx *gorm.DB, now int64) error {
			if err := touchSession(tx, ref, h, now, now+secs); err != nil {
				return err
			}
			var err error
			n, err = keepAliveCount(tx, ref.ID, chunk, now, now+secs)
			return err
		})
		if err != nil {
			return kept, fmt.Errorf("heartbeat: %w", err)
		}
		kept += n
	}
	return kept, nil
}

// maxBeatKeys bounds the claims one heartbeat write keeps alive.
const maxBeatKeys = 256

// EndSession ends session ref cleanly: it is no longer alive, and its
// live leases are released, in its holder's name. It returns them.
// ErrSessionMoved or ErrSessionGone as Heartbeat: then nothing is
// released.
func (s *Store) EndSession(ctx context.Context, ref SessionRef, h Holder) ([]Lease, error) {
	keys, err := s.sessionKeys(ctx, ref.ID)
	if err != nil {
		return nil, fmt.Errorf("end session: %w", err)
	}
	var out []Lease
	err = s.write(ctx, scope{keys: keys}, func(tx *gorm.DB, now int64) error {
		out = nil
		n, err := execCount(tx, endSessionSQL, now, ref.ID, ref.Gen, h.ID, h.Agent, now)
		switch {
		case err != nil:
			return err
		case n == 0:
			return sessionRefused(tx, ref, now)
		}
		for _, k := range keys {
			row, found, err := load(tx, k)
			if err != nil {
				return err
			}
			if !found || row.Session != ref.ID || !row.live(now) {
				continue
			}
			l := row.lease()
			previous := *row.Holder
			row.free()
			if err := storeRecord(tx, row, true, Event{RepoID: k.RepoID, Issue: k.Issue, Action: ActionRelease, Holder: h.Login, HolderID: h.ID, Agent: h.Agent,
				Previous: previous, Token: row.Token, At: now, AcquiredAt: row.AcquiredAt}); err != nil {
				return err
			}
			out = append(out, l)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("end session: %w", err)
	}
	return out, nil
}

// SessionLeases returns the live leases session id keeps, oldest first.
func (s *Store) SessionLeases(ctx context.Context, id string) ([]Lease, error) {
	rows, err := liveRows(s.db.WithContext(ctx), s.readNow()).Select(leaseColumns).
		Where("session = ?", id).Order("acquired_at, repo_id, issue").Rows()
	if err != nil {
		return nil, fmt.Errorf("leases of session: %w", mapDBError(err))
	}
	out, err := scanLeases(rows, []Lease{})
	if err != nil {
		return nil, fmt.Errorf("leases of session: %w", mapDBError(err))
	}
	return out, nil
}

// sessionKeys are the issues whose rows name session id: what a write
// about the session may change, to be locked before it decides. A lease
// the session claims after this read is not among them, and is left
// alone by that write; the session's own commands come one at a time,
// so only a heartbeat can miss one, and the next one takes it.
func (s *Store) sessionKeys(ctx context.Context, id string) ([]Key, error) {
	keys, err := s.keys(ctx, "claims of the session", sessionKeysSQL, id)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(keys, compareKeys)
	return keys, nil
}

func compareKeys(a, b Key) int {
	if a.RepoID != b.RepoID {
		return int(sign(a.RepoID - b.RepoID))
	}
	return int(sign(a.Issue - b.Issue))
}

func sign(x int64) int64 {
	switch {
	case x < 0:
		return -1
	case x > 0:
		return 1
	}
	return 0
}

// touchSession begins a decision in session ref's name, made at now by
// h: the session must be alive, of h, and held by ref's generation; it
// stays alive until at least until.
func touchSession(tx *gorm.DB, ref SessionRef, h Holder, now, until int64) error {
	n, err := execCount(tx, touchSessionSQL, until, ref.ID, ref.Gen, h.ID, h.Agent, now)
	switch {
	case err != nil:
		return err
	case n == 0:
		return sessionRefused(tx, ref, now)
	}
	return nil
}

// sessionRefused says why a decision in ref's name found no session to
// make it in: another generation holds it, or it is gone.
func sessionRefused(tx *gorm.DB, ref SessionRef, now int64) error {
	var alive int64
	if err := queryRow(tx, aliveSessionSQL, ref.ID, now).Scan(&alive); err != nil {
		return err
	}
	if alive > 0 {
		return ErrSessionMoved
	}
	return ErrSessionGone
}

// keepAlive moves the expiry of session id's live leases among keys to
// until (never earlier than it was, never past a lease's cap).
func keepAlive(tx *gorm.DB, id string, keys []Key, now, until int64) error {
	_, err := keepAliveCount(tx, id, keys, now, until)
	return err
}

func keepAliveCount(tx *gorm.DB, id string, keys []Key, now, until int64) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	var q strings.Builder
	pg := tx.Dialector.Name() == "postgres"
	args := []any{until, id, now}
	if pg {
		q.WriteString("UPDATE leases SET expires_at = LEAST(COALESCE(cap_at, $1), GREATEST(expires_at, $1)) WHERE session = $2 AND holder IS NOT NULL AND expires_at > $3 AND (repo_id, issue) IN (")
	} else {
		q.WriteString("UPDATE leases SET expires_at = MIN(COALESCE(cap_at, ?1), MAX(expires_at, ?1)) WHERE session = ?2 AND holder IS NOT NULL AND expires_at > ?3 AND (repo_id, issue) IN (")
	}
	for i, k := range keys {
		if i > 0 {
			q.WriteString(", ")
		}
		if pg {
			fmt.Fprintf(&q, "($%d, $%d)", len(args)+1, len(args)+2)
		} else {
			fmt.Fprintf(&q, "(?%d, ?%d)", len(args)+1, len(args)+2)
		}
		args = append(args, k.RepoID, k.Issue)
	}
	q.WriteString(")")
	c, ctx := conn(tx)
	res, err := c.ExecContext(ctx, q.String(), args...)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// sessionLeases are the live leases of session id at now, oldest first.
func sessionLeases(tx *gorm.DB, id string, now int64) ([]Lease, error) {
	c, ctx := conn(tx)
	rows, err := c.QueryContext(ctx, sessionLeasesSQL.in(tx), id, now)
	if err != nil {
		return nil, err
	}
	return scanLeases(rows, []Lease{})
}

// execCount runs q and says how many rows it changed.
func execCount(tx *gorm.DB, q stmt, args ...any) (int64, error) {
	c, ctx := conn(tx)
	res, err := c.ExecContext(ctx, q.in(tx), args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// inSession is what a claim in session h.Session's name decides at now,
// with this ttl (0: none): the session must be alive and h's, and is
// heard from now; the lease's expiry is a grace from now, and never past
// its cap, ttl from now. Outside a session, the expiry is ttl's.
func inSession(tx *gorm.DB, h Holder, ttl time.Duration, now int64) (session string, expires, capAt *int64, err error) {
	if h.Session == nil {
		return "", expiry(now, ttl), nil, nil
	}
	grace := int64(h.Session.Grace / time.Second)
	if err := touchSession(tx, *h.Session, h, now, now+grace); err != nil {
		return "", nil, nil, err
	}
	e := now + grace
	capAt = expiry(now, ttl)
	if capAt != nil && *capAt < e {
		e = *capAt
	}
	return h.Session.ID, &e, capAt, nil
}

// stayInSession is what a re-acquire or renew by the holder outside the
// session does to a live lease its session keeps (a command run under
// `git collab run`, as its agent, without the session): the session
// still keeps it, and the call's ttl, if any, caps its life from now
// (0: no cap).
func stayInSession(row leaseRow, ttl time.Duration, now int64) (session string, expires, capAt *int64) {
	capAt = expiry(now, ttl)
	e := *row.ExpiresAt
	if capAt != nil && *capAt < e {
		e = *capAt
	}
	return row.Session, &e, capAt
}

// lapse records, before the ledger changes a row whose session's tenure
// has lapsed, when and how it lapsed: the history cannot tell from its
// events, since the session moved its expiry without any.
func lapse(tx *gorm.DB, row leaseRow, now int64) error {
	if row.Holder == nil || row.Session == "" || row.ExpiresAt == nil || row.live(now) {
		return nil
	}
	action := ActionSessionLost
	if row.CapAt != nil && *row.ExpiresAt >= *row.CapAt {
		action = ActionExpire
	}
	var id int64
	if row.HolderID != nil {
		id = *row.HolderID
	}
	return record(tx, Event{RepoID: row.RepoID, Issue: row.Issue, Action: action, Holder: *row.Holder, HolderID: id, Agent: row.Agent,
		Token: row.Token, At: *row.ExpiresAt, ExpiresAt: row.ExpiresAt, AcquiredAt: row.AcquiredAt, Session: row.Session})
}

// free makes the row free, keeping its token.
func (r *leaseRow) free() {
	r.Holder, r.HolderID, r.Agent, r.ExpiresAt, r.Session, r.CapAt = nil, nil, "", nil, "", nil
}
