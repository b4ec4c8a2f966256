package ssh

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// handleSession answers one session: exec and shell go to the Handler,
// everything else (pty, env, subsystem, agent, x11) is refused.
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
			if h, ok := s.Handler.(Sessioned); ok && h.OpensSession(line) {
				s.serveSession(c, ch, reqs, h, line)
				return
			}
			timeout := s.CommandTimeout
			if p, ok := s.Handler.(Patient); ok {
				timeout = p.Timeout(line, timeout)
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			go s.watchSession(c, reqs, cancel, timeout > s.IdleTimeout/2)
			var r Reply
			if h, ok := s.Handler.(Streaming); ok {
				r = h.ExecStreaming(ctx, c.info, line, s.writer(c, ch.Stderr()))
			} else {
				r = s.Handler.Exec(ctx, c.info, line)
			}
			s.send(c, ch, r)
			cancel()
			_ = ch.Close() // the whole answer, then the channel's close
			s.endCommand(c)
			return
		case "shell":
			_ = req.Reply(true, nil)
			s.send(c, ch, s.Handler.Greet(c.info))
			return
		default:
			_ = req.Reply(false, nil)
		}
	}
}

// serveSession runs an agent session (Sessioned) on ch: a command that
// lasts as long as its client wants, with no timeout of its own; it
// ends when the client closes the channel or goes away, or at shutdown.
// The session refuses the channel's further requests itself (no
// goroutine of watchSession's for each of a thousand idle sessions).
func (s *Server) serveSession(c *serverConn, ch gossh.Channel, reqs <-chan *gossh.Request, h Sessioned, line string) {
	defer s.endCommand(c)
	if c.idle != nil {
		c.idle.lineByLine.Store(true)
	}
	ctx, cancel := context.WithCancel(s.stopping)
	keepalive := func() error {
		if c.ssh == nil {
			return errors.New("no connection")
		}
		s.keepalives.Add(1)
		_, _, err := c.ssh.SendRequest("keepalive@openssh.com", true, nil)
		return err
	}
	r := h.Session(ctx, c.info, line, SessionIO{Lines: ch, Requests: reqs, Out: s.writer(c, ch), Keepalive: keepalive,
		Every: s.IdleTimeout / 2, CommandTimeout: s.CommandTimeout})
	cancel()
	s.send(c, ch, r)
	_ = ch.Close()
}

// watchSession runs beside a command: it refuses the session's further
// requests and cancels the command once the session's requests end (the
// client closed the session, or the connection went away), so that a
// waiting command stops at once. For a command that may outlast half the
// idle timeout it also keeps the connection alive with a keepalive
// request every interval, whose answer (OpenSSH answers "failure") is the
// traffic the idle timeout needs; a client that stopped answering is cut
// by that timeout, which ends the command too.
func (s *Server) watchSession(c *serverConn, reqs <-chan *gossh.Request, cancel context.CancelFunc, keepAlive bool) {
	defer cancel()
	var tick <-chan time.Time
	if keepAlive && c.ssh != nil {
		t := time.NewTicker(s.IdleTimeout / 2)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case req, ok := <-reqs:
			if !ok {
				return
			}
			_ = req.Reply(false, nil)
		case <-tick:
			s.keepalives.Add(1)
			go func() { _, _, _ = c.ssh.SendRequest("keepalive@openssh.com", true, nil) }()
		}
	}
}

// sendChunk is the largest piece of a reply written at once: each piece
// must get out within the write timeout.
const sendChunk = 32 << 10

// send writes r and the exit status, then ends the session's output. A
// piece of the output that the client's session window does not let out
// within the write timeout closes the connection: a client that takes no
// output (or opened its session with no window) would otherwise hold the
// session, and delay shutdown, for as long as it keeps the connection
// alive. A client that stops reading the socket is idleConn's to cut.
func (s *Server) send(c *serverConn, ch gossh.Channel, r Reply) {
	_, _ = s.writer(c, ch).Write(r.Stdout)
	_, _ = s.writer(c, ch.Stderr()).Write([]byte(r.Stderr))
	var status [4]byte
	binary.BigEndian.PutUint32(status[:], uint32(r.Code))
	_, _ = ch.SendRequest("exit-status", false, status[:])
	_ = ch.CloseWrite()
}

// writer is w under the server's write deadline: a client that takes
// none of a chunk within WriteTimeout stalls its connection (idleConn
// cuts it).
func (s *Server) writer(c *serverConn, w io.Writer) io.Writer {
	return deadlineWriter{w: w, timeout: s.WriteTimeout, stall: c.idle.stall}
}

type deadlineWriter struct {
	w       io.Writer
	timeout time.Duration
	stall   func()
}

func (d deadlineWriter) Write(p []byte) (int, error) {
	watchdog := time.AfterFunc(d.timeout, d.stall)
	defer watchdog.Stop()
	written := 0
	for len(p) > 0 {
		n := min(len(p), sendChunk)
		watchdog.Reset(d.timeout)
		m, err := d.w.Write(p[:n])
		written += m
		if err != nil {
			return written, err
		}
		p = p[n:]
	}
	return written, nil
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
