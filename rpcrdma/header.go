package rpcrdma

import (
	"encoding/binary"
	"fmt"
)

// Version is the RPC-over-RDMA protocol version this package speaks
// (RFC 8166 §4.2.2). Append always writes it; Decode rejects any other.
const Version = 1

// Limits on the chunk lists of one transport header. Decode rejects a header
// that exceeds them with a *LimitError before it has stored anything beyond
// the limit, and Append refuses to produce one, so a peer cannot make one
// header cost more than a bounded amount of memory and work.
//
// The values are generous for NFSv3, where a call carries at most one
// DDP-eligible item (RFC 8267 §3) and so at most one Read chunk, one Write
// chunk or one Reply chunk, plus a position-zero Read chunk for a long call
// (RFC 8166 §3.5.3):
//   - MaxReadSegments counts the segments of the whole Read list, over all
//     of its Read chunks.
//   - MaxWriteChunks counts the Write chunks of the Write list.
//   - MaxChunkSegments counts the segments of one Write chunk or of the
//     Reply chunk: 64 segments cover a 256 KiB payload scattered over
//     4 KiB pages.
const (
	MaxReadSegments  = 16
	MaxWriteChunks   = 8
	MaxChunkSegments = 64
)

// Sizes of the XDR encoding (RFC 8166 §4.1.2), in bytes.
const (
	// FixedHeaderLen is the size of rdma_xid, rdma_vers, rdma_credit and
	// rdma_proc (RFC 8166 §4.2).
	FixedHeaderLen = 16
	// SegmentLen is the size of one xdr_rdma_segment (RFC 8166 §3.4.3).
	SegmentLen = 16
	// MinHeaderLen is the size of an RDMA_MSG header with three empty chunk
	// lists: the smallest header that can precede an RPC message.
	MinHeaderLen = FixedHeaderLen + 3*4
	// MaxHeaderLen is the size of the largest header within the limits
	// above.
	MaxHeaderLen = FixedHeaderLen +
		MaxReadSegments*(4+4+SegmentLen) + 4 +
		MaxWriteChunks*(4+4+MaxChunkSegments*SegmentLen) + 4 +
		4 + 4 + MaxChunkSegments*SegmentLen
)

// Proc is the rdma_proc field of the transport header (RFC 8166 §4.2.4): it
// selects the body that follows the fixed fields.
type Proc uint32

const (
	// ProcMsg (RDMA_MSG): chunk lists, then the RPC message inline in the
	// rest of the Send.
	ProcMsg Proc = 0
	// ProcNoMsg (RDMA_NOMSG): chunk lists only; the RPC message travels in
	// a position-zero Read chunk (a long call) or in the Reply chunk (a long
	// reply), RFC 8166 §3.5.3.
	ProcNoMsg Proc = 1
	// ProcMsgp (RDMA_MSGP) is retired (RFC 8166 §4.6.1); Decode reports it
	// as a *UnsupportedProcError.
	ProcMsgp Proc = 2
	// ProcDone (RDMA_DONE) is retired (RFC 8166 §4.6.2); Decode reports it
	// as a *UnsupportedProcError.
	ProcDone Proc = 3
	// ProcError (RDMA_ERROR): an error body and nothing else (RFC 8166
	// §4.5).
	ProcError Proc = 4
)

func (p Proc) String() string {
	switch p {
	case ProcMsg:
		return "RDMA_MSG"
	case ProcNoMsg:
		return "RDMA_NOMSG"
	case ProcMsgp:
		return "RDMA_MSGP"
	case ProcDone:
		return "RDMA_DONE"
	case ProcError:
		return "RDMA_ERROR"
	}
	return fmt.Sprintf("Proc(%d)", uint32(p))
}

// ErrorCode is rpc_rdma_errcode, the discriminator of an RDMA_ERROR body
// (RFC 8166 §4.1.2, §4.5).
type ErrorCode uint32

