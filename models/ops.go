package models

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// The five ledger operations. Each mutation is one transaction that reads
// the issue's row, decides, writes the row and appends to the history; the
// write lock is held from BEGIN, so two callers can never both decide on
// the same stale read.

// Acquire claims k, an issue or pull request (obs.Kind), for h. ttl 0
// means open-ended; otherwise the lease expires ttl after now. The issue
// must not be recorded closed at a version at least obs.Version (ErrClosed,
// see issues.go); what the caller saw of it is recorded.
//
//   - no row, or a row that is not live: a new tenure with token old+1 (1
//     for a first claim);
//   - live and held by h (same account ID): idempotent, same token, expiry
//     re-set from this call's ttl, and the login shown becomes h's current
//     one;
//   - live and held by someone else: *HeldError;
//   - not live, and quarantined (quarantine.go): *QuarantinedError.
func (s *Store) Acquire(ctx context.Context, k Key, h Holder, ttl time.Duration, obs Observed) (Lease, error) {
	return s.acquire(ctx, k, h, ttl, obs, false)
}

// AcquireForced is Acquire that overrides the issue's quarantine, for a
// repository admin (the caller decides who may). The quarantine stays:
// it is lifted only by LiftQuarantine.
func (s *Store) AcquireForced(ctx context.Context, k Key, h Holder, ttl time.Duration, obs Observed) (Lease, error) {
	return s.acquire(ctx, k, h, ttl, obs, true)
}

func (s *Store) acquire(ctx context.Context, k Key, h Holder, ttl time.Duration, obs Observed, force bool) (Lease, error) {
	kind := obs.Kind
	if err := s.validate(k, h, ttl, false); err != nil {
		return Lease{}, fmt.Errorf("acquire %d#%d: %w", k.RepoID, k.Issue, err)
	}
	if kind != KindIssue && kind != KindPull {
		return Lease{}, fmt.Errorf("acquire %d#%d: %w: unknown kind %d", k.RepoID, k.Issue, ErrInvalid, kind)
	}
	var out Lease
	err := s.write(ctx, s.claimScope(issueScope(k), h), func(tx *gorm.DB, now int64) error {
		if err := admit(tx, k, obs, now); err != nil {
			return err
		}
		p := s.policy()
		p.force = force
		var err error
		out, err = acquireIn(tx, k, h, ttl, kind, now, p)
		return err
	})
	if err != nil {
		return Lease{}, fmt.Errorf("acquire %d#%d: %w", k.RepoID, k.Issue, err)
	}
	return out, nil
}

// policy is what a new tenure must respect besides the row itself: the
// lock-delay (seconds), the claim caps (0: none) and the quarantine
// (after that many involuntary endings; 0: never), which force
// overrides.
type policy struct {
	delay, perHolder, perAccount int64
	quarantine                   int64
	force                        bool
}

func (s *Store) policy() policy {
	return policy{delay: s.lockDelay, perHolder: s.perHolder, perAccount: s.perAccount, quarantine: s.quarantineAfter}
}

// claimScope is sc, and on PostgreSQL with a claim cap also h's account:
// the count of its live leases and the new tenure are one decision, so
// two claims of the account on different issues wait for each other.
func (s *Store) claimScope(sc scope, h Holder) scope {
	if s.perHolder > 0 || s.perAccount > 0 {
		sc.account = h.ID
	}
	return sc
}

var (
	countHolderSQL  = sqlStmt("SELECT count(*) FROM leases WHERE holder_id = ? AND agent = ? AND " + liveSQL)
	countAccountSQL = sqlStmt("SELECT count(*) FROM leases WHERE holder_id = ? AND " + liveSQL)
)

// capped is the *LimitError of a new tenure for h beyond p's caps, if any
// (the holder's cap first); h holds no live lease on the issue at stake.
// moving: the issue's live lease is of h's account already (a handoff
// between its agents), so the account's count keeps it and must not
// count it twice.
func capped(tx *gorm.DB, h Holder, now int64, p policy, moving bool) error {
	if p.perHolder <= 0 && p.perAccount <= 0 {
		return nil
	}
	for _, c := range []struct {
		scope string
		limit int64
		q     stmt
		args  []any
	}{
		{"holder", p.perHolder, countHolderSQL, []any{h.ID, h.Agent, now}},
		{"account", p.perAccount, countAccountSQL, []any{h.ID, now}},
	} {
		if c.limit <= 0 {
			continue
		}
		var live int64
		if err := queryRow(tx, c.q, c.args...).Scan(&live); err != nil {
			return err
		}
		if moving && c.scope == "account" {
			live--
		}
		if live >= c.limit {
			return &LimitError{Scope: c.scope, Limit: c.limit, Live: live}
		}
	}
	return nil
}

