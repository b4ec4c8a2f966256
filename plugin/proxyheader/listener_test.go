package proxyheader

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/collab-lease/collab-lease/plugin/leasetest"
	"github.com/pires/go-proxyproto"
)

// balancerIP is the loopback address the tests' balancer connects from;
// connections from 127.0.0.1 are the untrusted ones.
var balancerIP = net.ParseIP("127.0.0.2")

// listen starts a Listener on 127.0.0.1 that trusts 127.0.0.2 only.
func listen(t *testing.T, timeout time.Duration) (*Listener, *leasetest.LogBuffer) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs := &leasetest.LogBuffer{}
	l := &Listener{Listener: raw, From: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}, Timeout: timeout,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	t.Cleanup(func() { _ = l.Close() })
	return l, logs
}

// dialFrom connects to l from the loopback address from.
func dialFrom(t *testing.T, l net.Listener, from net.IP) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// accept is the next connection of l, which must come at once.
func accept(t *testing.T, l net.Listener) net.Conn {
	t.Helper()
	type result struct {
		c   net.Conn
		err error
	}
	got := make(chan result, 1)
	go func() {
		c, err := l.Accept()
		got <- result{c, err}
	}()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
		t.Cleanup(func() { _ = r.c.Close() })
		_ = r.c.SetDeadline(time.Now().Add(10 * time.Second))
		return r.c
	case <-time.After(5 * time.Second):
		t.Fatal("Accept did not return")
		return nil
	}
}

func header(t *testing.T, version byte, src string, dst net.Addr) []byte {
	t.Helper()
	b, err := proxyproto.HeaderProxyFromAddrs(version, net.TCPAddrFromAddrPort(netip.MustParseAddrPort(src)), dst).Format()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A trusted balancer's header, version 1 or 2, IPv4 or IPv6, names the
// client: RemoteAddr is the client's, and what follows the header is the
// connection's first byte.
func TestProxyHeaderFromTheBalancerNamesTheClient(t *testing.T) {
	for _, tc := range []struct {
		name    string
		version byte
		src     string
	}{
		{"v1 IPv4", 1, "192.0.2.7:40001"},
		{"v2 IPv4", 2, "198.51.100.9:40002"},
		{"v1 IPv6", 1, "[2001:db8::7]:40003"},
		{"v2 IPv6", 2, "[2001:db8::8]:40004"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, logs := listen(t, 0)
			client := dialFrom(t, l, balancerIP)
			if _, err := client.Write(append(header(t, tc.version, tc.src, l.Addr()), "SSH-2.0-x\r\n"...)); err != nil {
				t.Fatal(err)
			}
			c := accept(t, l)
			if got := c.RemoteAddr().String(); got != tc.src {
				t.Fatalf("RemoteAddr %s, want the header's %s", got, tc.src)
			}
			line := make([]byte, len("SSH-2.0-x\r\n"))
			if _, err := io.ReadFull(c, line); err != nil || string(line) != "SSH-2.0-x\r\n" {
				t.Fatalf("after the header: %q, %v", line, err)
			}
			if pc, ok := c.(*Conn); !ok || pc.Balancer().String() != client.LocalAddr().String() {
				t.Fatalf("balancer of %T: want %s", c, client.LocalAddr())
			}
			if s := logs.String(); s != "" {
				t.Fatalf("logged: %s", s)
			}
		})
	}
}

