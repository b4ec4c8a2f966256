package lease

import (
	"context"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/changes"
)

// committed is the service's ledger: every write the service makes goes
// through it, and once the ledger has committed the write (its call has
// returned without error), what it changed is published on the bus,
// once. So no verb tells the waiters, the live feeds, the fence worker
// or the other replicas anything by hand, and no write can be forgotten:
// a write added to Ledger without a method here publishes nothing, which
// TestEveryLedgerWritePublishes catches.
type committed struct {
	Ledger
	bus *changes.Bus
}

// chores is a ledger shared by replicas, which take turns at chores
// (models.Store.Exclusive; a turn writes no lease, so it publishes
// nothing).
type chores interface {
	Exclusive(ctx context.Context, chore int32, fn func(context.Context) error) (bool, error)
}

// chores is the wrapped ledger's, if it has them.
func (c committed) chores() (chores, bool) {
	ch, ok := c.Ledger.(chores)
	return ch, ok
}

func (c committed) publish(cs ...changes.Change) {
	c.bus.Publish(changes.Set{Origin: changes.Committed, Changes: cs})
}

// ended is the change of every lease in ls, which ended.
func ended(ls []models.Lease) []changes.Change {
	cs := make([]changes.Change, len(ls))
	for i, l := range ls {
		cs[i] = changes.Change{Key: l.Key, Ended: true}
	}
	return cs
}

func (c committed) Acquire(ctx context.Context, k models.Key, h models.Holder, ttl time.Duration, obs models.Observed) (models.Lease, error) {
	l, err := c.Ledger.Acquire(ctx, k, h, ttl, obs)
	if err == nil {
		c.publish(changes.Change{Key: k})
	}
	return l, err
}

func (c committed) Renew(ctx context.Context, k models.Key, h models.Holder, ttl time.Duration) (models.Lease, error) {
	l, err := c.Ledger.Renew(ctx, k, h, ttl)
	if err == nil {
		c.publish(changes.Change{Key: k})
	}
	return l, err
}

func (c committed) RenewTenure(ctx context.Context, k models.Key, h models.Holder, token int64, ttl time.Duration) (models.Lease, error) {
	l, err := c.Ledger.RenewTenure(ctx, k, h, token, ttl)
	if err == nil {
		c.publish(changes.Change{Key: k})
	}
	return l, err
}

func (c committed) Release(ctx context.Context, k models.Key, h models.Holder) (*models.Lease, error) {
	l, err := c.Ledger.Release(ctx, k, h)
	if err == nil && l != nil {
		c.publish(changes.Change{Key: k, Ended: true})
	}
	return l, err
}

func (c committed) ForceRelease(ctx context.Context, k models.Key, by models.Holder) (*models.Lease, error) {
	l, err := c.Ledger.ForceRelease(ctx, k, by)
	if err == nil && l != nil {
		c.publish(changes.Change{Key: k, Ended: true})
	}
	return l, err
}

func (c committed) Handoff(ctx context.Context, k models.Key, by, to models.Holder, force bool) (models.Lease, models.Lease, error) {
	l, from, err := c.Ledger.Handoff(ctx, k, by, to, force)
	if err == nil {
		c.publish(changes.Change{Key: k})
	}
	return l, from, err
}

func (c committed) AcquireFirst(ctx context.Context, repoID int64, cands []models.Candidate, h models.Holder, ttl time.Duration) (models.Lease, error) {
	l, err := c.Ledger.AcquireFirst(ctx, repoID, cands, h, ttl)
	if err == nil {
		c.publish(changes.Change{Key: l.Key})
	}
	return l, err
}

// EndIssue and ReopenIssue publish the issue itself even when no lease
// ended: its state changed, which the fence worker's statuses may depend
// on.
func (c committed) EndIssue(ctx context.Context, k models.Key, why models.Reason, version int64, delivery string) (models.Ended, error) {
	a, err := c.Ledger.EndIssue(ctx, k, why, version, delivery)
	if err == nil {
		c.publish(append(ended(a.Leases), changes.Change{Key: k})...)
	}
	return a, err
}

func (c committed) ReopenIssue(ctx context.Context, k models.Key, version int64, delivery string) (models.Ended, error) {
	a, err := c.Ledger.ReopenIssue(ctx, k, version, delivery)
	if err == nil {
		c.publish(append(ended(a.Leases), changes.Change{Key: k})...)
	}
	return a, err
}

func (c committed) EndRepo(ctx context.Context, repoID int64, delivery string) (models.Ended, error) {
	a, err := c.Ledger.EndRepo(ctx, repoID, delivery)
	if err == nil {
		c.publish(ended(a.Leases)...)
	}
	return a, err
}

func (c committed) RecordPull(ctx context.Context, p models.Pull, delivery string) (bool, error) {
	changed, err := c.Ledger.RecordPull(ctx, p, delivery)
	if err == nil {
		c.publish(changes.Change{Key: models.Key{RepoID: p.RepoID, Issue: p.Number}, Pull: true})
	}
	return changed, err
}

