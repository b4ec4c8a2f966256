package models

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/pathglob"
)

// Path reservations (the verbs reserve, unreserve, reservations): a
// holder's claim on paths of one repository, given as globs (plugin/pathglob),
// exclusive or shared. A reservation lives as long as its anchor: a
// claim's tenure (it ends when that tenure ends, however it ends), else
// an agent session, else a time to live of its own. Conflicts are
// decided here, under the write primitive, for a whole set of globs at
// once: an exclusive glob conflicts with another holder's live
// reservation whose glob matches a common path, a shared one only with
// another holder's exclusive ones. pathglob.Overlap is exact, so the
// conflicts are too. A reservation that is no longer live is dead
// weight: the next reserve in its repository removes it.

// MaxReserveGlobs bounds the globs of one reserve.
const MaxReserveGlobs = contract.MaxReserveGlobs

// reservationRow is one glob of one holder.
type reservationRow struct {
	ID     int64  `gorm:"primaryKey"`
	RepoID int64  `gorm:"not null;index:idx_reservations_repo_prefix,priority:1"`
	Glob   string `gorm:"size:255;not null"`
	// Prefix is the glob's literal leading directories
	// (pathglob.Glob.Prefix): a reserve reads only the reservations
	// whose prefix is above or below its own globs'.
	Prefix   string `gorm:"size:255;not null;default:'';index:idx_reservations_repo_prefix,priority:2"`
	Shared   bool   `gorm:"not null"`
	HolderID int64  `gorm:"not null;index:idx_reservations_holder"`
	Login    string `gorm:"size:255;not null"`
	Agent    string `gorm:"size:40;not null;default:''"`
	// The anchor: the claim of Issue under Token, else the agent session
	// Session, else ExpiresAt.
	Issue     int64  `gorm:"not null;default:0"`
	Token     int64  `gorm:"not null;default:0"`
	Session   string `gorm:"size:32;not null;default:''"`
	ExpiresAt *int64
	CreatedAt int64 `gorm:"not null"`
}

func (reservationRow) TableName() string { return "reservations" }

// Reservation is one live reservation.
type Reservation struct {
	// ID names this reservation: a reserve of a glob its holder has
	// already makes it anew, under a new ID.
	ID     int64
	RepoID int64
	Glob   string
	Shared bool
	Holder Holder
	// Issue is the claim it is anchored to (0: none); ExpiresAt its
	// anchor's expiry (nil: open-ended).
	Issue     int64
	ExpiresAt *time.Time
}

// Reserve is a reserve: Globs for Holder in RepoID, anchored to its
// claim of Issue (if not 0), else to Holder.Session (if set), else for
// TTL.
type Reserve struct {
	RepoID int64
	Holder Holder
	Globs  []string
	Shared bool
	Issue  int64
	TTL    time.Duration
}

// ReservedError: reservations of other holders stand in the way; With
// are those that do, and nothing was reserved.
type ReservedError struct {
	With []Reservation
}

func (e *ReservedError) Error() string {
	return fmt.Sprintf("%d reservations of others stand in the way", len(e.With))
}

// Is makes errors.Is(err, ErrReserved) true.
func (e *ReservedError) Is(target error) bool { return target == ErrReserved }

// ErrReserved: another holder's reservation conflicts (*ReservedError).
var ErrReserved = errors.New("paths reserved by another")

// reservationsSQL reads reservations with their anchors' expiry (Unix
// seconds, NULL: open-ended) and whether they are live (1) or not (0);
// its first arguments are now three times, then those of the WHERE
// clause that follows it.
const reservationsSQL = "SELECT r.id, r.repo_id, r.glob, r.shared, r.holder_id, r.login, r.agent, r.issue," +
	" CASE WHEN r.issue <> 0 THEN l.expires_at WHEN r.session <> '' THEN s.alive_until ELSE r.expires_at END," +
	" CASE WHEN " + reservationLiveSQL + " THEN 1 ELSE 0 END" +
	" FROM reservations r" +
	" LEFT JOIN leases l ON l.repo_id = r.repo_id AND l.issue = r.issue" +
	" LEFT JOIN agent_sessions s ON s.id = r.session" +
	" WHERE "

// reservationLiveSQL is true of a live reservation (now three times):
// its claim's tenure goes on, else its session, else its own TTL.
const reservationLiveSQL = "((r.issue <> 0 AND l.holder IS NOT NULL AND (l.expires_at IS NULL OR l.expires_at > ?) AND l.token = r.token AND l.holder_id = r.holder_id AND l.agent = r.agent)" +
	" OR (r.issue = 0 AND r.session <> '' AND s.ended_at IS NULL AND s.alive_until > ?)" +
	" OR (r.issue = 0 AND r.session = '' AND r.expires_at > ?))"

