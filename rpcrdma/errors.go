package rpcrdma

import (
	"errors"
	"fmt"
)

// ErrTruncated reports input that ends before the structure it is supposed
// to hold: a header cut short, a list missing its terminator, a counted array
// shorter than its count. RFC 8166 §4.5.2 treats this as an XDR error.
var ErrTruncated = errors.New("rpcrdma: truncated transport header")

// ErrReadChunkSplit reports a Read list whose segments of one Read chunk are
// not adjacent (RFC 8166 §3.4.5), so they cannot be grouped without copying.
var ErrReadChunkSplit = errors.New("rpcrdma: read chunk segments are not adjacent in the read list")

// VersionError reports a transport header whose rdma_vers is not Version
// (RFC 8166 §4.2.2). A responder answers such a call with ERR_VERS
// (RFC 8166 §4.5.1); a requester drops such a reply.
type VersionError struct {
	XID  uint32
	Vers uint32
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("rpcrdma: xid %#08x: unsupported RPC-over-RDMA version %d (want %d)", e.XID, e.Vers, Version)
}

// UnsupportedProcError reports a transport header whose rdma_proc this
// package does not accept: RDMA_MSGP and RDMA_DONE, which RFC 8166 §4.6
// retires, and values outside the enumeration of RFC 8166 §4.2.4.
type UnsupportedProcError struct {
	XID  uint32
	Proc Proc
}

func (e *UnsupportedProcError) Error() string {
	return fmt.Sprintf("rpcrdma: xid %#08x: unsupported procedure %v", e.XID, e.Proc)
}

// XDRError reports a malformed XDR item (RFC 8166 §4.5.2): an optional-data
// or list discriminator that is neither 0 nor 1, or an error code outside
// rpc_rdma_errcode. Offset is the byte offset of the item in the header.
type XDRError struct {
	Field  string
	Value  uint32
	Offset int
}

func (e *XDRError) Error() string {
	return fmt.Sprintf("rpcrdma: malformed %s (%d) at offset %d", e.Field, e.Value, e.Offset)
}

// LimitError reports a chunk list longer than this package's limits
// (MaxReadSegments, MaxWriteChunks, MaxChunkSegments).
type LimitError struct {
	What  string // "read segments", "write chunks" or "chunk segments"
	Count uint64 // how many the input holds (at least Limit+1)
	Limit int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("rpcrdma: %d %s exceed the limit of %d", e.Count, e.What, e.Limit)
}

// RemoteVersError is an RDMA_ERROR reply with ERR_VERS (RFC 8166 §4.5.1):
// the responder does not speak the requester's version and supports only
// versions Low through High.
type RemoteVersError struct {
	XID       uint32
	Low, High uint32
}

func (e *RemoteVersError) Error() string {
	return fmt.Sprintf("rpcrdma: xid %#08x: server rejected the RPC-over-RDMA version (ERR_VERS, supports %d-%d)", e.XID, e.Low, e.High)
}

// RemoteChunkError is an RDMA_ERROR reply with ERR_CHUNK (RFC 8166 §4.5.2,
// §4.5.3): the responder could not parse the call's transport header or
// chunk lists, or could not use the chunks it was given.
type RemoteChunkError struct {
	XID uint32
}

func (e *RemoteChunkError) Error() string {
	return fmt.Sprintf("rpcrdma: xid %#08x: server rejected the call's chunks (ERR_CHUNK)", e.XID)
}
