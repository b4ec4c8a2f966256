package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// The board: what a person looks at to see who works on what in a
// repository, or in every repository they may read. It shows what the
// API shows the same viewer (the live claims of the units they may read,
// the reservations, as Reservations), and what only this process knows:
// who waits (acquire --wait per issue, next --wait per repository) and
// the last push the gate let in under each claim. Both are this
// replica's: a sidecar with replicas shows, on each, its own.

// Board sizes.
const (
	// BoardPage is how many claims one page of a board shows.
	BoardPage = 100
	// BoardEndedWindow is how far back a board shows the claims that
	// ended against their holder's will.
	BoardEndedWindow = 24 * time.Hour
	// MaxBoardRepos bounds the repositories one board of all shows.
	MaxBoardRepos = 100
	// boardNameTTL is how long a repository's name, by its ID, is kept
	// for the board of all (the viewer's access is asked every time).
	boardNameTTL = time.Minute
	// maxBoardNames bounds the names kept (a few hundred kilobytes): the
	// board of all reads the name of every repository with live claims.
	maxBoardNames = 10000
)

// The orders of a board's claims (BoardQuery.Sort); a leading "-"
// reverses one.
const (
	SortExpiry = "expiry" // the soonest to expire first, open-ended last
	SortHolder = "holder" // by holder, then agent
	SortIssue  = "issue"  // by number
	SortAge    = "age"    // the longest held first
)

// BoardQuery selects a page of a board.
type BoardQuery struct {
	Sort   string // SortExpiry when empty
	Offset int
	Limit  int // BoardPage when 0
}

// ParseSort checks a board's order: one of the Sort… names, maybe with a
// leading "-"; "" is SortExpiry.
func ParseSort(s string) (string, bool) {
	switch strings.TrimPrefix(s, "-") {
	case "":
		return SortExpiry, s == ""
	case SortExpiry, SortHolder, SortIssue, SortAge:
		return s, true
	}
	return "", false
}

// Board is one repository's board, as one viewer may see it.
type Board struct {
	Repo string // owner/name, as the forge calls it now
	// Claims are the page's live claims, Total how many the viewer may
	// see in all.
	Claims []BoardClaim
	Total  int
	// Reservations are the live path reservations (Reservations' view).
	Reservations []contract.Reservation
	// NextWaiters is how many callers of this process wait in next
	// --wait for an issue of the repository.
	NextWaiters int
	// Ended are the claims that ended against their holder's will within
	// BoardEndedWindow, newest first.
	Ended []BoardEnding
	// Quarantined are the quarantined issues the viewer may see, in
	// order (next skips them; docs/operating.md, Quarantine).
	Quarantined []BoardIssue
	Now         time.Time
}

// BoardIssue is an issue or pull request as the board names it.
type BoardIssue struct {
	Number int64
	Pull   bool
	Title  string // "" when the forge did not say
}

// BoardClaim is one live claim.
type BoardClaim struct {
	BoardIssue
	Holder     string
	Agent      string
	Token      int64
	AcquiredAt time.Time
	ExpiresAt  *time.Time // nil: open-ended
	// Waiters is how many callers of this process wait for the issue
	// (acquire --wait).
	Waiters int
	// Push is the last push the gate let in carrying this claim's token,
	// as this process answered it; nil: none.
	Push *GatePush
}

// BoardEnding is a claim that ended against its holder's will.
type BoardEnding struct {
	BoardIssue
	Holder     string
	Agent      string
	Token      int64
	AcquiredAt time.Time
	EndedAt    time.Time
	How        string // models.Ending: expired, taken_over, session_lost, force_released
	By         string // who force-released it
}

// GatePush is a push the gate let in under a claim.
type GatePush struct {
	Token  int64
	Ref    string // refs/heads/…
	Commit string
	At     time.Time
}

// Board returns the board of owner/name as v may see it: a repository v
// may not read is ErrRepoNotFound, as for List.
func (s *Service) Board(ctx context.Context, v Viewer, owner, name string, q BoardQuery) (Board, error) {
	r, err := s.repo(ctx, v, owner, name)
	if err != nil {
		return Board{}, err
	}
	return s.board(ctx, v, r, q, true)
}