const (
	// ErrCodeVers (ERR_VERS): the responder does not support the
	// requester's version; the body carries the supported range (RFC 8166
	// §4.5.1).
	ErrCodeVers ErrorCode = 1
	// ErrCodeChunk (ERR_CHUNK): the responder could not process the call's
	// transport header or chunks (RFC 8166 §4.5.2, §4.5.3).
	ErrCodeChunk ErrorCode = 2
)

func (c ErrorCode) String() string {
	switch c {
	case ErrCodeVers:
		return "ERR_VERS"
	case ErrCodeChunk:
		return "ERR_CHUNK"
	}
	return fmt.Sprintf("ErrorCode(%d)", uint32(c))
}

// Segment is an RDMA segment, xdr_rdma_segment (RFC 8166 §3.4.3): a piece of
// the requester's memory that the responder may access with RDMA Read or
// Write.
type Segment struct {
	Handle uint32 // steering tag: the rkey of the registration
	Length uint32 // bytes
	Offset uint64 // address of the first byte, as the handle's registration names it
}

// ReadSegment is one entry of the Read list, xdr_read_chunk (RFC 8166 §3.4.5,
// §4.3.1): a segment the responder pulls with RDMA Read, together with the
// XDR position in the RPC message where its bytes belong. Segments with the
// same position form one Read chunk; position zero carries a whole RPC call
// (RFC 8166 §3.5.3).
type ReadSegment struct {
	Position uint32
	Segment
}

// WriteChunk is xdr_write_chunk (RFC 8166 §3.4.6, §4.3.2): a counted array of
// segments into which the responder pushes one result with RDMA Write. In a
// reply, the responder returns each segment's Length set to the bytes it
// actually wrote. The Reply chunk has the same form (RFC 8166 §4.3.3).
type WriteChunk []Segment

// TotalLength is the sum of the chunk's segment lengths.
func (c WriteChunk) TotalLength() uint64 {
	var n uint64
	for _, s := range c {
		n += uint64(s.Length)
	}
	return n
}

// ReadChunk is one Read chunk (RFC 8166 §3.4.5): the run of Read list
// segments that share a position. Segments is a sub-slice of the Header's
// Reads.
type ReadChunk struct {
	Position uint32
	Segments []ReadSegment
}

// TotalLength is the sum of the chunk's segment lengths.
func (c ReadChunk) TotalLength() uint64 {
	var n uint64
	for _, s := range c.Segments {
		n += uint64(s.Length)
	}
	return n
}

// Header is an RPC-over-RDMA version 1 transport header, rpcrdma1_header
// (RFC 8166 §4.1.2): the fixed fields (§4.2), then for RDMA_MSG and
// RDMA_NOMSG the Read list, the Write list and the Reply chunk (§4.3), or
// for RDMA_ERROR the error body (§4.5).
//
// The zero Header is an RDMA_MSG with xid 0, no credits and no chunks. A
// Header decoded into repeatedly keeps the capacity of its slices, so after
// a few messages decoding allocates nothing.
type Header struct {
	XID     uint32 // rdma_xid: the XID of the RPC message (RFC 8166 §4.2.1)
	Credits uint32 // rdma_credit: requested or granted credits (RFC 8166 §3.3.1, §4.2.3)
	Proc    Proc   // rdma_proc (RFC 8166 §4.2.4)

	// Chunk lists of RDMA_MSG and RDMA_NOMSG (RFC 8166 §4.3).
	Reads    []ReadSegment // the Read list, in wire order
	Writes   []WriteChunk  // the Write list, in wire order
	Reply    WriteChunk    // the Reply chunk's segments, when HasReply
	HasReply bool          // whether the Reply chunk is present (it may be present and empty)

	// RDMA_ERROR body (RFC 8166 §4.5).
	ErrCode  ErrorCode
	VersLow  uint32 // ERR_VERS: lowest version the responder supports
	VersHigh uint32 // ERR_VERS: highest version the responder supports
}

// Reset makes h the zero Header but keeps the capacity of its slices, for
// building the next header in place.
func (h *Header) Reset() {
	*h = Header{
		Reads:  h.Reads[:0],
		Writes: h.Writes[:0],
		Reply:  h.Reply[:0],
	}
}

