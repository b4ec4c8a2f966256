package ssh

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/collab-lease/collab-lease/internal/shallow"
	"github.com/collab-lease/collab-lease/plugin/contract"
	"github.com/collab-lease/collab-lease/plugin/lease"
)

// Sessioned is a Handler that serves long-lived sessions
// (`collab-lease session`, docs/ssh.md, Sessions): one exec whose stdin
// carries commands, one per line, and whose stdout carries one line per
// command, and lines of its own.
type Sessioned interface {
	// OpensSession says whether an exec's command line opens a session.
	OpensSession(line string) bool
	// Session serves the session line opens until it ends, and returns
	// the exec's end: its exit status, and an error line if it ended
	// otherwise than cleanly. ctx ends when the client closes the
	// channel or the connection goes away (context.Canceled), or when
	// the server shuts down (context.Cause: ErrShuttingDown).
	Session(ctx context.Context, c ConnInfo, line string, io SessionIO) Reply
}

// SessionIO is what a session runs on.
type SessionIO struct {
	Lines io.Reader // the channel's stdin
	// Requests are the channel's further requests, to refuse; closed
	// when the client closes the channel or the connection goes.
	Requests <-chan *gossh.Request
	Out      io.Writer // its stdout, under the server's write deadline
	// Keepalive sends a keepalive request on the connection and returns
	// once the client has answered it (an error: it cannot).
	Keepalive func() error
	// Every is the longest interval between keepalives that keeps the
	// connection from idling out.
	Every time.Duration
	// CommandTimeout bounds one command of the session.
	CommandTimeout time.Duration
}

// ErrShuttingDown is the cause of a session's end when the server shuts
// down: its claims are kept for a --resume on another replica.
var ErrShuttingDown = errors.New("server shutting down")

// lineShuttingDown tells a session's client why it ended at shutdown.
const lineShuttingDown = contract.ErrorPrefix + "the sidecar is shutting down; resume the session to keep its claims"

// lineSessionLost tells a session's client that stopped answering why
// its session ended (it is seldom read).
const lineSessionLost = contract.ErrorPrefix + "session lost: the connection stopped answering"

// OpensSession says whether line is `collab-lease session …`.
func (v *LeaseVerb) OpensSession(line string) bool {
	words, err := contract.SplitWords(line)
	return err == nil && len(words) >= 2 && words[0] == "collab-lease" && words[1] == string(contract.VerbSession)
}

// Session serves one agent session: it opens (or resumes) it, writes its
// first line, then answers each line of io.Lines with one line on io.Out,
// in order, and writes a lost line whenever a claim of the session ends
// by anything but its own release. It ends cleanly (exit 0, its claims
// released) at EOF or the line "close"; at a loss (the connection stopped
// answering, or went away), its claims stay live for a grace after its
// last sign of life, for a --resume.
func (v *LeaseVerb) Session(ctx context.Context, c ConnInfo, line string, sio SessionIO) Reply {
	start := time.Now()
	cmd, err := contract.ParseCommand(line, v.maxTTL())
	switch {
	case err != nil:
		return v.logged(c, cmd, exitCode(err), start)
	case c.Unavailable:
		return v.logged(c, cmd, exitCode(errForgeUnavailable), start)
	case c.Crowded:
		return v.logged(c, cmd, exitCode(errTooManyConnections), start)
	}
	var (
		who    lease.Viewer
		ss     *lease.Session
		opened contract.SessionOpened
	)
	shallow.Run(func() {
		openCtx, cancel := context.WithTimeout(ctx, sio.CommandTimeout)
		defer cancel()
		if who, err = v.Leases.Recheck(openCtx, c.Fingerprint, forgeUser(c)); err != nil {
			return
		}
		who.Agent = cmd.Agent
		ss, opened, err = v.Leases.OpenSession(openCtx, who, cmd.Grace, cmd.Resume)
	})
	if err != nil {
		return v.logged(c, cmd, exitCode(err), start)
	}
	s := &sessionServer{v: v, c: c, ss: ss, io: sio}
	s.write(opened)
	claims := 0
	if opened.Leases != nil {
		claims = len(*opened.Leases)
	}
	v.logger().Info("session opened", "user", who.Login, "agent", who.Agent, "session", opened.Session,
		"grace_seconds", opened.GraceSeconds, "resumed", cmd.Resume != "", "claims", claims)
	r := s.serve(ctx)
	v.logger().Info("session ended", "user", who.Login, "agent", who.Agent, "session", opened.Session,
		"outcome", r.Outcome, "exit", r.Code, "duration_ms", time.Since(start).Milliseconds())
	return r
}

