package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/collab-lease/collab-lease/plugin/contract"
)

// A session is one `collab-lease session` exec: one ssh process whose
// stdin takes one command a line and whose stdout answers each with one
// line, in order, with "lost" notices in between (docs/ssh.md, Sessions).
// The claims taken through it live as long as it does, so `git collab
// run` and `git collab mcp` keep their claims without renewing them. This
// file is one connection; resume.go keeps a session across dropped ones.

// The session's first line is a contract.SessionOpened, whose Leases only
// a resumed session's carries; a claim of the session that ends by
// anything but its own release is told by a contract.Lost line.

// graceOf is how long the session o opened keeps its claims after a
// dropped connection.
func graceOf(o contract.SessionOpened) time.Duration {
	return time.Duration(o.GraceSeconds) * time.Second
}

// leasesOf are the claims a resumed session took back; none for a new one.
func leasesOf(o contract.SessionOpened) []contract.SessionLease {
	if o.Leases == nil {
		return nil
	}
	return *o.Leases
}

// sessionReply is the answer line to one command.
type sessionReply struct {
	code int    // its "exit": the exit status the exec would have ended with; -1 if it has none
	body []byte // the line as it came
	// said is the error line an exec would have printed for an error
	// reply ("error: issue not found"), "" for any other.
	said string
}

var (
	// errSessionGone: the sidecar no longer has the session a --resume
	// named (unknown, ended, another holder's, or past its grace).
	errSessionGone = errors.New("the sidecar no longer has the session")
	// errSessionEnded: the session's ssh ended before the command was
	// answered.
	errSessionEnded = errors.New("the connection to the sidecar ended")
)

// sessionExit is a session exec that ended without opening the session,
// or the ssh of an open one that ended: its exit status and what it said.
type sessionExit struct {
	code int
	said string // ssh's stderr, trimmed: the sidecar's error line, or ssh's own complaint
}

func (e *sessionExit) Error() string {
	if e.said != "" {
		return e.said
	}
	return fmt.Sprintf("ssh ended with exit status %d", e.code)
}

// sessionArgs are the options of the session exec itself.
type sessionArgs struct {
	agent  string // "" for none: the account itself
	grace  string // "" for the sidecar's default
	resume string // a session id to take over, or ""
}

// aliveOptions have ssh itself ask the sidecar whether it is still there
// once it has heard nothing for about a third of the grace (whole
// seconds, at least one), and give up when the next third passes
// unanswered: a connection that stopped answering without closing (a
// partition, a suspended machine) ends ssh about two thirds of the grace
// after its last sign of life (4 s of a 5 s grace, 20 s of 30 s, as with
// an ask every sixth and three unanswered), so the session is resumed,
// or its loss noticed and the command stopped, before the sidecar lets
// its claims go. Each ask costs the client a wakeup and a round trip for
// as long as the session lives, so it asks no more often than that needs.
func (s sessionArgs) aliveOptions() []string {
	grace := 30 * time.Second
	if d, err := contract.ParseDuration(s.grace, 168*time.Hour); err == nil && d > 0 {
		grace = d
	}
	every := max((grace+1500*time.Millisecond)/(3*time.Second), 1) // a third, rounded
	return []string{"-o", fmt.Sprintf("ServerAliveInterval=%d", every), "-o", "ServerAliveCountMax=1"}
}

// line is the exec's command line, each value quoted as RemoteCommand's.
func (s sessionArgs) line() string {
	words := []string{"collab-lease", "session"}
	for _, f := range []struct{ name, value string }{{"--agent", s.agent}, {"--grace", s.grace}, {"--resume", s.resume}} {
		if f.value != "" {
			words = append(words, f.name, shellQuote(f.value))
		}
	}
	return strings.Join(words, " ")
}

// sessionLine is the line a session takes for verb on issue with flags
// (and globs):
// the exec's command without its leading "collab-lease", checked by the
// sidecar's grammar as RemoteCommand checks it. flags carry no --agent:
// a session's commands act as its holder.
func sessionLine(verb contract.Verb, repo string, issue int64, flags []Flag, globs ...string) (string, contract.Command, error) {
	line, req, err := RemoteCommand(verb, repo, issue, flags, globs...)
	return strings.TrimPrefix(line, "collab-lease "), req, err
}

// session is one open session's ssh.
type session struct {
	opened contract.SessionOpened
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	said   *tailBuffer // the end of ssh's stderr
	notify func(contract.Lost)

	mu      sync.Mutex
	pending []chan sessionReply // the commands sent and not yet answered, in order
	ended   bool
	closing bool // Close was called: the end is ours

	done chan struct{} // closed once ssh has ended
	exit *sessionExit  // how it ended, set before done is closed
}