// RemoteError returns the error an RDMA_ERROR header reports, as a
// *RemoteVersError or a *RemoteChunkError, and nil for any other header.
func (h *Header) RemoteError() error {
	if h.Proc != ProcError {
		return nil
	}
	switch h.ErrCode {
	case ErrCodeVers:
		return &RemoteVersError{XID: h.XID, Low: h.VersLow, High: h.VersHigh}
	case ErrCodeChunk:
		return &RemoteChunkError{XID: h.XID}
	}
	return &XDRError{Field: "error code", Value: uint32(h.ErrCode), Offset: FixedHeaderLen}
}

// ReadChunks groups the Read list into Read chunks by position (RFC 8166
// §3.4.5), appending them to dst in the order of their first segment. The
// chunks' Segments alias h.Reads, so nothing is copied; reuse dst to avoid
// allocating. It returns ErrReadChunkSplit if one position's segments are
// not adjacent in the list.
func (h *Header) ReadChunks(dst []ReadChunk) ([]ReadChunk, error) {
	first := len(dst)
	for i := 0; i < len(h.Reads); {
		pos := h.Reads[i].Position
		j := i + 1
		for j < len(h.Reads) && h.Reads[j].Position == pos {
			j++
		}
		for _, c := range dst[first:] {
			if c.Position == pos {
				return dst[:first], ErrReadChunkSplit
			}
		}
		dst = append(dst, ReadChunk{Position: pos, Segments: h.Reads[i:j:j]})
		i = j
	}
	return dst, nil
}

// Len returns the size of h's encoding, as Append would produce it.
func (h *Header) Len() int {
	if h.Proc == ProcError {
		if h.ErrCode == ErrCodeVers {
			return FixedHeaderLen + 4 + 8
		}
		return FixedHeaderLen + 4
	}
	n := MinHeaderLen + len(h.Reads)*(4+4+SegmentLen)
	for _, c := range h.Writes {
		n += 4 + 4 + len(c)*SegmentLen
	}
	if h.HasReply {
		n += 4 + len(h.Reply)*SegmentLen
	}
	return n
}

// Append appends the XDR encoding of h to b (RFC 8166 §4.1.2) and returns
// the extended slice. The version written is always Version.
//
// It returns b unchanged and an error if h cannot be encoded: Proc is not
// RDMA_MSG, RDMA_NOMSG or RDMA_ERROR (*UnsupportedProcError), a chunk list
// exceeds the package limits (*LimitError), an RDMA_ERROR has an unknown
// ErrCode (*XDRError), or Reply holds segments while HasReply is false.
func (h *Header) Append(b []byte) ([]byte, error) {
	if err := h.validate(); err != nil {
		return b, err
	}
	b = binary.BigEndian.AppendUint32(b, h.XID)
	b = binary.BigEndian.AppendUint32(b, Version)
	b = binary.BigEndian.AppendUint32(b, h.Credits)
	b = binary.BigEndian.AppendUint32(b, uint32(h.Proc))
	if h.Proc == ProcError {
		b = binary.BigEndian.AppendUint32(b, uint32(h.ErrCode))
		if h.ErrCode == ErrCodeVers {
			b = binary.BigEndian.AppendUint32(b, h.VersLow)
			b = binary.BigEndian.AppendUint32(b, h.VersHigh)
		}
		return b, nil
	}

	// Read list: an XDR optional-data linked list of xdr_read_chunk.
	for i := range h.Reads {
		r := &h.Reads[i]
		b = binary.BigEndian.AppendUint32(b, 1)
		b = binary.BigEndian.AppendUint32(b, r.Position)
		b = appendSegment(b, r.Segment)
	}
	b = binary.BigEndian.AppendUint32(b, 0)

	// Write list: an optional-data linked list of counted segment arrays.
	for _, c := range h.Writes {
		b = binary.BigEndian.AppendUint32(b, 1)
		b = appendChunk(b, c)
	}
	b = binary.BigEndian.AppendUint32(b, 0)

	// Reply chunk: one optional counted segment array.
	if h.HasReply {
		b = binary.BigEndian.AppendUint32(b, 1)
		b = appendChunk(b, h.Reply)
	} else {
		b = binary.BigEndian.AppendUint32(b, 0)
	}
	return b, nil
}

