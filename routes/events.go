package routes

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/lease"
	"github.com/collab-lease/collab-lease/plugin/live"
)

// Live events: GET /api/v1/repos/{owner}/{repo}/leases/events streams the
// repository's lease changes that the viewer may see as Server-Sent
// Events (docs/http.md, Live events), from the lease service's Watch: one "lease" or
// "released" event per change, one "reserved" or "unreserved" per path
// reservation made or ended, each with an id; a client that reconnects
// with Last-Event-ID (or ?last_event_id=, for a new EventSource) is sent
// what it missed, or a "reset" when that is no longer known. A comment
// line every heartbeat keeps proxies from closing an idle stream.
//
// A stream holds a connection for as long as the page is open, so
// streams are bounded per signed-in account and per client address
// (429 past either), and each write has its own deadline in place of
// the server's write timeout (a client that stops reading is dropped,
// never waited for).
// The server's shutdown ends every stream.

// EventsPath is the route of the live events.
const EventsPath = "/api/v1/repos/:owner/:repo/leases/events"

// Defaults of StreamOptions.
const (
	DefaultStreamsPerViewer   = 10
	DefaultStreamsPerAddress  = 50
	DefaultHeartbeat          = 20 * time.Second
	DefaultStreamWriteTimeout = 10 * time.Second
)

// streamRetry is the reconnection delay a stream asks browsers to use
// after it drops (the SSE "retry:" field), in milliseconds.
const streamRetry = 2000

// StreamOptions bound the live event streams; a zero field keeps its
// default.
type StreamOptions struct {
	// PerViewer is how many streams one signed-in account (or API
	// token's owner) may hold at once (DefaultStreamsPerViewer).
	PerViewer int
	// PerAddress is how many streams one client address may hold at
	// once, signed in or not (DefaultStreamsPerAddress).
	PerAddress int
	// Heartbeat is how often an idle stream sends a comment line
	// (DefaultHeartbeat).
	Heartbeat time.Duration
	// WriteTimeout is how long one write to a stream may take before the
	// stream is ended (DefaultStreamWriteTimeout).
	WriteTimeout time.Duration
}

func (o StreamOptions) withDefaults() StreamOptions {
	if o.PerViewer <= 0 {
		o.PerViewer = DefaultStreamsPerViewer
	}
	if o.PerAddress <= 0 {
		o.PerAddress = DefaultStreamsPerAddress
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultStreamWriteTimeout
	}
	return o
}

// streams counts the open streams, for the caps, and ends them all when
// the server shuts down.
type streams struct {
	opts StreamOptions

	mu        sync.Mutex
	byViewer  map[int64]int
	byAddress map[string]int
	open      map[*streamSlot]struct{}
	closed    bool
}

type streamSlot struct {
	viewer  int64
	address string
	session bool // its viewer is signed in by a session cookie
	cancel  context.CancelFunc
}

func newStreams(o StreamOptions) *streams {
	return &streams{opts: o.withDefaults(), byViewer: map[int64]int{}, byAddress: map[string]int{}, open: map[*streamSlot]struct{}{}}
}

// take admits a stream of viewer (0: anonymous, counted by address only)
// from address, or refuses it; the stream's context ends with ctx or at
// shutdown. done gives the slot back.
func (s *streams) take(ctx context.Context, viewer int64, address string, session bool) (_ context.Context, done func(), _ error) {
	address = streamAddress(address)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, nil, errShuttingDown
	case viewer != 0 && s.byViewer[viewer] >= s.opts.PerViewer, s.byAddress[address] >= s.opts.PerAddress:
		return nil, nil, errTooManyStreams
	}
	ctx, cancel := context.WithCancel(ctx)
	slot := &streamSlot{viewer: viewer, address: address, session: session, cancel: cancel}
	s.open[slot] = struct{}{}
	if viewer != 0 {
		s.byViewer[viewer]++
	}
	s.byAddress[address]++
	return ctx, func() { s.give(slot) }, nil
}

func (s *streams) give(slot *streamSlot) {
	slot.cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.open[slot]; !ok {
		return
	}
	delete(s.open, slot)
	if slot.viewer != 0 {
		if s.byViewer[slot.viewer]--; s.byViewer[slot.viewer] <= 0 {
			delete(s.byViewer, slot.viewer)
		}
	}
	if s.byAddress[slot.address]--; s.byAddress[slot.address] <= 0 {
		delete(s.byAddress, slot.address)
	}
}

// endSessions ends the streams of viewer's browser sessions (it signed
// out: its session cookies no longer count).
func (s *streams) endSessions(viewer int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for slot := range s.open {
		if slot.session && slot.viewer == viewer {
			slot.cancel()
		}
	}
}