// acquireIn is acquire's decision, inside its transaction, once the
// issue's state has been admitted, under policy p.
func acquireIn(tx *gorm.DB, k Key, h Holder, ttl time.Duration, kind Kind, now int64, p policy) (Lease, error) {
	row, found, err := load(tx, k)
	if err != nil {
		return Lease{}, err
	}
	live := found && row.live(now)
	if found && !live && p.quarantine > 0 && !p.force {
		st, err := quarantineIn(tx, row, p.quarantine, now)
		if err != nil {
			return Lease{}, err
		}
		if st.since != nil {
			return Lease{}, &QuarantinedError{Since: time.Unix(*st.since, 0).UTC()}
		}
	}
	ev := Event{RepoID: k.RepoID, Issue: k.Issue, Holder: h.Login, HolderID: h.ID, Agent: h.Agent, At: now}
	switch {
	case live && !row.heldBy(h):
		return Lease{}, &HeldError{Holder: *row.Holder, Agent: row.Agent, ExpiresAt: unixPtr(row.ExpiresAt)}
	case found && coolingUntil(row, h, now, p.delay) != nil:
		return Lease{}, &CoolingError{Until: *coolingUntil(row, h, now, p.delay)}
	case !live:
		// A new tenure: within the claim caps? (A re-acquire never counts.)
		if err := capped(tx, h, now, p, false); err != nil {
			return Lease{}, err
		}
	}
	session, expires, capAt, err := inSession(tx, h, ttl, now)
	if err != nil {
		return Lease{}, err
	}
	if live && h.Session == nil && row.Session != "" {
		session, expires, capAt = stayInSession(row, ttl, now)
	}
	if found && !live {
		if err := lapse(tx, row, now); err != nil {
			return Lease{}, err
		}
	}
	ev.ExpiresAt, ev.Session = expires, session
	switch {
	case live:
		row.Holder, row.ExpiresAt, row.Kind = &h.Login, expires, kind
		ev.Action = ActionReacquire
	case found:
		if row.Holder != nil {
			ev.Action, ev.Previous = ActionTakeover, *row.Holder
		} else {
			ev.Action = ActionAcquire
		}
		row.Holder, row.HolderID, row.Agent, row.Kind = &h.Login, &h.ID, h.Agent, kind
		row.Token, row.AcquiredAt, row.ExpiresAt = row.Token+1, now, expires
	default:
		ev.Action = ActionAcquire
		row = leaseRow{RepoID: k.RepoID, Issue: k.Issue, Holder: &h.Login, HolderID: &h.ID, Agent: h.Agent, Kind: kind,
			Token: 1, AcquiredAt: now, ExpiresAt: expires}
	}
	row.Session, row.CapAt = session, capAt
	ev.Token, ev.AcquiredAt = row.Token, row.AcquiredAt
	if err := storeRecord(tx, row, found, ev); err != nil {
		return Lease{}, err
	}
	return row.lease(), nil
}

// Renew extends h's live lease on k to now+ttl, keeping its token; the
// login shown becomes h's current one. Anything else (free, expired,
// someone else's) is a *NotHolderError.
func (s *Store) Renew(ctx context.Context, k Key, h Holder, ttl time.Duration) (Lease, error) {
	return s.renew(ctx, k, h, 0, ttl)
}

// RenewTenure is Renew of tenure token alone: if k's live lease is h's
// with another token, it is a *NotHolderError too (the gate's
// --renew-on-push renews the tenure whose token a push carried).
func (s *Store) RenewTenure(ctx context.Context, k Key, h Holder, token int64, ttl time.Duration) (Lease, error) {
	if token <= 0 {
		return Lease{}, fmt.Errorf("renew %d#%d: %w: token %d", k.RepoID, k.Issue, ErrInvalid, token)
	}
	return s.renew(ctx, k, h, token, ttl)
}