func (h *Header) validate() error {
	switch h.Proc {
	case ProcMsg, ProcNoMsg:
	case ProcError:
		if h.ErrCode != ErrCodeVers && h.ErrCode != ErrCodeChunk {
			return &XDRError{Field: "error code", Value: uint32(h.ErrCode), Offset: FixedHeaderLen}
		}
		return nil
	default:
		return &UnsupportedProcError{XID: h.XID, Proc: h.Proc}
	}
	if len(h.Reads) > MaxReadSegments {
		return &LimitError{What: "read segments", Count: uint64(len(h.Reads)), Limit: MaxReadSegments}
	}
	if len(h.Writes) > MaxWriteChunks {
		return &LimitError{What: "write chunks", Count: uint64(len(h.Writes)), Limit: MaxWriteChunks}
	}
	for _, c := range h.Writes {
		if len(c) > MaxChunkSegments {
			return &LimitError{What: "chunk segments", Count: uint64(len(c)), Limit: MaxChunkSegments}
		}
	}
	if len(h.Reply) > MaxChunkSegments {
		return &LimitError{What: "chunk segments", Count: uint64(len(h.Reply)), Limit: MaxChunkSegments}
	}
	if !h.HasReply && len(h.Reply) > 0 {
		return fmt.Errorf("rpcrdma: xid %#08x: Reply has %d segments but HasReply is false", h.XID, len(h.Reply))
	}
	return nil
}

func appendSegment(b []byte, s Segment) []byte {
	b = binary.BigEndian.AppendUint32(b, s.Handle)
	b = binary.BigEndian.AppendUint32(b, s.Length)
	return binary.BigEndian.AppendUint64(b, s.Offset)
}

func appendChunk(b []byte, c WriteChunk) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(c)))
	for _, s := range c {
		b = appendSegment(b, s)
	}
	return b
}

// Decode parses the transport header at the start of b into h and returns
// its length: for RDMA_MSG the RPC message starts at b[n:]; for RDMA_NOMSG
// and RDMA_ERROR nothing meaningful follows. Bytes after the header are not
// examined.
//
// Decode reuses the capacity of h's slices; the decoded segments do not
// alias b. On error h holds no chunks, and its XID, Credits and Proc are
// set whenever b holds at least FixedHeaderLen bytes, so that a transport
// can still name the RPC a malformed header belongs to. The errors are
// ErrTruncated, *VersionError, *UnsupportedProcError (including RDMA_MSGP
// and RDMA_DONE), *XDRError and *LimitError.
func (h *Header) Decode(b []byte) (n int, err error) {
	h.Reset()
	if len(b) < FixedHeaderLen {
		return 0, ErrTruncated
	}
	h.XID = binary.BigEndian.Uint32(b[0:4])
	vers := binary.BigEndian.Uint32(b[4:8])
	h.Credits = binary.BigEndian.Uint32(b[8:12])
	h.Proc = Proc(binary.BigEndian.Uint32(b[12:16]))
	if vers != Version {
		return 0, &VersionError{XID: h.XID, Vers: vers}
	}
	d := decoder{b: b, off: FixedHeaderLen}
	switch h.Proc {
	case ProcMsg, ProcNoMsg:
		err = h.decodeChunkLists(&d)
	case ProcError:
		err = h.decodeErrorBody(&d)
	default:
		return 0, &UnsupportedProcError{XID: h.XID, Proc: h.Proc}
	}
	if err != nil {
		h.Reads, h.Writes, h.Reply, h.HasReply = h.Reads[:0], h.Writes[:0], h.Reply[:0], false
		h.ErrCode, h.VersLow, h.VersHigh = 0, 0, 0
		return 0, err
	}
	return d.off, nil
}

