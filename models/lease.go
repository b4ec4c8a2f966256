package models

import (
	"time"
)

// Key names one issue (or pull request) of one repository. The repository
// is Gitea's numeric ID, so a lease survives renames and transfers.
type Key struct {
	RepoID int64
	Issue  int64
}

// Holder is a forge account as the ledger keeps it: its ID decides who
// holds a lease, its login is only shown. Logins can be renamed and then
// taken by a new account; IDs are never reused, so a new account with an
// old login inherits nothing.
//
// One account may run several agents, each a holder of its own: the
// holder is the pair (ID, Agent), and Agent "" is the account itself.
type Holder struct {
	ID    int64 // the forge's user ID, > 0
	Login string
	Agent string // which of the account's agents, at most contract.MaxAgentLen bytes (the columns' size); "" the account itself
	// Session, when set, is the agent session the holder acts in: what
	// it claims or renews, the session keeps alive (agentsessions.go).
	// It is not part of who the holder is.
	Session *SessionRef
}

// Kind says whether a number is an issue or a pull request (they share one
// number space). The ledger records it at acquire, so readers can filter
// by unit without asking the forge about every lease; rows written before
// it was recorded are KindUnknown.
type Kind int8

// The kinds of a leased number.
const (
	KindUnknown Kind = iota
	KindIssue
	KindPull
)

// Lease is a live claim on an issue.
type Lease struct {
	Key
	// Holder of the tenure. Holder.ID is 0 for a lease written before the
	// ledger kept account IDs whose login no longer names an account (or
	// not yet resolved): it matches nobody.
	Holder     Holder
	Kind       Kind
	Token      int64 // fencing token of this tenure; never reused for the issue
	AcquiredAt time.Time
	ExpiresAt  *time.Time // nil: open-ended (a human assignment)
	// Session is the agent session keeping the lease alive ("" none).
	Session string
}

// leaseRow is one issue's tenure ledger. Rows are never deleted and Token
// only ever increases: a free row (Holder NULL) keeps its token, so the
// next tenure gets a larger one, and a zombie holder's token can never be
// valid again.
type leaseRow struct {
	RepoID int64 `gorm:"primaryKey;autoIncrement:false;index:idx_leases_repo_acquired,priority:1"`
	Issue  int64 `gorm:"primaryKey;autoIncrement:false"`
	// Holder is the holder's login as of its latest write (shown only);
	// HolderID is who holds it. NULL HolderID on a held row: written by
	// schema 1 and not resolved yet; 0: resolved to no account.
	Holder     *string `gorm:"size:255"`
	HolderID   *int64  `gorm:"index:idx_leases_holder"`
	Kind       Kind    `gorm:"not null;default:0"`
	Token      int64   `gorm:"not null"`
	AcquiredAt int64   `gorm:"not null;index:idx_leases_repo_acquired,priority:2"`
	// ExpiresAt is indexed over held rows only (partial index), so that
	// counting live leases (CountLive, read at every metrics scrape)
	// searches the live rows instead of scanning a table that keeps a row
	// for every issue ever claimed.
	ExpiresAt *int64 `gorm:"index:idx_leases_held_expiry,where:holder IS NOT NULL"`
	// Agent is which of the holder's account's agents holds it ("" the
	// account itself; rows written before agents were kept have "").
	Agent string `gorm:"size:40;not null;default:''"`
	// Session is the agent session that keeps the lease alive ("" none:
	// its expiry is its holder's to renew), and CapAt the end of its whole
	// life that a --ttl given in the session set (nil: none). See
	// agentsessions.go.
	Session string `gorm:"size:32;not null;default:'';index:idx_leases_session"`
	CapAt   *int64
}

func (leaseRow) TableName() string { return "leases" }

// live is the one definition of a live lease: held, and open-ended or not
// yet expired. At the exact expiry instant the lease is no longer live.
func (r *leaseRow) live(now int64) bool {
	return r.Holder != nil && (r.ExpiresAt == nil || *r.ExpiresAt > now)
}

// cooling is the one definition of the lock-delay: the row's lease lapsed
// (it was not released: the holder is kept) less than delay seconds ago,
// so no holder but h's own may claim it until the instant it returns.
func (r *leaseRow) cooling(h Holder, now, delay int64) (until int64, ok bool) {
	if r.heldBy(h) {
		return 0, false
	}
	return r.lapsedWithin(now, delay)
}

