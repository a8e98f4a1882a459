package sunrpc

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"syscall"
)

// The reserved source ports an RPC client binds when it may (the Linux
// client's defaults, sunrpc.min_resvport and max_resvport). Servers that
// export with "secure" (exports(5)'s default) and rpc.mountd refuse calls from
// other ports.
const (
	MinResvPort = 665
	MaxResvPort = 1023
)

// DialResvPort connects to addr over network ("tcp", "tcp4", "tcp6") from a
// reserved source port (MinResvPort to MaxResvPort), as the Linux client's
// "resvport" does. It tries prefer first when it is in that range, then the
// others from a random start downwards, skipping ports already taken
// (EADDRINUSE, or EADDRNOTAVAIL when the same connection still lingers in
// TIME_WAIT). When the process may not bind them (not root and without
// CAP_NET_BIND_SERVICE) it connects from an ordinary port, without error.
// When every reserved port is taken the error wraps syscall.EADDRINUSE.
func DialResvPort(ctx context.Context, network, addr string, prefer int) (net.Conn, error) {
	n := MaxResvPort - MinResvPort + 1
	start := MinResvPort + rand.IntN(n)
	tries := make([]int, 0, n+1)
	if prefer >= MinResvPort && prefer <= MaxResvPort {
		tries = append(tries, prefer)
	}
	for i := range n {
		p := start - i
		if p < MinResvPort {
			p += n
		}
		if p != prefer {
			tries = append(tries, p)
		}
	}
	var last error
	for _, port := range tries {
		d := net.Dialer{LocalAddr: &net.TCPAddr{Port: port}, Control: reuseAddr}
		c, err := d.DialContext(ctx, network, addr)
		switch {
		case err == nil:
			return c, nil
		case errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM):
			var d net.Dialer // not allowed to bind them: an ordinary port
			return d.DialContext(ctx, network, addr)
		case errors.Is(err, syscall.EADDRINUSE) || errors.Is(err, syscall.EADDRNOTAVAIL):
			last = err
			if ctx.Err() != nil {
				return nil, err
			}
			continue
		}
		return nil, err
	}
	return nil, fmt.Errorf("sunrpc: no free reserved source port (%d-%d) to %s (NoResvPort dials from an ordinary one): %w",
		MinResvPort, MaxResvPort, addr, last)
}

// reuseAddr sets SO_REUSEADDR so that a port whose earlier connection lingers
// in TIME_WAIT can be bound again (the 4-tuple still has to be free: connect
// then fails with EADDRNOTAVAIL and the next port is tried).
func reuseAddr(_, _ string, rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
	})
	if err != nil {
		return err
	}
	return serr
}

// localPort returns c's local TCP port, or 0.
func localPort(c net.Conn) int {
	if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}
