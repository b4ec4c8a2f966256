package models

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// Merges through the sidecar (docs/ssh.md, Merging through the sidecar):
// into one base branch of a repository, one merge at a time across every
// replica. The turn is a row of the ledger per base branch, the merge
// ticket: which pull request is being merged, under which claim and
// token, until when. The gate admits the forge's merge of a pull request
// that an agent's claim fences only under a ticket of that claim's
// current tenure (gate.go). A ticket lasts at most its bound (the
// sidecar's 5 minutes) and no longer than its tenure: a ticket whose
// claim ended, or moved on to another token, frees the base branch as an
// expired one does, so a sidecar that dies holding a turn holds it no
// longer than that.
//
// Tickets change no lease, so no change is published for them.

// mergeTicketRow is the merge under way into a base branch.
type mergeTicketRow struct {
	RepoID int64  `gorm:"primaryKey;autoIncrement:false;index:idx_merge_tickets_pull,priority:1"`
	Base   string `gorm:"primaryKey;size:255"`
	Pull   int64  `gorm:"not null;index:idx_merge_tickets_pull,priority:2"`
	// Issue and Token are the claim the merge is made under: the pull
	// request's own, or an issue's it closes.
	Issue    int64  `gorm:"not null"`
	Token    int64  `gorm:"not null"`
	HolderID int64  `gorm:"not null"`
	Agent    string `gorm:"size:40;not null;default:''"`
	// ID is the merge's own (random, from the sidecar): only it extends
	// or drops its ticket.
	ID        string `gorm:"size:64;not null"`
	TakenAt   int64  `gorm:"not null"`
	ExpiresAt int64  `gorm:"not null"`
}

func (mergeTicketRow) TableName() string { return "merge_tickets" }

// MergeTicket is one merge's turn at a base branch.
type MergeTicket struct {
	RepoID int64
	Base   string
	Pull   int64
	// Claim is the claim merged under (its Key: the pull request or an
	// issue it closes), held by Holder with Token.
	Claim  Key
	Token  int64
	Holder Holder
	// ID names the merge that holds the ticket.
	ID        string
	ExpiresAt time.Time
}

// MergeBusyError: another merge holds the base branch's ticket.
type MergeBusyError struct {
	Pull      int64 // the pull request being merged
	ExpiresAt time.Time
}

func (e *MergeBusyError) Error() string {
	return fmt.Sprintf("another merge (pull request %d) holds the base branch until %s", e.Pull, e.ExpiresAt.UTC().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrMergeBusy) true.
func (e *MergeBusyError) Is(target error) bool { return target == ErrMergeBusy }

// StaleTokenError: the caller holds the claim, but under another token
// than the one it names: Token is the current one.
type StaleTokenError struct {
	Token int64
}

func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("token is stale: the claim's current token is %d", e.Token)
}

// Is makes errors.Is(err, ErrStale) true.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStale }

var (
	// ErrMergeBusy: another merge holds the base branch (*MergeBusyError).
	ErrMergeBusy = errors.New("merge ticket held")
	// ErrStale: a token that is not the claim's current one
	// (*StaleTokenError).
	ErrStale = errors.New("stale token")
)

