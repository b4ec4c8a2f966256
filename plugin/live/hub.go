// Package live keeps the live lease events: one feed per repository
// that someone watches, however many watch it, each with its last events
// for clients that reconnect. The lease service (plugin/lease, watch.go)
// decides who may watch what and filters each event for its viewer; this
// package only tells what changed: the leases (hub.go), and the path
// reservations (reservations.go), each made or ended told as its own
// event.
//
// A feed hears of changes from the change bus (plugin/changes): after a
// committed change, an expiry instant, or another replica's
// announcement, it reads the issue's live lease from the ledger and
// publishes what differs from what it last published, once, to every
// watcher of the repository. The reads run on the feed's own goroutine,
// never on the reply path of the write that caused them. Reading after
// the change, one issue at a time per feed, is what keeps the order
// right: whatever the order in which concurrent changes reach the hub,
// the last event about an issue is read after the last change to it.
// Each feed has its own reader, so a slow read delays only the events of
// its own repository.
//
// Expiry is lazy in the ledger, so nothing else would say so: each lease
// a feed publishes puts its expiry on the bus's expiry queue, and so
// does the soonest reservation that no claim anchors; the bus tells the
// hub at that instant. A reservation of a claim ends with the claim's
// tenure: the end of a lease its reservations are anchored to has the
// feed read them again.
//
// Each event has an id ("<epoch>-<feed>-<seq>": the epoch names this
// process, feed a random name of this feed of the repository, and seq
// counts its events; so a stream's ids say nothing of other
// repositories' activity, private ones included). A feed keeps its last
// events, so a client that reconnects with the id it saw last is sent
// what it missed; one whose id is older than what the feed keeps (or from
// another process) is sent a reset, and fetches the list again. A feed
// outlives its last watcher by the linger, so that a reconnect finds it.
//
// Watchers never slow the hub down: each has a bounded buffer, and one
// whose buffer is full is dropped (its stream ends; its client resumes
// from its last id) rather than waited for.
//
// It never writes the ledger, never asks the forge, and never decides who
// may see an event.
package live

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/collab-lease/collab-lease/models"
	"github.com/collab-lease/collab-lease/plugin/changes"
	"github.com/collab-lease/collab-lease/plugin/contract"
)

// Ledger is what the hub reads of the lease store (models.Store).
type Ledger interface {
	Current(ctx context.Context, k models.Key) (*models.Lease, error)
	List(ctx context.Context, repoID int64) ([]models.Lease, error)
	// Reservations are the live path reservations of a repository
	// (path "": all of them), oldest first.
	Reservations(ctx context.Context, repoID int64, path string) ([]models.Reservation, error)
}

// Defaults of Options.
const (
	DefaultReplay  = 256              // events kept per repository for resuming
	DefaultBuffer  = 64               // events a stream may fall behind before it is dropped
	DefaultLinger  = 5 * time.Minute  // how long a repository's events outlive its last stream
	DefaultRecheck = 30 * time.Second // how often a stream's viewer is asked about again
)

// readTimeout bounds the hub's ledger reads, which run after the change
// that caused them has been answered (its caller may be gone).
const readTimeout = 10 * time.Second

// ErrFellBehind: a stream did not take its events as fast as they came
// and was dropped. Its client reconnects and resumes from its last event.
var ErrFellBehind = errors.New("the stream fell behind")

// Options bound the live lease events; a zero field keeps its default.
type Options struct {
	// Replay is how many events of a repository are kept for clients
	// that reconnect (DefaultReplay).
	Replay int
	// Buffer is how many events a stream may fall behind before it is
	// dropped (DefaultBuffer).
	Buffer int
	// Linger is how long a repository's events are kept after its last
	// stream ended (DefaultLinger).
	Linger time.Duration
	// Recheck is how often a stream asks the forge again whether its
	// viewer may still read the repository (DefaultRecheck; the forge's
	// permission cache makes most of these free). The hub does not use
	// it: the lease service's streams do.
	Recheck time.Duration
}

// WithDefaults is o with every zero field set to its default.
func (o Options) WithDefaults() Options {
	if o.Replay <= 0 {
		o.Replay = DefaultReplay
	}
	if o.Buffer <= 0 {
		o.Buffer = DefaultBuffer
	}
	if o.Linger <= 0 {
		o.Linger = DefaultLinger
	}
	if o.Recheck <= 0 {
		o.Recheck = DefaultRecheck
	}
	return o
}