// logged logs a session that did not open, as a command.
func (v *LeaseVerb) logged(c ConnInfo, cmd contract.Command, r Reply, start time.Time) Reply {
	cmd.Verb = contract.VerbSession
	v.log(c, cmd, c.Login, r, time.Since(start))
	return r
}

// sessionServer is one open session on its channel.
type sessionServer struct {
	v  *LeaseVerb
	c  ConnInfo
	ss *lease.Session
	io SessionIO

	mu sync.Mutex // one line at a time on Out
}

// write writes reply as one line of the session's stdout.
func (s *sessionServer) write(reply any) {
	b, err := json.Marshal(reply)
	if err != nil {
		b = []byte(`{"status":"error","exit":1,"error":"internal error"}`)
	}
	s.writeLine(b)
}

func (s *sessionServer) writeLine(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = s.io.Out.Write(append(b, '\n'))
}

// input is what the reader goroutine hands the session: a line, or the
// end of its stdin.
type input struct {
	line    string
	tooLong bool
	eof     bool
}

func (s *sessionServer) serve(ctx context.Context) Reply {
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	defer s.ss.Close()
	// The session's commands end when it does: its connection stopped
	// answering or went away, or the ledger let it go.
	cmdCtx, stopCmds := context.WithCancel(ctx)
	defer stopCmds()
	// The session's keepalives run in this loop (no goroutine of their
	// own for each of a thousand idle sessions).
	keeper := s.ss.Keeper(s.io.Every, s.io.Keepalive)
	defer keeper.Stop()
	lines := make(chan input)
	go s.read(runCtx, lines)
	reqs := s.io.Requests
	// One command at a time, in order, on a goroutine of its own: while
	// it runs (acquire --wait may take long), the loop still writes lost
	// lines and hears the channel close; it reads no new line.
	next := lines
	replies := make(chan []byte, 1)
	flush := func() {
		for _, l := range s.ss.TakeLost() {
			s.write(l)
		}
	}
	end := func(clean bool) Reply {
		stopCmds()
		flush()
		return s.ended(ctx, clean)
	}
	// The key's recheck asks the forge, which may be slow; it runs beside
	// the loop, one at a time, so keepalives and heartbeats never wait
	// for it.
	recheck := time.NewTicker(sessionRecheck)
	defer recheck.Stop()
	rechecked := make(chan bool, 1)
	checking := false
	for {
		var kept error // what the keeper says, if the session is over
		select {
		case <-keeper.Due():
			kept = keeper.Step(runCtx, cmdCtx, false)
		case <-keeper.Tick():
			kept = keeper.Step(runCtx, cmdCtx, true)
		case <-recheck.C:
			if !checking {
				checking = true
				go func() { rechecked <- s.revoked(runCtx) }()
			}
		case revoked := <-rechecked:
			checking = false
			if revoked {
				stopCmds()
				flush()
				s.ended(ctx, false)
				return exitCode(lease.ErrRevoked)
			}
		case <-s.ss.Told():
			flush()
		case req, ok := <-reqs:
			if !ok {
				// The channel is gone (closed by the client, or with its
				// connection): no clean end was asked for.
				return end(false)
			}
			if req.WantReply {
				_ = req.Reply(false, nil)
			}
		case reply := <-replies:
			s.writeLine(reply)
			next = lines
		case in := <-next:
			switch {
			case in.eof:
				// A closed stdin is the client's word only if it is still
				// there to hear the answer (ended asks it); no sign of life.
				return end(true)
			case in.tooLong:
				s.ss.Alive()
				s.writeLine(errorLine(contract.ExitError, contract.ErrorLine("usage: command longer than 4096 bytes")))
			case strings.TrimSpace(in.line) == "close":
				s.ss.Alive()
				stopCmds()
				flush()
				return s.closed(ctx)
			default:
				s.ss.Alive()
				next = nil
				// A goroutine for this command alone: its stack, deep
				// from the ledger's call, goes with it (no shallow.Run).
				go func() { replies <- s.command(cmdCtx, in.line) }()
			}
		case <-ctx.Done():
			return end(false)
		}
		if kept == nil {
			continue
		}
		// The session is over: its commands with it.
		stopCmds()
		flush()
		switch {
		case errors.Is(kept, lease.ErrSessionIdle):
			return end(true)
		case errors.Is(kept, lease.ErrSessionMoved), errors.Is(kept, lease.ErrSessionGone):
			// Nothing to end here: the ledger has let the session go.
			return exitCode(kept)
		}
		return end(false)
	}
}

