package ssh

import (
	"net"
	"sync/atomic"
	"time"
)

// idleConn closes a connection that sees no traffic in either direction
// for the idle timeout, by pushing the deadline forward on every read and
// write. Before each read it also asks the kernel to acknowledge at once
// (see quickAck), which keeps OpenSSH's small key-exchange writes from
// waiting on a delayed ACK.
type idleConn struct {
	net.Conn
	idle time.Duration
	// armed is set once the handshake is over; until then the fixed
	// handshake deadline must not be pushed forward by traffic.
	armed atomic.Bool
	// got counts the bytes the peer has sent: when handshakes must be
	// evicted, the one that got furthest (a real client is past its key
	// exchange within a round trip) is kept over one that stalls.
	got atomic.Int64
}

func newIdleConn(c net.Conn, idle time.Duration) *idleConn {
	return &idleConn{Conn: c, idle: idle}
}

// arm ends the handshake deadline and starts the idle timeout.
func (c *idleConn) arm() {
	c.armed.Store(true)
	_ = c.Conn.SetDeadline(time.Time{})
	c.extend()
}

func (c *idleConn) Read(p []byte) (int, error) {
	quickAck(c.Conn)
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.got.Add(int64(n))
		c.extend()
	}
	return n, err
}

func (c *idleConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.extend()
	}
	return n, err
}

func (c *idleConn) extend() {
	if c.armed.Load() {
		_ = c.Conn.SetReadDeadline(time.Now().Add(c.idle))
	}
}