// A trusted balancer's connection without a header is refused, with one
// log line: its reads fail, nothing is written to it, and it is not taken
// for the client it would otherwise seem to be.
func TestProxyHeaderMissingFromTheBalancerIsRefused(t *testing.T) {
	l, logs := listen(t, 0)
	client := dialFrom(t, l, balancerIP)
	if _, err := client.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	c := accept(t, l)
	if n, err := c.Read(make([]byte, 64)); !errors.Is(err, proxyproto.ErrNoProxyProtocol) {
		t.Fatalf("read %d bytes, %v; want %v", n, err, proxyproto.ErrNoProxyProtocol)
	}
	if _, err := c.Write([]byte("HTTP/1.1 200 OK\r\n\r\n")); err == nil {
		t.Fatal("wrote to a connection that sent no header")
	}
	if got := c.RemoteAddr().String(); got != client.LocalAddr().String() {
		t.Fatalf("RemoteAddr %s, want the balancer's own %s", got, client.LocalAddr())
	}
	if s := logs.String(); strings.Count(s, "\n") != 1 || !strings.Contains(s, "no valid PROXY protocol header") ||
		!strings.Contains(s, "balancer="+client.LocalAddr().String()) {
		t.Fatalf("want one line saying why, got: %s", s)
	}
}

// A header from an address that is not a trusted balancer, version 1 or
// 2, is refused with one log line: anybody could claim any address.
func TestProxyHeaderFromElsewhereIsRefused(t *testing.T) {
	for _, version := range []byte{1, 2} {
		t.Run(map[byte]string{1: "v1", 2: "v2"}[version], func(t *testing.T) {
			l, logs := listen(t, 0)
			client := dialFrom(t, l, net.ParseIP("127.0.0.1"))
			if _, err := client.Write(append(header(t, version, "192.0.2.7:40001", l.Addr()), "SSH-2.0-x\r\n"...)); err != nil {
				t.Fatal(err)
			}
			c := accept(t, l)
			if n, err := c.Read(make([]byte, 64)); !errors.Is(err, proxyproto.ErrSuperfluousProxyHeader) {
				t.Fatalf("read %d bytes, %v; want %v", n, err, proxyproto.ErrSuperfluousProxyHeader)
			}
			if got := c.RemoteAddr().String(); got != client.LocalAddr().String() {
				t.Fatalf("RemoteAddr %s, want the socket's %s", got, client.LocalAddr())
			}
			if s := logs.String(); strings.Count(s, "\n") != 1 || !strings.Contains(s, "not in proxy-protocol-from") {
				t.Fatalf("want one line saying why, got: %s", s)
			}
		})
	}
}

// Any other connection is served as it comes: the server may speak first
// (an SSH server does) without waiting for the client, and RemoteAddr is
// the socket's at once.
func TestProxyHeaderlessConnectionFromElsewhereIsServed(t *testing.T) {
	l, logs := listen(t, time.Hour) // a wait for the client would hang the test
	client := dialFrom(t, l, net.ParseIP("127.0.0.1"))
	c := accept(t, l)
	if got := c.RemoteAddr().String(); got != client.LocalAddr().String() {
		t.Fatalf("RemoteAddr %s, want %s", got, client.LocalAddr())
	}
	if _, err := c.Write([]byte("SSH-2.0-server\r\n")); err != nil {
		t.Fatal(err)
	}
	banner := make([]byte, len("SSH-2.0-server\r\n"))
	if _, err := io.ReadFull(client, banner); err != nil {
		t.Fatalf("the client got no banner before speaking: %v", err)
	}
	// Its first bytes look like a header's start ("P", then "\r\n") but
	// are not one.
	for _, msg := range []string{"POST / HTTP/1.1\r\n", "\r\nSSH-2.0-client\r\n"} {
		if _, err := client.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil || string(got) != msg {
			t.Fatalf("read %q, %v; want %q", got, err, msg)
		}
	}
	if s := logs.String(); s != "" {
		t.Fatalf("logged: %s", s)
	}
}