// Event is one Server-Sent Event of a lease stream. An event with no
// Type carries only its ID: the stream's position, for a client that has
// seen no event yet to resume from.
type Event struct {
	ID   string
	Type string // contract.EventLease, EventReleased, EventReserved, EventUnreserved, EventReset, or ""
	Data []byte // its JSON

	seq   uint64
	issue int64
	kind  models.Kind
	// unnumbered is Data without the claim's number, for a reservation
	// of a claim (nil: Data names none).
	unnumbered []byte
}

// Kind is the unit (issue or pull request) of the number the event is
// about, as the ledger knows it; KindUnknown for an event about none (or
// about a reservation, whose claim's unit the ledger does not keep).
func (e *Event) Kind() models.Kind { return e.kind }

// WithoutNumber is Data without the number of the claim a reservation's
// event names, for a viewer who may not see that number: its "issue" is
// null. It is Data for every other event.
func (e *Event) WithoutNumber() []byte {
	if e.unnumbered != nil {
		return e.unnumbered
	}
	return e.Data
}

// Hub keeps the feeds. Make one with New.
type Hub struct {
	ledger Ledger
	bus    *changes.Bus
	now    func() time.Time
	opts   Options
	epoch  string

	// nfeeds lets a change to an unwatched repository cost one atomic
	// load, the case of every write when nobody watches.
	nfeeds atomic.Int64

	mu        sync.Mutex
	feeds     map[int64]*feed
	linger    *changes.Alarm // set for the soonest end of an idle feed's linger
	watchers  int
	readers   int        // feeds whose reader goroutine runs
	readsDone *sync.Cond // signalled when a reader goroutine stops
}

// feed is one repository's: its watchers, its last events, and the live
// leases and reservations it last published (to tell what changed).
type feed struct {
	repoID int64
	// pub serialises a feed's read-then-publish (refresh) and its seeding;
	// taken before Hub.mu, never while holding it (but for a new feed).
	pub       sync.Mutex
	name      string   // random, new for each feed of a repository
	seq       uint64   // its events so far
	floor     uint64   // a client that saw seq >= floor can be told what it missed
	ring      []*Event // the last events, oldest first
	subs      map[*watcher]struct{}
	leases    map[int64]models.Lease
	idleSince time.Time // when its last watcher left; zero while watched
	broken    bool      // seeding failed: the feed is gone

	// reservations are the live reservations last published, by holder
	// and glob (reservations.go); anchors counts those of each claim's
	// issue, whose lease's changes may end them.
	reservations map[heldGlob]models.Reservation
	anchors      map[int64]int

	// What the feed's reader goroutine is to read again (under Hub.mu):
	// issues, or all of them (resync), and the reservations (all of them
	// imply those too); reading is true while it runs.
	// Each feed reads on its own goroutine, so one slow read (a seed, a
	// lagging database) delays only its own repository's events.
	dirty    map[int64]struct{}
	dirtyAll bool
	dirtyRes bool
	reading  bool
}

type watcher struct {
	c       chan *Event
	dropped bool // fell behind: c is closed
}

// New returns a hub that reads ledger and hears of changes on bus, with
// now and after its clock (the linger of idle feeds runs on it).
func New(ledger Ledger, bus *changes.Bus, now func() time.Time, after changes.After, o Options) *Hub {
	h := &Hub{ledger: ledger, bus: bus, now: now, opts: o.WithDefaults(),
		epoch: strconv.FormatInt(now().UnixNano(), 36), feeds: map[int64]*feed{}}
	h.readsDone = sync.NewCond(&h.mu)
	h.linger = changes.NewAlarm(now, after, h.fire)
	bus.Subscribe(h.heard)
	return h
}

// Options are the bounds the hub was made with, every zero field set to
// its default (the lease service's streams read Recheck).
func (h *Hub) Options() Options { return h.opts }

func (h *Hub) id(f *feed, seq uint64) string {
	return h.epoch + "-" + f.name + "-" + strconv.FormatUint(seq, 10)
}

