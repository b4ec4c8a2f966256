package ssh

import (
	"container/list"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/collab-lease/collab-lease/plugin"
)

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("ssh: server closed")

// errForgeUnavailable marks a connection whose key could not be resolved
// because the forge was down: it is let in, and every command is answered
// with exit 75 so the agent retries instead of seeing an auth failure.
var errForgeUnavailable = errors.New("forge unavailable")

// Permission extensions carrying the identity of the verified key. They are
// set only by the public-key callback and read only from the
// authenticated connection's Permissions.
const (
	extLogin       = "collab-lease-login"
	extFingerprint = "collab-lease-fingerprint"
	extUnavailable = "collab-lease-forge-unavailable"
)

// Server serves the collab-lease verb. Set the fields, then call Serve.
// Zero values of the limits take the defaults below.
type Server struct {
	HostKey gossh.Signer // required
	Forge   plugin.Forge // required
	Ledger  Ledger       // required
	Logger  *slog.Logger // nil: slog.Default()

	MaxTTL           time.Duration // largest --ttl accepted (default plugin.DefaultMaxTTL)
	HandshakeTimeout time.Duration // from accept to authenticated (default 10s)
	IdleTimeout      time.Duration // no traffic on a connection (default 2m)
	CommandTimeout   time.Duration // one command, forge calls included (default 15s)
	MaxConns         int           // concurrent connections (default 1024)
	MaxAuthTries     int           // per connection (default 6)
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

	// Observe, if set, is told about every command (for metrics).
	Observe func(verb Verb, outcome string, d time.Duration)
	// ConnDelta, if set, is told +1 when a connection is accepted and -1
	// when it closes (for metrics).
	ConnDelta func(delta int)

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*serverConn]struct{}
	closing   atomic.Bool
	commands  sync.WaitGroup // commands running
	open      sync.WaitGroup // tracked connections
	slots     chan struct{}
	lookups   chan struct{}
	startups  *list.List // *serverConn still in the handshake, oldest first
	initOnce  sync.Once
}

type serverConn struct {
	net.Conn
	idle     *idleConn
	ssh      *gossh.ServerConn
	active   atomic.Int32  // commands running on this connection
	sessions atomic.Int32  // open sessions on this connection
	startup  *list.Element // in Server.startups while in the handshake
	since    time.Time     // when the connection was accepted
}

