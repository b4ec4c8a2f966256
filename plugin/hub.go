package plugin

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/contract"
)

// Live lease changes (SPEC §8.5). The hub keeps one feed per repository
// that someone watches (Watch, watch.go), however many watch it. The
// service tells the hub which issues changed after each committed change
// (changed, beside the waiters of --wait and the fenced-merge worker):
// the feed reads the issue's live lease from the ledger then, and
// publishes what differs from what it last published, once, to every
// watcher of the repository. Reading after the commit, one issue at a
// time per feed, is what keeps the order right: whatever the order in
// which concurrent changes reach the hub, the last event about an issue
// is read after the last change to it.
//
// Expiry is lazy in the ledger, so nothing else would say so: the hub
// keeps one timer, on the service's clock, for the soonest expiry among
// the leases its feeds have published, and reads those issues again at
// that instant.
//
// Each event has an id ("<epoch>-<feed>-<seq>": the epoch names this
// process, feed a random name of this feed of the repository, and seq
// counts its events; so a stream's ids say nothing of other
// repositories' activity, private ones included). A feed keeps its last events, so a client
// that reconnects with the id it saw last is sent what it missed; one
// whose id is older than what the feed keeps (or from another process)
// is sent a reset, and fetches the list again. A feed outlives its last
// watcher by the linger, so that a reconnect finds it.
//
// Watchers never slow the hub down: each has a bounded buffer, and one
// whose buffer is full is dropped (its stream ends; its client resumes
// from its last id) rather than waited for.

// Defaults of LiveOptions.
const (
	DefaultLiveReplay  = 256              // events kept per repository for resuming
	DefaultLiveBuffer  = 64               // events a stream may fall behind before it is dropped
	DefaultLiveLinger  = 5 * time.Minute  // how long a repository's events outlive its last stream
	DefaultLiveRecheck = 30 * time.Second // how often a stream's viewer is asked about again
)

// hubReadTimeout bounds the hub's ledger reads, which run after the
// change that caused them has been answered (its caller may be gone).
const hubReadTimeout = 10 * time.Second

// ErrFellBehind: a stream did not take its events as fast as they came
// and was dropped. Its client reconnects and resumes from its last event.
var ErrFellBehind = errors.New("the stream fell behind")

// LiveOptions bound the live lease events; a zero field keeps its default.
type LiveOptions struct {
	// Replay is how many events of a repository are kept for clients
	// that reconnect (DefaultLiveReplay).
	Replay int
	// Buffer is how many events a stream may fall behind before it is
	// dropped (DefaultLiveBuffer).
	Buffer int
	// Linger is how long a repository's events are kept after its last
	// stream ended (DefaultLiveLinger).
	Linger time.Duration
	// Recheck is how often a stream asks the forge again whether its
	// viewer may still read the repository (DefaultLiveRecheck; the
	// forge's permission cache makes most of these free).
	Recheck time.Duration
}

// WithLive sets the bounds of the live lease events (Watch).
func WithLive(o LiveOptions) Option { return func(s *Service) { s.liveOpts = o } }

func (o LiveOptions) withDefaults() LiveOptions {
	if o.Replay <= 0 {
		o.Replay = DefaultLiveReplay
	}
	if o.Buffer <= 0 {
		o.Buffer = DefaultLiveBuffer
	}
	if o.Linger <= 0 {
		o.Linger = DefaultLiveLinger
	}
	if o.Recheck <= 0 {
		o.Recheck = DefaultLiveRecheck
	}
	return o
}

// LiveEvent is one Server-Sent Event of a lease stream. An event with no
// Type carries only its ID: the stream's position, for a client that has
// seen no event yet to resume from.
type LiveEvent struct {
	ID   string
	Type string // contract.EventLease, EventReleased, EventReset, or ""
	Data []byte // its JSON

	seq   uint64
	issue int64
	kind  models.Kind
}

type hub struct {
	ledger Ledger
	now    func() time.Time
	after  func(time.Duration) (<-chan time.Time, func() bool)
	opts   LiveOptions
	epoch  string

	// nfeeds lets a change to an unwatched repository cost one atomic
	// load, the case of every write when nobody watches.
	nfeeds atomic.Int64

	mu       sync.Mutex
	feeds    map[int64]*feed
	expiries expiryHeap
	timer    *hubTimer // armed for the soonest expiry or linger end; nil: none
	watchers int
}

