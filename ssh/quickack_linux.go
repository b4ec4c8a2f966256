package ssh

import (
	"net"
	"syscall"
)

// quickAck sets TCP_QUICKACK, which Linux clears again by itself, so it is
// set before every read.
func quickAck(c net.Conn) {
	sc, ok := c.(syscall.Conn) // a *net.TCPConn, or one wrapped by proxyheader
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_QUICKACK, 1)
	})
}
