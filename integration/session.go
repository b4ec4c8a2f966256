package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"

	"github.com/collab-lease/collab-lease/plugin/leasetest"
)

// SessionProc is the real OpenSSH client running `collab-lease session`
// against a sidecar: commands go in on its stdin, one per line; replies
// come back in order (Do), and lines the sidecar writes unasked (lost)
// on Lost.
type SessionProc struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	stderr *leasetest.LogBuffer
	// First is the session's first line.
	First   map[string]any
	replies chan map[string]any
	// Lost receives the session's lost lines.
	Lost chan map[string]any
	done chan struct{}
	err  error // how ssh ended, once done is closed
	mu   sync.Mutex
}

// OpenSession starts `ssh … collab-lease session <args>` with the key at
// keyPath and waits for its first line. A session that does not open
// (its first line is no session line) is an error carrying what ssh said.
func (s *Sidecar) OpenSession(ctx context.Context, keyPath string, args ...string) (*SessionProc, error) {
	host, port, _ := net.SplitHostPort(s.SSHAddr)
	argv := []string{"-F", os.DevNull, "-p", port, "-i", keyPath,
		"-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none", "-o", "BatchMode=yes",
		"-o", "UserKnownHostsFile=" + s.KnownHosts, "-o", "StrictHostKeyChecking=yes",
		"-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR", "git@" + host, "collab-lease", "session"}
	cmd := exec.Command("ssh", append(argv, args...)...)
	p := &SessionProc{cmd: cmd, stderr: &leasetest.LogBuffer{}, replies: make(chan map[string]any, 16), Lost: make(chan map[string]any, 64),
		done: make(chan struct{})}
	cmd.Stderr = p.stderr
	var err error
	if p.in, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	first := make(chan map[string]any, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		n := 0
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				m = map[string]any{"status": "unparsed", "line": sc.Text()}
			}
			switch _, reply := m["exit"]; {
			case n == 0:
				first <- m
			case m["status"] == "lost" && !reply:
				p.Lost <- m
			default:
				p.replies <- m
			}
			n++
		}
		if n == 0 {
			close(first)
		}
		p.err = cmd.Wait()
		close(p.replies)
		close(p.done)
	}()
	select {
	case m, ok := <-first:
		if !ok || m["status"] != "session" {
			<-p.done
			return nil, fmt.Errorf("session did not open: first line %v, %v, stderr %q", m, p.err, p.stderr.String())
		}
		p.First = m
		return p, nil
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		return nil, ctx.Err()
	}
}

// ID is the session's id.
func (p *SessionProc) ID() string { return fmt.Sprint(p.First["session"]) }

// Send writes one command line without waiting for its reply.
func (p *SessionProc) Send(line string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, err := fmt.Fprintln(p.in, line)
	return err
}

// Reply is the next reply (within ctx).
func (p *SessionProc) Reply(ctx context.Context) (map[string]any, error) {
	select {
	case m, ok := <-p.replies:
		if !ok {
			return nil, fmt.Errorf("session ended: %v, stderr %q", p.err, p.stderr.String())
		}
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Do sends one command line and returns its reply.
func (p *SessionProc) Do(ctx context.Context, line string) (map[string]any, error) {
	if err := p.Send(line); err != nil {
		return nil, err
	}
	return p.Reply(ctx)
}

// CloseInput closes the session's stdin (EOF: a clean end).
func (p *SessionProc) CloseInput() error { return p.in.Close() }

// Kill SIGKILLs the ssh client.
func (p *SessionProc) Kill() { _ = p.cmd.Process.Signal(syscall.SIGKILL) }

// Wait waits for ssh to end and returns its exit status (-1 if it could
// not tell) and its stderr.
func (p *SessionProc) Wait(ctx context.Context) (int, string, error) {
	select {
	case <-p.done:
	case <-ctx.Done():
		return -1, p.stderr.String(), ctx.Err()
	}
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return 0, p.stderr.String(), nil
	case errors.As(p.err, &ee):
		return ee.ExitCode(), p.stderr.String(), nil
	}
	return -1, p.stderr.String(), p.err
}

// Stderr is what ssh wrote on stderr so far.
func (p *SessionProc) Stderr() string { return p.stderr.String() }

// PID is the ssh client's process ID.
func (p *SessionProc) PID() int { return p.cmd.Process.Pid }
