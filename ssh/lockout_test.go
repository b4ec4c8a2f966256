package ssh

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/forge"
	gossh "golang.org/x/crypto/ssh"
)

// runOn executes one command on an open client connection.
func runOn(t *testing.T, c *gossh.Client, cmd string) (string, int) {
	t.Helper()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatalf("session: %v", err)
	}
	defer sess.Close()
	var stderr bytes.Buffer
	sess.Stderr = &stderr
	err = sess.Run(cmd)
	if ee, ok := err.(*gossh.ExitError); ok {
		return stderr.String(), ee.ExitStatus()
	}
	if err != nil {
		t.Fatalf("run %q: %v", cmd, err)
	}
	return stderr.String(), 0
}

// waitClosed polls until the client's connection is gone.
func waitClosed(t *testing.T, c *gossh.Client, within time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { _ = c.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(within):
		t.Fatalf("%s: still open after %v", what, within)
	}
}

// While Gitea cannot resolve keys, anyone with a key of their own is let
// in to be told exit 75; such connections must not lock agents out once
// Gitea is back: they live ShortLife at most, traffic does not extend it,
// and a new connection pushes the oldest of them out when slots run out.
func TestConnectionsAdmittedDuringAnOutageDoNotLockAgentsOut(t *testing.T) {
	w := newWorld(t, func(s *Server) {
		s.MaxConns, s.MaxConnsPerAddr = 4, 100
		s.ShortLife = time.Minute // eviction, not the life, must free the slots here
	})
	w.forge.SetHook(func(ctx context.Context, method string) error {
		if method == "UserByKey" {
			return fmt.Errorf("gitea down: %w", forge.ErrUnavailable)
		}
		return nil
	})
	var held []*gossh.Client
	for i := 0; i < 4; i++ {
		c := w.dial(t, "mallory")
		defer c.Close()
		if stderr, code := runOn(t, c, "collab-lease list acme/widgets"); code != 75 || !strings.Contains(stderr, "forge unavailable") {
			t.Fatalf("during the outage: exit %d %q", code, stderr)
		}
		held = append(held, c)
	}
	// Every slot is held by a connection that keeps itself alive.
	for _, c := range held {
		if _, _, err := c.SendRequest("keepalive@openssh.com", true, nil); err != nil {
			t.Fatalf("keepalive: %v", err)
		}
	}
	w.forge.SetHook(nil) // Gitea is back
	start := time.Now()
	for i := 0; i < 3; i++ {
		if r := w.ssh("alice", "collab-lease list acme/widgets"); r.code != 0 {
			t.Fatalf("agent %d after Gitea recovered, with every slot held: %+v", i, r)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("3 agents took %v to be served", d)
	}
}

func TestShortLifeIsNotExtendedByTraffic(t *testing.T) {
	w := newWorld(t, func(s *Server) { s.ShortLife = 300 * time.Millisecond })
	w.forge.SetHook(func(ctx context.Context, method string) error {
		if method == "UserByKey" {
			return fmt.Errorf("gitea down: %w", forge.ErrUnavailable)
		}
		return nil
	})
	c := w.dial(t, "alice")
	defer c.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() { // traffic all along
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				_, _, _ = c.SendRequest("keepalive@openssh.com", true, nil)
			}
		}
	}()
	waitClosed(t, c, 10*time.Second, "a connection let in without an identity, kept busy")
}

// One account cannot hold every connection: past MaxConnsPerAccount its
// connections answer exit 75 with a line saying why, and others are
// served.
func TestConnectionsPerAccountAreCapped(t *testing.T) {
	w := newWorld(t, func(s *Server) { s.MaxConnsPerAccount = 2; s.MaxConnsPerAddr = 100 })
	a1, a2 := w.dial(t, "alice"), w.dial(t, "alice")
	defer a1.Close()
	defer a2.Close()
	if _, code := runOn(t, a2, "collab-lease acquire acme/widgets 42"); code != 0 {
		t.Fatalf("alice's second connection: exit %d", code)
	}
	a3 := w.dial(t, "alice")
	defer a3.Close()
	if stderr, code := runOn(t, a3, "collab-lease acquire acme/widgets 43"); code != 75 || stderr != "error: too many connections for this account, try again\n" {
		t.Fatalf("alice's third connection: exit %d %q", code, stderr)
	}
	if r := w.ssh("bob", "collab-lease acquire acme/widgets 43"); r.code != 0 {
		t.Fatalf("bob meanwhile: %+v", r)
	}
	a1.Close()
	// Once one of hers closes, she is served again.
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := w.ssh("alice", "collab-lease renew acme/widgets 42 --ttl 1m")
		if r.code == 0 {
			break
		}
		if r.code != 75 || time.Now().After(deadline) {
			t.Fatalf("alice after closing a connection: %+v", r)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// One address cannot hold every connection: past MaxConnsPerAddr, a new
// connection pushes out one of that address's own handshakes (so its
// stalled connections never lock out its real clients), and is closed at
// once when all of them are working connections; leaving frees a place.
func TestConnectionsPerAddressAreCapped(t *testing.T) {
	w := newWorld(t, func(s *Server) { s.MaxConnsPerAddr = 3 })
	var stalled []net.Conn
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", w.addr.String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		stalled = append(stalled, c)
	}
	// A real client from the same address gets in among its stallers.
	if r := w.ssh("alice", "collab-lease list acme/widgets"); r.code != 0 {
		t.Fatalf("a real client among its address's stalled handshakes: %+v", r)
	}
	for _, c := range stalled {
		c.Close()
	}
	var clients []*gossh.Client
	for _, u := range []string{"alice", "bob", "carol"} {
		c := w.dialRetry(t, u)
		defer c.Close()
		clients = append(clients, c)
	}
	// Wait until the server has let the stalled ones go: only the three
	// working connections count now.
	deadline := time.Now().Add(10 * time.Second)
	for {
		w.srv.mu.Lock()
		n, starting := w.srv.perAddr[addrOf(w.addr)], w.srv.startups.Len()
		w.srv.mu.Unlock()
		if n == 3 && starting == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections counted for the address, %d in the handshake, want 3 and 0", n, starting)
		}
		time.Sleep(5 * time.Millisecond)
	}
	fourth, err := net.Dial("tcp", w.addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer fourth.Close()
	_ = fourth.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := fourth.Read(make([]byte, 8)); err == nil {
		t.Fatalf("a fourth connection from an address holding 3 got %d bytes", n)
	}
	clients[0].Close()
	deadline = time.Now().Add(10 * time.Second)
	for {
		r := w.ssh("alice", "collab-lease list acme/widgets")
		if r.code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after one left: %+v", r)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// dialRetry dials as user, retrying while the server is still letting a
// closed connection go (its place is freed when its goroutine ends).
func (w *world) dialRetry(t *testing.T, user string) *gossh.Client {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := w.tryDial(user)
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("dial as %s: %v", user, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