// sessionRecheck is how often a session asks again whether its key still
// belongs to its account (as every command does): a session that holds
// its claims without sending a line must not outlive a revoked key.
var sessionRecheck = time.Minute

// revoked says whether the session's key is no longer its account's (a
// forge that cannot answer now is asked again at the next round).
func (s *sessionServer) revoked(ctx context.Context) bool {
	var v lease.Viewer
	var err error
	shallow.Run(func() {
		rctx, cancel := context.WithTimeout(ctx, s.io.CommandTimeout)
		defer cancel()
		v, err = s.v.Leases.Recheck(rctx, s.c.Fingerprint, forgeUser(s.c))
	})
	return errors.Is(err, lease.ErrRevoked) || (err == nil && v.ID != s.ss.Viewer().ID)
}

// closed ends the session at its client's `close`: cleanly, without
// asking whether the client is still there (it said so).
func (s *sessionServer) closed(ctx context.Context) (r Reply) {
	shallow.Run(func() {
		bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.io.CommandTimeout)
		defer cancel()
		r = s.release(bg)
	})
	return r
}

// release is the clean end: the session's claims released.
func (s *sessionServer) release(ctx context.Context) Reply {
	if err := s.ss.End(ctx); err != nil && !errors.Is(err, lease.ErrSessionMoved) && !errors.Is(err, lease.ErrSessionGone) {
		return exitCode(err)
	}
	return Reply{Outcome: "session_closed"}
}

// ended ends the session: cleanly (its claims released) when its client
// said so (EOF, close) and is still there to be told; otherwise as a
// loss, its claims kept for a grace after its last sign of life.
func (s *sessionServer) ended(ctx context.Context, clean bool) (r Reply) {
	shallow.Run(func() { r = s.end(ctx, clean) })
	return r
}

func (s *sessionServer) end(ctx context.Context, clean bool) Reply {
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.io.CommandTimeout)
	defer cancel()
	if errors.Is(context.Cause(ctx), ErrShuttingDown) {
		s.ss.Lose(bg)
		return Reply{Stderr: lineShuttingDown + "\n", Code: contract.ExitTempFail, Outcome: "shutting_down"}
	}
	if clean && !s.answers(min(s.ss.Grace(), 5*time.Second)) {
		clean = false // the connection is gone: EOF was its end, not the client's word
	}
	if !clean {
		s.ss.Lose(bg)
		return Reply{Stderr: lineSessionLost + "\n", Code: contract.ExitTempFail, Outcome: "session_lost"}
	}
	return s.release(bg)
}

// answers says whether the connection answers a keepalive within d.
func (s *sessionServer) answers(d time.Duration) bool {
	done := make(chan error, 1)
	go func() { done <- s.io.Keepalive() }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case err := <-done:
		return err == nil
	case <-t.C:
		return false
	}
}

