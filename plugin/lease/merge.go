package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/changes"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// Merges through the sidecar (docs/ssh.md, Merging through the sidecar).
// The holder of a pull request's claim, or of a claim of an issue it
// closes, asks; the sidecar takes the base branch's turn (a merge ticket
// in the ledger, models/merges.go: one merge at a time into a base
// branch across every replica), and, holding it, asks the forge to merge
// as the holder, so that the forge's own permission and protection
// checks apply to the holder; the gate admits that merge under the
// ticket, and refuses any other merge of the pull request. Then the
// claims the merge ends are ended, before the reply.
//
// The forge answers "not yet" while it tests the pull request and after
// a test that found a conflict alike: the conflict test (WithConflictTest)
// tells them apart, so a conflict is refused at once and only a test is
// waited for. Asking for the pull request also makes Gitea test again a
// pull request whose test its queue lost, so the wait recovers it.

// Merger is what merging needs of the forge besides Forge
// (plugin/gitea's Forge has both).
type Merger interface {
	// PullForMerge returns pull request n of owner/name as login sees it,
	// never cached.
	PullForMerge(ctx context.Context, login, owner, name string, n int64) (forge.PullState, error)
	// MergePull asks the forge to merge pull request n as login.
	MergePull(ctx context.Context, login, owner, name string, n int64, o forge.MergeOptions) error
}

// ConflictTest says whether merging head into base conflicts in the
// repository owner/name, and in which files.
type ConflictTest func(ctx context.Context, owner, name, base, head string) (bool, []string, error)

// WithConflictTest sets the conflict test merges use. Without one, a pull
// request the forge keeps calling unmergeable for MergeUntested is
// refused, since a conflict and a slow test cannot be told apart.
func WithConflictTest(t ConflictTest) Option { return func(s *Service) { s.conflictTest = t } }

// WithMergeTicket sets the bound of a merge ticket (default
// contract.MergeTicketMax), and how often a merge waiting for its turn
// looks at the ledger again for another replica's merge ending (default
// MergeRecheck).
func WithMergeTicket(bound, recheck time.Duration) Option {
	return func(s *Service) { s.mergeBound, s.mergeRecheck = bound, recheck }
}

const (
	// MergeRecheck is how often a merge waiting for its turn looks again
	// when no merge of this sidecar ended: another replica's may have.
	MergeRecheck = 500 * time.Millisecond
	// MergeUntested is how long a merge without a conflict test waits
	// for the forge to find the pull request mergeable.
	MergeUntested = time.Minute
	// mergePoll bounds the pause between two looks at a pull request
	// the forge is testing. The base branch waits on this look, every
	// merge into it behind: a look is one cheap request, and only the
	// merge holding the turn makes it.
	mergePoll = 250 * time.Millisecond
	// mergeFresh is how old what the forge said of a pull request may be
	// when the turn to merge it comes for the merge to go by it: a turn
	// that came later came after another merge, which moved the base.
	mergeFresh = 100 * time.Millisecond
)

// MergeRequest is what a merge asks (collab-lease merge).
type MergeRequest struct {
	Pull int64
	// Token is the tenure the caller merges under; 0: its current one.
	Token        int64
	Style        string // one of contract.MergeStyles; "" the forge's "merge"
	DeleteBranch bool
	// Wait bounds the wait for the turn to merge into the base branch.
	Wait time.Duration
}

// mergeKey is a queue of merges waiting for their turn: a repository's
// base branch.
type mergeKey struct {
	repoID int64
	base   string
}

func newMergeWaits(total int) *waits[mergeKey] {
	return &waits[mergeKey]{queues: map[mergeKey][]*waiter{}, perKey: total, max: total,
		match: func(mergeKey, changes.Change) bool { return false }} // woken by the merges that end, never by the bus
}

