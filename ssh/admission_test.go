package ssh

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/clocktest"
)

// closeConn is a connection that only records being closed.
type closeConn struct {
	net.Conn
	closed atomic.Bool
}

func (c *closeConn) Close() error { c.closed.Store(true); return nil }

// Handshake eviction reads ages on the server's Clock: which connection
// gives way, on each side of the grace period, without sleeping.
func TestEvictionGraceOnTheInjectedClock(t *testing.T) {
	const ms = time.Millisecond
	type conn struct {
		arrived time.Duration // after the first
		got     int64         // bytes the client has sent
	}
	for _, tc := range []struct {
		name    string
		conns   []conn
		now     time.Duration // after the first arrived
		evicted int
	}{
		{"all within the grace: the oldest, whatever it sent",
			[]conn{{0, 200}, {100 * ms, 0}}, startupGrace - ms, 0},
		{"only the oldest past the grace: it",
			[]conn{{0, 200}, {100 * ms, 0}}, 100*ms + startupGrace - ms, 0},
		{"both past the grace: the one that sent least",
			[]conn{{0, 200}, {100 * ms, 0}}, 100*ms + startupGrace, 1},
		{"a tie: the oldest",
			[]conn{{0, 7}, {100 * ms, 7}}, time.Hour, 0},
		{"a young staller is spared until its grace ends",
			[]conn{{0, 200}, {100 * ms, 10}, {450 * ms, 0}}, 100*ms + startupGrace, 1},
		{"then it goes first",
			[]conn{{0, 200}, {100 * ms, 10}, {450 * ms, 0}}, 450*ms + startupGrace, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := clocktest.Start
			clk := clocktest.New()
			s := &Server{MaxStartups: len(tc.conns), Clock: clk.Now}
			s.init()
			raw := make([]*closeConn, len(tc.conns))
			for i, c := range tc.conns {
				clk.Set(start.Add(c.arrived))
				raw[i] = &closeConn{}
				idle := newIdleConn(raw[i], time.Minute, time.Minute)
				idle.got.Store(c.got)
				s.beginStartup(&serverConn{Conn: idle, idle: idle, since: s.Clock()})
			}
			clk.Set(start.Add(tc.now))
			if !s.evictStartup() {
				t.Fatal("nothing evicted")
			}
			for i, c := range raw {
				if c.closed.Load() != (i == tc.evicted) {
					t.Errorf("connection %d closed: %v; want only %d closed", i, c.closed.Load(), tc.evicted)
				}
			}
			if n := s.startups.Len(); n != len(tc.conns)-1 {
				t.Errorf("%d connections left in the handshake, want %d", n, len(tc.conns)-1)
			}
		})
	}
}

// A new connection beyond MaxStartups evicts one, by the same rule.
func TestBeginStartupEvictsAtMaxStartups(t *testing.T) {
	clk := clocktest.New()
	s := &Server{MaxStartups: 2, Clock: clk.Now}
	s.init()
	var raw []*closeConn
	for _, got := range []int64{300, 0, 50} {
		c := &closeConn{}
		raw = append(raw, c)
		idle := newIdleConn(c, time.Minute, time.Minute)
		idle.got.Store(got)
		s.beginStartup(&serverConn{Conn: idle, idle: idle, since: s.Clock()})
		clk.Advance(startupGrace)
	}
	if raw[0].closed.Load() || !raw[1].closed.Load() || raw[2].closed.Load() || s.startups.Len() != 2 {
		t.Fatalf("closed %v %v %v, %d left; want only the silent one closed, 2 left",
			raw[0].closed.Load(), raw[1].closed.Load(), raw[2].closed.Load(), s.startups.Len())
	}
}
