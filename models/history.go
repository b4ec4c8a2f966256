package models

import (
	"context"
	"fmt"
	"time"
)

// Ending says how a tenure ended, as the history shows it (docs/ssh.md, The agent verbs).
type Ending string

// How tenures end. A live tenure has none ("").
const (
	EndReleased      Ending = "released"       // its holder released it
	EndExpired       Ending = "expired"        // its expiry passed and nobody has taken the issue since
	EndTakenOver     Ending = "taken_over"     // its expiry passed and a new tenure began
	EndClosed        Ending = "closed"         // the forge closed the issue
	EndMerged        Ending = "merged"         // the forge merged the pull request
	EndDeleted       Ending = "deleted"        // the forge deleted the issue or its repository
	EndForceReleased Ending = "force_released" // a repository admin released it
	EndHandedOff     Ending = "handed_off"     // its holder (or an admin) handed the issue to another holder
	EndSessionLost   Ending = "session_lost"   // the session keeping it alive was lost, and its grace ran out
)

// Tenure is one tenure of an issue: from the acquire that gave it its
// token to what ended it.
type Tenure struct {
	Token      int64
	Holder     Holder // by the login its holder last acted with
	AcquiredAt time.Time
	// EndedAt and EndedBy are nil and "" while the tenure is live. An
	// expired tenure ended at its expiry instant, however much later the
	// ledger noticed (expiry is lazy).
	EndedAt *time.Time
	EndedBy Ending
	// ForcedBy is the admin who force-released it (EndForceReleased only).
	ForcedBy string
	// EndedByHolder is who ended it, login and agent, where a person or
	// an agent did (EndReleased, EndForceReleased); zero otherwise, and
	// for tenures released before the history kept agents it names the
	// account with no agent.
	EndedByHolder *Holder
}

// MaxTenures bounds one History call.
const MaxTenures = 200

// Tenures returns the last limit (at most MaxTenures) tenures of k, newest
// first, worked out from the append-only history and the lease row. Each
// new tenure takes the next token, so the last limit tenures are those
// whose tokens are within limit of the row's.
func (s *Store) Tenures(ctx context.Context, k Key, limit int) ([]Tenure, error) {
	if k.RepoID <= 0 || k.Issue <= 0 || limit <= 0 || limit > MaxTenures {
		return nil, fmt.Errorf("tenures %d#%d: %w: bad key or limit %d", k.RepoID, k.Issue, ErrInvalid, limit)
	}
	now := s.now()
	var rows []leaseRow
	db := s.db.WithContext(ctx)
	if err := db.Where("repo_id = ? AND issue = ?", k.RepoID, k.Issue).Limit(1).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("tenures %d#%d: %w", k.RepoID, k.Issue, mapDBError(err))
	}
	if len(rows) == 0 {
		return []Tenure{}, nil
	}
	row := rows[0]
	var evs []Event
	if err := db.Where("repo_id = ? AND issue = ? AND token > ?", k.RepoID, k.Issue, row.Token-int64(limit)).
		Order("id").Find(&evs).Error; err != nil {
		return nil, fmt.Errorf("tenures %d#%d: %w", k.RepoID, k.Issue, mapDBError(err))
	}
	if s.dbClock {
		// By the server's clock, as writes decide, read after the rows.
		var err error
		if now, err = s.readNowValue(ctx); err != nil {
			return nil, fmt.Errorf("tenures %d#%d: %w", k.RepoID, k.Issue, err)
		}
	}
	return tenures(row, evs, now), nil
}

// tenures folds the events of the last tenures of one issue (oldest first)
// and its lease row into those tenures, newest first.
func tenures(row leaseRow, evs []Event, now int64) []Tenure {
	type fold struct {
		Tenure
		expires *int64 // the latest expiry its holder set; nil: open-ended
		// session: an agent session keeps it alive, so its expiry is
		// the session's, which no event tells until it lapsed (lapse).
		session bool
		end     *Event // the event that ended it, if any
	}
	byToken := map[int64]*fold{}
	var order []int64
	for i := range evs {
		ev := &evs[i]
		f := byToken[ev.Token]
		if f == nil {
			f = &fold{Tenure: Tenure{Token: ev.Token, AcquiredAt: time.Unix(ev.AcquiredAt, 0).UTC()}}
			byToken[ev.Token] = f
			order = append(order, ev.Token)
		}
		switch ev.Action {
		case ActionAcquire, ActionTakeover, ActionReacquire, ActionRenew:
			f.Holder = Holder{ID: ev.HolderID, Login: ev.Holder, Agent: ev.Agent}
			f.expires, f.session = ev.ExpiresAt, ev.Session != ""
		case ActionSessionLost, ActionExpire: // a session's tenure lapsed; what the row does next follows
			if f.Holder.Login == "" {
				f.Holder = Holder{ID: ev.HolderID, Login: ev.Holder, Agent: ev.Agent}
			}
			f.session = true
			if f.end == nil {
				f.end = ev
			}
		default: // release, force_release, handoff, closed, merged, deleted
			if f.Holder.Login == "" {
				f.Holder.Login = ev.Previous // its start is older than the history kept
			}
			if f.end == nil {
				f.end = ev
			}
		}
	}
	out := make([]Tenure, 0, len(order))
	for i := len(order) - 1; i >= 0; i-- {
		f := byToken[order[i]]
		// Lapsed: its expiry passed before anything else ended it. (A
		// session's tenure that lapsed says so in the history, or, if
		// nothing changed its row since, in the row.)
		lapsed := !f.session && f.expires != nil && (f.end != nil && f.end.At >= *f.expires ||
			f.end == nil && (f.Token < row.Token || *f.expires <= now))
		rowLapsed := f.session && f.end == nil && f.Token == row.Token && row.Holder != nil && row.Session != "" &&
			row.ExpiresAt != nil && !row.live(now)
		switch {
		case rowLapsed:
			f.EndedAt, f.EndedBy = unixPtr(row.ExpiresAt), EndSessionLost
			if row.CapAt != nil && *row.ExpiresAt >= *row.CapAt {
				f.EndedBy = EndExpired
			}
		case lapsed:
			f.EndedAt, f.EndedBy = unixPtr(f.expires), EndExpired
			if f.end == nil && f.Token < row.Token {
				f.EndedBy = EndTakenOver
			}
		case f.end != nil:
			f.EndedAt, f.EndedBy = unixPtr(&f.end.At), endingOf(f.end.Action)
			if f.end.Action == ActionForceRelease {
				f.ForcedBy = f.end.Holder
			}
			if f.end.Action == ActionForceRelease || f.end.Action == ActionRelease || f.end.Action == ActionHandoff {
				f.EndedByHolder = &Holder{ID: f.end.HolderID, Login: f.end.Holder, Agent: f.end.Agent}
			}
		case f.Token < row.Token || !row.live(now):
			// Freed without a trace in the history kept (a ledger older
			// than it): ended no later than the next tenure began.
			f.EndedBy = EndReleased
			if next := byToken[f.Token+1]; next != nil {
				at := next.AcquiredAt
				f.EndedAt = &at
			}
		}
		out = append(out, f.Tenure)
	}
	return out
}

func endingOf(a Action) Ending {
	switch a {
	case ActionForceRelease:
		return EndForceReleased
	case ActionHandoff:
		return EndHandedOff
	case ActionSessionLost:
		return EndSessionLost
	case ActionExpire:
		return EndExpired
	case Action(ReasonClosed):
		return EndClosed
	case Action(ReasonMerged):
		return EndMerged
	case Action(ReasonDeleted):
		return EndDeleted
	}
	return EndReleased
}
