package ssh

import (
	"container/list"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("ssh: server closed")

// Server is an SSH server for exec requests of clients known by their key:
// it admits connections (MaxConns, MaxStartups, evicting stalled
// handshakes; a load balancer's connection that names its client in a
// PROXY protocol header, as proxyheader's listener gives it, counts as
// that client once the header is read), resolves each key through Keys,
// bounds what a connection may hold, how long it may idle and how long it
// may leave what it is sent untaken, hands exec and shell requests to
// Handler, and shuts down without losing replies. Everything else a client
// may ask for (pty, env, subsystems, forwarding) is refused.
//
// Set the fields, then call Serve. Zero values of the limits take the
// defaults below.
type Server struct {
	HostKey gossh.Signer // required
	Keys    Keys         // required: who owns a key
	Handler Handler      // required: the answers
	Logger  *slog.Logger // nil: slog.Default()

	HandshakeTimeout time.Duration // from accept to authenticated (default 10s)
	IdleTimeout      time.Duration // no traffic on a connection (default 2m)
	// WriteTimeout bounds how long the server waits for a client to take
	// what it sends (default 10s): a write to the socket that makes no
	// progress, or a piece of a reply (at most 32 KiB) that the client's
	// session window does not let out, for that long closes the
	// connection. So a client that stops reading cannot pin a session, and
	// Shutdown waits for it no longer than this.
	WriteTimeout   time.Duration
	CommandTimeout time.Duration // one command, forge calls included (default 15s)
	MaxConns       int           // concurrent connections (default 1024)
	MaxAuthTries   int           // per connection (default 6)
	// MaxStartups caps connections still in the handshake (default:
	// MaxConns). When it is reached, or all MaxConns are taken, a new
	// connection evicts one that has not authenticated yet (see
	// evictLocked), so clients that stall cannot lock others out.
	MaxStartups int
	// MaxSessions caps open sessions per connection (default 10).
	MaxSessions int
	// SessionStartTimeout closes a session that has asked for neither exec
	// nor shell by then (default 10s).
	SessionStartTimeout time.Duration
	// MaxKeyLookups caps concurrent key lookups at the forge (default 8),
	// so a flood of unknown keys cannot flood Gitea.
	MaxKeyLookups int
	// MaxConnsPerAddr caps the connections from one client address
	// (default MaxConns/8); past it a new one is closed at once. IPv6
	// addresses count per /64.
	MaxConnsPerAddr int
	// MaxConnsPerAccount caps the authenticated connections of one Gitea
	// account (default MaxConns/4); past it a connection is let in only
	// to answer every command with exit 75, and goes after ShortLife.
	MaxConnsPerAccount int
	// ShortLife is how long a connection may stay that was let in
	// without an identity to run commands as (the forge could not resolve
	// its key, or its account is over MaxConnsPerAccount): long enough
	// to answer its commands with exit 75, never kept open by traffic
	// (default 10s). When every slot is taken, such connections are the
	// first pushed out after those still in the handshake.
	ShortLife time.Duration

	// ConnDelta, if set, is told +1 when a connection is accepted and -1
	// when it closes (for metrics).
	ConnDelta func(delta int)
	// Clock tells the time for handshake eviction (nil: time.Now), so
	// tests can age connections without sleeping. Socket deadlines are
	// the kernel's and always use the real time.
	Clock func() time.Time

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*serverConn]struct{}
	closing   atomic.Bool
	commands  sync.WaitGroup // commands running
	open      sync.WaitGroup // tracked connections
	slots     chan struct{}
	lookups   chan struct{}
	startups  *list.List // *serverConn still in the handshake, oldest first
	// doomed holds the connections let in for ShortLife only, oldest
	// first: eviction's second choice.
	doomed   *list.List
	perAddr  map[netip.Prefix]int // connections per client address
	perAcct  map[int64]int        // authenticated connections per account
	initOnce sync.Once
	// keepalives counts the keepalive requests sent to clients that wait.
	keepalives atomic.Int64
	// stopping ends every open session (Sessioned) at Shutdown and
	// Close, with the cause ErrShuttingDown.
	stopping context.Context
	stop     context.CancelCauseFunc
}

type serverConn struct {
	net.Conn
	idle     *idleConn
	info     ConnInfo      // set once authenticated
	ssh      gossh.Conn    // set once authenticated
	active   atomic.Int32  // commands running on this connection
	sessions atomic.Int32  // open sessions on this connection
	startup  *list.Element // in Server.startups while in the handshake
	doomed   *list.Element // in Server.doomed while let in for ShortLife
	since    time.Time     // when the connection was accepted, on Clock
	addr     netip.Prefix  // the client's address, as perAddr counts it
	counted  bool          // addr is counted in perAddr
	// proxied is set while the connection's client address is still to
	// be read from the balancer's PROXY header (see acceptProxied).
	proxied proxiedConn
	account int64 // the account counted in perAcct (0: none)
}

