// Package changes is the sidecar's change bus. Every ledger write the
// lease service makes publishes what it changed, once, after the ledger
// has committed it (plugin/lease, committed.go); the parts that must hear
// of it subscribe: the waiters of acquire --wait (plugin/lease), the live
// feeds (plugin/live), the fenced-merge worker (plugin/fence) and the
// announcement to the other replicas (Follow). Expiry, which the ledger
// notices only lazily, comes from the bus's one expiry queue (ExpireAt),
// published like any other change at its instant.
//
// A change says only "look again": whoever hears one rereads the ledger.
// So hearing a change twice, or hearing of one that changed nothing, is
// harmless, and a subscriber never needs more than the key.
//
// The bus decides nothing, reads nothing and writes nothing. Publish calls
// every subscriber on the publisher's goroutine, so a subscriber must not
// block: it takes note and returns, and does any reading elsewhere.
package changes

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/collab-lease/collab-lease/models"
)

// Change is one key whose lease may have changed.
type Change struct {
	// Key is the issue; Issue 0 means any issue of Key.RepoID, and the
	// zero Key (models.Everything) any issue at all.
	Key models.Key
	// Ended: a lease on Key may have ended (released, force-released,
	// expired, closed, merged, deleted), so waiters for it try again.
	Ended bool
	// Pull: what the ledger records of pull request Key.Issue (its head,
	// its author, what it would close) may have changed.
	Pull bool
	// Reservations: the path reservations of Key.RepoID may have changed
	// (a reserve, an unreserve, or an instant ExpireReservationsAt asked
	// for; Key.Issue is 0), and nothing else: no lease did.
	Reservations bool
}

// Origin says where a change set comes from.
type Origin int

const (
	// Committed: a ledger write of this process, after its COMMIT.
	Committed Origin = iota
	// Expired: an expiry instant came (ExpireAt).
	Expired
	// Remote: a replica on the same database announced it (this
	// process's own announcements come back as Remote too).
	Remote
)

// Set is what one publication carries.
type Set struct {
	Origin  Origin
	Changes []Change
}

// Bus hands every published Set to every subscriber. The zero Bus is not
// usable: make one with New.
type Bus struct {
	mu   sync.Mutex // serialises Subscribe and its cancels
	subs atomic.Pointer[[]*subscription]
	exp  *expiries
}

type subscription struct{ fn func(Set) }

// New returns a bus whose expiry queue runs on this clock: now reads it,
// and after(d) returns a channel that receives once d has passed on it,
// with a function that stops it (a fake clock's After in tests).
func New(now Now, after After) *Bus {
	b := &Bus{}
	b.subs.Store(&[]*subscription{})
	b.exp = newExpiries(b, now, after)
	return b
}

// Subscribe has fn called with every Set published from now on, until the
// returned function is called. fn must not block (see the package doc).
func (b *Bus) Subscribe(fn func(Set)) (cancel func()) {
	s := &subscription{fn: fn}
	b.mu.Lock()
	subs := append(slices.Clone(*b.subs.Load()), s)
	b.subs.Store(&subs)
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		subs := slices.DeleteFunc(slices.Clone(*b.subs.Load()), func(x *subscription) bool { return x == s })
		b.subs.Store(&subs)
	}
}

// Publish hands set to every subscriber, on this goroutine, in the order
// they subscribed. An empty set is not published. It takes no lock: the
// subscribers are a list that Subscribe replaces, never changes.
func (b *Bus) Publish(set Set) {
	if len(set.Changes) == 0 {
		return
	}
	for _, s := range *b.subs.Load() {
		s.fn(set)
	}
}

// ExpireAt has the bus publish {Key: k, Ended: true} with Origin Expired
// at instant at, once, for whoever subscribes: the lease on k is due to
// expire then. The queue keeps one instant per key, the earliest asked
// for: asking for a later one while an earlier one waits does nothing,
// so whoever rereads a lease when its expiry comes asks again for the
// instant it now expires at (it may have been renewed). An instant that
// has passed is published at once (on the bus's alarm goroutine). An
// expiry that no longer holds is published all the same: it only makes
// its subscribers look again.
func (b *Bus) ExpireAt(k models.Key, at time.Time) { b.exp.add(queued{key: k}, at) }

// ExpireReservationsAt is ExpireAt for the path reservations of
// repository repoID, one of which is due to end at instant at: it
// publishes {Key: {RepoID: repoID}, Reservations: true} (not Ended, so
// that no waiter of a lease wakes for it), under the same rule of one
// instant, the earliest, per repository.
func (b *Bus) ExpireReservationsAt(repoID int64, at time.Time) {
	b.exp.add(queued{key: models.Key{RepoID: repoID}, reservations: true}, at)
}

// Pending reports how many keys wait for an expiry instant. The sidecar
// does not read it; it stays exported because the lease service's tests
// (another package) must know an expiry is queued before they move their
// fake clock past it, and nothing else shows that.
func (b *Bus) Pending() int { return b.exp.len() }

// KeysOf returns the keys of the changes of set.
func KeysOf(set Set) []models.Key {
	ks := make([]models.Key, len(set.Changes))
	for i, c := range set.Changes {
		ks[i] = c.Key
	}
	return ks
}
