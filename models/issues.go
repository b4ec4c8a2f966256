package models

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// The forge's word on each issue, kept in the ledger so that "the issue was
// closed" and "acquire" are ordered by the ledger's own transactions: once a
// close has been recorded, no acquire of that issue commits until a newer
// reopen is recorded, whatever the interleaving of the webhook delivery with
// an acquire's own look at the forge (docs/operating.md, When issues close; the coherence invariant).
//
// Versions order the forge's answers: a state carries the issue's
// last-update time at the forge (Unix seconds) when it was read, and an
// older answer never overwrites a newer one. An acquire that looked at the
// forge before a close was recorded carries an older (or equal) version
// than the close, and is refused.

// issueRow is what the ledger knows of one issue's state at the forge.
type issueRow struct {
	RepoID    int64 `gorm:"primaryKey;autoIncrement:false"`
	Issue     int64 `gorm:"primaryKey;autoIncrement:false"`
	Kind      Kind  `gorm:"not null;default:0"`
	Closed    bool  `gorm:"not null"`
	Deleted   bool  `gorm:"not null"`
	Version   int64 `gorm:"not null"` // the forge's update time of the state recorded
	CheckedAt int64 `gorm:"not null"` // when the ledger last heard of it from the forge
}

func (issueRow) TableName() string { return "issue_states" }

// deliveryRow remembers a webhook delivery that had its effect, so a
// repeated delivery has none.
type deliveryRow struct {
	ID string `gorm:"primaryKey;size:64"`
	At int64  `gorm:"not null;index"`
}

func (deliveryRow) TableName() string { return "webhook_deliveries" }

// deliveryMemory is how long a delivery ID is remembered. Gitea redelivers
// only by hand; a week covers any redelivery a person would make.
const deliveryMemory = 7 * 24 * 3600

// goneForever is the version of a deleted repository's issues: newer than
// any update time the forge will ever report.
const goneForever = int64(1) << 62

// ErrClosed: the ledger has recorded that the issue is closed (or deleted)
// at the forge, with a version no older than what the caller saw.
var ErrClosed = errors.New("issue is closed")

// IssueState is what the ledger knows of an issue at the forge.
type IssueState struct {
	Kind      Kind
	Closed    bool
	Deleted   bool
	Version   int64     // the forge's update time of this state (Unix seconds)
	CheckedAt time.Time // when the ledger last heard of it from the forge
}

// Observed is what an acquire knows of the issue: its kind, and Version,
// the issue's update time at the forge (Unix seconds) if the caller asked
// the forge just now and saw it open, or 0 if the caller relies on the
// ledger's own IssueState.
type Observed struct {
	Kind    Kind
	Version int64
}

// Reason says why the forge ended a tenure.
type Reason string

// Reasons the forge ends a tenure (recorded as the history's action).
const (
	ReasonClosed  Reason = "closed"
	ReasonMerged  Reason = "merged"
	ReasonDeleted Reason = "deleted"
)

// Ended is the outcome of a forge event: the live lease it ended, if any,
// and whether the delivery had been seen before (and so did nothing).
type Ended struct {
	Leases    []Lease
	Duplicate bool
}

// Issue returns what the ledger knows of k's state at the forge, or nil.
func (s *Store) Issue(ctx context.Context, k Key) (*IssueState, error) {
	r, found, err := loadIssue(s.db.WithContext(ctx), k) // every acquire asks: no reflection
	if err != nil {
		return nil, fmt.Errorf("issue state %d#%d: %w", k.RepoID, k.Issue, mapDBError(err))
	}
	if !found {
		return nil, nil
	}
	return &IssueState{Kind: r.Kind, Closed: r.Closed, Deleted: r.Deleted, Version: r.Version,
		CheckedAt: time.Unix(r.CheckedAt, 0).UTC()}, nil
}

