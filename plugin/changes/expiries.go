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
	timer *timer              // armed for heap[0]; nil: none
}

type expiry struct {
	at  int64 // Unix nanoseconds
	key models.Key
}

type timer struct {
	at     int64
	stop   func() bool
	cancel chan struct{}
}

func newExpiries(b *Bus, now Now, after After) *expiries {
	if now == nil {
		now = time.Now
	}
	if after == nil {
		after = RealAfter
	}
	return &expiries{bus: b, now: now, after: after, known: map[expiry]struct{}{}}
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

// arm sets the timer for the soonest instant, unless it is set for it
// already (under x.mu).
func (x *expiries) arm() {
	if len(x.heap) == 0 {
		x.disarm()
		return
	}
	next := x.heap[0].at
	if x.timer != nil && x.timer.at == next {
		return
	}
	x.disarm()
	c, stop := x.after(time.Duration(next - x.now().UnixNano()))
	t := &timer{at: next, stop: stop, cancel: make(chan struct{})}
	x.timer = t
	go func() {
		select {
		case <-c:
			x.fire(t)
		case <-t.cancel:
		}
	}()
}

func (x *expiries) disarm() {
	if x.timer != nil {
		x.timer.stop()
		close(x.timer.cancel)
		x.timer = nil
	}
}

// fire publishes every instant that has come, once the timer t went off.
func (x *expiries) fire(t *timer) {
	x.mu.Lock()
	if x.timer != t {
		x.mu.Unlock()
		return // superseded meanwhile
	}
	x.timer = nil
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