// Sub is one watcher of a repository's feed, used by one goroutine.
type Sub struct {
	h     *Hub
	f     *feed
	w     *watcher
	First []*Event // what to send before what C hands on
	// C hands on the feed's events; it is closed when the watcher fell
	// behind and was dropped (ErrFellBehind).
	C <-chan *Event
}

// Close takes the watcher off its feed; a feed left without watchers
// lingers. Closing twice does nothing.
func (s *Sub) Close() { s.h.unsubscribe(s.f, s.w) }

// Subscribe adds a watcher to repoID's feed (made and seeded from the
// ledger if nobody watches it). Its First events are the events after
// lastID, a reset if those are not known, or (no lastID) the stream's
// position.
func (h *Hub) Subscribe(ctx context.Context, repoID int64, lastID string) (*Sub, error) {
	w := &watcher{c: make(chan *Event, h.opts.Buffer)}
	h.mu.Lock()
	f := h.feeds[repoID]
	made := f == nil
	if made {
		// A new name: an id a client saw of an earlier feed of this
		// repository names another feed, since changes nobody watched
		// went untold.
		f = &feed{repoID: repoID, name: strconv.FormatUint(rand.Uint64(), 36), subs: map[*watcher]struct{}{}, leases: map[int64]models.Lease{},
			reservations: map[heldGlob]models.Reservation{}, anchors: map[int64]int{}}
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
			return nil, err
		}
	}
	return &Sub{h: h, f: f, w: w, First: first, C: w.c}, nil
}

// since is what a watcher of f that last saw lastID is sent first.
func (h *Hub) since(f *feed, lastID string) []*Event {
	here := &Event{ID: h.id(f, f.seq)}
	if lastID == "" {
		return []*Event{here}
	}
	parts := strings.Split(lastID, "-")
	var seq uint64
	err := errors.New("not an id of this hub")
	if len(parts) == 3 {
		seq, err = strconv.ParseUint(parts[2], 10, 64)
	}
	if err != nil || parts[0] != h.epoch || parts[1] != f.name || seq > f.seq || seq < f.floor {
		here.Type, here.Data = contract.EventReset, []byte("{}")
		return []*Event{here}
	}
	var out []*Event
	for _, e := range f.ring {
		if e.seq > seq {
			out = append(out, e)
		}
	}
	return out
}

// seed reads the live leases and reservations of a new feed, so that
// their changes and expiries are told from the start.
func (h *Hub) seed(ctx context.Context, f *feed) error {
	defer f.pub.Unlock()
	// The read serves every watcher that joins meanwhile, so the first
	// one's leaving must not cut it short.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readTimeout)
	defer cancel()
	leases, err := h.ledger.List(ctx, f.repoID)
	var rs []models.Reservation
	if err == nil {
		rs, err = h.ledger.Reservations(ctx, f.repoID, "")
	}
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
		h.expireAt(l)
	}
	h.reservationsRead(f, rs, false)
	return nil
}

// expireAt has the bus tell the hub when l expires.
func (h *Hub) expireAt(l models.Lease) {
	if l.ExpiresAt != nil {
		h.bus.ExpireAt(l.Key, *l.ExpiresAt)
	}
}

// unsubscribe takes w off f; a feed left without watchers lingers.
func (h *Hub) unsubscribe(f *feed, w *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := f.subs[w]; !ok {
		return // dropped already, or closed before
	}
	delete(f.subs, w)
	h.watchers--
	h.idle(f)
}

// drop takes w off f and closes its channel (under h.mu).
func (h *Hub) drop(f *feed, w *watcher) {
	delete(f.subs, w)
	h.watchers--
	w.dropped = true
	close(w.c)
}

// idle starts f's linger once it has no watchers (under h.mu).
func (h *Hub) idle(f *feed) {
	if len(f.subs) == 0 && f.idleSince.IsZero() && !f.broken {
		f.idleSince = h.now()
		h.arm()
	}
}

// remove forgets f (under h.mu).
func (h *Hub) remove(f *feed) {
	if h.feeds[f.repoID] == f {
		delete(h.feeds, f.repoID)
		h.nfeeds.Add(-1)
	}
	f.dirty, f.dirtyAll, f.dirtyRes = nil, false, false
}