// read hands the session each line of its stdin, then its end.
func (s *sessionServer) read(ctx context.Context, out chan<- input) {
	// A small buffer: a thousand idle sessions each have one. A line
	// longer than it is put together piece by piece, up to the longest
	// command there is.
	br := bufio.NewReaderSize(s.io.Lines, 256)
	for {
		b, err := br.ReadSlice('\n')
		long := false
		if errors.Is(err, bufio.ErrBufferFull) {
			whole := append([]byte{}, b...)
			for errors.Is(err, bufio.ErrBufferFull) {
				b, err = br.ReadSlice('\n')
				if len(whole) <= contract.MaxCommandLen+2 {
					whole = append(whole, b...)
				}
			}
			b, long = whole, len(whole) > contract.MaxCommandLen+2
		}
		in := input{line: strings.TrimRight(string(b), "\r\n")}
		switch {
		case long:
			in = input{tooLong: true}
		case err != nil:
			// The end of stdin; a line it cut short (a client killed
			// while it wrote) is no command.
			in = input{eof: true}
		}
		select {
		case out <- in:
		case <-ctx.Done():
			return
		}
		if err != nil && !in.tooLong {
			if !in.eof {
				select {
				case out <- input{eof: true}:
				case <-ctx.Done():
				}
			}
			return
		}
	}
}

// command answers one line of the session: the exec's reply as one JSON
// line, with "exit".
func (s *sessionServer) command(ctx context.Context, line string) []byte {
	start := time.Now()
	cmd, err := contract.ParseCommand("collab-lease "+line, s.v.maxTTL())
	var r Reply
	login := s.c.Login
	switch {
	case err != nil:
		r = exitCode(err)
	case cmd.Verb == contract.VerbHelp:
		b, _ := json.Marshal(struct {
			Status string `json:"status"`
			Exit   int    `json:"exit"`
			Text   string `json:"text"`
		}{contract.StatusHelp, 0, contract.Usage})
		return b
	case cmd.Verb == contract.VerbSession:
		r = exitCode(&contract.UsageError{Detail: "a session cannot open another; send its commands instead"})
	case cmd.Agent != "":
		r = exitCode(&contract.UsageError{Detail: "a session's commands act as its agent; --agent is not allowed"})
	default:
		cctx, cancel := context.WithTimeout(ctx, runFor(cmd, s.io.CommandTimeout))
		r, login = run(cctx, s.v.Leases, s.c, cmd, io.Discard, s.ss)
		cancel()
	}
	s.v.log(s.c, cmd, login, r, time.Since(start))
	if s.v.Observe != nil {
		s.v.Observe(cmd.Verb, r.Outcome, time.Since(start))
	}
	if len(r.Stdout) > 0 {
		return withExit(r.Stdout, r.Code)
	}
	return errorLine(r.Code, strings.TrimSuffix(r.Stderr, "\n"))
}

// withExit is the JSON object out, one line, with "exit":code added.
func withExit(out []byte, code int) []byte {
	out = bytes.TrimRight(out, "\n")
	if len(out) < 2 || out[len(out)-1] != '}' {
		return errorLine(contract.ExitError, contract.ErrorLine("internal error"))
	}
	b := append([]byte{}, out[:len(out)-1]...)
	if len(out) > 2 {
		b = append(b, ',')
	}
	b = append(b, `"exit":`...)
	b = strconv.AppendInt(b, int64(code), 10)
	return append(b, '}')
}

// errorLine is an error as a session's line: {"status":"error","exit":…,"error":"…"}.
func errorLine(code int, line string) []byte {
	b, _ := json.Marshal(struct {
		Status string `json:"status"`
		Exit   int    `json:"exit"`
		Error  string `json:"error"`
	}{contract.StatusError, code, strings.TrimPrefix(line, contract.ErrorPrefix)})
	return b
}
