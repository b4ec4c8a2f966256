package routes

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/forgetest"
	"github.com/collab-lease/collab-lease/plugin/lease"
	"github.com/collab-lease/collab-lease/plugin/live"
)

// liveServer is the routes on a real listener whose server has short
// read and write timeouts (which a stream must outlive) and ends the
// streams when it shuts down.
type liveServer struct {
	*fixture
	srv *httptest.Server
}

func newLiveServer(t *testing.T, so StreamOptions, mod ...func(*httptest.Server)) *liveServer {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	srv.Config.ReadTimeout = 300 * time.Millisecond
	srv.Config.WriteTimeout = 300 * time.Millisecond
	f := newFixture(t, func(o *Options) {
		o.Streams = so
		o.RequestTimeout = 250 * time.Millisecond // a stream outlives it too
		o.RegisterOnShutdown = srv.Config.RegisterOnShutdown
	})
	srv.Config.Handler = f.h
	f.forge.Grant("acme/widgets", "alice", forgetest.Write)
	f.forge.Grant("acme/widgets", "bob", forgetest.Write)
	f.forge.Grant("acme/secret", "alice", forgetest.Write)
	for _, m := range mod {
		m(srv)
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return &liveServer{fixture: f, srv: srv}
}

// sseEvent is one message of a stream: an event, an id alone, or a
// comment (the heartbeat).
type sseEvent struct {
	id, event, data, comment string
}

// stream is an open event stream, read into events by a goroutine of
// its own until it ends.
type stream struct {
	resp   *http.Response
	events chan sseEvent
	client *http.Client
}

// open starts a stream of path; headers are "Name: value". It returns
// the response as is when it is not a stream.
func (s *liveServer) open(path string, headers ...string) (*stream, reply) {
	s.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.srv.URL+path, nil)
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Add(k, v)
	}
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, reply{Code: resp.StatusCode, Header: resp.Header, Body: string(b)}
	}
	st := &stream{resp: resp, events: make(chan sseEvent, 1000), client: c}
	go st.read()
	s.t.Cleanup(st.close)
	return st, reply{Code: resp.StatusCode, Header: resp.Header}
}

func (st *stream) read() {
	defer close(st.events)
	r := bufio.NewReader(st.resp.Body)
	var e sseEvent
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimSuffix(line, "\n")
		field, value, _ := strings.Cut(line, ": ")
		switch field {
		case "":
			if line == "" && e != (sseEvent{}) {
				st.events <- e
				e = sseEvent{}
			} else if strings.HasPrefix(line, ":") {
				e.comment = strings.TrimPrefix(line, ": ")
			}
		case "id":
			e.id = value
		case "event":
			e.event = value
		case "data":
			e.data = value
		case "retry":
		}
	}
}

func (st *stream) close() {
	st.resp.Body.Close()
	st.client.CloseIdleConnections()
}

// next is the stream's next message other than a heartbeat.
func (st *stream) next(t *testing.T) sseEvent {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case e, ok := <-st.events:
			if !ok {
				t.Fatal("the stream ended")
			}
			if e.comment != "" {
				continue
			}
			return e
		case <-deadline:
			t.Fatal("no event")
		}
	}
}

func (st *stream) expect(t *testing.T, event, data string) sseEvent {
	t.Helper()
	e := st.next(t)
	if e.event != event || e.data != data {
		t.Fatalf("event %q %s, want %q %s", e.event, e.data, event, data)
	}
	return e
}

// ended waits for the server to end the stream.
func (st *stream) ended(t *testing.T) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-st.events:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("the stream did not end")
		}
	}
}

func (s *liveServer) acquire(login string, n int64, ttl time.Duration) {
	s.t.Helper()
	s.forge.AddIssue("acme/widgets", n, false, false)
	if _, err := s.svc.Acquire(bg, lease.Viewer{User: s.user(login)}, "acme", "widgets", n, ttl); err != nil {
		s.t.Fatal(err)
	}
}

func (s *liveServer) release(login string, n int64) {
	s.t.Helper()
	if _, err := s.svc.Release(bg, lease.Viewer{User: s.user(login)}, "acme", "widgets", n); err != nil {
		s.t.Fatal(err)
	}
}

