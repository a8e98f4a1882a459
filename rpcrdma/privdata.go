package rpcrdma

import "encoding/binary"

// RDMA-CM private data constants (RFC 8797 §4).
const (
	// PrivateDataMagic is the format identifier that opens the private
	// data message.
	PrivateDataMagic = 0xf6ab0e18
	// PrivateDataVersion is the version of the private data format.
	PrivateDataVersion = 1
	// PrivateDataLen is the size of the encoded message.
	PrivateDataLen = 8
	// DefaultInlineSize is the inline threshold a peer assumes when no
	// private data tells it otherwise (RFC 8166 §3.3.2, RFC 8797 §5).
	DefaultInlineSize = 1024
	// MaxInlineSize is the largest size the one-octet encoding can
	// express: (255+1) * 1024 bytes.
	MaxInlineSize = 256 * 1024
)

// flagRemoteInvalidation is bit 0 of the flags octet (RFC 8797 §4).
const flagRemoteInvalidation = 1 << 0

// PrivateData is the RPC-over-RDMA version 1 RDMA-CM private data message
// (RFC 8797 §4), carried by the connection request and its accept:
//
//	format identifier (0xf6ab0e18, 32 bits) | version (8) | flags (8) |
//	send size (8) | receive size (8)
//
// Each size is encoded in one octet as (bytes/1024)-1, so it ranges from
// 1024 to 256 KiB in steps of 1024. Unused flag bits are sent as zero and
// ignored on receipt.
type PrivateData struct {
	// RemoteInvalidation (flag bit 0) says the sender accepts Send With
	// Invalidate: its peer may invalidate one of the sender's rkeys with
	// the Send that carries a reply (RFC 8797 §4).
	RemoteInvalidation bool
	// SendSize is the size in bytes of the largest Send the sender will
	// post: its peer's receive buffers need be no larger.
	SendSize uint32
	// RecvSize is the size in bytes of the sender's receive buffers: the
	// largest Send its peer may post to it.
	RecvSize uint32
}

// DefaultPrivateData is what a peer that sent no usable private data is
// assumed to have advertised: 1024-byte inline sizes and no Remote
// Invalidation (RFC 8797 §5).
func DefaultPrivateData() PrivateData {
	return PrivateData{SendSize: DefaultInlineSize, RecvSize: DefaultInlineSize}
}

// encodeSize converts a byte count to its one-octet form, rounding down to a
// multiple of 1024 so that the value advertised is never more than the
// buffer holds, and clamping to [1024, MaxInlineSize].
func encodeSize(n uint32) byte {
	switch {
	case n < DefaultInlineSize:
		return 0
	case n >= MaxInlineSize:
		return 255
	}
	return byte(n/1024 - 1)
}

func decodeSize(b byte) uint32 { return (uint32(b) + 1) * 1024 }

// Append appends the 8-byte encoding of p to b. Sizes are rounded down to a
// multiple of 1024 and clamped to [1024, MaxInlineSize].
func (p PrivateData) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, PrivateDataMagic)
	var flags byte
	if p.RemoteInvalidation {
		flags |= flagRemoteInvalidation
	}
	return append(b, PrivateDataVersion, flags, encodeSize(p.SendSize), encodeSize(p.RecvSize))
}

// Decode parses the private data a peer sent and reports whether it held an
// RPC-over-RDMA version 1 message. Bytes beyond PrivateDataLen are ignored:
// rdma_cm pads private data to a transport-specific length. Private data
// that is too short, has another format identifier or another version is
// not an error: it means the peer did not advertise anything (RFC 8797 §5),
// so Decode sets p to DefaultPrivateData and returns false.
func (p *PrivateData) Decode(b []byte) (present bool) {
	if len(b) < PrivateDataLen ||
		binary.BigEndian.Uint32(b[0:4]) != PrivateDataMagic ||
		b[4] != PrivateDataVersion {
		*p = DefaultPrivateData()
		return false
	}
	*p = PrivateData{
		RemoteInvalidation: b[5]&flagRemoteInvalidation != 0,
		SendSize:           decodeSize(b[6]),
		RecvSize:           decodeSize(b[7]),
	}
	return true
}
