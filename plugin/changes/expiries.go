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
// a heap of instants with one timer, on the bus's clock, armed for the
// soonest. Whoever learns when a lease it cares about expires (a feed
// that published it, a waiter told it is held, the fence worker that
// computed a status from it) adds that instant; at the instant the bus
// publishes it to everyone.
type expiries struct {
	bus   *Bus
	now   Now
	after After

	mu    sync.Mutex
	heap  expiryHeap
	known map[expiry]struct{} // what the heap holds, so an instant is queued once
	alarm *Alarm              // set for heap[0]
}

type expiry struct {
	at  int64 // Unix nanoseconds
	key models.Key
}

func newExpiries(b *Bus, now Now, after After) *expiries {
	if now == nil {
		now = time.Now
	}
	if after == nil {
		after = RealAfter
	}
	x := &expiries{bus: b, now: now, after: after, known: map[expiry]struct{}{}}
	x.alarm = NewAlarm(now, after, x.fire)
	return x
}

func (x *expiries) add(k models.Key, at time.Time) {
	e := expiry{at: at.UnixNano(), key: k}
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, ok := x.known[e]; ok {
		return
	}
	x.known[e] = struct{}{}
	heap.Push(&x.heap, e)
	x.arm()
}

func (x *expiries) len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.heap)
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
	seen := map[models.Key]bool{}
	for len(x.heap) > 0 && x.heap[0].at <= now {
		e := heap.Pop(&x.heap).(expiry)
		delete(x.known, e)
		if !seen[e.key] {
			seen[e.key] = true
			due = append(due, Change{Key: e.key, Ended: true})
		}
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