// streamsDown polls until the service has this many streams.
func (s *liveServer) streamsDown(want int) {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, n := s.hub.Counts(); n == want {
			return
		}
		if time.Now().After(deadline) {
			_, n := s.hub.Counts()
			s.t.Fatalf("%d streams, want %d", n, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// goroutinesBackTo polls until no more goroutines run than base.
func goroutinesBackTo(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(time.Millisecond)
	}
}

const eventsPath = "/api/v1/repos/acme/widgets/leases/events"

// A stream: its headers, its position first, then the changes, with the
// heartbeat in between; it outlives the server's read and write timeouts.
func TestEventStream(t *testing.T) {
	s := newLiveServer(t, StreamOptions{Heartbeat: 50 * time.Millisecond})
	st, r := s.open(eventsPath, "Origin: "+giteaURL)
	if ct := r.Header.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" {
		t.Fatalf("Content-Type %q", ct)
	}
	if r.Header.Get("Cache-Control") != "no-store" || r.Header.Get("Access-Control-Allow-Origin") != giteaURL ||
		r.Header.Get("Access-Control-Allow-Credentials") != "true" {
		t.Fatalf("headers %v", r.Header)
	}
	first := st.next(t)
	if first.id == "" || first.event != "" || first.data != "" {
		t.Fatalf("first message %+v, want the stream's position", first)
	}
	start := time.Now()
	s.acquire("alice", 42, time.Hour)
	st.expect(t, "lease", `{"issue":42,"holder":"alice","agent":null,"token":1,"acquired_at":"2026-09-05T12:00:00Z","expires_at":"2026-09-05T13:00:00Z"}`)
	// Past the server's timeouts, heartbeats go on, and so do events.
	beats := 0
	for time.Since(start) < 2*s.srv.Config.WriteTimeout || beats < 2 {
		e, ok := <-st.events
		if !ok {
			t.Fatal("the stream ended")
		}
		if e.comment != "heartbeat" {
			t.Fatalf("message %+v, want a heartbeat", e)
		}
		beats++
	}
	s.release("alice", 42)
	st.expect(t, "released", `{"issue":42}`)
	s.clock.Advance(time.Minute) // nothing expires
	s.acquire("bob", 7, time.Minute)
	st.expect(t, "lease", `{"issue":7,"holder":"bob","agent":null,"token":1,"acquired_at":"2026-09-05T12:01:00Z","expires_at":"2026-09-05T12:02:00Z"}`)
	s.clock.Advance(time.Minute)
	st.expect(t, "released", `{"issue":7}`)
}

// Who may not read the repository gets the reply of one that does not
// exist, and an invalid token 401, before any stream starts.
func TestEventStreamVisibility(t *testing.T) {
	s := newLiveServer(t, StreamOptions{})
	for _, c := range []struct {
		path    string
		headers []string
		code    int
		body    string
	}{
		{"/api/v1/repos/acme/secret/leases/events", nil, 404, notFoundBody},
		{"/api/v1/repos/acme/nothing/leases/events", nil, 404, notFoundBody},
		{"/api/v1/repos/acme/secret/leases/events", []string{s.sessionFor("erin")}, 404, notFoundBody},
		{eventsPath, []string{"Authorization: token nope"}, 401, `{"error":"invalid token"}`},
	} {
		st, r := s.open(c.path, c.headers...)
		if st != nil || r.Code != c.code || r.Body != c.body {
			t.Fatalf("%s %v: %d %s, want %d %s", c.path, c.headers, r.Code, r.Body, c.code, c.body)
		}
	}
	st, _ := s.open("/api/v1/repos/acme/secret/leases/events", s.sessionFor("carol"))
	st.next(t)
	s.forge.AddIssue("acme/secret", 1, false, false)
	if _, err := s.svc.Acquire(bg, lease.Viewer{User: s.user("alice")}, "acme", "secret", 1, 0); err != nil {
		t.Fatal(err)
	}
	st.expect(t, "lease", `{"issue":1,"holder":"alice","agent":null,"token":1,"acquired_at":"2026-09-05T12:00:00Z","expires_at":null}`)
	if _, err := s.svc.Release(bg, lease.Viewer{User: s.user("alice")}, "acme", "secret", 1); err != nil {
		t.Fatal(err)
	}
	st.expect(t, "released", `{"issue":1}`)
}

// A client that reconnects with Last-Event-ID, or a new EventSource with
// ?last_event_id=, is sent what it missed; from too long ago, a reset.
func TestEventStreamResumes(t *testing.T) {
	s := newLiveServer(t, StreamOptions{})
	st, _ := s.open(eventsPath)
	st.next(t)
	s.acquire("alice", 1, 0)
	first := st.next(t)
	st.close()
	s.streamsDown(0)
	s.acquire("alice", 2, 0)
	// The feed reads the issues a change names in issue order, so it
	// tells this lease before the release below only once it has read it.
	s.hub.Settle()
	s.release("alice", 1)

	again, _ := s.open(eventsPath, "Last-Event-ID: "+first.id)
	again.expect(t, "lease", `{"issue":2,"holder":"alice","agent":null,"token":1,"acquired_at":"2026-09-05T12:00:00Z","expires_at":null}`)
	last := again.expect(t, "released", `{"issue":1}`)
	byQuery, _ := s.open(eventsPath + "?last_event_id=" + first.id)
	byQuery.next(t)
	if e := byQuery.next(t); e.id != last.id {
		t.Fatalf("resumed by query to %s, want %s", e.id, last.id)
	}
	for _, id := range []string{"nonsense", first.id + "0"} {
		reset, _ := s.open(eventsPath, "Last-Event-ID: "+id)
		if e := reset.next(t); e.event != "reset" || e.data != "{}" || e.id == "" {
			t.Fatalf("resume from %q: %+v, want a reset", id, e)
		}
	}
}

// Streams are capped per signed-in account and per address: 429 past
// either, and a slot is free again once its stream ends.
func TestEventStreamCaps(t *testing.T) {
	s := newLiveServer(t, StreamOptions{PerViewer: 2, PerAddress: 3})
	alice := s.sessionFor("alice")
	a1, _ := s.open(eventsPath, alice)
	s.open(eventsPath, alice)
	_, r := s.open(eventsPath, alice)
	expectReply(t, "third stream of alice", r, 429, `{"error":"too many event streams: close one and try again"}`)
	if r.Header.Get("Retry-After") == "" {
		t.Fatal("429 without Retry-After")
	}
	s.open(eventsPath) // anonymous, from the same address: the third
	_, r = s.open(eventsPath, s.sessionFor("bob"))
	expectReply(t, "fourth stream of the address", r, 429, `{"error":"too many event streams: close one and try again"}`)
	a1.close()
	s.streamsDown(2)
	if st, r := s.open(eventsPath, s.sessionFor("bob")); st == nil {
		t.Fatalf("after a stream ended: %d %s", r.Code, r.Body)
	}
}

// A stream whose client closes it, one whose viewer loses access, and one
// whose client stops reading each end without leaking a goroutine, and
// the others get their events all the while.
func TestEventStreamsEndWithoutLeaks(t *testing.T) {
	s := newLiveServer(t, StreamOptions{WriteTimeout: 200 * time.Millisecond}, func(srv *httptest.Server) {
		srv.Listener = smallBuffers{srv.Listener}
		srv.Config.WriteTimeout = 0 // only the stream's own write deadline ends a stuck write
	})
	long := strings.Repeat("l", 200) // a long login makes events big
	s.forge.AddUser(long)
	s.forge.Grant("acme/widgets", long, forgetest.Write)
	base := runtime.NumGoroutine()

	fast, _ := s.open(eventsPath)
	fast.next(t)
	closed, _ := s.open(eventsPath)
	closed.next(t)
	lost, _ := s.open("/api/v1/repos/acme/secret/leases/events", s.sessionFor("carol"))
	lost.next(t)
	slow := s.dialSlow(eventsPath)
	s.streamsDown(4)

	closed.close()
	s.streamsDown(3)
	s.forge.Grant("acme/secret", "carol", forgetest.None)
	s.clock.Advance(live.DefaultRecheck)
	lost.ended(t)
	s.streamsDown(2)

	// Events until the slow stream is dropped; the fast one gets each at once.
	for i := int64(1); ; i++ {
		if i > 5000 {
			t.Fatal("the slow stream was never dropped")
		}
		s.acquire(long, i, 0)
		if e := fast.next(t); e.event != "lease" || !strings.Contains(e.data, fmt.Sprintf(`"issue":%d,`, i)) {
			t.Fatalf("fast stream: %+v", e)
		}
		if _, n := s.hub.Counts(); n == 1 {
			break
		}
	}
	// The slow client still holds its connection, reading nothing: the
	// server gave up on it by its write deadline.
	fast.close()
	s.streamsDown(0)
	s.clock.Advance(live.DefaultLinger) // the feeds linger out, and the hub's timer with them
	goroutinesBackTo(t, base)
	slow.Close()
}

// smallBuffers makes the server's send buffers small, so that a client
// that stops reading blocks the server's writes soon.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(1024)
	}
	return c, err
}