// Boards is the board of all: the repositories' boards, and what was
// left out.
type Boards struct {
	Boards []Board
	// More: more repositories v may read have live claims than
	// MaxBoardRepos, the first of them by name shown.
	More bool
	// Unchecked counts the repositories with live claims left out because
	// the forge did not answer for them (down, or this address's budget
	// spent): v may or may not read them.
	Unchecked int
}

// Boards returns, for the first MaxBoardRepos repositories by name with
// live claims that v may read, their claims (q's page of each), with
// neither reservations nor endings. The ledger says which repositories
// have live claims; the forge's caches say which of them v may read.
// The names come first (kept a boardNameTTL), then the repositories are
// looked at in the order of their names, maxVisibleChecks at a time,
// until MaxBoardRepos are found: a look at the board costs at most a few
// checks past what it shows, however many repositories have claims. A
// repository the forge does not answer for is left out and counted; only
// the ledger failing fails the board.
func (s *Service) Boards(ctx context.Context, v Viewer, q BoardQuery) (Boards, error) {
	ids, err := s.ledger.LiveRepos(ctx)
	if err != nil {
		return Boards{}, fmt.Errorf("boards: %w", err)
	}
	var (
		out Boards
		mu  sync.Mutex
		g   errgroup.Group
	)
	type named struct {
		id   int64
		name string
	}
	names := make([]named, len(ids))
	unchecked := make([]bool, len(ids))
	g.SetLimit(maxVisibleChecks)
	for i, id := range ids {
		g.Go(func() error {
			full, err := s.boardNames.name(ctx, s, id)
			switch {
			case err == nil:
				names[i] = named{id, full}
			case errors.Is(err, forge.ErrNotFound):
			case unanswered(err):
				unchecked[i] = true
			default:
				return err
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return Boards{}, err
	}
	for _, u := range unchecked {
		if u {
			out.Unchecked++
		}
	}
	names = slices.DeleteFunc(names, func(n named) bool { return n.name == "" })
	slices.SortFunc(names, func(a, b named) int { return cmp.Compare(strings.ToLower(a.name), strings.ToLower(b.name)) })
	for len(names) > 0 && !out.More {
		batch := names[:min(len(names), maxVisibleChecks)]
		names = names[len(batch):]
		boards := make([]*Board, len(batch))
		for i, n := range batch {
			g.Go(func() error {
				b, ok, err := s.boardOf(ctx, v, n.id, n.name, q)
				switch {
				case ok:
					boards[i] = &b
				case err != nil && unanswered(err):
					mu.Lock()
					out.Unchecked++
					mu.Unlock()
				case err != nil:
					return err
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return Boards{}, err
		}
		for _, b := range boards {
			switch {
			case b == nil:
			case len(out.Boards) == MaxBoardRepos:
				out.More = true
			default:
				out.Boards = append(out.Boards, *b)
			}
		}
	}
	return out, nil
}

// boardOf is the board of repository id, named full, for Boards: none
// (false) if v may not read it, it is gone, or v sees no claim in it.
func (s *Service) boardOf(ctx context.Context, v Viewer, id int64, full string, q BoardQuery) (Board, bool, error) {
	owner, name, _ := strings.Cut(full, "/")
	r, err := s.repo(ctx, v, owner, name)
	switch {
	case errors.Is(err, ErrRepoNotFound):
		return Board{}, false, nil
	case err != nil:
		return Board{}, false, err
	case r.ID != id:
		s.boardNames.forget(id) // renamed, and its name taken since
		return Board{}, false, nil
	}
	b, err := s.board(ctx, v, r, q, false)
	return b, err == nil && b.Total > 0, err
}

// board reads r's board for v; full: with reservations and endings.
func (s *Service) board(ctx context.Context, v Viewer, r forge.Repo, q BoardQuery, full bool) (Board, error) {
	now := s.now()
	b := Board{Repo: r.FullName, Now: now, Claims: []BoardClaim{}, Reservations: []contract.Reservation{}, Ended: []BoardEnding{}}
	leases, err := s.ledger.List(ctx, r.ID)
	if err != nil {
		return Board{}, fmt.Errorf("board of %s: %w", r.FullName, err)
	}
	if leases, err = s.visibleLeases(ctx, v, r, leases); err != nil {
		return Board{}, err
	}
	sortLeases(leases, q.Sort)
	b.Total = len(leases)
	limit := cmp.Or(q.Limit, BoardPage)
	from := min(max(q.Offset, 0), len(leases))
	leases = leases[from:min(from+limit, len(leases))]
	var ended []models.Involuntary
	var quarantined []int64
	if full {
		if quarantined, err = s.visibleQuarantined(ctx, v, r); err != nil {
			return Board{}, err
		}
		rs, err := s.ledger.Reservations(ctx, r.ID, "")
		if err != nil {
			return Board{}, fmt.Errorf("board of %s: %w", r.FullName, err)
		}
		b.Reservations = reservationViews(r, rs)
		if ended, err = s.visibleEndings(ctx, v, r, now); err != nil {
			return Board{}, err
		}
	}
	numbers := make([]int64, 0, len(leases)+len(ended))
	for _, l := range leases {
		numbers = append(numbers, l.Issue)
	}
	for _, x := range ended {
		numbers = append(numbers, x.Issue)
	}
	numbers = append(numbers, quarantined...)
	owner, name, _ := strings.Cut(r.FullName, "/")
	// Without titles the board still shows every claim: the forge being
	// down, or this address's budget spent, costs the titles only.
	titles, _ := s.forge.IssueTitles(ctx, r.ID, owner, name, numbers)
	issue := func(n int64, k models.Kind) BoardIssue {
		return BoardIssue{Number: n, Pull: k == models.KindPull, Title: titles[n]}
	}
	perIssue, next := s.waitersIn(r.ID)
	b.NextWaiters = next
	for _, l := range leases {
		c := BoardClaim{BoardIssue: issue(l.Issue, l.Kind), Holder: l.Holder.Login, Agent: l.Holder.Agent, Token: l.Token,
			AcquiredAt: l.AcquiredAt, ExpiresAt: l.ExpiresAt, Waiters: perIssue[l.Issue], Push: s.boardPushes.last(l.Key, l.Token)}
		b.Claims = append(b.Claims, c)
	}
	for _, n := range quarantined {
		b.Quarantined = append(b.Quarantined, issue(n, models.KindUnknown))
	}
	for _, x := range ended {
		e := BoardEnding{BoardIssue: issue(x.Issue, x.Kind), Holder: x.Holder.Login, Agent: x.Holder.Agent, Token: x.Token,
			AcquiredAt: x.AcquiredAt, EndedAt: *x.EndedAt, How: string(x.EndedBy), By: x.ForcedBy}
		b.Ended = append(b.Ended, e)
	}
	return b, nil
}

// visibleQuarantined are r's quarantined issues that v may see: all of
// them to a viewer of both units, else those the forge says v may read.
func (s *Service) visibleQuarantined(ctx context.Context, v Viewer, r forge.Repo) ([]int64, error) {
	qs, err := s.ledger.Quarantined(ctx, r.ID)
	if err != nil || readsAll(r) {
		return qs, err
	}
	seen, err := s.visibleNumbers(ctx, v, r, qs)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(qs, func(n int64) bool { return !seen[n] }), nil
}

// visibleEndings are r's involuntary endings within BoardEndedWindow
// that v may see: of a unit v reads (a number whose kind the ledger does
// not know is asked of the forge, as for a list).
func (s *Service) visibleEndings(ctx context.Context, v Viewer, r forge.Repo, now time.Time) ([]models.Involuntary, error) {
	ended, err := s.ledger.InvoluntaryEnds(ctx, r.ID, now.Add(-BoardEndedWindow), models.MaxInvoluntary)
	if err != nil {
		return nil, fmt.Errorf("board of %s: %w", r.FullName, err)
	}
	if readsAll(r) {
		return ended, nil
	}
	var unknown []int64
	for _, x := range ended {
		if x.Kind == models.KindUnknown && !slices.Contains(unknown, x.Issue) {
			unknown = append(unknown, x.Issue)
		}
	}
	seen, err := s.visibleNumbers(ctx, v, r, unknown)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(ended, func(x models.Involuntary) bool {
		return !mayRead(r, x.Kind) && !(x.Kind == models.KindUnknown && seen[x.Issue])
	}), nil
}

// sortLeases puts leases in the board's order by (ParseSort's) sort.
func sortLeases(leases []models.Lease, sort string) {
	desc := strings.HasPrefix(sort, "-")
	by := func(a, b models.Lease) int {
		switch strings.TrimPrefix(sort, "-") {
		case SortHolder:
			return cmp.Or(cmp.Compare(strings.ToLower(a.Holder.Login), strings.ToLower(b.Holder.Login)), cmp.Compare(a.Holder.Agent, b.Holder.Agent))
		case SortIssue:
			return 0
		case SortAge:
			return a.AcquiredAt.Compare(b.AcquiredAt)
		}
		switch {
		case a.ExpiresAt == nil && b.ExpiresAt == nil:
			return 0
		case a.ExpiresAt == nil:
			return 1
		case b.ExpiresAt == nil:
			return -1
		}
		return a.ExpiresAt.Compare(*b.ExpiresAt)
	}
	slices.SortStableFunc(leases, func(a, b models.Lease) int {
		c := cmp.Or(by(a, b), cmp.Compare(a.Issue, b.Issue))
		if desc {
			return -c
		}
		return c
	})
}

// waitersIn counts the callers of this process that wait in r: acquire
// --wait's per issue, next --wait's in all.
func (s *Service) waitersIn(repoID int64) (map[int64]int, int) {
	perIssue := map[int64]int{}
	s.waits.mu.Lock()
	for k, q := range s.waits.queues {
		if k.RepoID == repoID {
			perIssue[k.Issue] += len(q)
		}
	}
	s.waits.mu.Unlock()
	next := 0
	s.nextWaits.mu.Lock()
	defer s.nextWaits.mu.Unlock()
	for k, q := range s.nextWaits.queues {
		if k.repoID == repoID {
			next += len(q)
		}
	}
	return perIssue, next
}

// maxBoardPushes bounds the claims whose last push is remembered.
const maxBoardPushes = 10000

// boardPushes remembers the last push the gate let in under each claim,
// in this process's memory only: the board's column is a hint for
// people, and a write per push would cost the gate's answer, which holds
// Gitea's push while it waits. A restart, or another replica's answer,
// is not seen. The zero value is ready.
type boardPushes struct {
	mu    sync.Mutex
	byKey map[models.Key]GatePush
}

// saw notes that a push of refs let in carried the current tokens of
// claims.
func (p *boardPushes) saw(claims []models.Lease, refs []contract.GateRef, at time.Time) {
	if len(claims) == 0 || len(refs) == 0 {
		return
	}
	ref := refs[0]
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byKey == nil || len(p.byKey) >= maxBoardPushes {
		p.byKey = map[models.Key]GatePush{} // forget all rather than grow: a hint
	}
	for _, l := range claims {
		p.byKey[l.Key] = GatePush{Token: l.Token, Ref: ref.Name, Commit: ref.New, At: at}
	}
}

// last is the last push let in under k's tenure token, if any.
func (p *boardPushes) last(k models.Key, token int64) *GatePush {
	p.mu.Lock()
	defer p.mu.Unlock()
	if g, ok := p.byKey[k]; ok && g.Token == token {
		return &g
	}
	return nil
}

// boardNames keeps repositories' names by ID for the board of all, so a
// look at it asks the forge for each name once a boardNameTTL. The zero
// value is ready.
type boardNames struct {
	mu    sync.Mutex
	names map[int64]boardName
}

type boardName struct {
	name string
	at   time.Time
}

func (n *boardNames) name(ctx context.Context, s *Service, id int64) (string, error) {
	now := s.now()
	n.mu.Lock()
	e, ok := n.names[id]
	n.mu.Unlock()
	if ok && now.Sub(e.at) < boardNameTTL {
		return e.name, nil
	}
	full, err := s.forge.RepoName(ctx, id)
	if err != nil {
		return "", err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.names == nil || len(n.names) >= maxBoardNames {
		n.names = map[int64]boardName{}
	}
	n.names[id] = boardName{name: full, at: now}
	return full, nil
}

func (n *boardNames) forget(id int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.names, id)
}
