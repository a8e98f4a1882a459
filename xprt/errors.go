package xprt

import (
	"errors"
	"fmt"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// ErrClosed is returned by calls on a closed Transport. It is
// sunrpc.ErrClosed, so callers see one error whatever the transport (the
// mount maps it to ENOTCONN, as over TCP).
var ErrClosed = sunrpc.ErrClosed

// ErrTooLarge is returned for a call whose bulk item exceeds Config.MaxIO.
var ErrTooLarge = errors.New("xprt: bulk item larger than the transport's MaxIO")

// ConnectError is a failed connection attempt.
type ConnectError struct {
	Addr string
	Err  error
}

func (e *ConnectError) Error() string {
	return fmt.Sprintf("xprt: cannot connect to %s over RDMA: %v", e.Addr, e.Err)
}

func (e *ConnectError) Unwrap() error { return e.Err }

// ProtocolError is a reply that breaks RFC 8166 in a way that fails the
// call it belongs to (a chunk length beyond what was offered, a chunk that
// was not offered).
type ProtocolError struct {
	XID uint32
	Err error
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("xprt: malformed reply to xid %#08x: %v", e.XID, e.Err)
}

func (e *ProtocolError) Unwrap() error { return e.Err }