// feed is one repository's: its watchers, its last events, and the live
// leases it last published (to tell what changed, and when they expire).
type feed struct {
	repoID int64
	// pub serialises a feed's read-then-publish (refresh) and its seeding;
	// taken before hub.mu, never while holding it (but for a new feed).
	pub       sync.Mutex
	name      string       // random, new for each feed of a repository
	seq       uint64       // its events so far
	floor     uint64       // a client that saw seq >= floor can be told what it missed
	ring      []*LiveEvent // the last events, oldest first
	subs      map[*watcher]struct{}
	leases    map[int64]models.Lease
	idleSince time.Time // when its last watcher left; zero while watched
	broken    bool      // seeding failed: the feed is gone
}

type watcher struct {
	c       chan *LiveEvent
	dropped bool // fell behind: c is closed
}

type hubTimer struct {
	at     time.Time
	stop   func() bool
	cancel chan struct{}
}

func newHub(ledger Ledger, now func() time.Time, after func(time.Duration) (<-chan time.Time, func() bool), o LiveOptions) *hub {
	return &hub{ledger: ledger, now: now, after: after, opts: o.withDefaults(),
		epoch: strconv.FormatInt(now().UnixNano(), 36), feeds: map[int64]*feed{}}
}

func (h *hub) id(f *feed, seq uint64) string {
	return h.epoch + "-" + f.name + "-" + strconv.FormatUint(seq, 10)
}

// subscribe adds a watcher to repoID's feed (made and seeded from the
// ledger if nobody watches it), and returns what the watcher is to be
// sent first: the events after lastID, a reset if those are not known,
// or (no lastID) the stream's position.
func (h *hub) subscribe(ctx context.Context, repoID int64, lastID string) (*feed, *watcher, []*LiveEvent, error) {
	w := &watcher{c: make(chan *LiveEvent, h.opts.Buffer)}
	h.mu.Lock()
	f := h.feeds[repoID]
	made := f == nil
	if made {
		// A new name: an id a client saw of an earlier feed of this
		// repository names another feed, since changes nobody watched
		// went untold.
		f = &feed{repoID: repoID, name: strconv.FormatUint(rand.Uint64(), 36), subs: map[*watcher]struct{}{}, leases: map[int64]models.Lease{}}
		f.pub.Lock() // new, so nobody else holds it: until it is seeded, refreshes wait
		h.feeds[repoID] = f
		h.nfeeds.Add(1)
	}
	f.subs[w] = struct{}{}
	f.idleSince = time.Time{}
	h.watchers++
	first := h.since(f, lastID)
	h.mu.Unlock()
	if made {
		if err := h.seed(ctx, f); err != nil {
			return nil, nil, nil, err
		}
	}
	return f, w, first, nil
}

// since is what a watcher of f that last saw lastID is sent first.
func (h *hub) since(f *feed, lastID string) []*LiveEvent {
	here := &LiveEvent{ID: h.id(f, f.seq)}
	if lastID == "" {
		return []*LiveEvent{here}
	}
	parts := strings.Split(lastID, "-")
	var seq uint64
	err := errors.New("not an id of this hub")
	if len(parts) == 3 {
		seq, err = strconv.ParseUint(parts[2], 10, 64)
	}
	if err != nil || parts[0] != h.epoch || parts[1] != f.name || seq > f.seq || seq < f.floor {
		here.Type, here.Data = contract.EventReset, []byte("{}")
		return []*LiveEvent{here}
	}
	var out []*LiveEvent
	for _, e := range f.ring {
		if e.seq > seq {
			out = append(out, e)
		}
	}
	return out
}

// seed reads the live leases of a new feed, so that their changes and
// expiries are told from the start.
func (h *hub) seed(ctx context.Context, f *feed) error {
	defer f.pub.Unlock()
	// The read serves every watcher that joins meanwhile, so the first
	// one's leaving must not cut it short.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hubReadTimeout)
	defer cancel()
	leases, err := h.ledger.List(ctx, f.repoID)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		// Nobody can be told what they missed: every watcher that
		// joined meanwhile is dropped with the feed.
		f.broken = true
		for w := range f.subs {
			h.drop(f, w)
		}
		h.remove(f)
		return err
	}
	for _, l := range leases {
		f.leases[l.Issue] = l
		if l.ExpiresAt != nil {
			heap.Push(&h.expiries, expiry{at: *l.ExpiresAt, key: l.Key})
		}
	}
	h.arm()
	return nil
}

