package ssh

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pires/go-proxyproto"
	gossh "golang.org/x/crypto/ssh"

	"github.com/collab-lease/collab-lease/plugin/forge"
	"github.com/collab-lease/collab-lease/plugin/leasetest"
	"github.com/collab-lease/collab-lease/plugin/proxyheader"
)

// proxyWorld is a Server behind proxyheader's listener, trusting the
// balancer at 127.0.0.2; connections from 127.0.0.1 are direct ones.
type proxyWorld struct {
	srv     *Server
	l       net.Listener
	h       *recordingHandler
	hostKey gossh.Signer
	signer  gossh.Signer
	logs    *leasetest.LogBuffer
}

var (
	balancerIP = net.ParseIP("127.0.0.2")
	directIP   = net.ParseIP("127.0.0.1")
)

// newProxyWorld starts it; headerTimeout is the listener's (0: its default).
func newProxyWorld(t *testing.T, headerTimeout time.Duration, tweak func(*Server)) *proxyWorld {
	t.Helper()
	dir := t.TempDir()
	key := newTestKey(t, dir, "alice")
	pemBytes, err := os.ReadFile(key.path)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := gossh.ParsePrivateKey(pemBytes)
	if err != nil {
		t.Fatal(err)
	}
	hostKey, err := LoadOrCreateHostKey(filepath.Join(dir, "host_key"))
	if err != nil {
		t.Fatal(err)
	}
	keys := keysFunc(func(_ context.Context, fp string) (forge.User, error) {
		if fp == key.fp {
			return forge.User{ID: 1, Login: "alice"}, nil
		}
		return forge.User{}, forge.ErrNotFound
	})
	logs := &leasetest.LogBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &proxyheader.Listener{Listener: raw, From: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")},
		Timeout: headerTimeout, Logger: logger}
	w := &proxyWorld{l: l, h: &recordingHandler{}, hostKey: hostKey, signer: signer, logs: logs}
	w.srv = &Server{HostKey: hostKey, Keys: keys, Handler: w.h, Logger: logger}
	if tweak != nil {
		tweak(w.srv)
	}
	go func() { _ = w.srv.Serve(l) }()
	t.Cleanup(func() { _ = w.srv.Close() })
	return w
}

func (w *proxyWorld) log() string {
	return w.logs.String()
}

