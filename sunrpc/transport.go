package sunrpc

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"sync/atomic"
)

// Request is one encoded RPC call message for a Transport, in three parts so that a
// DDP-eligible argument (RFC 8267 §3: WRITE data, SYMLINK path) never has to be copied into the inline buffer.
type Request struct {
	XID  uint32
	Head []byte // RPC call header + arguments up to and including the bulk item's XDR length word (the whole message when Bulk is nil)
	Bulk []byte // the DDP-eligible argument's data bytes, unpadded; nil when none
	Tail []byte // arguments after the bulk item; the transport inserts Bulk's XDR pad (0–3 zero bytes) between Bulk and Tail when sending inline
	// Reply expectations:
	ReplyBulk []byte // when the reply carries a DDP-eligible result (READ data, READLINK path): the buffer where its data should land, len = the most bytes expected; nil otherwise
	MaxReply  int    // upper bound of the whole reply's size in bytes (RPC header + results, bulk included), so RDMA can size a Reply chunk
}

// Len returns the size of the whole call message as sent inline: head, bulk, the
// bulk's XDR pad and tail.
func (r *Request) Len() int {
	return len(r.Head) + RoundUp(len(r.Bulk)) + len(r.Tail)
}

// Reply is a received RPC reply. When Bulk is non-nil the DDP-eligible result's data bytes travelled apart (RDMA Write chunk): Inline holds the
// reply with those data bytes and their XDR pad removed (the XDR length word stays inline), and Bulk aliases Request.ReplyBulk[:n].
// Otherwise Inline is the whole reply message.
type Reply struct {
	Inline []byte
	Bulk   []byte

	release func()
}

// NewReply returns a Reply for a transport; release, if not nil, is called once
// by the first Release to return the transport's buffers.
func NewReply(inline, bulk []byte, release func()) *Reply {
	return &Reply{Inline: inline, Bulk: bulk, release: release}
}

// Release returns the reply's buffers to the transport. Inline (and anything
// decoded from it without copying) must not be used afterwards. Release is
// idempotent and safe on a nil Reply.
func (r *Reply) Release() {
	if r == nil {
		return
	}
	if f := r.release; f != nil {
		r.release = nil
		f()
	}
	r.Inline = nil
	r.Bulk = nil
}

// Transport carries RPC calls to one server and their replies back.
// Implementations allow concurrent RoundTrips.
type Transport interface {
	RoundTrip(ctx context.Context, req *Request) (*Reply, error) // send one call, wait for the reply with req.XID
	Close() error
}

// ErrClosed is returned by a Transport's RoundTrip after Close.
var ErrClosed = errors.New("sunrpc: transport closed")

// ErrXIDInUse is returned by a Transport when a call's XID is already waiting
// for a reply on it.
var ErrXIDInUse = errors.New("sunrpc: xid already outstanding")

// XIDSource allocates transaction IDs (RFC 5531 §9: xid): a random start, then
// increments. It is safe for concurrent use; Clients sharing one Transport
// should share one XIDSource.
type XIDSource struct{ next atomic.Uint32 }

// NewXIDSource returns a source starting at a random XID.
func NewXIDSource() *XIDSource {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	s := &XIDSource{}
	s.next.Store(binary.BigEndian.Uint32(b[:]))
	return s
}

// Next returns a fresh XID.
func (s *XIDSource) Next() uint32 { return s.next.Add(1) }