func (h *Header) decodeChunkLists(d *decoder) error {
	// Read list.
	for {
		more, err := d.discriminator("read list entry discriminator")
		if err != nil {
			return err
		}
		if !more {
			break
		}
		if len(h.Reads) == MaxReadSegments {
			return &LimitError{What: "read segments", Count: MaxReadSegments + 1, Limit: MaxReadSegments}
		}
		if d.remaining() < 4+SegmentLen {
			return ErrTruncated
		}
		pos := d.uint32()
		h.Reads = append(h.Reads, ReadSegment{Position: pos, Segment: d.segment()})
	}

	// Write list.
	for {
		more, err := d.discriminator("write list entry discriminator")
		if err != nil {
			return err
		}
		if !more {
			break
		}
		if len(h.Writes) == MaxWriteChunks {
			return &LimitError{What: "write chunks", Count: MaxWriteChunks + 1, Limit: MaxWriteChunks}
		}
		// Grow by one, recovering the segment array a previous decode
		// left in the slot beyond the current length.
		if len(h.Writes) < cap(h.Writes) {
			h.Writes = h.Writes[:len(h.Writes)+1]
		} else {
			h.Writes = append(h.Writes, nil)
		}
		c := &h.Writes[len(h.Writes)-1]
		if *c, err = d.chunk(*c); err != nil {
			return err
		}
	}

	// Reply chunk.
	present, err := d.discriminator("reply chunk discriminator")
	if err != nil {
		return err
	}
	if present {
		if h.Reply, err = d.chunk(h.Reply); err != nil {
			return err
		}
		h.HasReply = true
	}
	return nil
}

func (h *Header) decodeErrorBody(d *decoder) error {
	if d.remaining() < 4 {
		return ErrTruncated
	}
	off := d.off
	h.ErrCode = ErrorCode(d.uint32())
	switch h.ErrCode {
	case ErrCodeVers:
		if d.remaining() < 8 {
			return ErrTruncated
		}
		h.VersLow = d.uint32()
		h.VersHigh = d.uint32()
	case ErrCodeChunk:
	default:
		return &XDRError{Field: "error code", Value: uint32(h.ErrCode), Offset: off}
	}
	return nil
}

// decoder reads big-endian XDR items from b. Callers check remaining before
// reading fixed-size items.
type decoder struct {
	b   []byte
	off int
}

func (d *decoder) remaining() int { return len(d.b) - d.off }

func (d *decoder) uint32() uint32 {
	v := binary.BigEndian.Uint32(d.b[d.off : d.off+4])
	d.off += 4
	return v
}

func (d *decoder) segment() Segment {
	s := d.b[d.off : d.off+SegmentLen]
	d.off += SegmentLen
	return Segment{
		Handle: binary.BigEndian.Uint32(s[0:4]),
		Length: binary.BigEndian.Uint32(s[4:8]),
		Offset: binary.BigEndian.Uint64(s[8:16]),
	}
}

// discriminator reads an XDR optional-data or boolean discriminator, which
// must be 0 or 1.
func (d *decoder) discriminator(field string) (bool, error) {
	if d.remaining() < 4 {
		return false, ErrTruncated
	}
	off := d.off
	switch v := d.uint32(); v {
	case 0:
		return false, nil
	case 1:
		return true, nil
	default:
		return false, &XDRError{Field: field, Value: v, Offset: off}
	}
}

// chunk reads a counted segment array into c's storage.
func (d *decoder) chunk(c WriteChunk) (WriteChunk, error) {
	c = c[:0]
	if d.remaining() < 4 {
		return c, ErrTruncated
	}
	count := d.uint32()
	if count > MaxChunkSegments {
		return c, &LimitError{What: "chunk segments", Count: uint64(count), Limit: MaxChunkSegments}
	}
	if d.remaining() < int(count)*SegmentLen {
		return c, ErrTruncated
	}
	for range count {
		c = append(c, d.segment())
	}
	return c, nil
}
