package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/live"
)

// What each verb does: ask the forge what access.go needs to decide, make
// the one ledger call, and render the contract's reply. Every method takes
// the viewer, the repository as the caller named it, and the issue number.

// Acquire claims issue n of owner/name for v (docs/ssh.md, Rules worth knowing): ttl 0 is
// open-ended. The issue must exist, be open and be of a unit v may write.
func (s *Service) Acquire(ctx context.Context, v Viewer, owner, name string, n int64, ttl time.Duration) (contract.Tenure, error) {
	return s.acquire(ctx, v, owner, name, n, ttl, false)
}

// acquire is Acquire, or with force a repository admin's acquire that
// overrides the issue's quarantine (quarantine.go).
func (s *Service) acquire(ctx context.Context, v Viewer, owner, name string, n int64, ttl time.Duration, force bool) (contract.Tenure, error) {
	if v.Anonymous() {
		return contract.Tenure{}, fmt.Errorf("acquire: %w: no account", ErrInvalid)
	}
	r, err := s.repo(ctx, v, owner, name)
	if err != nil {
		return contract.Tenure{}, err
	}
	write := s.ledger.Acquire
	if force {
		if err := mayForce(r); err != nil {
			return contract.Tenure{}, err
		}
		write = s.ledger.AcquireForced
	}
	k := models.Key{RepoID: r.ID, Issue: n}
	for remembered := true; ; remembered = false {
		is, obs, from, err := s.issue(ctx, v, r, n, remembered)
		if err != nil {
			return contract.Tenure{}, err
		}
		if err := mayAcquire(r, is.Issue); err != nil {
			return contract.Tenure{}, err
		}
		done := v.Session.writing(k)
		l, err := write(ctx, k, v.holder(), ttl, obs)
		done()
		switch {
		case errors.Is(err, models.ErrClosed) && from == fromMemory:
			// Closed since this process saw it open: decide again from
			// the ledger's record, as if nothing had been remembered.
			s.openIssues.forget(k)
			continue
		case err != nil:
			return contract.Tenure{}, conflict(r, n, v, err)
		case from == fromForge:
			// The write recorded what the forge said, no earlier than
			// the time before asking it.
			s.openIssues.put(k, obs.Kind, is.Checked, s.now(), s.issueTTL)
		}
		v.Session.track(r.FullName, l)
		return tenure(contract.StatusAcquired, r, l), nil
	}
}

// issueSource says where what acquire knows of an issue came from.
type issueSource int

const (
	fromMemory issueSource = iota // openIssues: an open issue seen lately
	fromLedger                    // the ledger's fresh record
	fromForge                     // the forge, asked just now
)

// issue is what acquire needs to know of issue n of r: whether it exists,
// is open and is a pull request. The ledger's record (kept current by the
// forge's webhooks) answers while it is fresh, with no request to the
// forge; otherwise the forge is asked, as the viewer, and what it said is
// handed to the ledger with its version (models.Observed), so that a
// close recorded meanwhile still wins.
//
// An issue this process saw open within the same bound (openIssues) needs
// no read of the record at all, when remembered allows it.
func (s *Service) issue(ctx context.Context, v Viewer, r forge.Repo, n int64, remembered bool) (checkedIssue, models.Observed, issueSource, error) {
	k := models.Key{RepoID: r.ID, Issue: n}
	now := s.now()
	if kind, ok := s.openIssues.get(k, now, s.issueTTL); ok && remembered {
		return checkedIssue{Issue: forge.Issue{Number: n, IsPull: kind == models.KindPull}}, models.Observed{Kind: kind}, fromMemory, nil
	}
	st, err := s.ledger.Issue(ctx, k)
	if err != nil {
		return checkedIssue{}, models.Observed{}, fromLedger, err
	}
	if st != nil && st.Kind != models.KindUnknown && now.Sub(st.CheckedAt) < s.issueTTL {
		if st.Deleted {
			return checkedIssue{}, models.Observed{}, fromLedger, fmt.Errorf("%s#%d: %w", r.FullName, n, ErrIssueNotFound)
		}
		if !st.Closed {
			s.openIssues.put(k, st.Kind, st.CheckedAt, now, s.issueTTL)
		}
		return checkedIssue{Issue: forge.Issue{Number: n, Closed: st.Closed, IsPull: st.Kind == models.KindPull}}, models.Observed{Kind: st.Kind}, fromLedger, nil
	}
	owner, name, _ := strings.Cut(r.FullName, "/")
	is, err := s.forge.Issue(ctx, v.Login, owner, name, n)
	switch {
	case errors.Is(err, forge.ErrNotFound):
		return checkedIssue{}, models.Observed{}, fromForge, fmt.Errorf("%s#%d: %w", r.FullName, n, ErrIssueNotFound)
	case err != nil:
		return checkedIssue{}, models.Observed{}, fromForge, err
	}
	return checkedIssue{Issue: is, Checked: now}, models.Observed{Kind: kindOf(is), Version: max(is.Updated.Unix(), 1)}, fromForge, nil
}