// resolving is the ledger's upgrade of holders from logins to accounts
// (ResolveHolders): a resolution rewrites the holder of leases, so it is
// published as a change of every lease, which the fence worker's
// statuses depend on.
type resolving struct {
	HolderResolver
	bus *changes.Bus
}

func (r resolving) ResolveHolder(ctx context.Context, login string, id int64) (int64, error) {
	n, err := r.HolderResolver.ResolveHolder(ctx, login, id)
	if err == nil && n > 0 {
		r.bus.Publish(changes.Set{Origin: changes.Committed, Changes: []changes.Change{{Key: models.Everything}}})
	}
	return n, err
}

// EndSessions moves a browser account's session epoch on: no lease
// changes, so nothing is published.
func (c committed) EndSessions(ctx context.Context, userID int64) (int64, error) {
	return c.Ledger.EndSessions(ctx, userID)
}

// OpenSession, ResumeSession and Heartbeat end no lease and begin none:
// they only move a session's expiries on, which nobody waits for (the
// live feeds and the fence worker reread at the expiry they knew, and
// find the lease still live). Nothing is published.
func (c committed) OpenSession(ctx context.Context, h models.Holder, grace time.Duration, max int) (models.SessionRef, error) {
	return c.Ledger.OpenSession(ctx, h, grace, max)
}

func (c committed) ResumeSession(ctx context.Context, id string, h models.Holder) (models.SessionRef, []models.Lease, error) {
	return c.Ledger.ResumeSession(ctx, id, h)
}

func (c committed) Heartbeat(ctx context.Context, ref models.SessionRef, h models.Holder, left time.Duration) (int, error) {
	return c.Ledger.Heartbeat(ctx, ref, h, left)
}

// EndSession releases the session's claims: each is published as ended.
func (c committed) EndSession(ctx context.Context, ref models.SessionRef, h models.Holder) ([]models.Lease, error) {
	ls, err := c.Ledger.EndSession(ctx, ref, h)
	if err == nil && len(ls) > 0 {
		c.publish(ended(ls)...)
	}
	return ls, err
}

// TakeMergeTicket and DropMergeTicket change no lease: a merge ticket is
// a turn at a base branch, which the merges of this sidecar wait for
// themselves (merge.go), and those of other replicas look at again.
// Nothing is published.
func (c committed) TakeMergeTicket(ctx context.Context, t models.MergeTicket, bound time.Duration) (models.MergeTicket, error) {
	return c.Ledger.TakeMergeTicket(ctx, t, bound)
}

func (c committed) DropMergeTicket(ctx context.Context, repoID int64, base, id string) error {
	return c.Ledger.DropMergeTicket(ctx, repoID, base, id)
}

func (c committed) Reserve(ctx context.Context, r models.Reserve) ([]models.Reservation, error) {
	rs, err := c.Ledger.Reserve(ctx, r)
	if err == nil {
		c.publish(changes.Change{Key: models.Key{RepoID: r.RepoID}, Reservations: true})
	}
	return rs, err
}

func (c committed) Unreserve(ctx context.Context, repoID int64, h models.Holder, globs []string, issue int64, force bool) ([]models.Reservation, error) {
	rs, err := c.Ledger.Unreserve(ctx, repoID, h, globs, issue, force)
	if err == nil && len(rs) > 0 {
		c.publish(changes.Change{Key: models.Key{RepoID: repoID}, Reservations: true})
	}
	return rs, err
}

// PruneReservations removes reservations that were no longer live:
// nothing anyone sees changes, so it publishes nothing.
func (c committed) PruneReservations(ctx context.Context) (int64, error) {
	return c.Ledger.PruneReservations(ctx)
}

func (c committed) AcquireForced(ctx context.Context, k models.Key, h models.Holder, ttl time.Duration, obs models.Observed) (models.Lease, error) {
	l, err := c.Ledger.AcquireForced(ctx, k, h, ttl, obs)
	if err == nil {
		c.publish(changes.Change{Key: k})
	}
	return l, err
}

// RecordQuarantine publishes the issue once its quarantine is recorded:
// no lease changed, but what the issue's readers show of it did.
func (c committed) RecordQuarantine(ctx context.Context, k models.Key) (models.Quarantine, bool, error) {
	q, recorded, err := c.Ledger.RecordQuarantine(ctx, k)
	if err == nil && recorded {
		c.publish(changes.Change{Key: k})
	}
	return q, recorded, err
}

// LiftQuarantine publishes a lift as an ending: the issue may be claimed
// again, so the waiters of next --wait look again.
func (c committed) LiftQuarantine(ctx context.Context, k models.Key, labelGone bool) (bool, error) {
	lifted, err := c.Ledger.LiftQuarantine(ctx, k, labelGone)
	if err == nil && lifted {
		c.publish(changes.Change{Key: k, Ended: true})
	}
	return lifted, err
}

// MarkQuarantineForged records what the forge was told of a quarantine:
// nothing anyone reads of a lease changes, so nothing is published.
func (c committed) MarkQuarantineForged(ctx context.Context, k models.Key, token int64, labeled bool) error {
	return c.Ledger.MarkQuarantineForged(ctx, k, token, labeled)
}
