package ssh

import (
	"container/list"
	"time"
)

// takeSlot reserves one of MaxConns for a new connection. When all are
// taken, a connection still in its handshake gives way (see evictLocked),
// so stalled handshakes cannot hold every slot; authenticated connections
// are never pushed out.
func (s *Server) takeSlot() bool {
	select {
	case s.slots <- struct{}{}:
		return true
	default:
	}
	if !s.evictStartup() {
		return false
	}
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case s.slots <- struct{}{}: // the evicted connection's goroutine frees its slot
		return true
	case <-t.C:
		return false
	}
}

func (s *Server) evictStartup() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.evictLocked()
}

// startupGrace is how long a new connection is spared from eviction by
// bytes: within it a real client has sent its version line and key
// exchange offer (one round trip), while a staller has sent nothing or its
// version line only.
const startupGrace = 500 * time.Millisecond

// evictLocked closes one connection in the handshake. Among those past
// startupGrace, it picks the one that has sent the fewest bytes (the
// oldest, on a tie), so a client that stalls goes before a client that is
// exchanging keys; if every connection is younger than that, the oldest.
// (A flood of more than MaxStartups new connections within startupGrace
// can therefore push out a real client that arrived amid it: it must
// retry, as with OpenSSH's MaxStartups.) Ages are read on s.Clock.
func (s *Server) evictLocked() bool {
	var victim *list.Element
	least := int64(-1)
	now := s.Clock()
	for e := s.startups.Front(); e != nil; e = e.Next() {
		c := e.Value.(*serverConn)
		if now.Sub(c.since) < startupGrace {
			break // the list is in arrival order: the rest are younger still
		}
		if got := c.idle.got.Load(); least < 0 || got < least {
			victim, least = e, got
		}
	}
	if victim == nil {
		victim = s.startups.Front()
	}
	if victim == nil {
		return false
	}
	c := s.startups.Remove(victim).(*serverConn)
	c.startup = nil
	_ = c.Close()
	return true
}

// beginStartup counts c among the connections in the handshake, evicting
// one (see evictLocked) when there are MaxStartups already, so stalled
// clients cannot keep others from authenticating.
func (s *Server) beginStartup(c *serverConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.startups.Len() >= s.MaxStartups && s.evictLocked() {
	}
	c.startup = s.startups.PushBack(c)
}

func (s *Server) endStartup(c *serverConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.startup != nil {
		s.startups.Remove(c.startup)
		c.startup = nil
	}
}