// streamAddress is the client as the cap per address counts it: its IPv4
// address or its IPv6 /64 (plugin.ClientPrefix).
func streamAddress(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	return forge.ClientPrefix(a).String()
}

// closeAll ends every stream, and refuses new ones (the server is
// shutting down).
func (s *streams) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for slot := range s.open {
		slot.cancel()
	}
}

// leaseEvents answers GET …/leases/events with the stream.
func (h *handler) leaseEvents(c *gin.Context) {
	// What comes before the stream is bounded by the request timeout (the
	// deadline middleware leaves this route alone); the stream itself
	// lasts as long as its client, or until shutdown.
	client := c.Request.Context()
	setup, cancel := context.WithTimeout(client, h.timeout)
	defer cancel()
	c.Request = c.Request.WithContext(setup)
	v, err := h.viewer(c)
	if err != nil {
		h.fail(c, err)
		return
	}
	// A viewer signed in by a session cookie (no token) must stay signed
	// in: the stream ends when the cookie expires or its account signs
	// out (here: at once; on another replica: at the next check).
	session := v.ID != 0 && v.Token == ""
	ctx, done, err := h.streams.take(client, v.ID, c.RemoteIP(), session)
	if err != nil {
		h.fail(c, err)
		return
	}
	defer done()
	lastID := c.GetHeader("Last-Event-ID")
	if lastID == "" {
		lastID = c.Query("last_event_id")
	}
	wt, err := h.leases.Watch(setup, v, c.Param("owner"), c.Param("repo"), lastID)
	if err != nil {
		h.fail(c, err)
		return
	}
	defer wt.Close()
	var still func() bool
	if session {
		req := c.Request
		still = func() bool {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(client), h.timeout)
			defer cancel()
			u, ok, err := h.sessionOf(req.WithContext(ctx))
			// A ledger that cannot answer right now ends nothing.
			return err != nil || (ok && u.ID == v.ID)
		}
	}
	h.stream(ctx, c.Writer, wt, still)
}

// stream writes wt's events to w until the client goes, a write does not
// finish within the write timeout, or wt ends (the viewer lost access,
// the stream fell behind: its client reconnects and resumes).
//
// still, if set, says whether the viewer is still signed in; it is asked
// once per heartbeat interval.
func (h *handler) stream(ctx context.Context, w http.ResponseWriter, wt *lease.Watch, still func() bool) {
	// The server's write timeout, meant for short requests, would end the
	// stream: each write below has a deadline of its own instead.
	rc := http.NewResponseController(w)
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream; charset=utf-8")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no") // a proxy must not hold events back
	w.WriteHeader(http.StatusOK)
	buf := []byte("retry: " + strconv.Itoa(streamRetry) + "\n\n")
	checked := time.Now()
	for {
		if still != nil && time.Since(checked) >= h.streams.opts.Heartbeat {
			if !still() {
				return
			}
			checked = time.Now()
		}
		if buf != nil {
			if err := h.send(rc, w, buf); err != nil {
				return
			}
			buf = buf[:0]
		}
		beat, cancel := context.WithTimeout(ctx, h.streams.opts.Heartbeat)
		e, err := wt.Next(beat)
		cancel()
		switch {
		case err == nil:
			buf = appendEvent(buf, e)
		case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			buf = append(buf, ": heartbeat\n\n"...)
		case ctx.Err() != nil:
			return // the client went away, or the server is shutting down
		default:
			if !errors.Is(err, live.ErrFellBehind) && !errors.Is(err, lease.ErrRepoNotFound) {
				h.log.Warn("event stream ended", "err", err)
			}
			return
		}
	}
}

// send writes b and flushes it, within the write timeout.
func (h *handler) send(rc *http.ResponseController, w io.Writer, b []byte) error {
	_ = rc.SetWriteDeadline(time.Now().Add(h.streams.opts.WriteTimeout))
	if _, err := w.Write(b); err != nil {
		return err
	}
	return rc.Flush()
}

// appendEvent renders one event: its id, its name and its JSON (which has
// no line breaks); an event without a name is only its id, which moves
// the client's Last-Event-ID without dispatching anything.
func appendEvent(b []byte, e live.Event) []byte {
	b = append(append(append(b, "id: "...), e.ID...), '\n')
	if e.Type != "" {
		b = append(append(append(b, "event: "...), e.Type...), '\n')
		b = append(append(append(b, "data: "...), e.Data...), '\n')
	}
	return append(b, '\n')
}