// Merge merges pull request m.Pull of owner/name as its holder: the
// caller must hold the pull request's claim, or the claim of an issue it
// closes (else not_holder), under m.Token (else stale). Merges into one
// base branch take turns across replicas, first come first served, up
// to m.Wait (else busy); told hears the caller's place while it waits,
// as AcquireWaitTold's does. The forge's refusal is a *ConflictError of
// contract.MergeRefused; once merged, the claims the merge ends are ended
// before Merge returns.
func (s *Service) Merge(ctx context.Context, v Viewer, owner, name string, m MergeRequest, told func(ahead int)) (contract.Merged, error) {
	merger, ok := s.forge.(Merger)
	switch {
	case !ok:
		return contract.Merged{}, fmt.Errorf("%w: this sidecar's forge does not merge", ErrInvalid)
	case v.Anonymous():
		return contract.Merged{}, fmt.Errorf("%w: no account", ErrInvalid)
	case m.Pull <= 0:
		return contract.Merged{}, fmt.Errorf("%w: pull request %d", ErrInvalid, m.Pull)
	case m.Style != "" && !contract.ValidMergeStyle(m.Style):
		return contract.Merged{}, fmt.Errorf("%w: merge style %q", ErrInvalid, m.Style)
	}
	r, err := s.repo(ctx, v, owner, name)
	if err != nil {
		return contract.Merged{}, err
	}
	owner, name, _ = strings.Cut(r.FullName, "/")
	n := m.Pull
	st, err := merger.PullForMerge(ctx, v.Login, owner, name, n)
	read := s.now()
	if errors.Is(err, forge.ErrNotFound) {
		return contract.Merged{}, fmt.Errorf("%s!%d: %w", r.FullName, n, ErrIssueNotFound)
	}
	if err != nil {
		return contract.Merged{}, err
	}
	links, err := s.notePull(ctx, r, st)
	if err != nil {
		return contract.Merged{}, err
	}
	claim, err := s.mergeClaim(ctx, r, v, n, links)
	if err != nil {
		if st.Merged {
			// Asked again after a reply that was lost: the merge ended
			// the claim it was made under.
			if issue, t, ok := s.mergedUnder(ctx, r, v, links); ok {
				return contract.Merged{Status: contract.StatusMerged, Repo: r.FullName, Pull: n, SHA: st.MergeSHA, Issue: issue, Token: t}, nil
			}
		}
		return contract.Merged{}, err
	}
	if m.Token != 0 && m.Token != claim.Token {
		cur := claim.Token
		return contract.Merged{}, &ConflictError{Reply: contract.Stale{Status: contract.StatusStale, Repo: r.FullName, Issue: claim.Issue, Token: &cur}}
	}
	refused := func(why string) error {
		return &ConflictError{Reply: contract.MergeRefused{Status: contract.StatusRefused, Repo: r.FullName, Pull: n, Reason: why}}
	}
	switch {
	case st.Merged:
		// Merged already (a reply lost on the way, asked again): say so,
		// and end what the merge ends, as the webhook will.
		s.endMerged(ctx, r, st, links, claim.Holder)
		return contract.Merged{Status: contract.StatusMerged, Repo: r.FullName, Pull: n, SHA: st.MergeSHA, Issue: claim.Issue, Token: claim.Token}, nil
	case st.Closed:
		return contract.Merged{}, refused("the pull request is closed")
	case st.Draft:
		return contract.Merged{}, refused("the pull request is a draft (work in progress), which Gitea does not merge")
	}

	t := models.MergeTicket{RepoID: r.ID, Base: st.Base, Pull: n, Claim: claim.Key, Token: claim.Token, Holder: claim.Holder, ID: mergeID()}
	k := mergeKey{repoID: r.ID, base: st.Base}
	var busy *models.MergeBusyError
	place := 0 // merges of this sidecar before this one, when last told
	tell := func(ahead int) {
		place = ahead
		if told != nil {
			told(ahead)
		}
	}
	wait := m.Wait
	if wait <= 0 {
		wait = contract.DefaultMergeWait
	}
	held, err := waitTurns(ctx, s.after, s.mergeWaits, k, fmt.Sprintf("merge into %s:%s", r.FullName, st.Base), wait, s.mergeRecheck, tell,
		waitTurn[models.MergeTicket]{
			try: func() (models.MergeTicket, error) { return s.ledger.TakeMergeTicket(ctx, t, s.mergeBound) },
			again: func(err error) bool {
				return errors.As(err, &busy)
			},
			over: func() error {
				// Those before this one, and the merge under way.
				return &ConflictError{Reply: contract.MergeBusy{Status: contract.StatusBusy, Repo: r.FullName, Pull: n, Ahead: place + 1}}
			},
		})
	if err != nil {
		return contract.Merged{}, s.mergeConflict(r, n, claim, err)
	}
	// The turn ends with Gitea's answer to the merge, whatever the
	// caller's context did: what follows (reading what was merged,
	// ending the claims) is the sidecar's alone, and the next merge into
	// the base need not wait for it.
	endTurn := sync.OnceFunc(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := s.ledger.DropMergeTicket(ctx, r.ID, st.Base, t.ID); err != nil {
			slog.Warn("merge: dropping the merge ticket failed; it ends with its bound", "repo", r.FullName, "pull", n, "err", err)
		}
		s.mergeWaits.wakeHead(k)
	})
	defer endTurn()
	fresh := s.now().Sub(read) < mergeFresh
	// The merge must be done while the ticket lasts: the gate admits it
	// no longer.
	within, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	over, stop := s.after(held.ExpiresAt.Sub(s.now())) // on the ledger's clock
	defer stop()
	go func() {
		select {
		case <-over:
			cancel(errTicketOver)
		case <-within.Done():
		}
	}()
	done, look, err := s.mergeHolding(within, merger, r, owner, name, claim, st, fresh, m)
	endTurn()
	if err != nil {
		if ctx.Err() == nil && errors.Is(context.Cause(within), errTicketOver) {
			return contract.Merged{}, refused(fmt.Sprintf("Gitea did not merge the pull request while its merge ticket lasted (until %s)", held.ExpiresAt.Format(time.RFC3339)))
		}
		return contract.Merged{}, err
	}
	if look {
		// Gitea answered the merge: read what it merged.
		if done, err = merger.PullForMerge(ctx, claim.Holder.Login, owner, name, n); err != nil {
			return contract.Merged{}, err
		}
		if !done.Merged {
			return contract.Merged{}, fmt.Errorf("merge %s!%d: %w: Gitea answered the merge but says the pull request is not merged", r.FullName, n, forge.ErrUnavailable)
		}
	}
	s.endMerged(ctx, r, done, links, claim.Holder)
	return contract.Merged{Status: contract.StatusMerged, Repo: r.FullName, Pull: n, SHA: done.MergeSHA, Issue: claim.Issue, Token: claim.Token}, nil
}

