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

// Lease is a live claim on an issue.
type Lease struct {
	Key
	Holder     string
	Token      int64 // fencing token of this tenure; never reused for the issue
	AcquiredAt time.Time
	ExpiresAt  *time.Time // nil: open-ended (a human assignment)
}

// leaseRow is one issue's tenure ledger. Rows are never deleted and Token
// only ever increases: a free row (Holder NULL) keeps its token, so the
// next tenure gets a larger one, and a zombie holder's token can never be
// valid again.
type leaseRow struct {
	RepoID     int64   `gorm:"primaryKey;autoIncrement:false;index:idx_leases_repo_acquired,priority:1"`
	Issue      int64   `gorm:"primaryKey;autoIncrement:false"`
	Holder     *string `gorm:"size:255"`
	Token      int64   `gorm:"not null"`
	AcquiredAt int64   `gorm:"not null;index:idx_leases_repo_acquired,priority:2"`
	ExpiresAt  *int64
}

func (leaseRow) TableName() string { return "leases" }

// live is the one definition of a live lease: held, and open-ended or not
// yet expired. At the exact expiry instant the lease is no longer live.
func (r *leaseRow) live(now int64) bool {
	return r.Holder != nil && (r.ExpiresAt == nil || *r.ExpiresAt > now)
}

func (r *leaseRow) lease() Lease {
	l := Lease{
		Key:        Key{RepoID: r.RepoID, Issue: r.Issue},
		Token:      r.Token,
		AcquiredAt: time.Unix(r.AcquiredAt, 0).UTC(),
		ExpiresAt:  unixPtr(r.ExpiresAt),
	}
	if r.Holder != nil {
		l.Holder = *r.Holder
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
)

// Event is one row of the append-only tenure history: who did what to
// which issue, with which token, when. It answers "who held #42 last
// Tuesday" long after the lease row has moved on.
type Event struct {
	ID         int64  `gorm:"primaryKey;autoIncrement"`
	RepoID     int64  `gorm:"not null;index:idx_lease_events_issue,priority:1"`
	Issue      int64  `gorm:"not null;index:idx_lease_events_issue,priority:2"`
	Action     Action `gorm:"size:16;not null"`
	Holder     string `gorm:"size:255;not null"` // who acted (the new holder, or who released)
	Previous   string `gorm:"size:255"`          // takeover: whose expired lease was replaced
	Token      int64  `gorm:"not null"`
	At         int64  `gorm:"not null"`
	ExpiresAt  *int64 // the expiry this action set, if any
	AcquiredAt int64  `gorm:"not null"` // start of the tenure this event belongs to
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