// openSession runs argv (ssh with a session exec), reads the session's
// first line and returns it open. ssh's stderr goes to stderr as it comes;
// notify gets every lost notice, from the reader's goroutine, and must not
// block. ssh runs with no terminal, in a process group of its own (see
// noTerminal): a passphrase prompt cannot hang it, and a Ctrl-C meant for
// the command git collab run runs does not end it. The
// session lives until Close, or until its ssh ends; ctx bounds only the
// opening.
func openSession(ctx context.Context, argv, env []string, stderr io.Writer, notify func(contract.Lost)) (*session, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	s := &session{cmd: cmd, said: &tailBuffer{max: 4096}, notify: notify, done: make(chan struct{})}
	cmd.Stderr = io.MultiWriter(stderr, s.said)
	cmd.WaitDelay = time.Second // a process left holding ssh's pipes does not keep it open
	noTerminal(cmd)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if s.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	first := make(chan []byte, 1)
	go s.read(stdout, first)

	select {
	case line, ok := <-first:
		if !ok {
			<-s.done
			return nil, s.exit
		}
		var o contract.SessionOpened
		if err := json.Unmarshal(line, &o); err != nil || (o.Status != contract.StatusSession && o.Status != contract.StatusSessionGone) {
			s.kill()
			return nil, fmt.Errorf("the sidecar did not open a session; it said %s", quote(string(line)))
		}
		if o.Status == contract.StatusSessionGone {
			s.kill()
			return nil, errSessionGone
		}
		if o.Session == "" || o.GraceSeconds <= 0 {
			s.kill()
			return nil, fmt.Errorf("the sidecar opened a session without an id or a grace: %s", quote(string(line)))
		}
		s.opened = o
		return s, nil
	case <-ctx.Done():
		s.kill()
		return nil, ctx.Err()
	}
}

// read reads ssh's stdout to its end: the first line to first, then each
// reply to the command waiting longest for one, and each lost notice to
// notify. Then it waits for ssh and records how it ended.
func (s *session) read(stdout io.Reader, first chan<- []byte) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64*1024), 4<<20) // a long list or history is one line
	for sc.Scan() {
		line := bytes.Clone(sc.Bytes())
		if first != nil {
			first <- line
			first = nil
			continue
		}
		var head struct {
			Exit   *int   `json:"exit"`
			Status string `json:"status"`
			Error  string `json:"error"`
		}
		err := json.Unmarshal(line, &head)
		if err == nil && head.Exit == nil {
			// Not a reply: a notice, the only kind of which is "lost".
			var n contract.Lost
			if head.Status == contract.StatusLost && json.Unmarshal(line, &n) == nil {
				s.notify(n)
			}
			continue
		}
		r := sessionReply{code: -1, body: line}
		if err == nil {
			r.code = *head.Exit
			if head.Status == contract.StatusError && head.Error != "" {
				r.said = contract.ErrorLine(head.Error)
			}
		}
		s.mu.Lock()
		if len(s.pending) > 0 {
			s.pending[0] <- r
			s.pending = s.pending[1:]
		}
		s.mu.Unlock()
	}
	if first != nil {
		close(first)
	}
	// stdout ended: ssh is ending, or a wrapper left it behind.
	err := s.cmd.Wait()
	code := 0
	var ee *exec.ExitError
	switch {
	case err == nil, errors.Is(err, exec.ErrWaitDelay):
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		code = ee.ExitCode()
	default:
		code = exitSSH // killed by a signal: it did not finish
	}
	s.mu.Lock()
	s.ended = true
	s.exit = &sessionExit{code: code, said: strings.TrimSpace(s.said.String())}
	s.mu.Unlock()
	close(s.done)
}

// Do sends one command line and returns its reply. The reply of a
// command whose ctx ended first still comes, in its turn: late, if not
// nil, gets it (a claim made for a caller who left can then be released).
// An error means no reply came: errSessionEnded (wrapped with how ssh
// ended) if the session ended, or ctx's error.
func (s *session) Do(ctx context.Context, line string, late func(sessionReply)) (sessionReply, error) {
	ch := make(chan sessionReply, 1)
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return sessionReply{}, s.endedErr()
	}
	// Appending and writing under one lock keeps the replies' order that
	// of the lines.
	s.pending = append(s.pending, ch)
	_, err := io.WriteString(s.stdin, line+"\n")
	s.mu.Unlock()
	if err != nil {
		// The pipe is closed: ssh has ended or is ending.
		<-s.done
	}
	select {
	case r := <-ch:
		return r, nil
	case <-s.done:
		select {
		case r := <-ch: // it came just before the end
			return r, nil
		default:
		}
		return sessionReply{}, s.endedErr()
	case <-ctx.Done():
		if late != nil {
			go func() {
				select {
				case r := <-ch:
					late(r)
				case <-s.done:
				}
			}()
		}
		return sessionReply{}, ctx.Err()
	}
}

func (s *session) endedErr() error {
	<-s.done
	return fmt.Errorf("%w (%v)", errSessionEnded, s.exit)
}

// Done is closed when the session's ssh has ended.
func (s *session) Done() <-chan struct{} { return s.done }

// Exit is how ssh ended; only after Done.
func (s *session) Exit() *sessionExit {
	<-s.done
	return s.exit
}

// Closing reports whether the session ended, or is ending, by Close.
func (s *session) Closing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// closeWait is how long Close waits for the sidecar to end the session
// before it stops ssh.
var closeWait = 5 * time.Second

// Close ends the session cleanly: EOF on its stdin, after which the
// sidecar releases its claims and ends the exec with status 0. If ssh
// has not ended within closeWait, it is stopped.
func (s *session) Close() {
	s.mu.Lock()
	s.closing = true
	s.stdin.Close()
	s.mu.Unlock()
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
		s.kill()
	}
}

// kill stops ssh, wrappers and all, and waits for it to end. The sidecar
// then sees a dropped connection: the session's claims live out its grace.
func (s *session) kill() {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	killGroup(s.cmd)
	<-s.done
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = t.b[over:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
