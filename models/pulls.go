package models

import (
	"context"
	"fmt"
	"slices"

	"gorm.io/gorm"
)

// Pull requests and the issues they would close, as the forge's webhook
// tells (docs/operating.md, Fenced merges): the sidecar keeps, per open pull request,
// its head commit, its author (by account) and the issues it is linked to
// (Gitea's closing keywords in its title and body, and its own number),
// so that it can say on the head commit whether the author holds every
// linked issue's live tenure.

// pullRow is one pull request as the forge last described it.
type pullRow struct {
	RepoID int64  `gorm:"primaryKey;autoIncrement:false"`
	Number int64  `gorm:"primaryKey;autoIncrement:false"`
	Head   string `gorm:"size:64;not null"`
	// Branch is the head branch when it is in the pull request's own
	// repository ("" for a fork's, or a record from before schema 10).
	Branch   string `gorm:"size:255;not null;default:'';index:idx_pull_requests_branch"`
	AuthorID int64  `gorm:"not null"`
	Author   string `gorm:"size:255;not null"`
	Open     bool   `gorm:"not null;index"`
	Version  int64  `gorm:"not null"` // the forge's update time of this description
}

func (pullRow) TableName() string { return "pull_requests" }

// pullLinkRow links a pull request to an issue of its repository it would
// close (or to itself).
type pullLinkRow struct {
	RepoID int64 `gorm:"primaryKey;autoIncrement:false;index:idx_pull_links_issue,priority:1"`
	Pull   int64 `gorm:"primaryKey;autoIncrement:false"`
	Issue  int64 `gorm:"primaryKey;autoIncrement:false;index:idx_pull_links_issue,priority:2"`
}

func (pullLinkRow) TableName() string { return "pull_links" }

// Pull is an open or closed pull request and the numbers it is linked to.
type Pull struct {
	RepoID int64
	Number int64
	Head   string // the head commit's SHA
	// Branch is the head branch if it is in the same repository, else ""
	// (a fork's branch is not the repository's to fence).
	Branch  string
	Author  Holder
	Open    bool
	Version int64   // the forge's update time of this description (Unix seconds)
	Links   []int64 // the issues it would close and its own number, ascending
}

// RecordPull records what the forge says of a pull request, unless a
// newer description is recorded already; a delivery seen before has no
// effect. It reports whether the record changed.
func (s *Store) RecordPull(ctx context.Context, p Pull, delivery string) (bool, error) {
	if p.RepoID <= 0 || p.Number <= 0 || len(p.Head) > 64 || len(p.Author.Login) > 255 || len(p.Branch) > MaxBranchLen {
		return false, fmt.Errorf("record pull %d#%d: %w", p.RepoID, p.Number, ErrInvalid)
	}
	changed := false
	// A pull request's number is an issue number of its repository.
	_, err := s.onEvent(ctx, delivery, issueScope(Key{RepoID: p.RepoID, Issue: p.Number}), func(tx *gorm.DB, now int64) ([]Lease, error) {
		changed = false
		var rows []pullRow
		if err := tx.Where("repo_id = ? AND number = ?", p.RepoID, p.Number).Limit(1).Find(&rows).Error; err != nil {
			return nil, err
		}
		if len(rows) == 1 && rows[0].Version > p.Version {
			return nil, nil // older than what is recorded
		}
		if err := tx.Save(&pullRow{RepoID: p.RepoID, Number: p.Number, Head: p.Head, Branch: p.Branch, AuthorID: p.Author.ID,
			Author: p.Author.Login, Open: p.Open, Version: p.Version}).Error; err != nil {
			return nil, err
		}
		if err := tx.Where("repo_id = ? AND pull = ?", p.RepoID, p.Number).Delete(&pullLinkRow{}).Error; err != nil {
			return nil, err
		}
		for _, n := range p.Links {
			if n <= 0 {
				continue
			}
			if err := tx.Create(&pullLinkRow{RepoID: p.RepoID, Pull: p.Number, Issue: n}).Error; err != nil {
				return nil, err
			}
		}
		changed = true
		return nil, nil
	})
	if err != nil {
		return false, fmt.Errorf("record pull %d#%d: %w", p.RepoID, p.Number, err)
	}
	return changed, nil
}

// PullsLinkedTo returns the open pull requests of the repository linked
// to issue n (a pull request is linked to itself).
func (s *Store) PullsLinkedTo(ctx context.Context, repoID, n int64) ([]Pull, error) {
	var numbers []int64
	db := s.db.WithContext(ctx)
	if err := db.Model(&pullLinkRow{}).Where("repo_id = ? AND issue = ?", repoID, n).Pluck("pull", &numbers).Error; err != nil {
		return nil, fmt.Errorf("pulls linked to %d#%d: %w", repoID, n, mapDBError(err))
	}
	return s.pulls(ctx, db.Where("repo_id = ? AND number IN ? AND open", repoID, numbers))
}

// OpenPulls returns every open pull request the ledger knows of that is
// linked to anything (for re-posting after a restart).
func (s *Store) OpenPulls(ctx context.Context) ([]Pull, error) {
	return s.pulls(ctx, s.db.WithContext(ctx).Where("open"))
}

// PullsOnBranch returns the open pull requests of the repository whose
// head is its branch (for that branch's push fence).
func (s *Store) PullsOnBranch(ctx context.Context, repoID int64, branch string) ([]Pull, error) {
	if branch == "" {
		return nil, nil
	}
	return s.pulls(ctx, s.db.WithContext(ctx).Where("repo_id = ? AND branch = ? AND open", repoID, branch))
}

// PullOf returns pull request number of the repository, or nil.
func (s *Store) PullOf(ctx context.Context, repoID, number int64) (*Pull, error) {
	ps, err := s.pulls(ctx, s.db.WithContext(ctx).Where("repo_id = ? AND number = ?", repoID, number))
	if err != nil || len(ps) == 0 {
		return nil, err
	}
	return &ps[0], nil
}

func (s *Store) pulls(ctx context.Context, q *gorm.DB) ([]Pull, error) {
	var rows []pullRow
	if err := q.Order("repo_id, number").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("pull requests: %w", mapDBError(err))
	}
	out := make([]Pull, 0, len(rows))
	for _, r := range rows {
		var links []int64
		if err := s.db.WithContext(ctx).Model(&pullLinkRow{}).Where("repo_id = ? AND pull = ?", r.RepoID, r.Number).
			Order("issue").Pluck("issue", &links).Error; err != nil {
			return nil, fmt.Errorf("links of pull %d#%d: %w", r.RepoID, r.Number, mapDBError(err))
		}
		out = append(out, Pull{RepoID: r.RepoID, Number: r.Number, Head: r.Head, Branch: r.Branch, Author: Holder{ID: r.AuthorID, Login: r.Author},
			Open: r.Open, Version: r.Version, Links: slices.Compact(links)})
	}
	return out, nil
}

// Leases returns the live leases on these issues of the repository, by
// pages of MaxPageIssues numbers (ListPage's query).
func (s *Store) Leases(ctx context.Context, repoID int64, issues []int64) ([]Lease, error) {
	var out []Lease
	for chunk := range slices.Chunk(issues, MaxPageIssues) {
		ls, _, err := s.ListPage(ctx, Page{RepoID: repoID, Issues: chunk, Limit: len(chunk)})
		if err != nil {
			return nil, err
		}
		out = append(out, ls...)
	}
	return out, nil
}