// checkedIssue is what acquire knows of an issue, and when the forge was
// asked (zero: it was not).
type checkedIssue struct {
	forge.Issue
	Checked time.Time
}

// Renew extends v's live lease on issue n of owner/name to now+ttl.
func (s *Service) Renew(ctx context.Context, v Viewer, owner, name string, n int64, ttl time.Duration) (contract.Tenure, error) {
	r, err := s.changeable(ctx, v, owner, name, n)
	if err != nil {
		return contract.Tenure{}, err
	}
	k := models.Key{RepoID: r.ID, Issue: n}
	done := v.Session.writing(k)
	l, err := s.ledger.Renew(ctx, k, v.holder(), ttl)
	done()
	if err != nil {
		return contract.Tenure{}, conflict(r, n, v, err)
	}
	v.Session.track(r.FullName, l)
	return tenure(contract.StatusRenewed, r, l), nil
}

// Release frees v's lease on issue n of owner/name; releasing nothing
// succeeds.
func (s *Service) Release(ctx context.Context, v Viewer, owner, name string, n int64) (contract.Released, error) {
	r, err := s.changeable(ctx, v, owner, name, n)
	if err != nil {
		return contract.Released{}, err
	}
	k := models.Key{RepoID: r.ID, Issue: n}
	done := v.Session.leaving(k)
	_, err = s.ledger.Release(ctx, k, v.holder())
	done(err == nil)
	if err != nil {
		return contract.Released{}, conflict(r, n, v, err)
	}
	return contract.Released{Status: contract.StatusReleased, Repo: r.FullName, Issue: n}, nil
}

// changeable is the access check of renew and release: v may write the
// repository's issues or pull requests, and may read the unit of n. A
// number whose kind the ledger does not know (no lease, or one written
// before kinds were kept) is asked of the forge, for a viewer limited to
// one unit only, so that nobody learns of a lease on a number they
// cannot see.
func (s *Service) changeable(ctx context.Context, v Viewer, owner, name string, n int64) (forge.Repo, error) {
	if v.Anonymous() {
		return forge.Repo{}, fmt.Errorf("%w: no account", ErrInvalid)
	}
	r, err := s.repo(ctx, v, owner, name)
	if err != nil {
		return forge.Repo{}, err
	}
	if err := mayChange(r); err != nil {
		return forge.Repo{}, err
	}
	if readsAll(r) {
		return r, nil
	}
	kind := models.KindUnknown
	cur, err := s.ledger.Current(ctx, models.Key{RepoID: r.ID, Issue: n})
	if err != nil {
		return forge.Repo{}, err
	}
	if cur != nil {
		kind = cur.Kind
	}
	ok, err := s.visible(ctx, v, r, n, kind)
	switch {
	case err != nil:
		return forge.Repo{}, err
	case !ok:
		return forge.Repo{}, fmt.Errorf("%s#%d: %w", r.FullName, n, ErrIssueNotFound)
	}
	return r, nil
}

// List returns the live leases of owner/name that v may see, oldest first.
func (s *Service) List(ctx context.Context, v Viewer, owner, name string) (contract.List, error) {
	r, err := s.repo(ctx, v, owner, name)
	if err != nil {
		return contract.List{}, err
	}
	leases, err := s.ledger.List(ctx, r.ID)
	if err != nil {
		return contract.List{}, fmt.Errorf("leases of %s: %w", r.FullName, err)
	}
	if leases, err = s.visibleLeases(ctx, v, r, leases); err != nil {
		return contract.List{}, err
	}
	out := contract.List{Repo: r.FullName, Leases: make([]contract.LeaseView, len(leases))}
	for i, l := range leases {
		out.Leases[i] = live.View(l)
	}
	return out, nil
}

// MaxListIssues bounds the numbers one ListPage may ask for.
const MaxListIssues = models.MaxPageIssues

// ListQuery selects a page of a repository's live leases (ListPage).
type ListQuery struct {
	Issues []int64 // only these numbers (at most MaxListIssues); none: all
	Offset int
	Limit  int
}

