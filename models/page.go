package models

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"

	"gorm.io/gorm"
)

// MaxPageIssues bounds the numbers one page query may ask for.
const MaxPageIssues = 50

// Page asks for one page of a repository's live leases, oldest first (by
// acquired_at, then issue number), as the HTTP API pages them.
type Page struct {
	RepoID int64
	// Issues, if not empty, keeps only these numbers (at most
	// MaxPageIssues): the badge of a page of Gitea's issue list asks for
	// the numbers it shows, whatever the repository holds.
	Issues []int64
	// Kinds, if not empty, keeps only leases of these kinds (a viewer who
	// reads one unit only).
	Kinds  []Kind
	Offset int
	Limit  int // 1 or more
}

// ListPage returns the live leases of p's page and how many live leases
// match p in all. Without Issues, filter, order and paging are the
// query's, so its cost grows with the page (and, for the count, the
// repository's live leases in the index), never with the rows returned
// and decoded. With Issues, at most MaxPageIssues rows can match: one
// query finds them by the primary key and they are counted, ordered and
// paged here, so a page of 50 numbers costs the same over 1,000 leases or
// 10,000. (Asked to order them, SQLite walks the repository's leases in
// the (repo_id, acquired_at) index instead, to spare itself a sort of 50
// rows: a cost that grows with the repository.)
func (s *Store) ListPage(ctx context.Context, p Page) ([]Lease, int, error) {
	switch {
	case p.RepoID <= 0:
		return nil, 0, fmt.Errorf("list page %d: %w: repository must be positive", p.RepoID, ErrInvalid)
	case p.Offset < 0 || p.Limit <= 0:
		return nil, 0, fmt.Errorf("list page %d: %w: offset %d, limit %d", p.RepoID, ErrInvalid, p.Offset, p.Limit)
	case len(p.Issues) > MaxPageIssues:
		return nil, 0, fmt.Errorf("list page %d: %w: more than %d issues", p.RepoID, ErrInvalid, MaxPageIssues)
	}
	now := s.readNow()
	where := func(db *gorm.DB) *gorm.DB {
		q := liveRows(db.WithContext(ctx), now).Where("repo_id = ?", p.RepoID)
		if len(p.Issues) > 0 {
			q = q.Where("issue IN ?", p.Issues)
		}
		if len(p.Kinds) > 0 {
			q = q.Where("kind IN ?", p.Kinds)
		}
		return q
	}
	if len(p.Issues) > 0 {
		rows, err := where(s.db).Select(leaseColumns).Rows()
		if err != nil {
			return nil, 0, fmt.Errorf("list page %d: %w", p.RepoID, mapDBError(err))
		}
		found, err := scanLeases(rows, make([]Lease, 0, len(p.Issues)))
		if err != nil {
			return nil, 0, fmt.Errorf("list page %d: %w", p.RepoID, mapDBError(err))
		}
		slices.SortFunc(found, func(a, b Lease) int {
			return cmp.Or(a.AcquiredAt.Compare(b.AcquiredAt), cmp.Compare(a.Issue, b.Issue))
		})
		from, to := min(p.Offset, len(found)), len(found)
		if p.Limit < to-from {
			to = from + p.Limit
		}
		return found[from:to], len(found), nil
	}
	var total int64
	if err := where(s.db).Count(&total).Error; err != nil {
		return nil, 0, fmt.Errorf("list page %d: %w", p.RepoID, mapDBError(err))
	}
	out := []Lease{}
	if int64(p.Offset) >= total {
		return out, int(total), nil
	}
	rows, err := where(s.db).Select(leaseColumns).
		Order("acquired_at, issue").Offset(p.Offset).Limit(p.Limit).Rows()
	if err != nil {
		return nil, 0, fmt.Errorf("list page %d: %w", p.RepoID, mapDBError(err))
	}
	if out, err = scanLeases(rows, out); err != nil {
		return nil, 0, fmt.Errorf("list page %d: %w", p.RepoID, mapDBError(err))
	}
	return out, int(total), nil
}

// scanLeases appends the leases of rows (selected as leaseColumns) to out
// and closes rows.
func scanLeases(rows *sql.Rows, out []Lease) ([]Lease, error) {
	defer rows.Close()
	for rows.Next() {
		var r leaseRow
		if err := rows.Scan(r.fields()...); err != nil {
			return nil, err
		}
		out = append(out, r.lease())
	}
	return out, rows.Err()
}