// lapsedWithin says whether the row's lease lapsed less than delay
// seconds ago, and until when that lasts: while it does, the row stays
// as it lapsed (a release changes nothing), so the lock-delay holds for
// everyone but its holder.
func (r *leaseRow) lapsedWithin(now, delay int64) (until int64, ok bool) {
	if delay <= 0 || r.Holder == nil || r.ExpiresAt == nil || r.live(now) {
		return 0, false
	}
	until = *r.ExpiresAt + delay
	return until, now < until
}

// heldBy is the one definition of "h holds this row" (live or not): the
// account IDs match and so do the agents. A row whose holder was never
// resolved to an account is held by nobody.
func (r *leaseRow) heldBy(h Holder) bool {
	return r.ofAccount(h) && r.Agent == h.Agent
}

// ofAccount says whether the row is held by h's account, by any of its
// agents or by the account itself: such a row is h's to release.
func (r *leaseRow) ofAccount(h Holder) bool {
	return r.Holder != nil && r.HolderID != nil && *r.HolderID > 0 && *r.HolderID == h.ID
}

func (r *leaseRow) lease() Lease {
	l := Lease{
		Key:        Key{RepoID: r.RepoID, Issue: r.Issue},
		Kind:       r.Kind,
		Token:      r.Token,
		AcquiredAt: time.Unix(r.AcquiredAt, 0).UTC(),
		ExpiresAt:  unixPtr(r.ExpiresAt),
		Session:    r.Session,
	}
	if r.Holder != nil {
		l.Holder.Login, l.Holder.Agent = *r.Holder, r.Agent
	}
	if r.HolderID != nil {
		l.Holder.ID = *r.HolderID
	}
	return l
}

// Action names a state change in the tenure history.
type Action string

// Actions recorded in the history.
const (
	ActionAcquire   Action = "acquire"   // new tenure on a free issue
	ActionTakeover  Action = "takeover"  // new tenure after the previous one expired
	ActionReacquire Action = "reacquire" // holder acquired again: same tenure, new expiry
	ActionRenew     Action = "renew"     // holder extended the expiry
	ActionRelease   Action = "release"   // the issue was freed
	// ActionForceRelease: a repository admin freed someone else's live
	// lease; Holder is the admin, Previous whose lease it was.
	ActionForceRelease Action = "force_release"
	// ActionHandoff: the holder (or a repository admin, with force) ended
	// the tenure by handing the issue to another holder, whose tenure
	// begins in the same transaction; Holder is who handed it off,
	// Previous whose tenure it was.
	ActionHandoff Action = "handoff"
	// ActionSessionLost: the session keeping the tenure alive was lost,
	// and the tenure lapsed At (grace after its last sign of life);
	// recorded when the ledger next changes the row. ActionExpire: a
	// session's tenure reached the cap its --ttl set.
	ActionSessionLost Action = "session_lost"
	ActionExpire      Action = "expire"
)

// Event is one row of the append-only tenure history: who did what to
// which issue, with which token, when. It answers "who held #42 last
// Tuesday" long after the lease row has moved on.
type Event struct {
	ID     int64  `gorm:"primaryKey;autoIncrement"`
	RepoID int64  `gorm:"not null;index:idx_lease_events_issue,priority:1"`
	Issue  int64  `gorm:"not null;index:idx_lease_events_issue,priority:2"`
	Action Action `gorm:"size:16;not null"`
	// Holder is who acted (the new holder, or who released), by login at
	// the time; HolderID is that account (0 in events written by schema 1)
	// and Agent which of its agents ("" the account itself).
	Holder     string `gorm:"size:255;not null"`
	HolderID   int64  `gorm:"not null;default:0"`
	Agent      string `gorm:"size:40;not null;default:''"`
	Previous   string `gorm:"size:255"` // takeover, release: whose lease was replaced or freed
	Token      int64  `gorm:"not null"`
	At         int64  `gorm:"not null"`
	ExpiresAt  *int64 // the expiry this action set, if any
	AcquiredAt int64  `gorm:"not null"` // start of the tenure this event belongs to
	// Session is the agent session that kept the tenure alive from this
	// event on ("" none), on acquire, takeover, reacquire and renew; and
	// on the session_lost and expire events that record when a session's
	// tenure lapsed (its expiry is the session's to move, so the events
	// before do not tell).
	Session string `gorm:"size:32;not null;default:''"`
}

// TableName keeps the history's table name stable across refactors.
func (Event) TableName() string { return "lease_events" }

func unixPtr(p *int64) *time.Time {
	if p == nil {
		return nil
	}
	t := time.Unix(*p, 0).UTC()
	return &t
}
