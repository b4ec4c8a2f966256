package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/live"
)

// The path reservations: reserve, unreserve and reservations (the
// ledger's models/reservations.go decides; this checks who may ask and
// renders the contract's replies).

// ReserveRequest is one reserve: the globs (each as contract.CheckGlob
// accepts it, at most contract.MaxReserveGlobs), exclusive unless
// Shared, anchored to the caller's claim of Issue if it is not 0, else
// for TTL if it is not 0, else to the caller's session.
type ReserveRequest struct {
	Globs  []string
	Shared bool
	Issue  int64
	TTL    time.Duration
}

// Reserve reserves r.Globs for v in owner/name, all or none: the reply
// lists the caller's reservations of them; others' reservations in the
// way are a *ConflictError with contract.ReserveConflict, an Issue that
// is not v's live claim one with contract.Conflict (not_holder), the
// reservation cap one with contract.Limit. It needs write access, as
// acquire does.
func (s *Service) Reserve(ctx context.Context, v Viewer, owner, name string, req ReserveRequest) (contract.Reservations, error) {
	// With --issue, the caller must also see that number's unit, as for
	// renew and release: not_holder names the claim's holder.
	r, err := s.reserveRepo(ctx, v, owner, name)
	if err == nil && req.Issue > 0 {
		r, err = s.changeable(ctx, v, owner, name, req.Issue)
	}
	if err != nil {
		return contract.Reservations{}, err
	}
	if err := checkGlobs(req.Globs, 1); err != nil {
		return contract.Reservations{}, err
	}
	switch {
	case req.Issue < 0:
		return contract.Reservations{}, fmt.Errorf("%w: issue %d", ErrInvalid, req.Issue)
	case req.Issue != 0 && req.TTL != 0:
		return contract.Reservations{}, fmt.Errorf("%w: a reservation of a claim lives as long as the claim, with no ttl of its own", ErrInvalid)
	case req.Issue == 0 && v.Session == nil && req.TTL == 0:
		return contract.Reservations{}, fmt.Errorf("%w: a reservation needs --issue (a claim it lives with), a session, or --ttl", ErrInvalid)
	}
	h := v.holder()
	if req.Issue != 0 || req.TTL != 0 {
		h.Session = nil // it lives with the claim, or for its ttl, not with the session
	}
	rs, err := s.ledger.Reserve(ctx, models.Reserve{RepoID: r.ID, Holder: h, Globs: req.Globs, Shared: req.Shared, Issue: req.Issue, TTL: req.TTL})
	if err != nil {
		var reserved *models.ReservedError
		var limit *models.LimitError
		switch {
		case errors.As(err, &reserved):
			return contract.Reservations{}, &ConflictError{Reply: contract.ReserveConflict{Status: contract.StatusConflict, Repo: r.FullName,
				With: reservationViews(r, reserved.With)}}
		case errors.As(err, &limit):
			var issue *int64
			if req.Issue != 0 {
				issue = &req.Issue
			}
			return contract.Reservations{}, limitConflict(r, issue, v, limit)
		}
		return contract.Reservations{}, conflict(r, req.Issue, v, err)
	}
	return contract.Reservations{Status: contract.StatusReserved, Repo: r.FullName, Reservations: reservationViews(r, rs)}, nil
}

// Unreserve removes v's reservations in owner/name of globs (every one
// of v's if none is named), of its claim of issue if that is not 0; with
// force, whoever's they are, which takes a repository admin. The reply
// lists what it removed, maybe nothing.
func (s *Service) Unreserve(ctx context.Context, v Viewer, owner, name string, globs []string, issue int64, force bool) (contract.Reservations, error) {
	r, err := s.reserveRepo(ctx, v, owner, name)
	if err != nil {
		return contract.Reservations{}, err
	}
	if force {
		if err := mayForce(r); err != nil {
			return contract.Reservations{}, err
		}
	}
	if err := checkGlobs(globs, 0); err != nil {
		return contract.Reservations{}, err
	}
	if issue < 0 {
		return contract.Reservations{}, fmt.Errorf("%w: issue %d", ErrInvalid, issue)
	}
	rs, err := s.ledger.Unreserve(ctx, r.ID, v.holder(), globs, issue, force)
	if err != nil {
		return contract.Reservations{}, err
	}
	return contract.Reservations{Status: contract.StatusUnreserved, Repo: r.FullName, Reservations: reservationViews(r, rs)}, nil
}

// Reservations lists the live reservations of owner/name, oldest first;
// with path, those whose glob matches it. It needs read access; a
// viewer who may not read both issues and pull requests sees no claim's
// number (issue is null).
func (s *Service) Reservations(ctx context.Context, v Viewer, owner, name, path string) (contract.Reservations, error) {
	r, err := s.repo(ctx, v, owner, name)
	if err != nil {
		return contract.Reservations{}, err
	}
	if path != "" {
		if _, err := contract.ParsePath(path); err != nil {
			return contract.Reservations{}, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	rs, err := s.ledger.Reservations(ctx, r.ID, path)
	if err != nil {
		return contract.Reservations{}, fmt.Errorf("reservations of %s: %w", r.FullName, err)
	}
	return contract.Reservations{Status: contract.StatusReservations, Repo: r.FullName, Reservations: reservationViews(r, rs)}, nil
}

// claimReservations are the live reservations of the claim l, for
// check's reply.
func (s *Service) claimReservations(ctx context.Context, r forge.Repo, l models.Lease) ([]contract.Reservation, error) {
	rs, err := s.ledger.ClaimReservations(ctx, l.Key)
	if err != nil {
		return nil, err
	}
	return reservationViews(r, rs), nil
}

// reserveRepo is the access check of reserve and unreserve: an account
// with write access to the repository's issues or pull requests.
func (s *Service) reserveRepo(ctx context.Context, v Viewer, owner, name string) (forge.Repo, error) {
	if v.Anonymous() {
		return forge.Repo{}, fmt.Errorf("%w: no account", ErrInvalid)
	}
	r, err := s.repo(ctx, v, owner, name)
	if err != nil {
		return forge.Repo{}, err
	}
	return r, mayChange(r)
}

// checkGlobs checks globs as the grammar does, for the transports that
// do not parse a command line (HTTP, MCP): at least least of them.
func checkGlobs(globs []string, least int) error {
	if len(globs) < least || len(globs) > contract.MaxReserveGlobs {
		return fmt.Errorf("%w: %d to %d globs, got %d", ErrInvalid, least, contract.MaxReserveGlobs, len(globs))
	}
	for _, g := range globs {
		if err := contract.CheckGlob(g); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	return nil
}

func reservationViews(r forge.Repo, rs []models.Reservation) []contract.Reservation {
	out := make([]contract.Reservation, len(rs))
	for i, x := range rs {
		out[i] = reservationView(r, x)
	}
	return out
}

// reservationView is x as the replies show it; the claim's number only
// to a viewer who reads both units (a number of the other unit would
// tell of it).
func reservationView(r forge.Repo, x models.Reservation) contract.Reservation {
	v := live.ReservationView(x)
	if !readsAll(r) {
		v.Issue = nil
	}
	return v
}
