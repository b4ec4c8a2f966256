package ssh

import (
	"container/list"
	"net"
	"net/netip"
	"time"

	"github.com/collab-lease/collab-lease/plugin/forge"
	gossh "golang.org/x/crypto/ssh"
)

// takeSlot reserves one of MaxConns for a new connection. When all are
// taken, a connection still in its handshake gives way (see evictLocked),
// so stalled handshakes cannot hold every slot; failing that, the oldest
// connection let in for ShortLife only (see doom). Connections that run
// commands as an account are never pushed out.
func (s *Server) takeSlot() bool {
	select {
	case s.slots <- struct{}{}:
		return true
	default:
	}
	if !s.evictStartup() && !s.evictDoomed() {
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
	return s.evictWhereLocked(func(*serverConn) bool { return true })
}

// evictWhereLocked is evictLocked among the handshakes that match.
func (s *Server) evictWhereLocked(match func(*serverConn) bool) bool {
	var victim, oldest *list.Element
	least := int64(-1)
	now := s.Clock()
	for e := s.startups.Front(); e != nil; e = e.Next() {
		c := e.Value.(*serverConn)
		if !match(c) {
			continue
		}
		if oldest == nil {
			oldest = e
		}
		if now.Sub(c.since) < startupGrace {
			break // the list is in arrival order: the rest are younger still
		}
		if got := c.idle.got.Load(); least < 0 || got < least {
			victim, least = e, got
		}
	}
	if victim == nil {
		victim = oldest
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

// doom lists c among the connections let in for ShortLife only.
func (s *Server) doom(c *serverConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c.doomed = s.doomed.PushBack(c)
}

// evictDoomed closes the oldest connection let in for ShortLife only.
func (s *Server) evictDoomed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.evictDoomedWhereLocked(func(*serverConn) bool { return true })
}

func (s *Server) evictDoomedWhereLocked(match func(*serverConn) bool) bool {
	for e := s.doomed.Front(); e != nil; e = e.Next() {
		c := e.Value.(*serverConn)
		if !match(c) {
			continue
		}
		s.doomed.Remove(e)
		c.doomed = nil
		_ = c.Close()
		return true
	}
	return false
}

// forget drops c from the doomed list and its account's count.
func (s *Server) forget(c *serverConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.doomed != nil {
		s.doomed.Remove(c.doomed)
		c.doomed = nil
	}
	if c.account != 0 {
		if s.perAcct[c.account]--; s.perAcct[c.account] <= 0 {
			delete(s.perAcct, c.account)
		}
		c.account = 0
	}
}

// countAccount counts c for its account, unless the account already has
// MaxConnsPerAccount connections.
func (s *Server) countAccount(c *serverConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.perAcct[c.info.UserID] >= s.MaxConnsPerAccount {
		return false
	}
	s.perAcct[c.info.UserID]++
	c.account = c.info.UserID
	return true
}

// addrOf is the client address as the per-address cap counts it: the IP,
// or its /64 for IPv6 (one host usually holds a whole /64). Anything else
// (a Unix socket, a test pipe) counts as one unknown address.
func addrOf(a net.Addr) netip.Prefix {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Prefix{}
	}
	return forge.ClientPrefix(ap.Addr())
}

// countAddr counts a new connection from addr. When addr already has
// MaxConnsPerAddr, one of its own connections gives way as takeSlot picks
// one (in the handshake, else let in for ShortLife only), so an address's
// stalled handshakes cannot lock out its real clients (who share it behind
// a NAT); if all of them run commands as an account, the new one is
// refused. (The evicted connection is uncounted when its goroutine ends,
// so an address may briefly hold one more.)
func (s *Server) countAddr(addr netip.Prefix) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.countAddrLocked(addr)
}

func (s *Server) countAddrLocked(addr netip.Prefix) bool {
	if s.perAddr[addr] >= s.MaxConnsPerAddr {
		same := func(c *serverConn) bool { return c.counted && c.addr == addr }
		if !s.evictWhereLocked(same) && !s.evictDoomedWhereLocked(same) {
			return false
		}
	}
	s.perAddr[addr]++
	return true
}

func (s *Server) uncountAddr(addr netip.Prefix) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.uncountAddrLocked(addr)
}

func (s *Server) uncountAddrLocked(addr netip.Prefix) {
	if s.perAddr[addr]--; s.perAddr[addr] <= 0 {
		delete(s.perAddr, addr)
	}
}

// uncount gives back c's place among its address's connections, if it
// was counted (a balancer's connection is counted only once its header
// has named the client).
func (s *Server) uncount(c *serverConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.counted {
		c.counted = false
		s.uncountAddrLocked(c.addr)
	}
}

// proxiedConn is a connection from a trusted load balancer whose client's
// address comes first on the connection, in a PROXY protocol header
// (proxyheader.Conn): reading it may take as long as the balancer takes,
// so it is read on the connection's own goroutine, never in Serve's loop.
type proxiedConn interface {
	net.Conn
	// ReadHeader reads the header (once; RemoteAddr is then the client's)
	// and says why the connection must go, having logged it, or nil.
	ReadHeader() error
	// Balancer is the address the connection came from.
	Balancer() net.Addr
}

// acceptProxied admits a balancer's connection before its client is
// known: it takes a slot and joins the handshakes at once, so the header
// is bounded by HandshakeTimeout and a balancer's connection that stalls
// is evicted as any stalled handshake is (it has sent nothing the server
// counts); its address is counted once the header names it (admitProxied,
// on the connection's goroutine).
func (s *Server) acceptProxied(c proxiedConn, cfg *gossh.ServerConfig) {
	if !s.takeSlot() {
		s.Logger.Warn("connection refused: too many connections", "balancer", c.Balancer().String(), "max", s.MaxConns)
		_ = c.Close()
		return
	}
	idle := newIdleConn(c, s.IdleTimeout, s.WriteTimeout)
	sc := &serverConn{Conn: idle, idle: idle, since: s.Clock(), proxied: c}
	_ = c.SetDeadline(time.Now().Add(s.HandshakeTimeout))
	s.beginStartup(sc)
	go s.handleConn(sc, cfg)
}

// admitProxied reads c's PROXY header and counts the client it names as
// Serve counts a direct connection's address (countAddr); false means c
// must go.
func (s *Server) admitProxied(c *serverConn) bool {
	if c.proxied.ReadHeader() != nil {
		return false // logged by ReadHeader
	}
	addr := addrOf(c.RemoteAddr())
	s.mu.Lock()
	ok := s.countAddrLocked(addr)
	if ok {
		c.addr, c.counted = addr, true
	}
	s.mu.Unlock()
	if !ok {
		s.Logger.Warn("connection refused: too many connections from one address", "remote", c.RemoteAddr().String(),
			"balancer", c.proxied.Balancer().String(), "max", s.MaxConnsPerAddr)
	}
	return ok
}