// mergeHolding is the merge once its turn is held: wait while the forge
// tests the pull request, refuse a conflict at once, ask the forge to
// merge, and try once more when the base moved meanwhile. It returns the
// merged pull request, or look: the forge answered that it merged it,
// and what it merged is to be read (once the turn is over). fresh says
// st was read right before the turn; if not, it is read again first.
func (s *Service) mergeHolding(ctx context.Context, merger Merger, r forge.Repo, owner, name string, claim models.Lease, st forge.PullState, fresh bool, m MergeRequest) (done forge.PullState, look bool, err error) {
	n := m.Pull
	refused := func(why string) error {
		return &ConflictError{Reply: contract.MergeRefused{Status: contract.StatusRefused, Repo: r.FullName, Pull: n, Reason: why}}
	}
	login := claim.Holder.Login
	pause := 50 * time.Millisecond
	waitAWhile := func() error {
		c, stop := s.after(pause)
		defer stop()
		pause = min(2*pause, mergePoll)
		select {
		case <-c:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var untestedSince time.Time
	baseMoved := 0
	for first := true; ; first = false {
		if !first || !fresh {
			var err error
			if st, err = merger.PullForMerge(ctx, login, owner, name, n); err != nil {
				return forge.PullState{}, false, err
			}
		}
		switch {
		case st.Merged:
			return st, false, nil
		case st.Closed:
			return forge.PullState{}, false, refused("the pull request is closed")
		case st.Draft:
			return forge.PullState{}, false, refused("the pull request is a draft (work in progress), which Gitea does not merge")
		}
		if !st.Mergeable {
			tested := false
			if s.conflictTest != nil {
				conflict, files, err := s.conflictTest(ctx, owner, name, st.BaseSHA, st.HeadSHA)
				switch {
				case err != nil:
					slog.Warn("merge: the conflict test failed; waiting for Gitea's, as without one", "repo", r.FullName, "pull", n, "err", err)
				case conflict:
					why := "the pull request conflicts with " + st.Base
					if len(files) > 0 {
						why += " in " + strings.Join(files[:min(len(files), 5)], ", ")
						if len(files) > 5 {
							why += fmt.Sprintf(" and %d more files", len(files)-5)
						}
					}
					return forge.PullState{}, false, refused(why + ": merge " + st.Base + " into it and push")
				default:
					tested = true
				}
			}
			if !tested {
				if untestedSince.IsZero() {
					untestedSince = s.now()
				} else if s.now().Sub(untestedSince) >= MergeUntested {
					return forge.PullState{}, false, refused(fmt.Sprintf("Gitea has not found the pull request mergeable in %s: a conflict, or its test has not finished", MergeUntested))
				}
			}
			// Gitea tests it (asking for it again also queues a test its
			// queue lost): look again in a while.
			if err := waitAWhile(); err != nil {
				return forge.PullState{}, false, err
			}
			continue
		}
		err := merger.MergePull(ctx, login, owner, name, n, forge.MergeOptions{Style: m.Style, DeleteBranch: m.DeleteBranch})
		var no *forge.MergeRefusedError
		switch {
		case err == nil:
			return st, true, nil
		case errors.Is(err, forge.ErrMergeNotYet):
			if err := waitAWhile(); err != nil {
				return forge.PullState{}, false, err
			}
		case errors.Is(err, forge.ErrBaseMoved):
			if baseMoved++; baseMoved > 1 {
				return forge.PullState{}, false, refused("the base branch " + st.Base + " moved during the merge, twice")
			}
		case errors.As(err, &no) && no.Failed:
			// Gitea may have merged before it failed: look.
			after, err2 := merger.PullForMerge(ctx, login, owner, name, n)
			if err2 == nil && after.Merged {
				return after, false, nil
			}
			return forge.PullState{}, false, refused(no.Reason)
		case errors.As(err, &no):
			return forge.PullState{}, false, refused(no.Reason)
		default:
			// No answer: the merge may have happened all the same.
			if after, err2 := merger.PullForMerge(ctx, login, owner, name, n); err2 == nil && after.Merged {
				return after, false, nil
			}
			return forge.PullState{}, false, err
		}
	}
}

// notePull records what the forge says of the pull request (the issues
// it closes, its head branch), so that the claims fencing it are known
// to the ledger, and the gate, even before its webhook's delivery; it
// returns the numbers it is linked to, itself included.
func (s *Service) notePull(ctx context.Context, r forge.Repo, st forge.PullState) ([]int64, error) {
	links := append(closingRefs(r.FullName, st.Title+"\n"+st.Body), st.Number)
	branch := ""
	if st.HeadRepoID == r.ID {
		branch = st.Head
	}
	p := models.Pull{RepoID: r.ID, Number: st.Number, Head: st.HeadSHA, Branch: branch,
		Author: models.Holder{ID: st.Author.ID, Login: st.Author.Login}, Open: !st.Closed, Version: st.Updated.Unix(), Links: links}
	if _, err := s.ledger.RecordPull(ctx, p, ""); err != nil {
		return nil, err
	}
	slices.Sort(links)
	return slices.Compact(links), nil
}

// mergeClaim is the claim v merges pull request n under: its own claim
// if v holds it, else a claim v holds of an issue it closes; otherwise
// not_holder, naming the pull request's holder if it has one.
func (s *Service) mergeClaim(ctx context.Context, r forge.Repo, v Viewer, n int64, links []int64) (models.Lease, error) {
	ls, err := s.ledger.Leases(ctx, r.ID, links)
	if err != nil {
		return models.Lease{}, err
	}
	h := v.holder()
	mine := func(l models.Lease) bool { return l.Holder.ID == h.ID && l.Holder.Agent == h.Agent }
	slices.SortFunc(ls, func(a, b models.Lease) int {
		// the pull request's own claim first
		switch {
		case a.Issue == n:
			return -1
		case b.Issue == n:
			return 1
		}
		return int(a.Issue - b.Issue)
	})
	for _, l := range ls {
		if mine(l) {
			return l, nil
		}
	}
	c := contract.Conflict{Status: contract.StatusNotHolder, Repo: r.FullName, Issue: n}
	if len(ls) > 0 {
		c.Holder, c.Agent, c.ExpiresAt = &ls[0].Holder.Login, contract.AgentPtr(ls[0].Holder.Agent), contract.TimePtr(ls[0].ExpiresAt)
		c.Issue = ls[0].Issue
	}
	return models.Lease{}, &ConflictError{Reply: c}
}

// mergedUnder finds, for a merged pull request, the token of v's tenure
// that its merge ended (of the pull request, or of an issue it closes),
// if v had one: the last tenure of one of links, v's, ended merged or
// closed.
func (s *Service) mergedUnder(ctx context.Context, r forge.Repo, v Viewer, links []int64) (issue, token int64, ok bool) {
	h := v.holder()
	for _, n := range links {
		ts, err := s.ledger.Tenures(ctx, models.Key{RepoID: r.ID, Issue: n}, 1)
		if err != nil || len(ts) == 0 {
			continue
		}
		t := ts[0]
		if t.Holder.ID == h.ID && t.Holder.Agent == h.Agent && (t.EndedBy == models.EndMerged || t.EndedBy == models.EndClosed) {
			return n, t.Token, true
		}
	}
	return 0, 0, false
}

// mergeConflict renders the ledger's refusal of a merge ticket: the claim
// ended or moved on since mergeClaim read it.
func (s *Service) mergeConflict(r forge.Repo, n int64, claim models.Lease, err error) error {
	var stale *models.StaleTokenError
	if errors.As(err, &stale) {
		cur := stale.Token
		return &ConflictError{Reply: contract.Stale{Status: contract.StatusStale, Repo: r.FullName, Issue: claim.Issue, Token: &cur}}
	}
	return conflict(r, claim.Issue, Viewer{}, err)
}

// endMerged ends the claims the merge of st ended, as the forge's webhook
// would: the pull request's own (merged), and those of the issues it
// closes that the forge says are closed now. A failure is logged: the
// webhook, or the reconcile, ends them later.
//
// The merging holder's agent sessions of this sidecar that keep one of
// those claims take its end as their own doing, as a release: not as a
// lost claim (git collab run does not stop the work that merged).
func (s *Service) endMerged(ctx context.Context, r forge.Repo, st forge.PullState, links []int64, by models.Holder) {
	at := st.MergedAt
	if at.IsZero() {
		at = s.now()
	}
	for _, n := range links {
		k := models.Key{RepoID: r.ID, Issue: n}
		for _, ss := range s.sessions.holding(k) {
			if w := ss.Viewer(); w.ID == by.ID && w.Agent == by.Agent {
				done := ss.leaving(k)
				defer done(true)
			}
		}
	}
	if _, err := s.Apply(ctx, forge.Event{Kind: forge.EventMerged, RepoID: r.ID, Number: st.Number, Updated: at}); err != nil {
		slog.Warn("merge: ending the pull request's claim failed; its webhook will", "repo", r.FullName, "pull", st.Number, "err", err)
	}
	others := slices.DeleteFunc(slices.Clone(links), func(i int64) bool { return i == st.Number })
	if len(others) == 0 {
		return
	}
	owner, name, _ := strings.Cut(r.FullName, "/")
	closed, _, _, err := s.forge.ClosedSince(ctx, owner, name, at.Add(-time.Second))
	if err != nil {
		slog.Warn("merge: asking which issues the merge closed failed; their webhooks will end their claims", "repo", r.FullName, "pull", st.Number, "err", err)
		return
	}
	for _, is := range closed {
		if !slices.Contains(others, is.Number) {
			continue
		}
		if _, err := s.Apply(ctx, forge.Event{Kind: forge.EventClosed, RepoID: r.ID, Number: is.Number, Updated: is.Updated}); err != nil {
			slog.Warn("merge: ending a closed issue's claim failed; its webhook will", "repo", r.FullName, "issue", is.Number, "err", err)
		}
	}
}

// errTicketOver ends a merge whose ticket ran out.
var errTicketOver = errors.New("the merge ticket ran out")

// mergeID names one merge (its ticket's ID).
func mergeID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