// admit is acquire's check of the issue's state, inside its transaction:
// ErrClosed if a close no older than what the caller saw is recorded;
// otherwise it records what the caller saw (an open issue of its kind).
func admit(tx *gorm.DB, k Key, obs Observed, now int64) error {
	st, found, err := loadIssue(tx, k)
	switch {
	case err != nil:
		return err
	case !found:
		return storeIssue(tx, issueRow{RepoID: k.RepoID, Issue: k.Issue, Kind: obs.Kind, Version: obs.Version, CheckedAt: now}, false)
	case st.Closed && obs.Version <= st.Version:
		return ErrClosed
	case obs.Version == 0:
		return nil // the ledger's own record said open: nothing new to record
	}
	st.Kind, st.Closed, st.Deleted = obs.Kind, false, false
	st.Version, st.CheckedAt = max(st.Version, obs.Version), now
	return storeIssue(tx, st, true)
}

// EndIssue records that the forge closed (merged, deleted) issue k at
// version, and ends its live lease with that reason, in one transaction.
// A close older than a reopen already recorded changes nothing. A
// delivery (the webhook's ID; "" for none) seen before has no effect.
func (s *Store) EndIssue(ctx context.Context, k Key, why Reason, version int64, delivery string) (Ended, error) {
	if k.RepoID <= 0 || k.Issue <= 0 || (why != ReasonClosed && why != ReasonMerged && why != ReasonDeleted) {
		return Ended{}, fmt.Errorf("end %d#%d: %w: bad key or reason %q", k.RepoID, k.Issue, ErrInvalid, why)
	}
	out, err := s.onEvent(ctx, delivery, issueScope(k), func(tx *gorm.DB, now int64) ([]Lease, error) {
		st, found, err := loadIssue(tx, k)
		switch {
		case err != nil:
			return nil, err
		case !found:
			st = issueRow{RepoID: k.RepoID, Issue: k.Issue}
		case version < st.Version:
			return nil, nil // a newer state (a reopen) is recorded already
		}
		st.Closed, st.Deleted = true, st.Deleted || why == ReasonDeleted
		st.Version, st.CheckedAt = max(st.Version, version), now
		if why == ReasonDeleted {
			st.Version = goneForever // a deleted issue's number never comes back
		}
		if err := storeIssue(tx, st, found); err != nil {
			return nil, err
		}
		l, err := endLease(tx, k, why, now)
		if l == nil {
			return nil, err
		}
		return []Lease{*l}, err
	})
	if err != nil {
		return Ended{}, fmt.Errorf("end %d#%d (%s): %w", k.RepoID, k.Issue, why, err)
	}
	return out, nil
}

// ReopenIssue records that the forge reopened issue k at version: it is
// acquirable again. A reopen older than the close recorded changes nothing.
func (s *Store) ReopenIssue(ctx context.Context, k Key, version int64, delivery string) (Ended, error) {
	if k.RepoID <= 0 || k.Issue <= 0 {
		return Ended{}, fmt.Errorf("reopen %d#%d: %w: bad key", k.RepoID, k.Issue, ErrInvalid)
	}
	out, err := s.onEvent(ctx, delivery, issueScope(k), func(tx *gorm.DB, now int64) ([]Lease, error) {
		return nil, tx.Model(&issueRow{}).Where("repo_id = ? AND issue = ? AND version <= ?", k.RepoID, k.Issue, version).
			Updates(map[string]any{"closed": false, "deleted": false, "version": version, "checked_at": now}).Error
	})
	if err != nil {
		return Ended{}, fmt.Errorf("reopen %d#%d: %w", k.RepoID, k.Issue, err)
	}
	return out, nil
}