// heard is the hub's subscription to the bus: it marks what each feed is
// to read again, and leaves the reading to the feed's reader goroutine.
func (h *Hub) heard(set changes.Set) {
	if h.nfeeds.Load() == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range set.Changes {
		switch {
		case c.Reservations: // the repository's reservations, and no lease
			if f := h.feeds[c.Key.RepoID]; f != nil {
				f.dirtyRes = true
				h.startReading(f)
			}
		case c.Key.Issue != 0:
			if f := h.feeds[c.Key.RepoID]; f != nil {
				if f.dirty == nil {
					f.dirty = map[int64]struct{}{}
				}
				f.dirty[c.Key.Issue] = struct{}{}
				h.startReading(f)
			}
		default: // a whole repository (RepoID 0: every one), its reservations too
			for id, f := range h.feeds {
				if c.Key.RepoID == 0 || id == c.Key.RepoID {
					f.dirtyAll = true
					h.startReading(f)
				}
			}
		}
	}
}

// startReading starts f's reader goroutine unless it runs (under h.mu).
func (h *Hub) startReading(f *feed) {
	if !f.reading {
		f.reading = true
		h.readers++
		go h.read(f)
	}
}

// read rereads what heard marked of f until nothing is left (f's reader
// goroutine; one at a time per feed).
func (h *Hub) read(f *feed) {
	for {
		h.mu.Lock()
		if len(f.dirty) == 0 && !f.dirtyAll && !f.dirtyRes {
			f.reading = false
			h.readers--
			h.readsDone.Broadcast()
			h.mu.Unlock()
			return
		}
		dirty, all := f.dirty, f.dirtyAll
		f.dirty, f.dirtyAll = nil, false
		h.mu.Unlock()
		if all {
			h.resync(f) // every issue of f
		}
		for _, n := range slices.Sorted(maps.Keys(dirty)) {
			h.refresh(f, models.Key{RepoID: f.repoID, Issue: n})
		}
		// The reservations after the leases, whose ending may have
		// ended some (leased and released mark them then).
		h.mu.Lock()
		res := all || f.dirtyRes
		f.dirtyRes = false
		h.mu.Unlock()
		if res {
			h.rereadReservations(f)
		}
	}
}

// Settle waits until the hub has read again everything it heard of so
// far (for tests, which then look for what was published: this
// package's, and those of the lease service and the routes, which reach
// the hub through leasetest's World).
func (h *Hub) Settle() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.readers > 0 {
		h.readsDone.Wait()
	}
}

// refresh reads k's live lease and publishes it to f if it differs from
// what f last published.
func (h *Hub) refresh(f *feed, k models.Key) {
	var cur *models.Lease
	h.reading(f, func(ctx context.Context) (err error) {
		cur, err = h.ledger.Current(ctx, k)
		return err
	}, func() { h.refreshed(f, k, cur) })
}

// reading is one read of f's reader goroutine, unless f is gone: read
// reads the ledger, then apply (under h.mu, unless f went meanwhile)
// publishes what differs. A read that fails publishes a reset: what
// changed cannot be told, so everyone refetches.
func (h *Hub) reading(f *feed, read func(ctx context.Context) error, apply func()) {
	f.pub.Lock()
	defer f.pub.Unlock()
	h.mu.Lock()
	gone := h.feeds[f.repoID] != f
	h.mu.Unlock()
	if gone {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	err := read(ctx)
	cancel()
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.feeds[f.repoID] != f:
	case err != nil:
		h.publish(f, &Event{Type: contract.EventReset, Data: []byte("{}")})
	default:
		apply()
	}
}

// refreshed publishes cur, k's live lease (nil: none), to f if it
// differs from what f last published (under h.mu).
func (h *Hub) refreshed(f *feed, k models.Key, cur *models.Lease) {
	prev, had := f.leases[k.Issue]
	switch {
	case cur == nil && !had:
		h.anchorChanged(f, k.Issue) // a claim f never saw ended: its reservations may have
	case cur == nil:
		h.released(f, k.Issue, prev)
	case had && sameLease(prev, *cur):
		// Unchanged: the bus's queue keeps one instant per lease, so ask
		// again for the one it expires at (an earlier one may be what
		// woke this read). At or past its expiry, the ledger's clock has
		// not got there yet: look again a second later.
		if cur.ExpiresAt != nil && !cur.ExpiresAt.After(h.now()) {
			h.bus.ExpireAt(k, h.now().Add(time.Second))
		} else {
			h.expireAt(*cur)
		}
	default:
		h.leased(f, *cur)
	}
}