type liveReservation struct {
	id   int64
	live bool
	Reservation
}

// readReservations reads the reservations where says (over r, with its
// args), oldest first, live or not.
func readReservations(db *gorm.DB, now any, where string, args ...any) ([]liveReservation, error) {
	rows, err := db.Raw(reservationsSQL+"("+where+") ORDER BY r.id", append([]any{now, now, now}, args...)...).Rows()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []liveReservation
	for rows.Next() {
		var r liveReservation
		var expires *int64
		var live int64
		if err := rows.Scan(&r.id, &r.RepoID, &r.Glob, &r.Shared, &r.Holder.ID, &r.Holder.Login, &r.Holder.Agent, &r.Issue, &expires, &live); err != nil {
			return nil, err
		}
		r.ID, r.ExpiresAt, r.live = r.id, unixPtr(expires), live == 1
		out = append(out, r)
	}
	return out, rows.Err()
}

// readLiveReservations reads the live reservations of a repository,
// oldest first.
func readLiveReservations(db *gorm.DB, repoID int64, now any) ([]liveReservation, error) {
	all, err := readReservations(db, now, "r.repo_id = ?", repoID)
	return slices.DeleteFunc(all, func(r liveReservation) bool { return !r.live }), err
}

// sameHolder: the reservation is h's (its account and agent).
func (r Reservation) sameHolder(h Holder) bool {
	return r.Holder.ID == h.ID && r.Holder.Agent == h.Agent
}