// unsubscribe takes w off f; a feed left without watchers lingers.
func (h *hub) unsubscribe(f *feed, w *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := f.subs[w]; !ok {
		return // dropped already
	}
	delete(f.subs, w)
	h.watchers--
	h.idle(f)
}

// drop takes w off f and closes its channel (under h.mu).
func (h *hub) drop(f *feed, w *watcher) {
	delete(f.subs, w)
	h.watchers--
	w.dropped = true
	close(w.c)
}

// idle starts f's linger once it has no watchers (under h.mu).
func (h *hub) idle(f *feed) {
	if len(f.subs) == 0 && f.idleSince.IsZero() && !f.broken {
		f.idleSince = h.now()
		h.arm()
	}
}

// remove forgets f (under h.mu). Its expiries are dropped when they come
// up, or when the heap is rebuilt.
func (h *hub) remove(f *feed) {
	if h.feeds[f.repoID] == f {
		delete(h.feeds, f.repoID)
		h.nfeeds.Add(-1)
	}
}

// changed tells the hub that the leases on these issues may have changed
// (after the change was committed).
func (h *hub) changed(ks ...models.Key) {
	if h.nfeeds.Load() == 0 {
		return
	}
	for _, k := range ks {
		h.mu.Lock()
		f := h.feeds[k.RepoID]
		h.mu.Unlock()
		if f != nil {
			h.refresh(f, k)
		}
	}
}

// refresh reads k's live lease and publishes it to f if it differs from
// what f last published.
func (h *hub) refresh(f *feed, k models.Key) {
	f.pub.Lock()
	defer f.pub.Unlock()
	h.mu.Lock()
	gone := h.feeds[k.RepoID] != f
	h.mu.Unlock()
	if gone {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), hubReadTimeout)
	cur, err := h.ledger.Current(ctx, k)
	cancel()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.feeds[k.RepoID] != f {
		return
	}
	prev, had := f.leases[k.Issue]
	switch {
	case err != nil:
		// What changed cannot be told: everyone refetches.
		h.publish(f, &LiveEvent{Type: contract.EventReset, Data: []byte("{}")})
	case cur == nil && !had:
	case cur == nil:
		delete(f.leases, k.Issue)
		data, _ := json.Marshal(contract.ReleasedEvent{Issue: k.Issue})
		h.publish(f, &LiveEvent{Type: contract.EventReleased, Data: data, issue: k.Issue, kind: prev.Kind})
	case had && sameLease(prev, *cur):
		// Unchanged. At or past its expiry, the ledger's clock has not
		// got there yet: look again a second later.
		if cur.ExpiresAt != nil && !cur.ExpiresAt.After(h.now()) {
			heap.Push(&h.expiries, expiry{at: h.now().Add(time.Second), key: k, retry: true})
			h.arm()
		}
	default:
		f.leases[k.Issue] = *cur
		data, _ := json.Marshal(leaseView(*cur))
		h.publish(f, &LiveEvent{Type: contract.EventLease, Data: data, issue: k.Issue, kind: cur.Kind})
		if cur.ExpiresAt != nil {
			heap.Push(&h.expiries, expiry{at: *cur.ExpiresAt, key: k})
			h.arm()
		}
	}
}

func sameLease(a, b models.Lease) bool {
	return a.Token == b.Token && a.Holder == b.Holder && a.Kind == b.Kind && a.AcquiredAt.Equal(b.AcquiredAt) &&
		(a.ExpiresAt == nil) == (b.ExpiresAt == nil) && (a.ExpiresAt == nil || a.ExpiresAt.Equal(*b.ExpiresAt))
}

