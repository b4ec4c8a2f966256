package models

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The claims of a repository that ended lately other than by their
// holder's hand or the forge's: they expired (or were taken over once
// they had), their session was lost, or an admin force-released them.
// The board shows them, as the signs of an agent in trouble.
//
// The read works the endings out as the history does (tenures, in
// history.go), over the issues the window touches: those with an event
// since then that may end a tenure (endingActions), and those whose row
// lapsed since then and has not changed (expiry is lazy: no event says
// it). It reads the repository's events
// since then through the (repo_id, issue) index: its cost follows the
// repository's history of the window, not its whole history.

// endingActions are the events after which a tenure may have ended
// against its holder's will: one taken over, or released too late (once
// it had lapsed), or the endings that say so themselves. Acquires and
// renewals end nothing, and handoffs and the forge's endings are no
// such ending: an issue whose window holds only those is not looked at.
var endingActions = []Action{ActionTakeover, ActionRelease, ActionForceRelease, ActionSessionLost, ActionExpire}

// MaxInvoluntary bounds the endings, and the issues, one read looks at.
const MaxInvoluntary = 200

// Involuntary is one tenure that ended involuntarily: its issue, the
// kind the ledger knows of it, and the tenure with how and when it ended.
type Involuntary struct {
	Key
	Kind Kind
	Tenure
}

// involuntary reports whether a tenure that ended so ended against its
// holder's will: it lapsed, or an admin force-released it.
func involuntary(e Ending) bool { return lapsed(e) || e == EndForceReleased }

// InvoluntaryEnds returns the tenures of repoID that ended involuntarily
// at or after since, newest first, at most limit (at most MaxInvoluntary)
// of them, over the MaxInvoluntary issues whose history moved last.
func (s *Store) InvoluntaryEnds(ctx context.Context, repoID int64, since time.Time, limit int) ([]Involuntary, error) {
	if repoID <= 0 || limit <= 0 || limit > MaxInvoluntary {
		return nil, fmt.Errorf("involuntary ends in %d: %w: bad repository or limit %d", repoID, ErrInvalid, limit)
	}
	from := since.Unix()
	db := s.db.WithContext(ctx)
	// The issues the window touches, and the first token of theirs that
	// it saw: the tenure before that one may have ended in it too.
	type touched struct {
		Issue int64
		Token int64
		Last  int64
	}
	var byEvents []touched
	if err := db.Model(&Event{}).Select("issue, MIN(token) AS token, MAX(at) AS last").
		Where("repo_id = ? AND at >= ? AND action IN ?", repoID, from, endingActions).Group("issue").
		Order("last DESC").Limit(MaxInvoluntary).Scan(&byEvents).Error; err != nil {
		return nil, fmt.Errorf("involuntary ends in %d: %w", repoID, mapDBError(err))
	}
	var byRows []touched
	if err := db.Model(&leaseRow{}).Select("issue, token, expires_at AS last").
		Where("repo_id = ? AND holder IS NOT NULL AND expires_at >= ? AND expires_at <= ?", repoID, from, s.readNow()).
		Order("expires_at DESC").Limit(MaxInvoluntary).Scan(&byRows).Error; err != nil {
		return nil, fmt.Errorf("involuntary ends in %d: %w", repoID, mapDBError(err))
	}
	first := map[int64]int64{}
	for _, t := range append(byEvents, byRows...) {
		if have, ok := first[t.Issue]; !ok || t.Token < have {
			first[t.Issue] = t.Token
		}
	}
	if len(first) == 0 {
		return []Involuntary{}, nil
	}
	issues := make([]int64, 0, len(first))
	for n := range first {
		issues = append(issues, n)
	}
	slices.Sort(issues)
	var rows []leaseRow
	if err := db.Where("repo_id = ? AND issue IN ?", repoID, issues).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("involuntary ends in %d: %w", repoID, mapDBError(err))
	}
	// Every event of the tenures that may have ended in the window: from
	// the one before the first the window saw, issue by issue.
	var evs []Event
	for chunk := range slices.Chunk(issues, 100) {
		var where []string
		var args []any
		for _, n := range chunk {
			where = append(where, "(issue = ? AND token >= ?)")
			args = append(args, n, first[n]-1)
		}
		var part []Event
		if err := db.Where("repo_id = ?", repoID).Where(strings.Join(where, " OR "), args...).
			Order("id").Find(&part).Error; err != nil {
			return nil, fmt.Errorf("involuntary ends in %d: %w", repoID, mapDBError(err))
		}
		evs = append(evs, part...)
	}
	now, err := s.readNowValue(ctx)
	if err != nil {
		return nil, fmt.Errorf("involuntary ends in %d: %w", repoID, err)
	}
	of := map[int64][]Event{}
	for _, ev := range evs {
		of[ev.Issue] = append(of[ev.Issue], ev)
	}
	out := []Involuntary{}
	for _, row := range rows {
		for _, t := range tenures(row, of[row.Issue], now) {
			if t.EndedAt != nil && !t.EndedAt.Before(since) && involuntary(t.EndedBy) {
				out = append(out, Involuntary{Key: Key{RepoID: repoID, Issue: row.Issue}, Kind: row.Kind, Tenure: t})
			}
		}
	}
	slices.SortFunc(out, func(a, b Involuntary) int {
		return cmp.Or(b.EndedAt.Compare(*a.EndedAt), cmp.Compare(a.Issue, b.Issue), cmp.Compare(b.Token, a.Token))
	})
	return out[:min(len(out), limit)], nil
}