func (s *Server) init() {
	s.initOnce.Do(func() {
		if s.Logger == nil {
			s.Logger = slog.Default()
		}
		if s.Clock == nil {
			s.Clock = time.Now
		}
		if s.HandshakeTimeout <= 0 {
			s.HandshakeTimeout = 10 * time.Second
		}
		if s.IdleTimeout <= 0 {
			s.IdleTimeout = 2 * time.Minute
		}
		if s.WriteTimeout <= 0 {
			s.WriteTimeout = 10 * time.Second
		}
		if s.CommandTimeout <= 0 {
			s.CommandTimeout = 15 * time.Second
		}
		if s.MaxConns <= 0 {
			s.MaxConns = 1024
		}
		if s.MaxAuthTries <= 0 {
			s.MaxAuthTries = 6
		}
		if s.MaxStartups <= 0 {
			s.MaxStartups = s.MaxConns
		}
		if s.MaxSessions <= 0 {
			s.MaxSessions = 10
		}
		if s.SessionStartTimeout <= 0 {
			s.SessionStartTimeout = 10 * time.Second
		}
		if s.MaxKeyLookups <= 0 {
			s.MaxKeyLookups = 8
		}
		if s.MaxConnsPerAddr <= 0 {
			s.MaxConnsPerAddr = max(s.MaxConns/8, 1)
		}
		if s.MaxConnsPerAccount <= 0 {
			s.MaxConnsPerAccount = max(s.MaxConns/4, 1)
		}
		if s.ShortLife <= 0 {
			s.ShortLife = 10 * time.Second
		}
		s.doomed = list.New()
		s.perAddr = map[netip.Prefix]int{}
		s.perAcct = map[int64]int{}
		s.slots = make(chan struct{}, s.MaxConns)
		s.lookups = make(chan struct{}, s.MaxKeyLookups)
		s.startups = list.New()
		s.listeners = map[net.Listener]struct{}{}
		s.conns = map[*serverConn]struct{}{}
		s.stopping, s.stop = context.WithCancelCause(context.Background())
	})
}

func (s *Server) config() *gossh.ServerConfig {
	cfg := &gossh.ServerConfig{
		MaxAuthTries:              s.MaxAuthTries,
		ServerVersion:             "SSH-2.0-collab-lease",
		PublicKeyCallback:         s.offered,
		VerifiedPublicKeyCallback: s.authenticate,
	}
	cfg.AddHostKey(s.HostKey)
	return cfg
}

// Serve accepts connections on l until Shutdown or Close. It always
// returns a non-nil error; after Shutdown or Close, ErrServerClosed.
func (s *Server) Serve(l net.Listener) error {
	s.init()
	if s.HostKey == nil || s.Keys == nil || s.Handler == nil {
		return errors.New("ssh: Server needs HostKey, Keys and Handler")
	}
	if s.closing.Load() {
		return ErrServerClosed
	}
	s.mu.Lock()
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
		_ = l.Close()
	}()
	cfg := s.config()
	for {
		c, err := l.Accept()
		if err != nil {
			if s.closing.Load() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		if pc, ok := c.(proxiedConn); ok {
			s.acceptProxied(pc, cfg)
			continue
		}
		addr := addrOf(c.RemoteAddr())
		if !s.countAddr(addr) {
			s.Logger.Warn("connection refused: too many connections from one address", "remote", c.RemoteAddr().String(), "max", s.MaxConnsPerAddr)
			_ = c.Close()
			continue
		}
		if !s.takeSlot() {
			s.uncountAddr(addr)
			s.Logger.Warn("connection refused: too many connections", "remote", c.RemoteAddr().String(), "max", s.MaxConns)
			_ = c.Close()
			continue
		}
		// Counted among the handshakes here, in arrival order, so that
		// eviction's "oldest" means the first accepted.
		idle := newIdleConn(c, s.IdleTimeout, s.WriteTimeout)
		sc := &serverConn{Conn: idle, idle: idle, since: s.Clock(), addr: addr, counted: true}
		_ = c.SetDeadline(time.Now().Add(s.HandshakeTimeout))
		s.beginStartup(sc)
		go s.handleConn(sc, cfg)
	}
}