// connect opens a TCP connection from the loopback address from and, with
// a version (1 or 2), sends a PROXY header naming client first.
func (w *proxyWorld) connect(t *testing.T, from net.IP, version byte, client string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", w.l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if version != 0 {
		h := proxyproto.HeaderProxyFromAddrs(version, net.TCPAddrFromAddrPort(netip.MustParseAddrPort(client)), w.l.Addr())
		if _, err := h.WriteTo(c); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// dial is connect, then an SSH handshake as alice.
func (w *proxyWorld) dial(t *testing.T, from net.IP, version byte, client string) (*gossh.Client, error) {
	t.Helper()
	c := w.connect(t, from, version, client)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	cc, chans, reqs, err := gossh.NewClientConn(c, w.l.Addr().String(), &gossh.ClientConfig{User: "git",
		Auth: []gossh.AuthMethod{gossh.PublicKeys(w.signer)}, HostKeyCallback: gossh.FixedHostKey(w.hostKey.PublicKey())})
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	sc := gossh.NewClient(cc, chans, reqs)
	t.Cleanup(func() { _ = sc.Close() })
	return sc, nil
}

// remoteOf runs a command on c and returns the client address the
// server's Handler was given for it.
func (w *proxyWorld) remoteOf(t *testing.T, c *gossh.Client) string {
	t.Helper()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	var ee *gossh.ExitError
	if err := sess.Run("collab-lease help"); !errors.As(err, &ee) || ee.ExitStatus() != 3 {
		t.Fatalf("command: %v", err)
	}
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	return w.h.execs[len(w.h.execs)-1].RemoteAddr.String()
}

func (w *proxyWorld) perAddr() map[string]int {
	w.srv.mu.Lock()
	defer w.srv.mu.Unlock()
	out := map[string]int{}
	for p, n := range w.srv.perAddr {
		out[p.String()] = n
	}
	return out
}

// Behind a balancer that sends PROXY headers (version 1 or 2), the server
// counts each client the header names, not the balancer: with one
// connection per address, two clients through the one balancer both get
// in, the Handler is told each one's address, a second connection of one
// of them is refused and logged with its address, and leaving gives the
// places back.
func TestProxyHeaderClientsCountForTheLimitPerAddress(t *testing.T) {
	for _, version := range []byte{1, 2} {
		t.Run(map[byte]string{1: "v1", 2: "v2"}[version], func(t *testing.T) {
			w := newProxyWorld(t, 0, func(s *Server) { s.MaxConnsPerAddr = 1 })
			one, err := w.dial(t, balancerIP, version, "192.0.2.1:40001")
			if err != nil {
				t.Fatal(err)
			}
			two, err := w.dial(t, balancerIP, version, "192.0.2.2:40002")
			if err != nil {
				t.Fatalf("a second client through the same balancer: %v\n%s", err, w.log())
			}
			if got := w.remoteOf(t, one); got != "192.0.2.1:40001" {
				t.Fatalf("the Handler was told %s, want the header's 192.0.2.1:40001", got)
			}
			if got := w.remoteOf(t, two); got != "192.0.2.2:40002" {
				t.Fatalf("the Handler was told %s, want the header's 192.0.2.2:40002", got)
			}
			if got := w.perAddr(); len(got) != 2 || got["192.0.2.1/32"] != 1 || got["192.0.2.2/32"] != 1 {
				t.Fatalf("counted per address: %v; want one each for the two clients", got)
			}
			if _, err := w.dial(t, balancerIP, version, "192.0.2.1:40003"); err == nil {
				t.Fatal("a second connection of a client at its limit got in")
			}
			waitUntil(t, "the refusal logged, naming the client", func() bool {
				s := w.log()
				return strings.Contains(s, "too many connections from one address") && strings.Contains(s, "remote=192.0.2.1:40003")
			})
			one.Close()
			two.Close()
			waitUntil(t, "the places to be given back", func() bool { return len(w.perAddr()) == 0 })
		})
	}
}

// A balancer's connection without a header, and a header from anywhere
// else, are refused, each with a log line; a direct connection without a
// header is served as before and counted by its own address.
func TestProxyHeaderMissingOrUnwantedIsRefused(t *testing.T) {
	w := newProxyWorld(t, 0, nil)
	if _, err := w.dial(t, balancerIP, 0, ""); err == nil {
		t.Fatal("a balancer's connection without a PROXY header got in")
	}
	waitUntil(t, "the balancer's connection without a header logged", func() bool {
		s := w.log()
		return strings.Contains(s, "no valid PROXY protocol header from a balancer") && strings.Contains(s, "balancer=127.0.0.2:")
	})
	for _, version := range []byte{1, 2} {
		if _, err := w.dial(t, directIP, version, "192.0.2.9:40009"); err == nil {
			t.Fatalf("a PROXY header (v%d) from an address not trusted got in", version)
		}
	}
	// The client may see its connection closed before the server's line
	// is written.
	waitUntil(t, "two refusals logged", func() bool {
		return strings.Count(w.log(), "a PROXY protocol header from an address not in proxy-protocol-from") == 2
	})
	c, err := w.dial(t, directIP, 0, "")
	if err != nil {
		t.Fatalf("a direct connection without a header: %v", err)
	}
	if got := w.remoteOf(t, c); !strings.HasPrefix(got, "127.0.0.1:") {
		t.Fatalf("the Handler was told %s for a direct connection", got)
	}
	if got := w.perAddr(); got["127.0.0.1/32"] != 1 || len(got) != 1 {
		t.Fatalf("counted per address: %v", got)
	}
}

// A balancer's connections that send no header neither stall the accept
// loop nor hold their slots: they count among the handshakes, so past
// MaxStartups they are evicted, and a client still gets in.
func TestProxyHeaderStallsAreEvicted(t *testing.T) {
	w := newProxyWorld(t, time.Hour, func(s *Server) { s.MaxStartups = 2; s.HandshakeTimeout = time.Hour })
	closed := make(chan int, 5)
	for i := 0; i < 5; i++ {
		c := w.connect(t, balancerIP, 0, "")
		go func() {
			_ = c.SetReadDeadline(time.Now().Add(time.Minute))
			if _, err := io.ReadAll(c); err == nil {
				closed <- i
			}
		}()
	}
	for range 3 {
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatal("five silent connections from the balancer, MaxStartups 2: three were not evicted")
		}
	}
	waitUntil(t, "two connections in the handshake", func() bool {
		w.srv.mu.Lock()
		defer w.srv.mu.Unlock()
		return w.srv.startups.Len() == 2
	})
	c, err := w.dial(t, balancerIP, 2, "192.0.2.1:40001")
	if err != nil {
		t.Fatalf("a client among silent balancer connections: %v\n%s", err, w.log())
	}
	if got := w.remoteOf(t, c); got != "192.0.2.1:40001" {
		t.Fatalf("the Handler was told %s", got)
	}
}

// The handshake timeout bounds the header too, whatever the listener's
// own timeout for it.
func TestProxyHeaderWithinTheHandshakeTimeout(t *testing.T) {
	w := newProxyWorld(t, time.Hour, func(s *Server) { s.HandshakeTimeout = 300 * time.Millisecond })
	c := w.connect(t, balancerIP, 0, "")
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("a silent connection from the balancer was not closed: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("a silent connection from the balancer closed after %s, handshake timeout 300ms", took)
	}
	waitUntil(t, "no connection left in the handshake", func() bool {
		w.srv.mu.Lock()
		defer w.srv.mu.Unlock()
		return w.srv.startups.Len() == 0
	})
}
