package lease

import (
	"context"
	"errors"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// Handoff hands v's live claim on issue n of owner/name to toLogin (as
// its agent toAgent, "" the account itself) in one ledger transaction:
// the tenure ends handed_off and the target's begins with the next
// token, keeping the old expiry (at least ten minutes ahead). v must hold
// it through its account (any of its agents), or administer the
// repository; the target must be an account that may claim the issue
// there, as any acquirer, within its claim caps.
func (s *Service) Handoff(ctx context.Context, v Viewer, owner, name string, n int64, toLogin, toAgent string) (contract.HandedOff, error) {
	r, err := s.changeable(ctx, v, owner, name, n)
	if err != nil {
		return contract.HandedOff{}, err
	}
	k := models.Key{RepoID: r.ID, Issue: n}
	cur, err := s.ledger.Current(ctx, k)
	if err != nil {
		return contract.HandedOff{}, err
	}
	// An admin may hand on anyone's claim; whose it is the ledger
	// decides, in the handoff's own transaction (anyone else gets
	// not_holder, as for a release).
	force := mayForce(r) == nil
	to, err := s.handoffTarget(ctx, r, owner, name, n, toLogin, cur)
	if err != nil {
		return contract.HandedOff{}, err
	}
	to.Agent = toAgent
	l, from, err := s.ledger.Handoff(ctx, k, v.holder(), to, force)
	if err != nil {
		if errors.Is(err, models.ErrAlreadyHolder) {
			holder := to.Login
			if toAgent != "" {
				holder += "/" + toAgent
			}
			return contract.HandedOff{}, &TargetHoldsError{Holder: holder, Repo: r.FullName, Issue: n}
		}
		var limit *models.LimitError
		if errors.As(err, &limit) {
			return contract.HandedOff{}, limitConflict(r, &n, Viewer{User: forge.User{ID: to.ID, Login: to.Login}, Agent: toAgent}, limit)
		}
		return contract.HandedOff{}, conflict(r, n, v, err)
	}
	return contract.HandedOff{Status: contract.StatusHandedOff, Repo: r.FullName, Issue: n, Holder: l.Holder.Login,
		Agent: contract.AgentPtr(l.Holder.Agent), Token: l.Token, ExpiresAt: contract.TimePtr(l.ExpiresAt),
		From: contract.From{Holder: from.Holder.Login, Agent: contract.AgentPtr(from.Holder.Agent), Token: from.Token}}, nil
}

// handoffTarget is the account toLogin names, if it may claim issue n
// (of the kind the ledger knows from cur, else as the forge says) in r:
// write access to its unit, as an acquirer needs.
func (s *Service) handoffTarget(ctx context.Context, r forge.Repo, owner, name string, n int64, toLogin string, cur *models.Lease) (models.Holder, error) {
	refused := &TargetMayNotClaimError{Login: toLogin, Repo: r.FullName}
	u, err := s.forge.UserByLogin(ctx, toLogin)
	switch {
	case errors.Is(err, forge.ErrNotFound):
		return models.Holder{}, refused
	case err != nil:
		return models.Holder{}, err
	}
	tr, err := s.forge.Repo(ctx, u.Login, owner, name)
	switch {
	case errors.Is(err, forge.ErrNotFound):
		return models.Holder{}, refused
	case err != nil:
		return models.Holder{}, err
	}
	kind := models.KindUnknown
	if cur != nil {
		kind = cur.Kind
	}
	if kind == models.KindUnknown {
		is, err := s.forge.Issue(ctx, u.Login, owner, name, n)
		if err != nil {
			if errors.Is(err, forge.ErrNotFound) {
				return models.Holder{}, refused
			}
			return models.Holder{}, err
		}
		kind = kindOf(is)
	}
	if !mayWrite(tr, kind) {
		return models.Holder{}, refused
	}
	return models.Holder{ID: u.ID, Login: u.Login}, nil
}