// Reserve reserves r.Globs, all or none: it returns the holder's
// reservations of those globs, or *ReservedError naming those of other
// holders that conflict, or *NotHolderError when r.Issue is not the
// holder's live claim.
func (s *Store) Reserve(ctx context.Context, r Reserve) ([]Reservation, error) {
	globs, err := s.validReserve(r)
	if err != nil {
		return nil, fmt.Errorf("reserve in %d: %w", r.RepoID, err)
	}
	var out []Reservation
	sc := repoScope(r.RepoID)
	if s.reservationCap > 0 {
		sc.account = r.Holder.ID // the cap's count and the reserve are one decision
	}
	err = s.write(ctx, sc, func(tx *gorm.DB, now int64) error {
		out = nil
		row := reservationRow{RepoID: r.RepoID, Shared: r.Shared, HolderID: r.Holder.ID, Login: r.Holder.Login, Agent: r.Holder.Agent, CreatedAt: now}
		var anchorExpiry *int64
		switch {
		case r.Issue != 0:
			l, found, err := load(tx, Key{RepoID: r.RepoID, Issue: r.Issue})
			if err != nil {
				return err
			}
			if err := heldLive(l, found, r.Holder, now); err != nil {
				return err
			}
			row.Issue, row.Token, anchorExpiry = r.Issue, l.Token, l.ExpiresAt
		case r.Holder.Session != nil:
			row.Session = r.Holder.Session.ID
			var alive []int64
			if err := tx.Model(&agentSessionRow{}).Where("id = ? AND ended_at IS NULL AND alive_until > ?", row.Session, now).
				Pluck("alive_until", &alive).Error; err != nil {
				return err
			}
			if len(alive) == 0 {
				return fmt.Errorf("%w: the session is not alive", ErrInvalid)
			}
			anchorExpiry = &alive[0]
		default:
			e := now + int64(r.TTL/time.Second)
			row.ExpiresAt, anchorExpiry = &e, &e
		}
		// The reservations that could meet these globs, and the
		// holder's own of them (which a reserve replaces).
		where, args := reserveCandidates(r.RepoID, r.Holder, globs, s.pg)
		cands, err := readReservations(tx, now, where, args...)
		if err != nil {
			return err
		}
		var with []Reservation
		var gone []int64
		for _, x := range cands {
			mine := x.sameHolder(r.Holder) && slices.ContainsFunc(globs, func(g pathglob.Glob) bool { return g.String() == x.Glob })
			if !x.live || mine {
				gone = append(gone, x.id)
				continue
			}
			if x.sameHolder(r.Holder) || (r.Shared && x.Shared) || (s.letExclusivesOverlap && !r.Shared && !x.Shared) {
				continue
			}
			other, err := pathglob.Parse(x.Glob)
			if err != nil {
				continue // not written by Reserve: never there
			}
			if slices.ContainsFunc(globs, func(g pathglob.Glob) bool { return mayOverlap(g, other) }) {
				with = append(with, x.Reservation)
			}
		}
		if len(with) > 0 {
			return &ReservedError{With: with}
		}
		if s.reservationCap > 0 {
			held, err := readReservations(tx, now, "r.holder_id = ? AND r.agent = ?", r.Holder.ID, r.Holder.Agent)
			if err != nil {
				return err
			}
			live := int64(0)
			for _, x := range held {
				if x.live && !slices.Contains(gone, x.id) {
					live++
				}
			}
			if live+int64(len(globs)) > s.reservationCap {
				return &LimitError{Scope: "reservations", Limit: s.reservationCap, Live: live}
			}
		}
		if len(gone) > 0 {
			if err := tx.Where("id IN ?", gone).Delete(&reservationRow{}).Error; err != nil {
				return err
			}
		}
		for _, g := range globs {
			row := row
			row.ID, row.Glob, row.Prefix = 0, g.String(), g.Prefix()
			if err := tx.Create(&row).Error; err != nil {
				return err
			}
			out = append(out, Reservation{ID: row.ID, RepoID: r.RepoID, Glob: row.Glob, Shared: r.Shared, Holder: Holder{ID: r.Holder.ID, Login: r.Holder.Login, Agent: r.Holder.Agent},
				Issue: row.Issue, ExpiresAt: unixPtr(anchorExpiry)})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reserve in %d: %w", r.RepoID, err)
	}
	return out, nil
}

// reserveCandidates is the WHERE clause (over reservations r) of what
// a reserve of globs by h reads: the repository's reservations whose
// prefix is one of the globs' prefixes, or above one (an ancestor
// directory, the root included), or below one; and h's own of these
// globs.
func reserveCandidates(repoID int64, h Holder, globs []pathglob.Glob, pg bool) (string, []any) {
	collate := ""
	if pg {
		collate = ` COLLATE "C"`
	}
	var above []string
	var below []string
	texts := make([]string, len(globs))
	for i, g := range globs {
		texts[i] = g.String()
		p := g.Prefix()
		if p == "" {
			return "r.repo_id = ?", []any{repoID} // it may meet any
		}
		for dir := p; ; {
			if !slices.Contains(above, dir) {
				above = append(above, dir)
			}
			i := strings.LastIndexByte(dir, '/')
			if i < 0 {
				break
			}
			dir = dir[:i]
		}
		below = append(below, p+"/")
	}
	above = append(above, "")
	// Each term names the repository, so that both engines read each
	// from the index of (repository, prefix), or of holders, and none
	// scans the repository's reservations.
	where := "(r.repo_id = ? AND r.prefix IN ?) OR (r.holder_id = ? AND r.repo_id = ? AND r.agent = ? AND r.glob IN ?)"
	args := []any{repoID, above, h.ID, repoID, h.Agent, texts}
	for _, b := range below {
		// Under b: from b up to b with its last byte, '/', moved on to
		// '0', in the order of bytes (SQLite's, which its index of the
		// prefixes follows; PostgreSQL's column compares by the
		// database's collation, so there the C collation says it).
		where += " OR (r.repo_id = ? AND r.prefix" + collate + " >= ? AND r.prefix" + collate + " < ?)"
		args = append(args, repoID, b, b[:len(b)-1]+"0")
	}
	return where, args
}

// PruneReservations removes the reservations that are no longer live
// (their anchor ended, which is for good), in every repository, and
// returns how many. The sidecar runs it with its reconcile sweep.
func (s *Store) PruneReservations(ctx context.Context) (int64, error) {
	var n int64
	err := s.write(ctx, scope{}, func(tx *gorm.DB, now int64) error {
		res := tx.Exec("DELETE FROM reservations WHERE id IN (SELECT r.id FROM reservations r"+
			" LEFT JOIN leases l ON l.repo_id = r.repo_id AND l.issue = r.issue"+
			" LEFT JOIN agent_sessions s ON s.id = r.session"+
			" WHERE CASE WHEN "+reservationLiveSQL+" THEN 0 ELSE 1 END = 1)", now, now, now)
		n = res.RowsAffected
		return res.Error
	})
	if err != nil {
		return 0, fmt.Errorf("prune reservations: %w", err)
	}
	return n, nil
}

func (s *Store) validReserve(r Reserve) ([]pathglob.Glob, error) {
	switch {
	case r.RepoID <= 0 || r.Holder.ID <= 0 || r.Holder.Login == "" || len(r.Holder.Login) > 255:
		return nil, ErrInvalid
	case len(r.Globs) == 0 || len(r.Globs) > MaxReserveGlobs:
		return nil, fmt.Errorf("%w: 1 to %d globs", ErrInvalid, MaxReserveGlobs)
	case r.Issue < 0, r.Issue > 0 && r.TTL != 0:
		return nil, fmt.Errorf("%w: a reservation of a claim lives as long as the claim, with no ttl of its own", ErrInvalid)
	case r.Issue == 0 && r.Holder.Session == nil && (r.TTL < time.Second || r.TTL%time.Second != 0 || (s.maxTTL > 0 && r.TTL > s.maxTTL)):
		return nil, fmt.Errorf("%w: a reservation of no claim or session needs a ttl of whole seconds, at most the maximum", ErrInvalid)
	}
	var globs []pathglob.Glob
	for _, g := range r.Globs {
		p, err := pathglob.Parse(g)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		if !slices.ContainsFunc(globs, func(x pathglob.Glob) bool { return x.String() == p.String() }) {
			globs = append(globs, p)
		}
	}
	return globs, nil
}

// Unreserve removes the holder's live reservations in the repository of
// these globs (all of them if none is named), of the claim of issue if
// it is not 0; with force, whoever's they are (a repository admin's
// doing, decided by the caller). It returns the reservations removed.
func (s *Store) Unreserve(ctx context.Context, repoID int64, h Holder, globs []string, issue int64, force bool) ([]Reservation, error) {
	if repoID <= 0 || h.ID <= 0 || len(globs) > MaxReserveGlobs || issue < 0 {
		return nil, fmt.Errorf("unreserve in %d: %w", repoID, ErrInvalid)
	}
	var out []Reservation
	err := s.write(ctx, repoScope(repoID), func(tx *gorm.DB, now int64) error {
		out = nil
		live, err := readLiveReservations(tx, repoID, now)
		if err != nil {
			return err
		}
		var ids []int64
		for _, x := range live {
			if (!force && !x.sameHolder(h)) || (len(globs) > 0 && !slices.Contains(globs, x.Glob)) || (issue != 0 && x.Issue != issue) {
				continue
			}
			ids = append(ids, x.id)
			out = append(out, x.Reservation)
		}
		if len(ids) == 0 {
			return nil
		}
		return tx.Where("id IN ?", ids).Delete(&reservationRow{}).Error
	})
	if err != nil {
		return nil, fmt.Errorf("unreserve in %d: %w", repoID, err)
	}
	return out, nil
}

// Reservations returns the live reservations of the repository, oldest
// first; with path, only those whose glob matches it.
func (s *Store) Reservations(ctx context.Context, repoID int64, path string) ([]Reservation, error) {
	live, err := readLiveReservations(s.db.WithContext(ctx), repoID, s.readNow())
	if err != nil {
		return nil, fmt.Errorf("reservations in %d: %w", repoID, mapDBError(err))
	}
	out := make([]Reservation, 0, len(live))
	for _, x := range live {
		if path != "" {
			g, err := pathglob.Parse(x.Glob)
			if err != nil || !g.Match(path) {
				continue
			}
		}
		out = append(out, x.Reservation)
	}
	return out, nil
}

// ClaimReservations returns the live reservations of the claim on k
// (whoever holds it), oldest first.
func (s *Store) ClaimReservations(ctx context.Context, k Key) ([]Reservation, error) {
	all, err := readReservations(s.db.WithContext(ctx), s.readNow(), "r.repo_id = ? AND r.issue = ?", k.RepoID, k.Issue)
	if err != nil {
		return nil, fmt.Errorf("reservations of %d#%d: %w", k.RepoID, k.Issue, mapDBError(err))
	}
	out := []Reservation{}
	for _, x := range all {
		if x.live {
			out = append(out, x.Reservation)
		}
	}
	return out, nil
}

// maxReservedLines bounds the lines of one push refused for reserved
// paths.
const maxReservedLines = 10

// gateReserved checks the paths of a push against the repository's live
// exclusive reservations: the lines of its refusal, one per path under
// another holder's reservation (at most maxReservedLines), or none. The
// pusher is the holder whose current token the push carries, else its
// account with no agent; its own reservations never refuse it, and an
// account's reservations made with no agent never refuse that account.
func (s *Store) gateReserved(ctx context.Context, p GatePush) ([]string, error) {
	db := s.db.WithContext(ctx)
	live, err := readLiveReservations(db, p.RepoID, s.readNow())
	if err != nil {
		return nil, mapDBError(err)
	}
	pusher := Holder{ID: p.Pusher.ID, Login: p.Pusher.Login}
	if opts := parseGateOptions(p.Options); len(opts.tokens) > 0 && p.Pusher.ID > 0 {
		issues := make([]int64, 0, len(opts.tokens))
		for n := range opts.tokens {
			issues = append(issues, n)
		}
		slices.Sort(issues)
		ls, err := s.Leases(ctx, p.RepoID, issues)
		if err != nil {
			return nil, err
		}
		for _, l := range ls {
			if l.Holder.ID == p.Pusher.ID && opts.tokens[l.Issue] == l.Token {
				pusher.Agent = l.Holder.Agent
				break
			}
		}
	}
	// The exclusive reservations of others, by their globs' literal
	// prefixes: a path is matched only against the globs it is under.
	type held struct {
		Reservation
		glob pathglob.Glob
	}
	byPrefix := map[string][]held{}
	for _, x := range live {
		if x.Shared || (p.Pusher.ID > 0 && x.Holder.ID == p.Pusher.ID && (x.Holder.Agent == pusher.Agent || x.Holder.Agent == "")) {
			continue
		}
		g, err := pathglob.Parse(x.Glob)
		if err != nil {
			continue
		}
		byPrefix[g.Prefix()] = append(byPrefix[g.Prefix()], held{x.Reservation, g})
	}
	if len(byPrefix) == 0 {
		return nil, nil
	}
	var lines []string
	for _, path := range p.Paths {
		var under *held
		for dir := path; under == nil; {
			i := strings.LastIndexByte(dir, '/')
			if i < 0 {
				dir = ""
			} else {
				dir = dir[:i]
			}
			for _, h := range byPrefix[dir] {
				if reservedBy(h.glob, path, p.PathsAreDirs) {
					under = &h
					break
				}
			}
			if dir == "" {
				break
			}
		}
		if p.PathsAreDirs && under == nil {
			// A directory also meets the globs below it.
			for prefix, hs := range byPrefix {
				if path == "" || prefix == path || strings.HasPrefix(prefix, path+"/") {
					for _, h := range hs {
						if reservedBy(h.glob, path, true) {
							under = &h
							break
						}
					}
				}
				if under != nil {
					break
				}
			}
		}
		if under == nil {
			continue
		}
		what := path
		switch {
		case p.PathsAreDirs && path == "":
			what = "a path this push changes"
		case p.PathsAreDirs:
			what = "a path under " + path + "/"
		}
		lines = append(lines, reservedLine(p.Repo, what, under.Reservation))
		if len(lines) == maxReservedLines {
			break
		}
	}
	return lines, nil
}

// reservedBy reports whether g reserves path, or, for a directory, some
// path under it.
func reservedBy(g pathglob.Glob, path string, dir bool) bool {
	switch {
	case !dir:
		return g.Match(path)
	case path == "": // the root: the whole tree
		return true
	}
	all, err := pathglob.Parse(path + "/")
	if err != nil {
		return false
	}
	_, ok := pathglob.Overlap(g, all)
	return ok
}

// reservedLine is what the pusher reads of what (a path) under r.
func reservedLine(repo, what string, r Reservation) string {
	line := fmt.Sprintf("collab-lease: %s is reserved by %s", what, holderName(r.Holder))
	if r.Issue != 0 {
		line += fmt.Sprintf(" for %s#%d", repo, r.Issue)
	}
	if r.ExpiresAt == nil {
		return line + " (no expiry)"
	}
	return line + " until " + r.ExpiresAt.UTC().Format("15:04") + " UTC"
}

// mayOverlap is pathglob.Overlap, after the cheap test that decides most
// pairs: every path a glob matches is under its literal prefix, so two
// globs whose prefixes part (neither is the other's, segment by segment)
// match no common path.
func mayOverlap(a, b pathglob.Glob) bool {
	pa, pb := a.Prefix(), b.Prefix()
	if !under(pa, pb) && !under(pb, pa) {
		return false
	}
	_, ok := pathglob.Overlap(a, b)
	return ok
}

// under reports whether directory a is dir or below it.
func under(a, dir string) bool {
	return dir == "" || a == dir || strings.HasPrefix(a, dir+"/")
}