// A balancer that connects and sends nothing holds neither the accept
// loop (Accept returns at once, and the next connection is served) nor
// its connection past Timeout.
func TestProxyHeaderTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	l, logs := listen(t, timeout)
	dialFrom(t, l, balancerIP) // silent
	silent := accept(t, l)

	client := dialFrom(t, l, balancerIP)
	if _, err := client.Write(append(header(t, 2, "192.0.2.7:40001", l.Addr()), "x"...)); err != nil {
		t.Fatal(err)
	}
	next := accept(t, l)
	if got := next.RemoteAddr().String(); got != "192.0.2.7:40001" {
		t.Fatalf("the connection after a silent one: RemoteAddr %s", got)
	}

	start := time.Now()
	err := silent.(*Conn).ReadHeader()
	took := time.Since(start)
	if !errors.Is(err, proxyproto.ErrNoProxyProtocol) || took > 10*timeout {
		t.Fatalf("the silent connection's header: %v after %s; want %v within about %s", err, took, proxyproto.ErrNoProxyProtocol, timeout)
	}
	if !strings.Contains(logs.String(), "no valid PROXY protocol header") {
		t.Fatalf("not logged: %s", logs.String())
	}
}

// An earlier deadline (the SSH handshake's) bounds the header too, and a
// later one is back in force once the header is read.
func TestProxyHeaderWithinTheConnectionsDeadline(t *testing.T) {
	l, _ := listen(t, time.Hour)
	dialFrom(t, l, balancerIP) // silent
	silent := accept(t, l)
	_ = silent.SetDeadline(time.Now().Add(200 * time.Millisecond))
	start := time.Now()
	if err := silent.(*Conn).ReadHeader(); err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("header of a silent connection past its deadline: %v after %s", err, time.Since(start))
	}

	client := dialFrom(t, l, balancerIP)
	if _, err := client.Write(header(t, 1, "192.0.2.7:40001", l.Addr())); err != nil {
		t.Fatal(err)
	}
	c := accept(t, l)
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if err := c.(*Conn).ReadHeader(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	var ne net.Error
	if _, err := c.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() || time.Since(start) > 5*time.Second {
		t.Fatalf("read after the header: %v after %s; want the deadline set before it", err, time.Since(start))
	}
}

func TestProxyParseFrom(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // the prefixes, comma-separated; "error" for a refusal
	}{
		{"", ""},
		{" , ", ""},
		{"10.0.0.5", "10.0.0.5/32"},
		{"10.0.0.5/24, 192.168.1.0/24", "10.0.0.0/24,192.168.1.0/24"},
		{"fd00::1, fd00::/64", "fd00::1/128,fd00::/64"},
		{"::ffff:10.0.0.5", "10.0.0.5/32"},
		{"::ffff:10.0.0.0/120", "10.0.0.0/24"},
		{"0.0.0.0/0", "0.0.0.0/0"},
		{"10.0.0.300", "error"},
		{"10.0.0.0/33", "error"},
		{"balancer.example.com", "error"},
		{"fe80::1%eth0", "error"},
		{"::ffff:10.0.0.0/64", "error"},
	} {
		ps, err := ParseFrom(tc.in)
		if tc.want == "error" {
			if err == nil {
				t.Errorf("ParseFrom(%q) = %v, want an error", tc.in, ps)
			}
			continue
		}
		var got []string
		for _, p := range ps {
			got = append(got, p.String())
		}
		if err != nil || strings.Join(got, ",") != tc.want {
			t.Errorf("ParseFrom(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

func TestProxyTrusts(t *testing.T) {
	from, err := ParseFrom("10.0.0.0/24, fd00::5")
	if err != nil {
		t.Fatal(err)
	}
	l := &Listener{From: from}
	for addr, want := range map[string]bool{
		"10.0.0.9:1000": true, "10.0.1.9:1000": false, "[::ffff:10.0.0.9]:1000": true,
		"[fd00::5]:1000": true, "[fd00::6]:1000": false,
	} {
		a := net.TCPAddrFromAddrPort(netip.MustParseAddrPort(addr))
		if got := l.Trusts(a); got != want {
			t.Errorf("Trusts(%s) = %v, want %v", addr, got, want)
		}
	}
	if (&Listener{From: from}).Trusts(&net.UnixAddr{Name: "/x", Net: "unix"}) {
		t.Error("a Unix socket's peer is trusted")
	}
}
