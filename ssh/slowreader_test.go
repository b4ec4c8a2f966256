package ssh

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/forge"
	gossh "golang.org/x/crypto/ssh"
)

// bigReply answers every command with size bytes of output, more than the
// SSH window and the socket buffers hold, and says when it was asked.
type bigReply struct {
	size  int
	asked chan struct{}
}

func (h *bigReply) Exec(context.Context, ConnInfo, string) Reply {
	h.asked <- struct{}{}
	return Reply{Stdout: make([]byte, h.size)}
}

func (h *bigReply) Greet(ConnInfo) Reply { return Reply{Code: 1} }

// smallSendBuffers shrinks the server's socket send buffers, so that a
// client that stops reading stalls the server's writes in the kernel (a
// zero TCP window) long before the SSH window runs out.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4 << 10)
	}
	return c, err
}

// stallingConn is a client's connection that stops reading once told to:
// its Reads then block until it is closed.
type stallingConn struct {
	net.Conn
	stop, closed         chan struct{}
	stopOnce, closedOnce sync.Once
}

func (c *stallingConn) Read(p []byte) (int, error) {
	select {
	case <-c.stop:
		<-c.closed
		return 0, net.ErrClosed
	default:
	}
	return c.Conn.Read(p)
}

func (c *stallingConn) stopReading() { c.stopOnce.Do(func() { close(c.stop) }) }

func (c *stallingConn) Close() error {
	c.closedOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// slowWorld is a server that answers with bigReply, and a way to dial it.
type slowWorld struct {
	srv    *Server
	addr   string
	reply  *bigReply
	live   atomic.Int64 // connections the server holds
	client *gossh.ClientConfig
}

func newSlowWorld(t *testing.T) *slowWorld {
	t.Helper()
	dir := t.TempDir()
	key := newTestKey(t, dir, "alice")
	keys := keysFunc(func(_ context.Context, fp string) (forge.User, error) {
		if fp == key.fp {
			return forge.User{ID: 1, Login: "alice"}, nil
		}
		return forge.User{}, forge.ErrNotFound
	})
	hostKey, err := LoadOrCreateHostKey(filepath.Join(dir, "host_key"))
	if err != nil {
		t.Fatal(err)
	}
	w := &slowWorld{reply: &bigReply{size: 8 << 20, asked: make(chan struct{}, 4)}}
	w.srv = &Server{HostKey: hostKey, Keys: keys, Handler: w.reply, Logger: slog.New(slog.DiscardHandler),
		WriteTimeout: 300 * time.Millisecond,
		IdleTimeout:  time.Minute, // far beyond every wait below: only the write timeout may cut
		ConnDelta:    func(d int) { w.live.Add(int64(d)) }}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w.addr = l.Addr().String()
	go func() { _ = w.srv.Serve(smallSendBuffers{l}) }()
	t.Cleanup(func() { _ = w.srv.Close() })
	pemBytes, err := os.ReadFile(key.path)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := gossh.ParsePrivateKey(pemBytes)
	if err != nil {
		t.Fatal(err)
	}
	w.client = &gossh.ClientConfig{User: "git", Auth: []gossh.AuthMethod{gossh.PublicKeys(signer)},
		HostKeyCallback: gossh.FixedHostKey(hostKey.PublicKey()), Timeout: 10 * time.Second}
	return w
}

// dial completes the handshake over a connection that can be told to stop
// reading, with a small receive buffer so that it fills at once.
func (w *slowWorld) dial(t *testing.T) (*gossh.Client, *stallingConn) {
	t.Helper()
	raw, err := net.Dial("tcp", w.addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = raw.(*net.TCPConn).SetReadBuffer(4 << 10)
	c := &stallingConn{Conn: raw, stop: make(chan struct{}), closed: make(chan struct{})}
	sc, chans, reqs, err := gossh.NewClientConn(c, w.addr, w.client)
	if err != nil {
		t.Fatal(err)
	}
	client := gossh.NewClient(sc, chans, reqs)
	t.Cleanup(func() { _ = client.Close() })
	return client, c
}

// run starts the big command on client, leaving its output unread, and
// returns once the server's handler has been asked (the reply follows).
func (w *slowWorld) run(t *testing.T, client *gossh.Client) {
	t.Helper()
	sess, err := client.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sess.StdoutPipe(); err != nil { // never read: its window is never granted again
		t.Fatal(err)
	}
	if err := sess.Start("big"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.reply.asked:
	case <-time.After(10 * time.Second):
		t.Fatal("the command never reached the handler")
	}
}

// within polls cond until it holds and says how long that took, or fails
// the test after d.
func within(t *testing.T, what string, d time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(5 * time.Millisecond) // polling, not waiting for time to pass
	}
	return time.Since(start)
}

// A client that stops reading its socket while the server writes a reply
// (a zero TCP window) is disconnected once a write has made no progress
// for WriteTimeout, rather than pinning its session until the idle
// timeout; Shutdown does not wait for such a client either; and nothing of
// either connection is left running.
func TestClientThatStopsReadingIsCut(t *testing.T) {
	base := runtime.NumGoroutine()
	w := newSlowWorld(t)

	client, conn := w.dial(t)
	w.run(t, client)
	conn.stopReading()
	took := within(t, "the server cuts the client that stopped reading", 5*time.Second, func() bool { return w.live.Load() == 0 })
	t.Logf("cut %v after the reply began (write timeout %v)", took, w.srv.WriteTimeout)
	_ = client.Close()

	client, conn = w.dial(t)
	w.run(t, client)
	conn.stopReading()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	began := time.Now()
	if err := w.srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown waited for the client that stopped reading: %v after %v", err, time.Since(began))
	}
	t.Logf("Shutdown returned after %v", time.Since(began))
	_ = client.Close()

	within(t, "goroutines back to their number before the server", 5*time.Second, func() bool { return runtime.NumGoroutine() <= base })
}

// A client that reads its socket but never takes the output of its
// session (its SSH window stays shut: a client may open a session with no
// window at all) is disconnected the same way.
func TestClientThatTakesNoOutputIsCut(t *testing.T) {
	w := newSlowWorld(t)
	client, _ := w.dial(t)
	w.run(t, client)
	took := within(t, "the server cuts the client that takes no output", 5*time.Second, func() bool { return w.live.Load() == 0 })
	t.Logf("cut %v after the reply began (write timeout %v)", took, w.srv.WriteTimeout)
	if err := client.Wait(); err == nil {
		t.Fatal("the client's connection ended without an error")
	}
}

// A write the peer does not take within the write timeout fails, and the
// connection is closed: after a timed-out write the SSH stream is broken.
func TestStalledWriteClosesTheConnection(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	c := newIdleConn(a, time.Minute, 50*time.Millisecond)
	c.arm()
	done := make(chan error, 1)
	go func() {
		_, err := c.Write([]byte("nobody reads this"))
		done <- err
	}()
	select {
	case err := <-done:
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("write: %v, want a timeout", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the write is still blocked")
	}
	if _, err := b.Read(make([]byte, 1)); err == nil {
		t.Fatal("the connection is still open")
	}
}