func (s *Server) init() {
	s.initOnce.Do(func() {
		if s.Logger == nil {
			s.Logger = slog.Default()
		}
		if s.MaxTTL <= 0 {
			s.MaxTTL = plugin.DefaultMaxTTL
		}
		if s.HandshakeTimeout <= 0 {
			s.HandshakeTimeout = 10 * time.Second
		}
		if s.IdleTimeout <= 0 {
			s.IdleTimeout = 2 * time.Minute
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
		s.slots = make(chan struct{}, s.MaxConns)
		s.lookups = make(chan struct{}, s.MaxKeyLookups)
		s.startups = list.New()
		s.listeners = map[net.Listener]struct{}{}
		s.conns = map[*serverConn]struct{}{}
	})
}

func (s *Server) config() *gossh.ServerConfig {
	cfg := &gossh.ServerConfig{
		MaxAuthTries:      s.MaxAuthTries,
		ServerVersion:     "SSH-2.0-collab-lease",
		PublicKeyCallback: s.authenticate,
	}
	cfg.AddHostKey(s.HostKey)
	return cfg
}

// authenticate resolves an offered or signed key through the forge. The
// library calls it for a key before checking the signature too, so what it
// returns is trusted only once it arrives on the authenticated connection.
func (s *Server) authenticate(meta gossh.ConnMetadata, key gossh.PublicKey) (*gossh.Permissions, error) {
	fp := gossh.FingerprintSHA256(key)
	// Half the handshake deadline: a slow or saturated forge must leave
	// time to finish the handshake and answer exit 75.
	ctx, cancel := context.WithTimeout(context.Background(), min(s.CommandTimeout, s.HandshakeTimeout/2))
	defer cancel()
	select {
	case s.lookups <- struct{}{}:
		defer func() { <-s.lookups }()
	case <-ctx.Done():
		// The forge is too slow to keep up: like an unreachable forge,
		// let the client in to be told to retry (exit 75), rather than
		// refuse a key that may well be valid.
		s.Logger.Warn("key lookups saturated; letting the connection in to answer exit 75",
			"fingerprint", fp, "remote", meta.RemoteAddr().String())
		return &gossh.Permissions{Extensions: map[string]string{extUnavailable: "1", extFingerprint: fp}}, nil
	}
	user, err := s.Forge.UserByKey(ctx, fp)
	switch {
	case err == nil:
		return &gossh.Permissions{Extensions: map[string]string{extLogin: user.Login, extFingerprint: fp}}, nil
	case errors.Is(err, plugin.ErrNotFound):
		return nil, fmt.Errorf("unknown key %s", fp)
	default:
		s.Logger.Warn("key lookup failed; letting the connection in to answer exit 75",
			"fingerprint", fp, "remote", meta.RemoteAddr().String(), "err", err)
		return &gossh.Permissions{Extensions: map[string]string{extUnavailable: "1", extFingerprint: fp}}, nil
	}
}

// Serve accepts connections on l until Shutdown or Close. It always
// returns a non-nil error; after Shutdown or Close, ErrServerClosed.
func (s *Server) Serve(l net.Listener) error {
	s.init()
	if s.HostKey == nil || s.Forge == nil || s.Ledger == nil {
		return errors.New("ssh: Server needs HostKey, Forge and Ledger")
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
		if !s.takeSlot() {
			s.Logger.Warn("connection refused: too many connections", "remote", c.RemoteAddr().String(), "max", s.MaxConns)
			_ = c.Close()
			continue
		}
		// Counted among the handshakes here, in arrival order, so that
		// eviction's "oldest" means the first accepted.
		idle := newIdleConn(c, s.IdleTimeout)
		sc := &serverConn{Conn: idle, idle: idle, since: time.Now()}
		_ = c.SetDeadline(sc.since.Add(s.HandshakeTimeout))
		s.beginStartup(sc)
		go s.handleConn(sc, cfg)
	}
}

func (s *Server) handleConn(c *serverConn, cfg *gossh.ServerConfig) {
	defer func() { <-s.slots }()
	defer s.endStartup(c)
	if s.ConnDelta != nil {
		s.ConnDelta(1)
		defer s.ConnDelta(-1)
	}
	defer c.Close()
	if !s.track(c) {
		return
	}
	defer s.untrack(c)

	sconn, chans, reqs, err := gossh.NewServerConn(c, cfg)
	s.endStartup(c)
	if err != nil {
		if !errors.Is(err, io.EOF) {
			s.Logger.Debug("handshake failed", "remote", c.RemoteAddr().String(), "err", err)
		}
		return
	}
	c.idle.arm()
	c.ssh = sconn
	go gossh.DiscardRequests(reqs) // tcpip-forward and friends: refused
	for ch := range chans {
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
// retry, as with OpenSSH's MaxStartups.)
func (s *Server) evictLocked() bool {
	var victim *list.Element
	least := int64(-1)
	for e := s.startups.Front(); e != nil; e = e.Next() {
		c := e.Value.(*serverConn)
		if time.Since(c.since) < startupGrace {
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

// handleSession answers one session: exec runs the verb, shell greets and
// exits 1, everything else (pty, env, subsystem, agent, x11) is refused.
func (s *Server) handleSession(c *serverConn, ch gossh.Channel, reqs <-chan *gossh.Request) {
	defer ch.Close()
	// A session that never asks for anything is closed, so idle sessions
	// cannot pile up on a connection that keeps itself alive.
	start := time.AfterFunc(s.SessionStartTimeout, func() { _ = ch.Close() })
	defer start.Stop()
	for req := range reqs {
		if req.Type == "exec" || req.Type == "shell" {
			start.Stop()
		}
		switch req.Type {
		case "exec":
			line, ok := execPayload(req.Payload)
			if !ok {
				_ = req.Reply(false, nil)
				continue
			}
			if !s.beginCommand(c) {
				_ = req.Reply(false, nil)
				return
			}
			_ = req.Reply(true, nil)
			s.exec(c, ch, line)
			_ = ch.Close() // the whole answer, then the channel's close
			s.endCommand(c)
			return
		case "shell":
			_ = req.Reply(true, nil)
			s.greet(c, ch)
			return
		default:
			_ = req.Reply(false, nil)
		}
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

func (s *Server) exec(c *serverConn, ch gossh.Channel, line string) {
	start := time.Now()
	login, unavailable := identity(c.ssh.Permissions)
	cmd, err := ParseCommand(line, s.MaxTTL)
	var r reply
	switch {
	case err != nil:
		r = errorReply(err)
	case cmd.Verb == VerbHelp:
		r = reply{stdout: []byte(Usage), outcome: "help"}
	case unavailable:
		r = errorReply(errForgeUnavailable)
	default:
		s.Logger.Debug("command started", "user", login, "verb", string(cmd.Verb), "repo", cmd.Repo(), "issue", cmd.Issue)
		ctx, cancel := context.WithTimeout(context.Background(), s.CommandTimeout)
		d := dispatcher{forge: s.Forge, ledger: s.Ledger}
		r = d.run(ctx, login, cmd)
		cancel()
	}
	send(ch, r)
	dur := time.Since(start)
	attrs := []any{"user", login, "verb", string(cmd.Verb), "outcome", r.outcome, "exit", r.code,
		"duration_ms", float64(dur.Microseconds()) / 1000, "remote", c.RemoteAddr().String()}
	if cmd.Owner != "" {
		attrs = append(attrs, "repo", cmd.Repo())
	}
	if cmd.Issue != 0 {
		attrs = append(attrs, "issue", cmd.Issue)
	}
	if unavailable {
		attrs = append(attrs, "fingerprint", c.ssh.Permissions.Extensions[extFingerprint])
	}
	s.Logger.Info("collab-lease", attrs...)
	if s.Observe != nil {
		s.Observe(cmd.Verb, r.outcome, dur)
	}
}

func (s *Server) greet(c *serverConn, ch gossh.Channel) {
	login, unavailable := identity(c.ssh.Permissions)
	msg := fmt.Sprintf("Hi %s! You've authenticated, but collab-lease offers no shell.\nUsage: ssh <host> <command>, where <command> is one of:\n%s", login, Usage)
	if unavailable {
		msg = "Your key could not be checked right now: the forge is unavailable. Try again.\n"
	}
	_, _ = io.WriteString(ch.Stderr(), msg)
	sendExit(ch, exitError)
}

// identity reads the verified user from the authenticated connection.
func identity(p *gossh.Permissions) (login string, unavailable bool) {
	if p == nil {
		return "", true
	}
	return p.Extensions[extLogin], p.Extensions[extUnavailable] != "" || p.Extensions[extLogin] == ""
}

func send(ch gossh.Channel, r reply) {
	if len(r.stdout) > 0 {
		_, _ = ch.Write(r.stdout)
	}
	if r.stderr != "" {
		_, _ = io.WriteString(ch.Stderr(), r.stderr+"\n")
	}
	sendExit(ch, r.code)
}

func sendExit(ch gossh.Channel, code int) {
	var status [4]byte
	binary.BigEndian.PutUint32(status[:], uint32(code))
	_, _ = ch.SendRequest("exit-status", false, status[:])
	_ = ch.CloseWrite()
}

// execPayload decodes the string of an exec request (RFC 4254 §6.5).
func execPayload(p []byte) (string, bool) {
	if len(p) < 4 {
		return "", false
	}
	n := binary.BigEndian.Uint32(p)
	if uint64(n) != uint64(len(p)-4) {
		return "", false
	}
	return string(p[4:]), true
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
