package models

import (
	"context"
	"fmt"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Push fences: the branch protection rules the sidecar made in the forge
// so that only a claim's holder may push to a pull request's head branch.
// The forge cannot tell a rule the sidecar made from an admin's of the
// same name, so the ledger remembers which are the sidecar's: the fence
// worker edits or removes only those, and after a restart removes those
// whose claim ended while it was down. A branch where an admin's rule
// already has the name the sidecar gives its own is remembered too
// (Admin), for doctor: the sidecar leaves it alone.
//
// The rows change nothing about any lease, so no change is published for
// them.

// MaxBranchLen bounds a branch name (Gitea's rule names are at most 255
// bytes, and a branch name with glob characters needs room to be quoted).
const MaxBranchLen = 255

// fenceRuleRow is one branch the sidecar fences, or found an admin's rule
// of the name the sidecar gives its own on.
type fenceRuleRow struct {
	RepoID int64  `gorm:"primaryKey;autoIncrement:false"`
	Branch string `gorm:"primaryKey;size:255"`
	// Admin: the branch has an admin's rule of the sidecar's name, which
	// the sidecar leaves alone; otherwise the rule is the sidecar's.
	Admin bool `gorm:"not null"`
	// Created is the forge's creation time of the sidecar's rule (Unix
	// seconds): a rule of the same name made later is not the sidecar's.
	// Below 0 while the creation is not known to have happened: -1, or
	// -T while the rule replaces an earlier sidecar's of the name it gave
	// (the branch itself), made at T. 0: an earlier sidecar was making
	// its rule of that name.
	Created int64 `gorm:"not null"`
}

func (fenceRuleRow) TableName() string { return "fence_rules" }

// FenceRule is what the ledger remembers of one fenced branch.
type FenceRule struct {
	RepoID  int64
	Branch  string
	Admin   bool
	Created int64
}

// FenceRules returns every branch the ledger remembers, in order of
// repository and branch.
func (s *Store) FenceRules(ctx context.Context) ([]FenceRule, error) {
	var rows []fenceRuleRow
	if err := s.db.WithContext(ctx).Order("repo_id, branch").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("fence rules: %w", mapDBError(err))
	}
	out := make([]FenceRule, 0, len(rows))
	for _, r := range rows {
		out = append(out, FenceRule(r))
	}
	return out, nil
}

// FenceRuleOf returns what the ledger remembers of the branch, or nil.
func (s *Store) FenceRuleOf(ctx context.Context, repoID int64, branch string) (*FenceRule, error) {
	var rows []fenceRuleRow
	if err := s.db.WithContext(ctx).Where("repo_id = ? AND branch = ?", repoID, branch).Limit(1).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("fence rule of %d:%s: %w", repoID, branch, mapDBError(err))
	}
	if len(rows) == 0 {
		return nil, nil
	}
	r := FenceRule(rows[0])
	return &r, nil
}

// IntendFenceRule records, before the sidecar asks the forge to create
// the branch's rule, that the rule about to exist is the sidecar's: a
// crash between the two then leaves a record that the next start
// reconciles, never a rule nobody owns. An existing record is kept as it
// is (another replica may have made the rule already).
func (s *Store) IntendFenceRule(ctx context.Context, repoID int64, branch string) error {
	if err := validFenceRule(repoID, branch); err != nil {
		return fmt.Errorf("intend fence rule of %d:%s: %w", repoID, branch, err)
	}
	err := s.write(ctx, repoScope(repoID), func(tx *gorm.DB, _ int64) error {
		return tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&fenceRuleRow{RepoID: repoID, Branch: branch, Created: -1}).Error
	})
	if err != nil {
		return fmt.Errorf("intend fence rule of %d:%s: %w", repoID, branch, err)
	}
	return nil
}

// SaveFenceRule records r as it is now: the sidecar's rule and its
// creation time, or an admin's rule of the sidecar's name.
func (s *Store) SaveFenceRule(ctx context.Context, r FenceRule) error {
	if err := validFenceRule(r.RepoID, r.Branch); err != nil {
		return fmt.Errorf("save fence rule of %d:%s: %w", r.RepoID, r.Branch, err)
	}
	err := s.write(ctx, repoScope(r.RepoID), func(tx *gorm.DB, _ int64) error {
		return tx.Save(&fenceRuleRow{RepoID: r.RepoID, Branch: r.Branch, Admin: r.Admin, Created: r.Created}).Error
	})
	if err != nil {
		return fmt.Errorf("save fence rule of %d:%s: %w", r.RepoID, r.Branch, err)
	}
	return nil
}

// DropFenceRule forgets the branch: the sidecar's rule is gone from the
// forge, or the admin's rule no longer matters.
func (s *Store) DropFenceRule(ctx context.Context, repoID int64, branch string) error {
	err := s.write(ctx, repoScope(repoID), func(tx *gorm.DB, _ int64) error {
		return tx.Where("repo_id = ? AND branch = ?", repoID, branch).Delete(&fenceRuleRow{}).Error
	})
	if err != nil {
		return fmt.Errorf("drop fence rule of %d:%s: %w", repoID, branch, err)
	}
	return nil
}

func validFenceRule(repoID int64, branch string) error {
	if repoID <= 0 || branch == "" || len(branch) > MaxBranchLen {
		return ErrInvalid
	}
	return nil
}