func (s *Store) renew(ctx context.Context, k Key, h Holder, token int64, ttl time.Duration) (Lease, error) {
	if err := s.validate(k, h, ttl, true); err != nil {
		return Lease{}, fmt.Errorf("renew %d#%d: %w", k.RepoID, k.Issue, err)
	}
	var out Lease
	err := s.write(ctx, issueScope(k), func(tx *gorm.DB, now int64) error {
		row, found, err := load(tx, k)
		if err != nil {
			return err
		}
		if !found || !row.live(now) || !row.heldBy(h) || token != 0 && row.Token != token {
			return notHolder(row, found, now)
		}
		session, expires, capAt, err := inSession(tx, h, ttl, now)
		if err != nil {
			return err
		}
		if h.Session == nil && row.Session != "" {
			session, expires, capAt = stayInSession(row, ttl, now)
		}
		row.Holder, row.ExpiresAt, row.Session, row.CapAt = &h.Login, expires, session, capAt
		if err := storeRecord(tx, row, true, Event{RepoID: k.RepoID, Issue: k.Issue, Action: ActionRenew, Holder: h.Login, HolderID: h.ID, Agent: h.Agent,
			Token: row.Token, At: now, ExpiresAt: row.ExpiresAt, AcquiredAt: row.AcquiredAt, Session: session}); err != nil {
			return err
		}
		out = row.lease()
		return nil
	})
	if err != nil {
		return Lease{}, fmt.Errorf("renew %d#%d: %w", k.RepoID, k.Issue, err)
	}
	return out, nil
}

// Release frees k unless someone else holds a live lease on it
// (*NotHolderError). The row keeps its token. Releasing a free or expired
// lease succeeds, so a client retrying after a dropped connection does not
// fail. It returns the lease it freed, or nil when there was none.
func (s *Store) Release(ctx context.Context, k Key, h Holder) (*Lease, error) {
	return s.release(ctx, k, h, false)
}

// ForceRelease frees k whoever holds it, for by, a repository admin (the
// caller decides who may): the history records the tenure as ended by
// ActionForceRelease, naming by. Otherwise it is Release.
func (s *Store) ForceRelease(ctx context.Context, k Key, by Holder) (*Lease, error) {
	return s.release(ctx, k, by, true)
}

func (s *Store) release(ctx context.Context, k Key, h Holder, force bool) (*Lease, error) {
	if err := s.validate(k, h, 0, false); err != nil {
		return nil, fmt.Errorf("release %d#%d: %w", k.RepoID, k.Issue, err)
	}
	var out *Lease
	err := s.write(ctx, issueScope(k), func(tx *gorm.DB, now int64) error {
		row, found, err := load(tx, k)
		if err != nil {
			return err
		}
		if !found || row.Holder == nil {
			return nil // nothing to free, nothing to record
		}
		if _, cooling := row.lapsedWithin(now, s.lockDelay); cooling || !row.live(now) && !row.ofAccount(h) && !force {
			// A lapsed lease of someone else, or one in its lock-delay
			// (whoever releases it, its holder and an admin included):
			// nothing to free, and its row stays as it is, so that no
			// release ends the lock-delay. Only its holder may take it
			// back early, by claiming it again.
			return nil
		}
		action := ActionRelease
		switch {
		// Any agent of the holder's account, or the account itself, may
		// release: a person cleaning up after their crashed bot.
		case row.live(now) && !row.ofAccount(h) && !force:
			return notHolder(row, found, now)
		case row.live(now) && !row.ofAccount(h):
			action = ActionForceRelease
		}
		if row.live(now) {
			l := row.lease()
			out = &l
		} else if err := lapse(tx, row, now); err != nil {
			return err
		}
		previous := *row.Holder
		row.free()
		return storeRecord(tx, row, true, Event{RepoID: k.RepoID, Issue: k.Issue, Action: action, Holder: h.Login, HolderID: h.ID, Agent: h.Agent,
			Previous: previous, Token: row.Token, At: now, AcquiredAt: row.AcquiredAt})
	})
	if err != nil {
		return nil, fmt.Errorf("release %d#%d: %w", k.RepoID, k.Issue, err)
	}
	return out, nil
}

// MinHandoffLife is the least a handed-off tenure has left: the target's
// tenure keeps the old one's expiry, but never less than this ahead (nor
// more than the ledger's maximum TTL, if that is shorter).
const MinHandoffLife = 10 * time.Minute

