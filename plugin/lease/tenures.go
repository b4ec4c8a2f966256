package lease

import (
	"context"
	"fmt"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
)

// The verbs about tenures rather than the live lease alone: check (is
// this token still the live one?), history (who held the issue, and how
// did each tenure end?) and release --force.

// Check answers whether token is the fencing token of the live tenure on
// issue n of owner/name: contract.Tenure with StatusCurrent if it is,
// with the claim's reservations; otherwise a *ConflictError with
// contract.Stale naming the live token (or none). It needs read access to the unit of n.
func (s *Service) Check(ctx context.Context, v Viewer, owner, name string, n, token int64) (contract.Tenure, error) {
	r, err := s.repo(ctx, v, owner, name)
	if err != nil {
		return contract.Tenure{}, err
	}
	k := models.Key{RepoID: r.ID, Issue: n}
	cur, err := s.ledger.Current(ctx, k)
	if err != nil {
		return contract.Tenure{}, fmt.Errorf("lease of %s#%d: %w", r.FullName, n, err)
	}
	if err := s.readable(ctx, v, r, k, cur); err != nil {
		return contract.Tenure{}, err
	}
	if cur != nil && cur.Token == token {
		t := tenure(contract.StatusCurrent, r, *cur)
		rs, err := s.claimReservations(ctx, r, *cur)
		if err != nil {
			return contract.Tenure{}, err
		}
		t.Reservations = &rs
		return t, nil
	}
	stale := contract.Stale{Status: contract.StatusStale, Repo: r.FullName, Issue: n}
	if cur != nil {
		stale.Token = &cur.Token
	}
	return contract.Tenure{}, &ConflictError{Reply: stale}
}

// History returns the last limit tenures of issue n of owner/name, newest
// first. It needs read access to the unit of n.
func (s *Service) History(ctx context.Context, v Viewer, owner, name string, n int64, limit int) (contract.History, error) {
	r, err := s.repo(ctx, v, owner, name)
	if err != nil {
		return contract.History{}, err
	}
	k := models.Key{RepoID: r.ID, Issue: n}
	if err := s.readable(ctx, v, r, k, nil); err != nil {
		return contract.History{}, err
	}
	ts, err := s.ledger.Tenures(ctx, k, limit)
	if err != nil {
		return contract.History{}, fmt.Errorf("history of %s#%d: %w", r.FullName, n, err)
	}
	out := contract.History{Repo: r.FullName, Issue: n, Tenures: make([]contract.TenureView, len(ts))}
	for i, t := range ts {
		tv := contract.TenureView{Token: t.Token, Holder: t.Holder.Login, Agent: contract.AgentPtr(t.Holder.Agent),
			AcquiredAt: contract.Time(t.AcquiredAt), EndedAt: contract.TimePtr(t.EndedAt), ForcedBy: t.ForcedBy}
		if by := t.EndedByHolder; by != nil {
			tv.EndedByLogin, tv.EndedByAgent = &by.Login, contract.AgentPtr(by.Agent)
		}
		if t.EndedBy != "" {
			by := string(t.EndedBy)
			tv.EndedBy = &by
		}
		out.Tenures[i] = tv
	}
	return out, nil
}

// ForceRelease frees the lease on issue n of owner/name whoever holds it;
// only a repository admin may. The history names v as who forced it.
func (s *Service) ForceRelease(ctx context.Context, v Viewer, owner, name string, n int64) (contract.Released, error) {
	if v.Anonymous() {
		return contract.Released{}, fmt.Errorf("%w: no account", ErrInvalid)
	}
	r, err := s.repo(ctx, v, owner, name)
	if err != nil {
		return contract.Released{}, err
	}
	if err := mayForce(r); err != nil {
		return contract.Released{}, err
	}
	_, err = s.ledger.ForceRelease(ctx, models.Key{RepoID: r.ID, Issue: n}, v.holder())
	if err != nil {
		return contract.Released{}, err
	}
	return contract.Released{Status: contract.StatusReleased, Repo: r.FullName, Issue: n}, nil
}

// readable is the access check of reading one issue's tenures: the viewer
// may read the unit of n, whose kind the ledger may know (from cur, the
// live lease, or from what it recorded of the issue).
func (s *Service) readable(ctx context.Context, v Viewer, r forge.Repo, k models.Key, cur *models.Lease) error {
	kind := models.KindUnknown
	switch {
	case readsAll(r):
	case cur != nil:
		kind = cur.Kind
	default:
		st, err := s.ledger.Issue(ctx, k)
		if err != nil {
			return err
		}
		if st != nil {
			kind = st.Kind
		}
	}
	ok, err := s.visible(ctx, v, r, k.Issue, kind)
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("%s#%d: %w", r.FullName, k.Issue, ErrIssueNotFound)
	}
	return nil
}
