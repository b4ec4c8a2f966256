// Package proxyheader learns a client's address behind TCP load balancers
// that speak the PROXY protocol (version 1 or 2, as HAProxy's send-proxy
// and send-proxy-v2 send it), so that limits per address and logs name
// the client rather than the balancer.
//
// A Listener wraps the SSH or the public HTTP listener. A connection from
// a trusted balancer (From) must begin with a PROXY header, and its
// RemoteAddr is then the client the header names; a connection from any
// other address is served as it comes, and may not send a header, since
// with one anybody could claim any address. Either refusal closes the
// connection unanswered and is logged, one line each.
//
// Accept never reads: a trusted connection's header is read on the
// connection's own goroutine (at its first ReadHeader, RemoteAddr, Read or
// Write), within Timeout and any deadline already set, so a balancer that
// stalls holds neither the accept loop nor the connection for long. The
// package decides nothing about limits: the servers count what RemoteAddr
// says.
package proxyheader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pires/go-proxyproto"
)

// DefaultTimeout is how long a trusted connection may take to send its
// header when Listener.Timeout is not set. A balancer sends it as soon as
// it has connected, before any of the client's bytes.
const DefaultTimeout = 5 * time.Second

// Listener is a net.Listener whose connections from From must begin with a
// PROXY header and whose other connections must not. Set the fields, then
// use it as the listener it wraps.
type Listener struct {
	net.Listener
	From    []netip.Prefix // the balancers' addresses; an empty list trusts nobody
	Timeout time.Duration  // for the header (default DefaultTimeout)
	Logger  *slog.Logger   // nil: slog.Default()
}

// Accept waits for the next connection and returns it without reading
// from it: a *Conn when it comes from a trusted balancer, otherwise a
// connection that refuses a header.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	log := l.Logger
	if log == nil {
		log = slog.Default()
	}
	timeout := l.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if l.Trusts(c.RemoteAddr()) {
		pc := proxyproto.NewConn(c, proxyproto.WithPolicy(proxyproto.REQUIRE),
			proxyproto.SetReadHeaderTimeout(timeout), proxyproto.ValidateHeader(validate))
		return &Conn{pc: pc, raw: c, log: log}, nil
	}
	pc := proxyproto.NewConn(c, proxyproto.WithPolicy(proxyproto.REJECT), proxyproto.SetReadHeaderTimeout(timeout))
	return &direct{pc: pc, raw: c, log: log}, nil
}

