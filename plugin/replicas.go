package plugin

import (
	"container/heap"
	"context"
	"encoding/json"
	"maps"
	"slices"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/contract"
)

// Replicas (SPEC §8.6): several sidecars on one PostgreSQL ledger behave
// as one, so a change committed through any of them must reach the
// --wait waiters, live-event feeds and fenced-merge worker of all. Each
// change this service commits is announced to the ledger (changed), and
// FollowChanges hears every replica's announcements, this one's own
// included, and tells the same parts here (remoteChanged).
//
// Hearing a change twice (locally, then its echo), or hearing of a change
// that changed nothing, is harmless: an announcement says only "look
// again". A woken waiter's head acquires, which answers held if the
// issue is still held; a feed rereads the lease and publishes only what
// differs from what it last published; the fenced-merge worker
// recomputes a pull request's status from the ledger.

// changeFeed is a ledger shared by replicas: models.Store (whose
// Announce and Changes do nothing on SQLite, one process).
type changeFeed interface {
	Announce(ks ...models.Key)
	Changes(ctx context.Context, fn func(models.Key)) error
}

// FollowChanges tells the waiters, live-event feeds and fenced-merge
// worker of this service of the changes other replicas make, until ctx
// ends (serve runs it beside RunFences). Without a shared ledger it
// returns nil at once.
func (s *Service) FollowChanges(ctx context.Context) error {
	f, ok := s.ledger.(changeFeed)
	if !ok {
		return nil
	}
	return f.Changes(ctx, s.remoteChanged)
}

// announce tells the other replicas that the lease on k may have changed.
func (s *Service) announce(k models.Key) {
	if f, ok := s.ledger.(changeFeed); ok {
		f.Announce(k)
	}
}

// remoteChanged handles a change some replica announced: k, or any issue
// of k's repository (Issue 0), or anything (models.Everything). Whether a
// lease ended is not said, so the waiters are woken as for a release.
func (s *Service) remoteChanged(k models.Key) {
	if k.Issue != 0 {
		s.waits.freed(k)
		s.fence.touch(k)
		s.hub.changed(k)
		return
	}
	s.waits.freedRepo(k.RepoID)
	s.fence.touchRepo(k.RepoID)
	s.hub.changedRepo(k.RepoID)
}

// freedRepo wakes the head of each queue on repoID's issues (0: of all).
func (ws *waits) freedRepo(repoID int64) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for k, q := range ws.queues {
		if (repoID == 0 || k.RepoID == repoID) && len(q) > 0 {
			notify(q[0])
		}
	}
}

// touchRepo marks every linked issue of repoID (0: of all).
func (f *fence) touchRepo(repoID int64) {
	f.mu.Lock()
	var ks []models.Key
	for k := range f.linked {
		if repoID == 0 || k.RepoID == repoID {
			ks = append(ks, k)
		}
	}
	f.mu.Unlock()
	f.touch(ks...)
}

// changedRepo rereads the live leases of repoID's feed (0: of every
// feed) and publishes what differs from what it last published.
func (h *hub) changedRepo(repoID int64) {
	if h.nfeeds.Load() == 0 {
		return
	}
	h.mu.Lock()
	var fs []*feed
	for id, f := range h.feeds {
		if repoID == 0 || id == repoID {
			fs = append(fs, f)
		}
	}
	h.mu.Unlock()
	for _, f := range fs {
		h.resync(f)
	}
}

// resync is refresh for every issue of f's repository at once.
func (h *hub) resync(f *feed) {
	f.pub.Lock()
	defer f.pub.Unlock()
	h.mu.Lock()
	gone := h.feeds[f.repoID] != f
	h.mu.Unlock()
	if gone {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), hubReadTimeout)
	leases, err := h.ledger.List(ctx, f.repoID)
	cancel()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.feeds[f.repoID] != f {
		return
	}
	if err != nil {
		h.publish(f, &LiveEvent{Type: contract.EventReset, Data: []byte("{}")})
		return
	}
	live := make(map[int64]models.Lease, len(leases))
	for _, l := range leases {
		live[l.Issue] = l
	}
	for _, n := range slices.Sorted(maps.Keys(f.leases)) {
		if _, ok := live[n]; !ok {
			prev := f.leases[n]
			delete(f.leases, n)
			data, _ := json.Marshal(contract.ReleasedEvent{Issue: n})
			h.publish(f, &LiveEvent{Type: contract.EventReleased, Data: data, issue: n, kind: prev.Kind})
		}
	}
	for _, n := range slices.Sorted(maps.Keys(live)) {
		cur := live[n]
		if prev, had := f.leases[n]; had && sameLease(prev, cur) {
			continue
		}
		f.leases[n] = cur
		data, _ := json.Marshal(leaseView(cur))
		h.publish(f, &LiveEvent{Type: contract.EventLease, Data: data, issue: n, kind: cur.Kind})
		if cur.ExpiresAt != nil {
			heap.Push(&h.expiries, expiry{at: *cur.ExpiresAt, key: cur.Key})
		}
	}
	h.arm()
}