// ListPage is List a page at a time: the live leases of owner/name that v
// may see, oldest first, q's page of them, and how many there are in all.
// The ledger filters by number and by the units v may read, so the cost
// follows the page, not the repository. Leases written before the ledger
// kept kinds are checked with the forge for a viewer of one unit only,
// after paging: such a page may be short, and the total count them.
func (s *Service) ListPage(ctx context.Context, v Viewer, owner, name string, q ListQuery) (contract.List, int, error) {
	r, err := s.repo(ctx, v, owner, name)
	if err != nil {
		return contract.List{}, 0, err
	}
	out := contract.List{Repo: r.FullName, Leases: []contract.LeaseView{}}
	p := models.Page{RepoID: r.ID, Issues: q.Issues, Offset: q.Offset, Limit: q.Limit}
	if !readsAll(r) {
		p.Kinds = []models.Kind{models.KindUnknown}
		for _, k := range []models.Kind{models.KindIssue, models.KindPull} {
			if mayRead(r, k) {
				p.Kinds = append(p.Kinds, k)
			}
		}
		if len(p.Kinds) == 1 {
			return out, 0, nil // neither unit: no lease is visible
		}
	}
	leases, total, err := s.ledger.ListPage(ctx, p)
	if err != nil {
		return contract.List{}, 0, fmt.Errorf("leases of %s: %w", r.FullName, err)
	}
	if leases, err = s.visibleLeases(ctx, v, r, leases); err != nil {
		return contract.List{}, 0, err
	}
	for _, l := range leases {
		out.Leases = append(out.Leases, live.View(l))
	}
	return out, total, nil
}

// Lease returns the live lease on issue n of owner/name, if v may see it.
// Like renew and release it reads the ledger alone and does not ask
// whether the issue exists: an unknown issue has no lease.
func (s *Service) Lease(ctx context.Context, v Viewer, owner, name string, n int64) (contract.IssueLease, error) {
	r, err := s.repo(ctx, v, owner, name)
	if err != nil {
		return contract.IssueLease{}, err
	}
	l, err := s.ledger.Current(ctx, models.Key{RepoID: r.ID, Issue: n})
	if err != nil {
		return contract.IssueLease{}, fmt.Errorf("lease of %s#%d: %w", r.FullName, n, err)
	}
	if l == nil {
		return contract.IssueLease{}, nil
	}
	ok, err := s.visible(ctx, v, r, n, l.Kind)
	if err != nil || !ok {
		return contract.IssueLease{}, err
	}
	view := live.View(*l)
	return contract.IssueLease{Lease: &view}, nil
}

// conflict renders a refusal of the ledger as the contract's reply; other
// errors pass unchanged.
func conflict(r forge.Repo, n int64, v Viewer, err error) error {
	var held *models.HeldError
	var notHolder *models.NotHolderError
	var cooling *models.CoolingError
	var limit *models.LimitError
	var quarantined *models.QuarantinedError
	switch {
	case errors.Is(err, models.ErrClosed):
		return fmt.Errorf("%s#%d: %w", r.FullName, n, ErrIssueClosed)
	case errors.As(err, &quarantined):
		return &ConflictError{Reply: contract.Quarantined{Status: contract.StatusQuarantined, Repo: r.FullName, Issue: n, Since: contract.Time(quarantined.Since)}}
	case errors.As(err, &limit):
		return limitConflict(r, &n, v, limit)
	case errors.As(err, &cooling):
		return &ConflictError{Reply: contract.Cooling{Status: contract.StatusCooling, Repo: r.FullName, Issue: n, Until: contract.Time(cooling.Until)}}
	case errors.As(err, &held):
		return &ConflictError{Reply: contract.Conflict{Status: contract.StatusHeld, Repo: r.FullName, Issue: n,
			Holder: &held.Holder, Agent: contract.AgentPtr(held.Agent), ExpiresAt: contract.TimePtr(held.ExpiresAt)}}
	case errors.As(err, &notHolder):
		c := contract.Conflict{Status: contract.StatusNotHolder, Repo: r.FullName, Issue: n,
			ExpiresAt: contract.TimePtr(notHolder.ExpiresAt)}
		if notHolder.Holder != "" {
			c.Holder, c.Agent = &notHolder.Holder, contract.AgentPtr(notHolder.Agent)
		}
		return &ConflictError{Reply: c}
	}
	return err
}

// limitConflict is the reply to a claim of v past a cap (issue nil: next).
func limitConflict(r forge.Repo, issue *int64, v Viewer, limit *models.LimitError) error {
	return &ConflictError{Reply: contract.Limit{Status: contract.StatusLimit, Repo: r.FullName, Issue: issue,
		Holder: v.Login, Agent: contract.AgentPtr(v.Agent), Scope: limit.Scope, Limit: limit.Limit, Live: limit.Live}}
}

func tenure(status string, r forge.Repo, l models.Lease) contract.Tenure {
	return contract.Tenure{Status: status, Repo: r.FullName, Issue: l.Issue, Holder: l.Holder.Login, Agent: contract.AgentPtr(l.Holder.Agent), Token: l.Token,
		AcquiredAt: contract.Time(l.AcquiredAt), ExpiresAt: contract.TimePtr(l.ExpiresAt)}
}