// Handoff ends the live tenure on k and begins to's, in one transaction:
// the old tenure ends handed_off, named as by's doing, and to's tenure
// gets the next token and the old one's expiry (open-ended stays so), at
// least MinHandoffLife ahead. by must be of the holder's account unless
// force (a repository admin; the caller decides who may). It returns
// to's lease and the one that ended. Not live, or not by's to hand: a
// *NotHolderError. to already the holder: ErrInvalid. to past its claim
// caps: a *LimitError.
func (s *Store) Handoff(ctx context.Context, k Key, by, to Holder, force bool) (Lease, Lease, error) {
	if err := s.validate(k, by, 0, false); err != nil {
		return Lease{}, Lease{}, fmt.Errorf("handoff %d#%d: %w", k.RepoID, k.Issue, err)
	}
	if err := s.validate(k, to, 0, false); err != nil {
		return Lease{}, Lease{}, fmt.Errorf("handoff %d#%d to %s: %w", k.RepoID, k.Issue, to.Login, err)
	}
	var out, from Lease
	err := s.write(ctx, s.claimScope(issueScope(k), to), func(tx *gorm.DB, now int64) error {
		row, found, err := load(tx, k)
		if err != nil {
			return err
		}
		switch {
		case !found || !row.live(now) || (!row.ofAccount(by) && !force):
			return notHolder(row, found, now)
		case row.heldBy(to):
			return ErrAlreadyHolder
		}
		if err := capped(tx, to, now, s.policy(), row.ofAccount(to)); err != nil {
			return err
		}
		from = row.lease()
		if err := record(tx, Event{RepoID: k.RepoID, Issue: k.Issue, Action: ActionHandoff, Holder: by.Login, HolderID: by.ID, Agent: by.Agent,
			Previous: *row.Holder, Token: row.Token, At: now, AcquiredAt: row.AcquiredAt}); err != nil {
			return err
		}
		if row.ExpiresAt != nil {
			least := now + int64(min(MinHandoffLife, s.maxTTL)/time.Second)
			row.ExpiresAt = &least
			if from.ExpiresAt.Unix() > least {
				exp := from.ExpiresAt.Unix()
				row.ExpiresAt = &exp
			}
		}
		// The target's tenure is its own to renew: no session of the
		// old holder keeps it.
		row.Holder, row.HolderID, row.Agent, row.Session, row.CapAt = &to.Login, &to.ID, to.Agent, "", nil
		row.Token, row.AcquiredAt = row.Token+1, now
		if err := storeRecord(tx, row, true, Event{RepoID: k.RepoID, Issue: k.Issue, Action: ActionAcquire, Holder: to.Login, HolderID: to.ID, Agent: to.Agent,
			Token: row.Token, At: now, ExpiresAt: row.ExpiresAt, AcquiredAt: now}); err != nil {
			return err
		}
		out = row.lease()
		return nil
	})
	if err != nil {
		return Lease{}, Lease{}, fmt.Errorf("handoff %d#%d: %w", k.RepoID, k.Issue, err)
	}
	return out, from, nil
}

// Current returns the live lease on k, or nil.
func (s *Store) Current(ctx context.Context, k Key) (*Lease, error) {
	if k.RepoID <= 0 || k.Issue <= 0 {
		return nil, fmt.Errorf("current %d#%d: %w: repository and issue must be positive", k.RepoID, k.Issue, ErrInvalid)
	}
	var rows []leaseRow
	err := liveRows(s.db.WithContext(ctx), s.readNow()).
		Where("repo_id = ? AND issue = ?", k.RepoID, k.Issue).Limit(1).Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("current %d#%d: %w", k.RepoID, k.Issue, mapDBError(err))
	}
	if len(rows) == 0 {
		return nil, nil
	}
	l := rows[0].lease()
	return &l, nil
}

// List returns the live leases of a repository, oldest first (by
// acquired_at, then issue number).
func (s *Store) List(ctx context.Context, repoID int64) ([]Lease, error) {
	if repoID <= 0 {
		return nil, fmt.Errorf("list %d: %w: repository must be positive", repoID, ErrInvalid)
	}
	// Scanned by hand rather than by gorm's reflection: a badge page
	// lists every live lease of a repository, and for thousands of rows
	// the reflection cost more than SQLite did.
	rows, err := liveRows(s.db.WithContext(ctx), s.readNow()).Select(leaseColumns).
		Where("repo_id = ?", repoID).Order("acquired_at, issue").Rows()
	if err != nil {
		return nil, fmt.Errorf("list %d: %w", repoID, mapDBError(err))
	}
	out, err := scanLeases(rows, []Lease{})
	if err != nil {
		return nil, fmt.Errorf("list %d: %w", repoID, mapDBError(err))
	}
	return out, nil
}

