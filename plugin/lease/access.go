package lease

import (
	"context"
	"errors"
	"fmt"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// Who may do what. Every permission decision of the sidecar is made in
// this file, from what the forge says about the viewer:
//
//   - list, and reading one issue's lease: read access to the repository;
//     a lease is shown only on a number of a unit (issues, pull requests)
//     the viewer may read;
//   - acquire: write access to the unit of the number (issues, or pull
//     requests), which must exist and be open;
//   - next: write access to the unit it claims from;
//   - check, history: read access to the unit of the number;
//   - release --force: admin access to the repository;
//   - handoff: the holder's account, or admin access (mayForce); the
//     target must be an account that may claim the number: write access
//     to its unit (mayWrite);
//   - watch (the live events): read access to the repository, asked again
//     while the stream lasts; an event about a number only to who may
//     read its unit, a reservation's to every reader but with its claim's
//     number only to who reads both units (mayWatch);
//   - renew, release: write access to the repository's issues or pull
//     requests, and read access to the unit of the number, whose lease
//     they would otherwise reveal;
//   - a repository that does not exist and one the viewer may not read are
//     the same ErrRepoNotFound; a number of a unit the viewer may not read
//     and a number that does not exist are the same ErrIssueNotFound.

// repo returns the repository owner/name as v sees it, or ErrRepoNotFound.
// A viewer who came with an API token sees it through the token's scopes.
func (s *Service) repo(ctx context.Context, v Viewer, owner, name string) (forge.Repo, error) {
	var (
		r   forge.Repo
		err error
	)
	if v.Token != "" {
		r, err = s.forge.TokenRepo(ctx, v.User, v.Token, owner, name)
	} else {
		r, err = s.forge.Repo(ctx, v.Login, owner, name)
	}
	switch {
	case errors.Is(err, forge.ErrNotFound):
		return forge.Repo{}, fmt.Errorf("%s/%s: %w", owner, name, ErrRepoNotFound)
	case err != nil:
		return forge.Repo{}, err
	case !r.CanRead:
		return forge.Repo{}, fmt.Errorf("%s/%s: %w", owner, name, ErrRepoNotFound)
	}
	return r, nil
}

// unanswered says whether err is the forge's not answering (down, slow
// past its deadline, or this address's budget spent), not a refusal or
// the ledger's failing: what was last known may stand.
func unanswered(err error) bool {
	return errors.Is(err, forge.ErrUnavailable) || errors.Is(err, forge.ErrRateLimited) || errors.Is(err, context.DeadlineExceeded)
}

// mayAcquire decides whether the viewer of r may claim is.
func mayAcquire(r forge.Repo, is forge.Issue) error {
	switch {
	case !mayRead(r, kindOf(is)):
		return fmt.Errorf("%s#%d: %w", r.FullName, is.Number, ErrIssueNotFound)
	case !mayWrite(r, kindOf(is)) && is.IsPull:
		return &WriteRequiredError{Repo: r.FullName, Unit: "pulls"}
	case !mayWrite(r, kindOf(is)):
		return &WriteRequiredError{Repo: r.FullName, Unit: "issues"}
	case is.Closed:
		return fmt.Errorf("%s#%d: %w", r.FullName, is.Number, ErrIssueClosed)
	}
	return nil
}

// mayChange decides whether the viewer of r may renew or release its own
// lease at all. Which unit the number is of is checked by visible.
func mayChange(r forge.Repo) error {
	if !r.CanWriteIssues && !r.CanWritePulls {
		return &WriteRequiredError{Repo: r.FullName, Unit: "issues"}
	}
	return nil
}

// mayNext decides whether the viewer of r may claim from the unit f
// names, and returns that unit's kind.
func mayNext(r forge.Repo, f forge.IssueFilter) (models.Kind, error) {
	switch {
	case f.Pulls && !r.CanWritePulls:
		return 0, &WriteRequiredError{Repo: r.FullName, Unit: "pulls"}
	case f.Pulls:
		return models.KindPull, nil
	case !r.CanWriteIssues:
		return 0, &WriteRequiredError{Repo: r.FullName, Unit: "issues"}
	}
	return models.KindIssue, nil
}

// mayForce decides whether the viewer of r may release another's lease.
func mayForce(r forge.Repo) error {
	if !r.Admin {
		return &WriteRequiredError{Repo: r.FullName, Admin: true}
	}
	return nil
}

// mayWrite says whether the viewer of r may claim numbers of this kind:
// write access to their unit (nobody, for KindUnknown). An acquirer needs
// it (mayAcquire), and so does a handoff's target.
func mayWrite(r forge.Repo, k models.Kind) bool {
	switch k {
	case models.KindIssue:
		return r.CanWriteIssues
	case models.KindPull:
		return r.CanWritePulls
	}
	return false
}

// mayRead says whether the viewer of r may read numbers of this kind.
// KindUnknown is readable only by who may read both units.
func mayRead(r forge.Repo, k models.Kind) bool {
	switch k {
	case models.KindIssue:
		return r.CanReadIssues
	case models.KindPull:
		return r.CanReadPulls
	}
	return r.CanReadIssues && r.CanReadPulls
}

// What a stream's viewer is told of one event (mayWatch).
type watchVerdict int

const (
	watchHide       watchVerdict = iota
	watchShow                    // the event as it is
	watchReset                   // a reset instead: refetch the list, which asks the forge
	watchUnnumbered              // the event without its claim's number (live.Event.WithoutNumber)
)

// mayWatch decides what the viewer of r is told of a live event of type
// typ about a number of kind k. A lease written before the ledger kept
// kinds is shown as is only to who reads both units; to a viewer of one
// unit it becomes a reset, whose refetch of the list asks the forge about
// that number as the viewer (visibleLeases) rather than on every event.
// A reservation's event is shown to every viewer, its claim's number
// only to who reads both units (as the reservations' list shows it: the
// ledger does not keep the unit of a claim's number there).
func mayWatch(r forge.Repo, typ string, k models.Kind) watchVerdict {
	switch {
	case typ == contract.EventReserved || typ == contract.EventUnreserved:
		if readsAll(r) {
			return watchShow
		}
		return watchUnnumbered
	case typ != contract.EventLease && typ != contract.EventReleased:
		return watchShow // the stream's position, or a reset: about no number
	case mayRead(r, k):
		return watchShow
	case k == models.KindUnknown && (r.CanReadIssues || r.CanReadPulls):
		return watchReset
	}
	return watchHide
}

// readsAll says whether the viewer of r may read every number, so that
// nothing needs to be asked about any one of them.
func readsAll(r forge.Repo) bool { return r.CanReadIssues && r.CanReadPulls }

// visible tells whether the viewer of r may see number n, whose kind the
// ledger may know (known) or not. A viewer who reads both units sees
// every number at no cost; otherwise an unknown kind is asked of the
// forge, as the viewer, and a number the forge does not know is not
// visible.
func (s *Service) visible(ctx context.Context, v Viewer, r forge.Repo, n int64, known models.Kind) (bool, error) {
	if readsAll(r) {
		return true, nil
	}
	if known != models.KindUnknown {
		return mayRead(r, known), nil
	}
	seen, err := s.visibleNumbers(ctx, v, r, []int64{n})
	return seen[n], err
}

func kindOf(is forge.Issue) models.Kind {
	if is.IsPull {
		return models.KindPull
	}
	return models.KindIssue
}