// resync is refresh for every issue of f's repository at once.
func (h *Hub) resync(f *feed) {
	var leases []models.Lease
	h.reading(f, func(ctx context.Context) (err error) {
		leases, err = h.ledger.List(ctx, f.repoID)
		return err
	}, func() { h.resynced(f, leases) })
}

// resynced publishes what differs between leases, the live ones of f's
// repository, and what f last published (under h.mu).
func (h *Hub) resynced(f *feed, leases []models.Lease) {
	live := make(map[int64]models.Lease, len(leases))
	for _, l := range leases {
		live[l.Issue] = l
	}
	for _, n := range slices.Sorted(maps.Keys(f.leases)) {
		if _, ok := live[n]; !ok {
			h.released(f, n, f.leases[n])
		}
	}
	for _, n := range slices.Sorted(maps.Keys(live)) {
		if prev, had := f.leases[n]; !had || !sameLease(prev, live[n]) {
			h.leased(f, live[n])
		}
	}
}

// leased publishes l as f's lease of its issue (under h.mu).
func (h *Hub) leased(f *feed, l models.Lease) {
	if prev, had := f.leases[l.Issue]; !had || prev.Token != l.Token || prev.Holder != l.Holder {
		h.anchorChanged(f, l.Issue) // a new tenure: the reservations of the old one ended
	}
	f.leases[l.Issue] = l
	data, _ := json.Marshal(View(l))
	h.publish(f, &Event{Type: contract.EventLease, Data: data, issue: l.Issue, kind: l.Kind})
	h.expireAt(l)
}

// released publishes that issue n of f, once leased as prev, is free
// (under h.mu).
func (h *Hub) released(f *feed, n int64, prev models.Lease) {
	h.anchorChanged(f, n)
	delete(f.leases, n)
	data, _ := json.Marshal(contract.ReleasedEvent{Issue: n})
	h.publish(f, &Event{Type: contract.EventReleased, Data: data, issue: n, kind: prev.Kind})
}

// View is l as the contract shows a lease: in events, and in the lease
// service's replies (list, lease).
func View(l models.Lease) contract.LeaseView {
	return contract.LeaseView{Issue: l.Issue, Holder: l.Holder.Login, Agent: contract.AgentPtr(l.Holder.Agent), Token: l.Token,
		AcquiredAt: contract.Time(l.AcquiredAt), ExpiresAt: contract.TimePtr(l.ExpiresAt)}
}

func sameLease(a, b models.Lease) bool {
	return a.Token == b.Token && a.Holder == b.Holder && a.Kind == b.Kind && a.AcquiredAt.Equal(b.AcquiredAt) &&
		(a.ExpiresAt == nil) == (b.ExpiresAt == nil) && (a.ExpiresAt == nil || a.ExpiresAt.Equal(*b.ExpiresAt))
}

// publish numbers e, keeps it for resuming and hands it to every watcher
// of f; a watcher whose buffer is full is dropped (under h.mu).
func (h *Hub) publish(f *feed, e *Event) {
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

// arm sets the linger alarm for the soonest end of an idle feed's
// linger (under h.mu).
func (h *Hub) arm() {
	var next time.Time
	for _, f := range h.feeds {
		if f.idleSince.IsZero() {
			continue
		}
		if end := f.idleSince.Add(h.opts.Linger); next.IsZero() || end.Before(next) {
			next = end
		}
	}
	h.linger.Set(next)
}

// fire forgets the feeds idle past their linger (the alarm went off).
func (h *Hub) fire() {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	for _, f := range h.feeds {
		if len(f.subs) == 0 && !f.idleSince.IsZero() && !now.Before(f.idleSince.Add(h.opts.Linger)) {
			h.remove(f)
		}
	}
	h.arm()
}

// Counts reports the feeds and the watchers (for tests and metrics).
func (h *Hub) Counts() (feeds, watchers int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.feeds), h.watchers
}
