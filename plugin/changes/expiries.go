package changes

import (
	"container/heap"
	"sync"
	"time"

	"github.com/collab-lease/collab-lease/models"
)

// Now reads a clock.
type Now func() time.Time

// After returns a channel that receives once d has passed on a clock, and
// a function that stops it.
type After func(d time.Duration) (<-chan time.Time, func() bool)

// RealAfter is After on the system clock.
func RealAfter(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// expiries is the bus's one expiry queue (etcd's lessor keeps one too):
// the soonest instant asked for each key, in a heap with one alarm, on
// the bus's clock, set for the soonest of all. Whoever learns when a
// lease it cares about expires (a feed that published it, a waiter told
// it is held, the fence worker that computed a status from it) adds that
// instant; at the instant the bus publishes it to everyone.
//
// One instant per key keeps the queue as small as the leases someone
// cares about, however often they are renewed: a later instant for a key
// that has an earlier one waits, and when the earlier one comes (the
// lease was renewed since, say), whoever cares rereads the lease and asks
// again for the instant it now expires at. An instant early is harmless
// (a look that finds the lease live); one late would not be, so the
// earlier always wins.
type expiries struct {
	bus   *Bus
	now   Now
	after After

	mu    sync.Mutex
	heap  expiryHeap       // may hold instants superseded by earlier ones of their key
	soon  map[queued]int64 // the instant each key waits for
	alarm *Alarm           // set for the soonest instant
}

// queued is what an instant is for: a key's lease, or (reservations) the
// path reservations of a repository.
type queued struct {
	key          models.Key
	reservations bool
}

type expiry struct {
	at  int64 // Unix nanoseconds
	key queued
}

func newExpiries(b *Bus, now Now, after After) *expiries {
	if now == nil {
		now = time.Now
	}
	if after == nil {
		after = RealAfter
	}
	x := &expiries{bus: b, now: now, after: after, soon: map[queued]int64{}}
	x.alarm = NewAlarm(now, after, x.fire)
	return x
}

func (x *expiries) add(k queued, at time.Time) {
	e := expiry{at: at.UnixNano(), key: k}
	x.mu.Lock()
	defer x.mu.Unlock()
	if cur, ok := x.soon[k]; ok && cur <= e.at {
		return
	}
	x.soon[k] = e.at
	heap.Push(&x.heap, e)
	// Entries superseded by earlier ones wait in the heap until their
	// instant; past twice the keys, they are dropped at once.
	if len(x.heap) > 2*len(x.soon)+64 {
		x.compact()
	}
	x.arm()
}

// compact rebuilds the heap from soon (under x.mu).
func (x *expiries) compact() {
	x.heap = x.heap[:0]
	for k, at := range x.soon {
		x.heap = append(x.heap, expiry{at: at, key: k})
	}
	heap.Init(&x.heap)
}

// len is how many keys wait for an instant.
func (x *expiries) len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.soon)
}

// arm sets the alarm for the soonest instant (under x.mu).
func (x *expiries) arm() {
	if len(x.heap) == 0 {
		x.alarm.Set(time.Time{})
		return
	}
	x.alarm.Set(time.Unix(0, x.heap[0].at))
}

// fire publishes every instant that has come (the alarm went off).
func (x *expiries) fire() {
	x.mu.Lock()
	now := x.now().UnixNano()
	var due []Change
	seen := map[queued]bool{}
	for len(x.heap) > 0 && x.heap[0].at <= now {
		e := heap.Pop(&x.heap).(expiry)
		if x.soon[e.key] != e.at || seen[e.key] {
			continue // superseded by an earlier instant, which came already
		}
		delete(x.soon, e.key)
		seen[e.key] = true
		due = append(due, Change{Key: e.key.key, Ended: !e.key.reservations, Reservations: e.key.reservations})
	}
	x.arm()
	x.mu.Unlock()
	x.bus.Publish(Set{Origin: Expired, Changes: due})
}

type expiryHeap []expiry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(v any)        { *h = append(*h, v.(expiry)) }
func (h *expiryHeap) Pop() any {
	old := *h
	v := old[len(old)-1]
	*h = old[:len(old)-1]
	return v
}