func (s *Server) handleConn(c *serverConn, cfg *gossh.ServerConfig) {
	defer func() { <-s.slots }()
	defer s.uncount(c)
	defer s.endStartup(c)
	defer s.forget(c)
	if s.ConnDelta != nil {
		s.ConnDelta(1)
		defer s.ConnDelta(-1)
	}
	defer c.Close()
	if !s.track(c) {
		return
	}
	defer s.untrack(c)
	if c.proxied != nil && !s.admitProxied(c) {
		return
	}
	defer func() {
		if c.idle.stalled.Load() {
			s.Logger.Warn("connection closed: the client took nothing of the reply", "remote", c.RemoteAddr().String(),
				"user", c.info.Login, "write_timeout", s.WriteTimeout.String())
		}
	}()

	sconn, chans, reqs, err := gossh.NewServerConn(c, cfg)
	s.endStartup(c)
	if err != nil {
		if !errors.Is(err, io.EOF) {
			s.Logger.Debug("handshake failed", "remote", c.RemoteAddr().String(), "err", err)
		}
		return
	}
	c.info, c.ssh = connInfo(sconn), sconn
	if !c.info.Unavailable && !s.countAccount(c) {
		c.info.Crowded = true
		s.Logger.Warn("connection let in to answer exit 75: too many connections for one account",
			"user", c.info.Login, "remote", c.RemoteAddr().String(), "max", s.MaxConnsPerAccount)
	}
	if c.info.Unavailable || c.info.Crowded {
		// No identity to run commands as: answer them, then go. Traffic
		// does not extend this life, and these go first when slots run
		// out, so they cannot lock agents out while Gitea is slow.
		s.doom(c)
		_ = c.idle.Conn.SetDeadline(time.Now().Add(s.ShortLife))
	} else {
		c.idle.arm()
	}
	for {
		// Global requests (tcpip-forward and friends) are refused on this
		// goroutine: one goroutine fewer per connection.
		var ch gossh.NewChannel
		select {
		case req, ok := <-reqs:
			if !ok {
				reqs = nil
				continue
			}
			refuseGlobal(req)
			continue
		case c, ok := <-chans:
			if !ok {
				return
			}
			ch = c
		}
		// Every global request the client sent before this channel is
		// queued already (the connection reads its packets in order):
		// refused first, so that a client that asked to forward a port
		// before it opened its session (OpenSSH does) hears the refusal
		// before its command's answer, and may give up on it.
		for drained := reqs == nil; !drained; {
			select {
			case req, ok := <-reqs:
				if !ok {
					reqs, drained = nil, true
					break
				}
				refuseGlobal(req)
			default:
				drained = true
			}
		}
		if ch.ChannelType() != "session" {
			_ = ch.Reject(gossh.Prohibited, "only exec sessions are served")
			continue
		}
		if s.closing.Load() {
			_ = ch.Reject(gossh.ResourceShortage, "server shutting down")
			continue
		}
		if c.sessions.Add(1) > int32(s.MaxSessions) {
			c.sessions.Add(-1)
			_ = ch.Reject(gossh.ResourceShortage, "too many sessions on one connection")
			continue
		}
		channel, requests, err := ch.Accept()
		if err != nil {
			c.sessions.Add(-1)
			continue
		}
		go func() {
			defer c.sessions.Add(-1)
			s.handleSession(c, channel, requests)
		}()
	}
}

// refuseGlobal refuses a global request (tcpip-forward and friends).
func refuseGlobal(req *gossh.Request) {
	if req.WantReply {
		_ = req.Reply(false, nil)
	}
}

func (s *Server) beginCommand(c *serverConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return false
	}
	s.commands.Add(1)
	c.active.Add(1)
	return true
}

func (s *Server) endCommand(c *serverConn) {
	c.active.Add(-1)
	s.commands.Done()
	if s.closing.Load() {
		c.finish()
	}
}

// lingerAfterReply bounds how long a connection whose last command has
// answered may stay open during shutdown, waiting for the client to close.
const lingerAfterReply = time.Second

// finish ends a connection whose answers have been sent without losing
// them: it stops sending (FIN after the queued reply) and lets the client
// close its side, within lingerAfterReply. Closing at once could reset the
// connection if the client's last packets are still unread, and a reset
// may destroy a reply (its exit status) the client has not read yet.
func (c *serverConn) finish() {
	c.idle.armed.Store(false) // traffic must not push the deadline on
	if cw, ok := c.idle.Conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.idle.Conn.SetDeadline(time.Now().Add(lingerAfterReply))
}

func (s *Server) track(c *serverConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return false
	}
	s.conns[c] = struct{}{}
	s.open.Add(1)
	return true
}

func (s *Server) untrack(c *serverConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	s.open.Done()
}

// Shutdown stops accepting connections and new commands, closes idle
// connections, and waits for running commands to finish (each replies and
// then its connection closes) or for ctx to end, whichever is first; then
// it closes what is left.
func (s *Server) Shutdown(ctx context.Context) error {
	s.init()
	s.mu.Lock()
	s.closing.Store(true)
	s.stop(ErrShuttingDown)
	for l := range s.listeners {
		_ = l.Close()
	}
	for c := range s.conns {
		if c.active.Load() == 0 {
			_ = c.Close()
		}
	}
	s.mu.Unlock()

	done := make(chan struct{})
	go func() {
		s.commands.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err == nil {
		// Every command has answered and its connection is finishing
		// (see finish); wait for them to go, within ctx.
		closed := make(chan struct{})
		go func() {
			s.open.Wait()
			close(closed)
		}()
		select {
		case <-closed:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	s.closeAll()
	return err
}

// Close stops the server at once, dropping running commands.
func (s *Server) Close() error {
	s.init()
	s.mu.Lock()
	s.closing.Store(true)
	s.stop(ErrShuttingDown)
	for l := range s.listeners {
		_ = l.Close()
	}
	s.mu.Unlock()
	s.closeAll()
	return nil
}

func (s *Server) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		_ = c.Close()
	}
}