// Trusts reports whether a connection from a may (and must) send a
// header.
func (l *Listener) Trusts(a net.Addr) bool {
	ip, ok := ipOf(a)
	if !ok {
		return false
	}
	for _, p := range l.From {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

func ipOf(a net.Addr) (netip.Addr, bool) {
	if t, ok := a.(*net.TCPAddr); ok {
		ip, ok := netip.AddrFromSlice(t.IP)
		return ip.Unmap(), ok
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap(), true
}

// ParseFrom parses a comma-separated list of addresses and CIDR ranges
// ("10.0.0.5, 192.168.1.0/24, fd00::/64"); an address is a range of one.
// An empty list is nil.
func ParseFrom(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		var p netip.Prefix
		if ip, err := netip.ParseAddr(f); err == nil {
			if ip.Zone() != "" {
				return nil, fmt.Errorf("%q: an address with a zone cannot be matched", f)
			}
			ip = ip.Unmap()
			p = netip.PrefixFrom(ip, ip.BitLen())
		} else if p, err = netip.ParsePrefix(f); err != nil {
			return nil, fmt.Errorf("%q is neither an IP address nor a CIDR range", f)
		}
		if p.Addr().Is4In6() {
			if p.Bits() < 96 {
				return nil, fmt.Errorf("%q: an IPv4-mapped range must be at least /96", f)
			}
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// SendLocal begins c with a PROXY header of the LOCAL command: the
// connection is the balancer's own (a health check), which names no
// client, and a Listener that trusts c's address takes it as coming from
// that address.
func SendLocal(c net.Conn) error {
	_, err := (&proxyproto.Header{Version: 2, Command: proxyproto.LOCAL, TransportProtocol: proxyproto.UNSPEC}).WriteTo(c)
	return err
}

// validate accepts a header for a TCP connection (over IPv4 or IPv6), or
// one that names no client: LOCAL (the balancer's own connection, such as
// a health check) or UNKNOWN. The connection is then the balancer's.
func validate(h *proxyproto.Header) error {
	if h.Command.IsLocal() || h.TransportProtocol.IsUnspec() {
		return nil
	}
	if h.TransportProtocol.IsStream() && (h.TransportProtocol.IsIPv4() || h.TransportProtocol.IsIPv6()) {
		return nil
	}
	return errors.New("proxyproto: the header is not for a TCP connection")
}

// Conn is a connection from a trusted balancer: nothing is read from it or
// written to it before its PROXY header has been read, and RemoteAddr is
// the client the header names (the balancer's own address for a LOCAL or
// UNKNOWN header).
type Conn struct {
	pc   *proxyproto.Conn
	raw  net.Conn
	log  *slog.Logger
	once sync.Once
	err  error
}

// ReadHeader reads the PROXY header, once, within the listener's Timeout
// and any read deadline already set, and reports why the connection must
// be refused (logged once), or nil. Servers that count connections by
// address call it on the connection's own goroutine before counting.
func (c *Conn) ReadHeader() error {
	c.once.Do(func() {
		if c.pc.ProxyHeader() != nil {
			return
		}
		// The header failed: the connection keeps the reason, and returns
		// it from every Read without reading.
		if _, err := c.pc.Read(nil); err != nil {
			c.err = err
		} else {
			c.err = proxyproto.ErrNoProxyProtocol
		}
		_ = c.raw.Close() // refused: nothing is answered
		level := slog.LevelWarn
		if errors.Is(c.err, net.ErrClosed) {
			level = slog.LevelDebug // closed here: shutdown, or evicted while it stalled
		}
		c.log.Log(context.Background(), level, "connection refused: no valid PROXY protocol header from a balancer in proxy-protocol-from",
			"balancer", c.raw.RemoteAddr().String(), "err", c.err)
	})
	return c.err
}

// RemoteAddr is the client's address from the header (read first, if it
// has not been), or the balancer's when the header named none or failed.
func (c *Conn) RemoteAddr() net.Addr {
	if c.ReadHeader() != nil {
		return c.raw.RemoteAddr()
	}
	return c.pc.RemoteAddr()
}

// Balancer is the address the connection came from.
func (c *Conn) Balancer() net.Addr { return c.raw.RemoteAddr() }

func (c *Conn) Read(b []byte) (int, error) {
	if err := c.ReadHeader(); err != nil {
		return 0, err
	}
	return c.pc.Read(b)
}

func (c *Conn) Write(b []byte) (int, error) {
	if err := c.ReadHeader(); err != nil {
		return 0, err
	}
	return c.raw.Write(b)
}

func (c *Conn) Close() error                       { return c.raw.Close() }
func (c *Conn) LocalAddr() net.Addr                { return c.raw.LocalAddr() }
func (c *Conn) SetDeadline(t time.Time) error      { return c.pc.SetDeadline(t) }
func (c *Conn) SetReadDeadline(t time.Time) error  { return c.pc.SetReadDeadline(t) }
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.raw.SetWriteDeadline(t) }

// CloseWrite half-closes a TCP connection (the SSH server's graceful end).
func (c *Conn) CloseWrite() error { return closeWrite(c.raw) }

// SyscallConn gives the socket's options (the SSH server's TCP_QUICKACK).
func (c *Conn) SyscallConn() (syscall.RawConn, error) { return syscallConn(c.raw) }

// direct is a connection from an address that is not a trusted balancer:
// served as it comes, except that a PROXY header at its start fails its
// reads. Only reads look for one, so the server may speak first (as an
// SSH server does) and RemoteAddr never waits.
type direct struct {
	pc   *proxyproto.Conn
	raw  net.Conn
	log  *slog.Logger
	once sync.Once
}

func (d *direct) Read(b []byte) (int, error) {
	n, err := d.pc.Read(b)
	if errors.Is(err, proxyproto.ErrSuperfluousProxyHeader) {
		d.once.Do(func() {
			_ = d.raw.Close() // refused: nothing is answered
			d.log.Warn("connection refused: a PROXY protocol header from an address not in proxy-protocol-from",
				"remote", d.raw.RemoteAddr().String())
		})
	}
	return n, err
}

func (d *direct) Write(b []byte) (int, error)        { return d.raw.Write(b) }
func (d *direct) Close() error                       { return d.raw.Close() }
func (d *direct) LocalAddr() net.Addr                { return d.raw.LocalAddr() }
func (d *direct) RemoteAddr() net.Addr               { return d.raw.RemoteAddr() }
func (d *direct) SetDeadline(t time.Time) error      { return d.pc.SetDeadline(t) }
func (d *direct) SetReadDeadline(t time.Time) error  { return d.pc.SetReadDeadline(t) }
func (d *direct) SetWriteDeadline(t time.Time) error { return d.raw.SetWriteDeadline(t) }
func (d *direct) CloseWrite() error                  { return closeWrite(d.raw) }
func (d *direct) SyscallConn() (syscall.RawConn, error) {
	return syscallConn(d.raw)
}

func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

func syscallConn(c net.Conn) (syscall.RawConn, error) {
	if sc, ok := c.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}
