package models

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// next's claim (docs/ssh.md, The agent verbs), in one transaction: of a repository's
// candidate issues, in the order given (oldest first), the first that is
// not live-held and not recorded closed is acquired. Deciding in one
// transaction, rather than trying candidates one by one, makes next one
// linearizable operation: "none" means every candidate was held (or
// closed) at one instant, and two callers never both take one issue.
//
// Whether a candidate is blocked by an open dependency is the forge's to
// say, and no network call may wait inside a transaction: a candidate not
// yet checked (Verified false) that would be taken stops the decision
// with *UnverifiedError, so the caller can ask the forge and try again.

// Candidate is one issue next may claim.
type Candidate struct {
	Issue int64
	// Observed is what the forge's list said of it (kind and version),
	// as for Acquire.
	Observed
	// Verified: the forge said it has no open dependency.
	Verified bool
}

// ErrNoneFree: every candidate is live-held or closed.
var ErrNoneFree = errors.New("no free candidate")

// UnverifiedError: Issues are the first free candidates, in order, up to
// MaxUnverified of them and up to the first one that is verified, and
// the first one's dependencies have not been checked; nothing was
// written. The caller asks the forge about them together.
type UnverifiedError struct {
	Issues []int64
}

// MaxUnverified bounds UnverifiedError.Issues.
const MaxUnverified = 8

func (e *UnverifiedError) Error() string {
	return fmt.Sprintf("candidates %v are free but their dependencies are unchecked", e.Issues)
}

// AcquireFirst acquires for h the first candidate of repository repoID
// that is free: not live-held by anyone (h included), not quarantined
// (quarantine.go) and not recorded closed at a version at least its
// Observed.Version. ErrNoneFree if there
// is none; *UnverifiedError if the first free one is not Verified.
func (s *Store) AcquireFirst(ctx context.Context, repoID int64, cands []Candidate, h Holder, ttl time.Duration) (Lease, error) {
	if err := s.validate(Key{RepoID: repoID, Issue: 1}, h, ttl, false); err != nil {
		return Lease{}, fmt.Errorf("next in %d: %w", repoID, err)
	}
	for _, c := range cands {
		if c.Issue <= 0 || (c.Kind != KindIssue && c.Kind != KindPull) {
			return Lease{}, fmt.Errorf("next in %d: %w: bad candidate %+v", repoID, ErrInvalid, c)
		}
	}
	var out Lease
	// The whole repository: "none" must hold for every candidate at once.
	err := s.write(ctx, s.claimScope(repoScope(repoID), h), func(tx *gorm.DB, now int64) error {
		held, err := takenIssues(tx, repoID, h, now, s.lockDelay)
		if err != nil {
			return err
		}
		if s.quarantineAfter > 0 {
			if err := quarantinedIssues(tx, repoID, held); err != nil {
				return err
			}
		}
		var unverified []int64
		for _, c := range cands {
			if held[c.Issue] {
				continue
			}
			k := Key{RepoID: repoID, Issue: c.Issue}
			st, found, err := loadIssue(tx, k)
			switch {
			case err != nil:
				return err
			case found && st.Closed && c.Version <= st.Version:
				continue
			case !c.Verified:
				if unverified = append(unverified, c.Issue); len(unverified) == MaxUnverified {
					return &UnverifiedError{Issues: unverified}
				}
				continue
			case len(unverified) > 0:
				return &UnverifiedError{Issues: unverified}
			}
			if err := admit(tx, k, c.Observed, now); err != nil {
				return err
			}
			out, err = acquireIn(tx, k, h, ttl, c.Kind, now, s.policy())
			if errors.Is(err, ErrQuarantined) {
				continue // its nth involuntary ending is not recorded yet: skipped all the same
			}
			return err
		}
		if len(unverified) > 0 {
			return &UnverifiedError{Issues: unverified}
		}
		return ErrNoneFree
	})
	if err != nil {
		return Lease{}, fmt.Errorf("next in %d: %w", repoID, err)
	}
	return out, nil
}

var liveIssuesSQL = sqlStmt("SELECT issue FROM leases WHERE repo_id = ? AND " + liveSQL)

// takenIssues returns the numbers of the repository that h may not take
// now: live-held (by anyone, h included), or cooling down after a lapse
// (for anyone but the lapsed holder).
func takenIssues(tx *gorm.DB, repoID int64, h Holder, now, delay int64) (map[int64]bool, error) {
	if delay <= 0 {
		return liveIssues(tx, repoID, now)
	}
	// A lease that lapsed within the delay is in liveSQL's rows at now -
	// delay; which of them cool for h is leaseRow.cooling's to say.
	var rows []leaseRow
	if err := tx.Where("repo_id = ? AND "+liveSQL, repoID, now-delay).Find(&rows).Error; err != nil {
		return nil, err
	}
	taken := make(map[int64]bool, len(rows))
	for _, r := range rows {
		if _, cooling := r.cooling(h, now, delay); r.live(now) || cooling {
			taken[r.Issue] = true
		}
	}
	return taken, nil
}

// liveIssues returns the numbers of the repository's live leases.
func liveIssues(tx *gorm.DB, repoID, now int64) (map[int64]bool, error) {
	c, ctx := conn(tx)
	rows, err := c.QueryContext(ctx, liveIssuesSQL.in(tx), repoID, now)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	held := map[int64]bool{}
	for rows.Next() {
		var n int64
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		held[n] = true
	}
	return held, rows.Err()
}
