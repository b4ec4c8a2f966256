package ssh

import (
	"errors"
	"net"
	"sync/atomic"
	"time"
)

// idleConn closes a connection that sees no traffic in either direction
// for the idle timeout, by pushing the read deadline forward on every read
// and write, and one whose peer stops taking what is written: each write
// must make progress within the write timeout (a fresh write deadline per
// attempt), or the connection is closed. Before each read it also asks the
// kernel to acknowledge at once (see quickAck), which keeps OpenSSH's small
// key-exchange writes from waiting on a delayed ACK.
type idleConn struct {
	net.Conn
	idle  time.Duration
	write time.Duration
	// armed is set once the handshake is over; until then the fixed
	// handshake deadline must not be pushed forward by traffic.
	armed atomic.Bool
	// got counts the bytes the peer has sent: when handshakes must be
	// evicted, the one that got furthest (a real client is past its key
	// exchange within a round trip) is kept over one that stalls.
	got atomic.Int64
	// stalled is set once the connection was closed because the peer
	// stopped taking what the server sends.
	stalled atomic.Bool
	// lineByLine is set once the connection carries an agent session:
	// every line the client sends is answered at once, and the answer
	// carries the ACK, so quickAck's system call before each read buys
	// nothing there.
	lineByLine atomic.Bool
}

func newIdleConn(c net.Conn, idle, write time.Duration) *idleConn {
	return &idleConn{Conn: c, idle: idle, write: write}
}

// arm ends the handshake deadline and starts the idle timeout.
func (c *idleConn) arm() {
	c.armed.Store(true)
	_ = c.Conn.SetDeadline(time.Time{})
	c.extend()
}

func (c *idleConn) Read(p []byte) (int, error) {
	if !c.lineByLine.Load() {
		quickAck(c.Conn)
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.got.Add(int64(n))
		c.extend()
	}
	return n, err
}

// Write writes all of p. Once armed, every attempt gets the write timeout:
// an attempt that timed out having written something is a slow peer and
// goes on; one that wrote nothing is a peer that stopped reading (its TCP
// window is shut), and the connection is closed, since a half-written SSH
// packet leaves the stream broken anyway. Before arm the handshake
// deadline bounds writes, as it bounds everything.
func (c *idleConn) Write(p []byte) (int, error) {
	written := 0
	for {
		armed := c.armed.Load()
		if armed {
			_ = c.Conn.SetWriteDeadline(time.Now().Add(c.write))
		}
		n, err := c.Conn.Write(p[written:])
		written += n
		if n > 0 {
			c.extend()
		}
		var ne net.Error
		if err == nil || !armed || !errors.As(err, &ne) || !ne.Timeout() {
			return written, err
		}
		if n == 0 {
			c.stall()
			return written, err
		}
	}
}

// stall closes a connection whose peer stopped taking what is written.
func (c *idleConn) stall() {
	c.stalled.Store(true)
	_ = c.Conn.Close()
}

func (c *idleConn) extend() {
	if c.armed.Load() {
		_ = c.Conn.SetReadDeadline(time.Now().Add(c.idle))
	}
}