// CountLive returns the number of live leases across all repositories.
func (s *Store) CountLive(ctx context.Context) (int64, error) {
	var n int64
	err := s.db.WithContext(ctx).Raw(countLiveSQL, s.readNow()).Scan(&n).Error
	if err != nil {
		return 0, fmt.Errorf("count live leases: %w", mapDBError(err))
	}
	return n, nil
}

// History returns the tenure history of k, oldest first.
func (s *Store) History(ctx context.Context, k Key) ([]Event, error) {
	var evs []Event
	err := s.db.WithContext(ctx).Where("repo_id = ? AND issue = ?", k.RepoID, k.Issue).Order("id").Find(&evs).Error
	if err != nil {
		return nil, fmt.Errorf("history %d#%d: %w", k.RepoID, k.Issue, mapDBError(err))
	}
	return evs, nil
}

// liveSQL is the SQL form of leaseRow.live, with now as its argument; the
// two must agree.
const liveSQL = "holder IS NOT NULL AND (expires_at IS NULL OR expires_at > ?)"

// countLiveSQL counts the rows of liveSQL, with now as its argument, as
// two searches of the partial index idx_leases_held_expiry (open-ended,
// and expiring after now): the cost grows with the live leases, not with
// the rows of expired tenures that stay held until their issue is claimed
// again, nor with the free rows. (liveSQL's OR would scan the index.)
const countLiveSQL = "SELECT (SELECT COUNT(*) FROM leases WHERE holder IS NOT NULL AND expires_at IS NULL)" +
	" + (SELECT COUNT(*) FROM leases WHERE holder IS NOT NULL AND expires_at > ?)"

// liveRows selects the live lease rows at now: a time in Unix seconds,
// or a read's readNow.
func liveRows(db *gorm.DB, now any) *gorm.DB {
	return db.Model(&leaseRow{}).Where(liveSQL, now)
}

func notHolder(row leaseRow, found bool, now int64) error {
	if found && row.live(now) {
		return &NotHolderError{Holder: *row.Holder, Agent: row.Agent, ExpiresAt: unixPtr(row.ExpiresAt)}
	}
	return &NotHolderError{}
}

// coolingUntil is when the row's lock-delay ends for h, or nil if h may
// claim it now.
func coolingUntil(row leaseRow, h Holder, now, delay int64) *time.Time {
	if until, ok := row.cooling(h, now, delay); ok {
		return unixPtr(&until)
	}
	return nil
}

func expiry(now int64, ttl time.Duration) *int64 {
	if ttl == 0 {
		return nil
	}
	e := now + int64(ttl/time.Second)
	return &e
}

// validate rejects what no transport should have let through.
func (s *Store) validate(k Key, h Holder, ttl time.Duration, needTTL bool) error {
	switch {
	case k.RepoID <= 0 || k.Issue <= 0:
		return fmt.Errorf("%w: repository and issue must be positive", ErrInvalid)
	case h.ID <= 0:
		return fmt.Errorf("%w: holder account ID must be positive", ErrInvalid)
	case h.Login == "":
		return fmt.Errorf("%w: empty holder", ErrInvalid)
	case len(h.Login) > 255:
		return fmt.Errorf("%w: holder name longer than 255 bytes", ErrInvalid)
	case len(h.Agent) > contract.MaxAgentLen:
		return fmt.Errorf("%w: agent name longer than %d bytes", ErrInvalid, contract.MaxAgentLen)
	case ttl < 0 || (needTTL && ttl == 0):
		return fmt.Errorf("%w: ttl must be at least 1s", ErrInvalid)
	case ttl != 0 && (ttl < time.Second || ttl%time.Second != 0):
		return fmt.Errorf("%w: ttl %s is not a whole number of seconds of at least 1s", ErrInvalid, ttl)
	case ttl > s.maxTTL:
		return fmt.Errorf("%w: ttl %s is above the maximum %s", ErrInvalid, ttl, s.maxTTL)
	}
	return nil
}