// EndRepo records that the forge deleted repository repoID: every live
// lease of it ends (ReasonDeleted) and every issue of it the ledger knows
// is closed for good, in one transaction.
func (s *Store) EndRepo(ctx context.Context, repoID int64, delivery string) (Ended, error) {
	if repoID <= 0 {
		return Ended{}, fmt.Errorf("end repository %d: %w", repoID, ErrInvalid)
	}
	out, err := s.onEvent(ctx, delivery, repoScope(repoID), func(tx *gorm.DB, now int64) ([]Lease, error) {
		// A deleted repository's numbers never come back: no later
		// version can reopen them.
		if err := tx.Model(&issueRow{}).Where("repo_id = ?", repoID).
			Updates(map[string]any{"closed": true, "deleted": true, "version": goneForever, "checked_at": now}).Error; err != nil {
			return nil, err
		}
		var issues []int64
		if err := liveRows(tx, now).Where("repo_id = ?", repoID).Order("issue").Pluck("issue", &issues).Error; err != nil {
			return nil, err
		}
		var ended []Lease
		for _, n := range issues {
			k := Key{RepoID: repoID, Issue: n}
			if err := tx.Save(&issueRow{RepoID: repoID, Issue: n, Closed: true, Deleted: true,
				Version: goneForever, CheckedAt: now}).Error; err != nil {
				return nil, err
			}
			l, err := endLease(tx, k, ReasonDeleted, now)
			if err != nil {
				return nil, err
			}
			if l != nil {
				ended = append(ended, *l)
			}
		}
		return ended, nil
	})
	if err != nil {
		return Ended{}, fmt.Errorf("end repository %d: %w", repoID, err)
	}
	return out, nil
}

// onEvent runs fn, the effect of one forge event on sc, in one write
// transaction, unless delivery (the webhook's ID; "" for none) had its
// effect before.
func (s *Store) onEvent(ctx context.Context, delivery string, sc scope, fn func(tx *gorm.DB, now int64) ([]Lease, error)) (Ended, error) {
	var out Ended
	err := s.write(ctx, sc, func(tx *gorm.DB, now int64) error {
		out = Ended{}
		dup, err := seen(tx, delivery, now)
		if dup || err != nil {
			out.Duplicate = dup
			return err
		}
		out.Leases, err = fn(tx, now)
		return err
	})
	return out, err
}

// endLease frees k's live lease, if any, recording why in the history.
func endLease(tx *gorm.DB, k Key, why Reason, now int64) (*Lease, error) {
	row, found, err := load(tx, k)
	if err != nil || !found || !row.live(now) {
		return nil, err
	}
	l := row.lease()
	row.free()
	err = storeRecord(tx, row, true, Event{RepoID: k.RepoID, Issue: k.Issue, Action: Action(why), Holder: forgeActor,
		Previous: l.Holder.Login, Token: l.Token, At: now, AcquiredAt: row.AcquiredAt})
	return &l, err
}

// forgeActor is who the history names for what the forge did.
const forgeActor = "gitea"

// seen records delivery as done and says whether it was done already;
// deliveries older than deliveryMemory are forgotten on the way. The
// delivery's row is claimed by inserting it, whatever its scope: a second
// delivery of it waits on PostgreSQL for the first to commit (or roll
// back), and then finds it, however the two interleave.
func seen(tx *gorm.DB, delivery string, now int64) (bool, error) {
	if delivery == "" {
		return false, nil
	}
	if len(delivery) > 64 {
		return false, fmt.Errorf("%w: delivery ID longer than 64 bytes", ErrInvalid)
	}
	res := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&deliveryRow{ID: delivery, At: now})
	if res.Error != nil || res.RowsAffected == 0 {
		return res.Error == nil, res.Error
	}
	return false, tx.Where("at < ?", now-deliveryMemory).Delete(&deliveryRow{}).Error
}

// LiveRepos returns the repositories that have live leases (for the
// reconcile with the forge).
func (s *Store) LiveRepos(ctx context.Context) ([]int64, error) {
	var ids []int64
	err := liveRows(s.db.WithContext(ctx), s.readNow()).Distinct("repo_id").Order("repo_id").Pluck("repo_id", &ids).Error
	if err != nil {
		return nil, fmt.Errorf("live repositories: %w", mapDBError(err))
	}
	return ids, nil
}