// publish numbers e, keeps it for resuming and hands it to every watcher
// of f; a watcher whose buffer is full is dropped (under h.mu).
func (h *hub) publish(f *feed, e *LiveEvent) {
	f.seq++
	e.seq, e.ID = f.seq, h.id(f, f.seq)
	f.ring = append(f.ring, e)
	if len(f.ring) > h.opts.Replay {
		f.floor = f.ring[0].seq
		f.ring = f.ring[1:]
	}
	for w := range f.subs {
		select {
		case w.c <- e:
		default:
			h.drop(f, w)
		}
	}
	h.idle(f)
}

// arm sets the hub's one timer for the soonest expiry or linger end, if
// it is not set for that instant already (under h.mu).
func (h *hub) arm() {
	var next time.Time
	if len(h.expiries) > 0 {
		next = h.expiries[0].at
	}
	for _, f := range h.feeds {
		if f.idleSince.IsZero() {
			continue
		}
		if end := f.idleSince.Add(h.opts.Linger); next.IsZero() || end.Before(next) {
			next = end
		}
	}
	if h.timer != nil && h.timer.at.Equal(next) {
		return
	}
	if h.timer != nil {
		h.timer.stop()
		close(h.timer.cancel)
		h.timer = nil
	}
	if next.IsZero() {
		return
	}
	c, stop := h.after(next.Sub(h.now()))
	t := &hubTimer{at: next, stop: stop, cancel: make(chan struct{})}
	h.timer = t
	go func() {
		select {
		case <-c:
			h.fire(t)
		case <-t.cancel:
		}
	}()
}

// fire runs when timer t goes off: the leases due to expire are read
// again, and feeds idle past their linger are forgotten.
func (h *hub) fire(t *hubTimer) {
	h.mu.Lock()
	if h.timer != t {
		h.mu.Unlock()
		return // superseded meanwhile
	}
	h.timer = nil
	now := h.now()
	type due struct {
		f *feed
		k models.Key
	}
	var dues []due
	seen := map[models.Key]bool{}
	for len(h.expiries) > 0 && !h.expiries[0].at.After(now) {
		e := heap.Pop(&h.expiries).(expiry)
		f := h.feeds[e.key.RepoID]
		if f == nil || seen[e.key] {
			continue
		}
		l, ok := f.leases[e.key.Issue]
		if !ok || l.ExpiresAt == nil || (!e.retry && !l.ExpiresAt.Equal(e.at)) || l.ExpiresAt.After(now) {
			continue // renewed or ended since: another entry stands for it
		}
		seen[e.key] = true
		dues = append(dues, due{f, e.key})
	}
	for _, f := range h.feeds {
		if len(f.subs) == 0 && !f.idleSince.IsZero() && !now.Before(f.idleSince.Add(h.opts.Linger)) {
			h.remove(f)
		}
	}
	h.compact()
	h.arm()
	h.mu.Unlock()
	for _, d := range dues {
		h.refresh(d.f, d.k)
	}
}

// compact rebuilds the expiry heap when entries for renewed, ended or
// forgotten leases outnumber the live ones (under h.mu).
func (h *hub) compact() {
	live := 0
	for _, f := range h.feeds {
		live += len(f.leases)
	}
	if len(h.expiries) <= 2*live+64 {
		return
	}
	h.expiries = h.expiries[:0]
	for _, f := range h.feeds {
		for _, l := range f.leases {
			if l.ExpiresAt != nil {
				h.expiries = append(h.expiries, expiry{at: *l.ExpiresAt, key: l.Key})
			}
		}
	}
	heap.Init(&h.expiries)
}

// counts reports the feeds and the watchers (for tests and metrics).
func (h *hub) counts() (feeds, watchers int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.feeds), h.watchers
}

// expiry is when the lease on key is due to expire, as last published
// (retry: looked at again after the ledger still had it live).
type expiry struct {
	at    time.Time
	key   models.Key
	retry bool
}

type expiryHeap []expiry

func (x expiryHeap) Len() int           { return len(x) }
func (x expiryHeap) Less(i, j int) bool { return x[i].at.Before(x[j].at) }
func (x expiryHeap) Swap(i, j int)      { x[i], x[j] = x[j], x[i] }
func (x *expiryHeap) Push(v any)        { *x = append(*x, v.(expiry)) }
func (x *expiryHeap) Pop() any {
	old := *x
	v := old[len(old)-1]
	*x = old[:len(old)-1]
	return v
}