// TakeMergeTicket takes the turn to merge t.Pull into t.Base: the caller
// must hold the claim t.Claim (live, held by t.Holder, else
// *NotHolderError) under t.Token (else *StaleTokenError), and no other
// merge may hold a live ticket of the base branch (*MergeBusyError). A
// ticket of the same ID is extended. The ticket lasts bound from now, and
// admits nothing once the claim has ended; it is returned with its
// expiry.
func (s *Store) TakeMergeTicket(ctx context.Context, t MergeTicket, bound time.Duration) (MergeTicket, error) {
	if t.RepoID <= 0 || t.Pull <= 0 || t.Claim.RepoID != t.RepoID || t.Claim.Issue <= 0 || t.Token <= 0 || t.Base == "" ||
		len(t.Base) > MaxBranchLen || t.ID == "" || len(t.ID) > 64 || t.Holder.ID <= 0 || bound < time.Second {
		return MergeTicket{}, fmt.Errorf("merge ticket %d!%d: %w", t.RepoID, t.Pull, ErrInvalid)
	}
	err := s.write(ctx, repoScope(t.RepoID), func(tx *gorm.DB, now int64) error {
		row, found, err := load(tx, t.Claim)
		if err != nil {
			return err
		}
		if err := heldLive(row, found, t.Holder, now); err != nil {
			return err
		}
		if row.Token != t.Token {
			return &StaleTokenError{Token: row.Token}
		}
		var held []mergeTicketRow
		if err := tx.Where("repo_id = ? AND base = ?", t.RepoID, t.Base).Limit(1).Find(&held).Error; err != nil {
			return err
		}
		if len(held) == 1 && held[0].ID != t.ID {
			live, err := ticketLive(tx, held[0], now)
			if err != nil {
				return err
			}
			if live {
				return &MergeBusyError{Pull: held[0].Pull, ExpiresAt: time.Unix(held[0].ExpiresAt, 0).UTC()}
			}
		}
		// The ticket lasts its bound; it never outlives its tenure, since
		// it admits nothing once the claim is no longer live under its
		// token (ticketLive, the gate), however the claim is kept alive:
		// a session's, whose expiry is a grace away and moves on with
		// each heartbeat, or one its holder renews while it merges.
		expires := now + int64(bound/time.Second)
		t.ExpiresAt = time.Unix(expires, 0).UTC()
		return tx.Save(&mergeTicketRow{RepoID: t.RepoID, Base: t.Base, Pull: t.Pull, Issue: t.Claim.Issue, Token: t.Token,
			HolderID: t.Holder.ID, Agent: t.Holder.Agent, ID: t.ID, TakenAt: now, ExpiresAt: expires}).Error
	})
	if err != nil {
		return MergeTicket{}, fmt.Errorf("merge ticket %d!%d into %q: %w", t.RepoID, t.Pull, t.Base, err)
	}
	return t, nil
}

// heldLive is nil when row (found) is h's live lease, else the
// *NotHolderError naming its live holder, if any.
func heldLive(row leaseRow, found bool, h Holder, now int64) error {
	if found && row.live(now) && row.heldBy(h) {
		return nil
	}
	e := &NotHolderError{}
	if found && row.live(now) {
		e.Holder, e.Agent, e.ExpiresAt = *row.Holder, row.Agent, unixPtr(row.ExpiresAt)
	}
	return e
}

// ticketLive says whether a ticket still holds its base branch: not
// expired, and its claim live under its token.
func ticketLive(tx *gorm.DB, t mergeTicketRow, now int64) (bool, error) {
	if t.ExpiresAt <= now {
		return false, nil
	}
	row, found, err := load(tx, Key{RepoID: t.RepoID, Issue: t.Issue})
	if err != nil {
		return false, err
	}
	return found && row.live(now) && row.Token == t.Token, nil
}

// DropMergeTicket ends merge id's turn at the base branch (a ticket
// another merge holds by now is left alone).
func (s *Store) DropMergeTicket(ctx context.Context, repoID int64, base, id string) error {
	err := s.write(ctx, repoScope(repoID), func(tx *gorm.DB, _ int64) error {
		return tx.Where("repo_id = ? AND base = ? AND id = ?", repoID, base, id).Delete(&mergeTicketRow{}).Error
	})
	if err != nil {
		return fmt.Errorf("drop merge ticket of %d into %q: %w", repoID, base, err)
	}
	return nil
}

// mergeTicketsOf returns the unexpired tickets of pull request n (at most
// one per base branch; a pull request has one base, but may have changed
// it).
func (s *Store) mergeTicketsOf(ctx context.Context, repoID, n int64) ([]mergeTicketRow, error) {
	var rows []mergeTicketRow
	err := s.db.WithContext(ctx).Where("repo_id = ? AND pull = ? AND expires_at > ?", repoID, n, s.readNow()).Find(&rows).Error
	return rows, mapDBError(err)
}