// dialSlow starts a stream whose client reads the first bytes and then
// nothing more, with a small receive buffer.
func (s *liveServer) dialSlow(path string) net.Conn {
	s.t.Helper()
	c, err := net.Dial("tcp", s.srv.Listener.Addr().String())
	if err != nil {
		s.t.Fatal(err)
	}
	_ = c.(*net.TCPConn).SetReadBuffer(1024)
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: sidecar\r\n\r\n", path); err != nil {
		s.t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 64)); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { c.Close() })
	return c
}

// The server's shutdown ends the streams rather than waiting for them
// for its whole grace.
func TestShutdownEndsEventStreams(t *testing.T) {
	s := newLiveServer(t, StreamOptions{})
	st, _ := s.open(eventsPath)
	st.next(t)
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	if err := s.srv.Config.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	st.ended(t)
}

// A path reservation made is told as "reserved", one removed as
// "unreserved", each with the reservation's JSON.
func TestEventStreamTellsReservations(t *testing.T) {
	s := newLiveServer(t, StreamOptions{})
	st, _ := s.open(eventsPath)
	st.next(t)
	alice := lease.Viewer{User: s.user("alice")}
	if _, err := s.svc.Reserve(bg, alice, "acme", "widgets", lease.ReserveRequest{Globs: []string{"src/<a>/**"}, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	const data = `{"glob":"src/\u003ca\u003e/**","shared":false,"holder":"alice","agent":null,"issue":null,"expires_at":"2026-09-05T13:00:00Z"}`
	st.expect(t, "reserved", data)
	if _, err := s.svc.Unreserve(bg, alice, "acme", "widgets", nil, 0, false); err != nil {
		t.Fatal(err)
	}
	st.expect(t, "unreserved", data)
}
