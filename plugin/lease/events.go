package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// What the forge tells the sidecar (its webhooks), and what the sidecar
// asks the forge when a delivery may have been missed (the reconcile).
// Either way the effect is one ledger transaction (models' EndIssue,
// ReopenIssue, EndRepo), ordered against acquires by the ledger itself.

// Applied is what an event did: the live leases it ended, and whether it
// was a repeated delivery.
type Applied = models.Ended

// Apply records e in the ledger, ending live leases as it says (the
// change bus tells whoever waits or watches), and drops what next had
// cached about the repository.
func (s *Service) Apply(ctx context.Context, e forge.Event) (Applied, error) {
	// What the delivery says of a pull request is recorded first: the
	// fenced-merge worker then never reads a closed pull request as open
	// with its leases already ended (and posts a status on it), and a
	// redelivery after a failure here is not taken for a repeat.
	if e.Pull != nil {
		if err := s.recordPull(ctx, e); err != nil {
			return Applied{}, err
		}
	}
	a, err := s.apply(ctx, e)
	if e.Kind != forge.EventPullChanged { // a push or an edit changes no dependency
		s.next.forget(e.RepoID, e.Kind == forge.EventClosed || e.Kind == forge.EventMerged || e.Kind == forge.EventDeleted)
	}
	return a, err
}

// recordPull keeps what a delivery says of a pull request: its head, its
// author and the issues it would close, for its fenced-merge status, and
// its head branch, for the push fence.
func (s *Service) recordPull(ctx context.Context, e forge.Event) error {
	pe := e.Pull
	links := append(closingRefs(pe.Repo, pe.Title+"\n"+pe.Body), e.Number)
	open := pe.Open && e.Kind != forge.EventClosed && e.Kind != forge.EventMerged && e.Kind != forge.EventDeleted
	p := models.Pull{RepoID: e.RepoID, Number: e.Number, Head: pe.Head, Branch: pe.Branch, Author: models.Holder{ID: pe.Author.ID, Login: pe.Author.Login},
		Open: open, Version: e.Updated.Unix(), Links: links}
	_, err := s.ledger.RecordPull(ctx, p, "")
	return err
}

func (s *Service) apply(ctx context.Context, e forge.Event) (Applied, error) {
	k := models.Key{RepoID: e.RepoID, Issue: e.Number}
	version := max(e.Updated.Unix(), 1)
	switch e.Kind {
	case forge.EventClosed:
		return s.ledger.EndIssue(ctx, k, models.ReasonClosed, version, e.Delivery)
	case forge.EventMerged:
		return s.ledger.EndIssue(ctx, k, models.ReasonMerged, version, e.Delivery)
	case forge.EventDeleted:
		return s.ledger.EndIssue(ctx, k, models.ReasonDeleted, version, e.Delivery)
	case forge.EventReopened:
		return s.ledger.ReopenIssue(ctx, k, version, e.Delivery)
	case forge.EventRepoDeleted:
		return s.ledger.EndRepo(ctx, e.RepoID, e.Delivery)
	case forge.EventPullChanged:
		return Applied{}, nil // only what it says of the pull request matters (recordPull)
	case forge.EventLabels:
		return Applied{}, s.labelsChanged(ctx, e) // quarantine.go
	}
	return Applied{}, fmt.Errorf("apply forge event %q: %w", e.Kind, ErrInvalid)
}

// Reconcile repairs missed deliveries: for every repository with live
// leases it asks the forge which issues were closed since the earlier of
// since and the repository's oldest live lease, and records them (ending
// their leases); a repository the forge no longer has ends all its leases.
// It returns the leases it ended. One repository's failure does not stop
// the others; the first error is returned. It also removes the path
// reservations that are no longer live.
//
// Replicas on one database take turns (models.Store.Exclusive): while
// another runs it, Reconcile does nothing and returns ErrReconciling.
func (s *Service) Reconcile(ctx context.Context, since time.Time) (int, error) {
	c, ok := s.ledger.chores()
	if !ok {
		return s.reconcile(ctx, since)
	}
	ended := 0
	ran, err := c.Exclusive(ctx, models.ChoreReconcile, func(ctx context.Context) error {
		var err error
		ended, err = s.reconcile(ctx, since)
		return err
	})
	if err == nil && !ran {
		err = ErrReconciling
	}
	return ended, err
}

func (s *Service) reconcile(ctx context.Context, since time.Time) (int, error) {
	repos, err := s.ledger.LiveRepos(ctx)
	if err != nil {
		return 0, err
	}
	ended := 0
	// Reservations whose anchor ended are dead for good: they go here,
	// where nothing waits on the answer.
	_, first := s.ledger.PruneReservations(ctx)
	for _, id := range repos {
		n, err := s.reconcileRepo(ctx, id, since)
		ended += n
		if err != nil && first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return ended, first
}

func (s *Service) reconcileRepo(ctx context.Context, id int64, since time.Time) (int, error) {
	full, err := s.forge.RepoName(ctx, id)
	if errors.Is(err, forge.ErrNotFound) {
		a, err := s.ledger.EndRepo(ctx, id, "")
		return len(a.Leases), err
	}
	if err != nil {
		return 0, fmt.Errorf("reconcile repository %d: %w", id, err)
	}
	leases, err := s.ledger.List(ctx, id)
	if err != nil {
		return 0, err
	}
	// Nothing acquired after a close can be live (acquire checks), so
	// the oldest live lease bounds how far back a missed close matters.
	for _, l := range leases {
		if since.IsZero() || l.AcquiredAt.Before(since) {
			since = l.AcquiredAt
		}
	}
	live := make(map[int64]bool, len(leases))
	for _, l := range leases {
		live[l.Issue] = true
	}
	owner, name, _ := strings.Cut(full, "/")
	// A list cut short (more closed than one call reads) still ends what
	// it names; a close beyond it waits for its webhook, or for a sweep
	// that finds fewer.
	closed, _, _, err := s.forge.ClosedSince(ctx, owner, name, since)
	if err != nil {
		return 0, fmt.Errorf("reconcile %s: %w", full, err)
	}
	ended := 0
	for _, is := range closed {
		if !live[is.Number] {
			continue
		}
		kind := forge.EventClosed
		if is.Merged {
			kind = forge.EventMerged
		}
		a, err := s.Apply(ctx, forge.Event{Kind: kind, RepoID: id, Number: is.Number, Updated: is.Updated})
		if err != nil {
			return ended, err
		}
		ended += len(a.Leases)
	}
	return ended, nil
}
