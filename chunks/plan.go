package chunks

import (
	"fmt"
	"math"

	"github.com/nfsrdma/nfsrdma/rpcrdma"
)

// MessageType is the rdma_proc field of the transport header, with its wire
// values (RFC 8166 §4.1 and the XDR definition in §5).
type MessageType uint32

const (
	RDMAMsg   = MessageType(rpcrdma.ProcMsg)   // RDMA_MSG: the RPC message follows the transport header
	RDMANoMsg = MessageType(rpcrdma.ProcNoMsg) // RDMA_NOMSG: the RPC message is in a chunk
)

func (t MessageType) String() string {
	switch t {
	case RDMAMsg:
		return "RDMA_MSG"
	case RDMANoMsg:
		return "RDMA_NOMSG"
	}
	return fmt.Sprintf("rdma_proc(%d)", uint32(t))
}

// Sizes of the transport header's parts in bytes (RFC 8166 §4.2 and §5),
// from the wire codec's constants.
const (
	fixedHeaderLen  = rpcrdma.FixedHeaderLen     // rdma_xid, rdma_vers, rdma_credit, rdma_proc
	readSegmentLen  = 4 + 4 + rpcrdma.SegmentLen // "present" discriminator, position, segment
	plainSegmentLen = rpcrdma.SegmentLen         // handle, length, 64-bit offset
	listEndLen      = 4                          // "not present" discriminator ending a list or standing for an absent Reply chunk
	chunkHeadLen    = 2 * 4                      // "present" discriminator and segment count of a Write or Reply chunk
)

// MinHeaderLen is the smallest transport header: the fixed fields and three
// empty chunk lists, 7 XDR words.
const MinHeaderLen = rpcrdma.MinHeaderLen

// DefaultInline is the inline threshold in both directions when the peers
// exchange no RFC 8797 private data (RFC 8166 §3.3).
const DefaultInline = rpcrdma.DefaultInlineSize

// maxLength bounds every length and position this package produces. The wire
// fields are 32 bits; 2^31-1 also fits an int on every platform.
const maxLength = math.MaxInt32

// Limits are the connection's negotiated sizes and the device's registration
// limits, plus the policy knobs. The zero value of each field has the
// documented default.
type Limits struct {
	// InlineSend is the largest Send the client may post, transport header
	// included: the server's receive size from RFC 8797 private data
	// (knfsd: 4096). 0 means DefaultInline.
	InlineSend int
	// InlineRecv is the largest reply the client receives inline, transport
	// header included: the client's receive buffer size. 0 means
	// DefaultInline.
	InlineRecv int
	// MaxSegmentSize is the most bytes one segment (one registration) may
	// cover; longer chunks are split into several segments. 0 means 2^31-1.
	MaxSegmentSize int
	// MaxSegments is the most segments one chunk may have. 0 means no limit.
	MaxSegments int
	// MaxSendSGEs is the most scatter/gather entries a Send may carry,
	// including the one for the transport header. It only matters when
	// GatherMin enables gathering. 0 means no limit.
	MaxSendSGEs int
	// DDPThreshold, when positive, moves a DDP-eligible item of at least
	// this many bytes into a Read or Write chunk even when the message would
	// fit inline. 0 (the default, and the Linux client's behaviour) uses
	// chunks only for messages that do not fit inline.
	DDPThreshold int
	// GatherMin, when positive, sends an inline Bulk of at least this many
	// bytes from its own buffer with its own SGE instead of copying it behind
	// Head. 0 (the default) always copies: an inline call is at most
	// InlineSend bytes, and a copy of a few KiB is cheaper than keeping
	// caller memory registered. The Linux client also pulls small calls up.
	GatherMin int
}

func (l Limits) normalized() (Limits, error) {
	if l.InlineSend < 0 || l.InlineRecv < 0 || l.MaxSegmentSize < 0 || l.MaxSegments < 0 ||
		l.MaxSendSGEs < 0 || l.DDPThreshold < 0 || l.GatherMin < 0 {
		return l, fmt.Errorf("%w: negative value in %+v", ErrInvalidLimits, l)
	}
	if l.InlineSend == 0 {
		l.InlineSend = DefaultInline
	}
	if l.InlineRecv == 0 {
		l.InlineRecv = DefaultInline
	}
	if l.InlineSend < MinHeaderLen || l.InlineRecv < MinHeaderLen {
		return l, fmt.Errorf("%w: inline sizes %d/%d are below the %d-byte minimal transport header",
			ErrInvalidLimits, l.InlineSend, l.InlineRecv, MinHeaderLen)
	}
	if l.MaxSegmentSize == 0 || l.MaxSegmentSize > maxLength {
		l.MaxSegmentSize = maxLength
	}
	if l.MaxSegments == 0 {
		l.MaxSegments = math.MaxInt
	}
	return l, nil
}

// Request is one RPC call message in three parts plus what its reply may
// hold, as the sunrpc layer describes a request.
type Request struct {
	// Head is the RPC call header and the arguments up to and including the
	// XDR length word of the DDP-eligible item; the whole message when there
	// is no such item. Its length is a multiple of 4.
	Head []byte
	// Bulk is the DDP-eligible argument's data, without its XDR pad (RFC 8267
	// §3: WRITE data, SYMLINK path). May be empty.
	Bulk []byte
	// Tail is the arguments after the DDP-eligible item, without the item's
	// XDR pad. Its length is a multiple of 4.
	Tail []byte
	// ReplyBulk is the most data bytes the DDP-eligible result may have (RFC
	// 8267 §3: READ data, READLINK path), 0 when the reply has none.
	ReplyBulk int
	// MaxReply is the largest the whole RPC reply can be, the DDP-eligible
	// result and its pad included (RFC 8267 §2, reply size estimation).
	MaxReply int
}

func (r *Request) validate() error {
	switch {
	case len(r.Head) == 0 || len(r.Head)%4 != 0:
		return fmt.Errorf("%w: Head is %d bytes, want a positive multiple of 4", ErrInvalidRequest, len(r.Head))
	case len(r.Tail)%4 != 0:
		return fmt.Errorf("%w: Tail is %d bytes, want a multiple of 4", ErrInvalidRequest, len(r.Tail))
	case r.MaxReply <= 0 || r.MaxReply > maxLength:
		return fmt.Errorf("%w: MaxReply %d out of range", ErrInvalidRequest, r.MaxReply)
	case r.ReplyBulk < 0 || r.ReplyBulk > r.MaxReply:
		return fmt.Errorf("%w: ReplyBulk %d does not fit MaxReply %d", ErrInvalidRequest, r.ReplyBulk, r.MaxReply)
	}
	// Lengths are bounded one by one first so that the sum cannot overflow.
	if len(r.Head) > maxLength || len(r.Bulk) > maxLength || len(r.Tail) > maxLength ||
		len(r.Head)+roundUp(len(r.Bulk))+len(r.Tail) > maxLength {
		return fmt.Errorf("%w: message of %d+%d+%d bytes is too long", ErrInvalidRequest,
			len(r.Head), len(r.Bulk), len(r.Tail))
	}
	return nil
}

// AppendRange appends the bytes of a Request range to dst: a slice of Head,
// Bulk or Tail, or r.Len zero bytes for BufPad. Ranges of the reply buffers
// append nothing. It is the pull-up copy, and what a responder would read
// from a Read chunk segment.
func (req *Request) AppendRange(dst []byte, r Range) []byte {
	switch r.Buf {
	case BufHead:
		return append(dst, req.Head[r.Off:r.Off+r.Len]...)
	case BufBulk:
		return append(dst, req.Bulk[r.Off:r.Off+r.Len]...)
	case BufTail:
		return append(dst, req.Tail[r.Off:r.Off+r.Len]...)
	case BufPad:
		var zeros [3]byte
		return append(dst, zeros[:r.Len]...)
	}
	return dst
}

// Buffer names the memory a Range lies in.
type Buffer uint8

const (
	BufHead Buffer = iota + 1 // Request.Head
	BufBulk                   // Request.Bulk
	// BufPad is the Bulk's XDR pad: Range.Len (1 to 3) zero bytes that are
	// in no Request buffer. The transport copies zeros, or points at a
	// registered zero-filled buffer of its own.
	BufPad
	BufTail      // Request.Tail
	BufReplyBulk // the caller's buffer for the DDP-eligible result, at least ReplyBulk bytes
	// BufReplyChunk is the buffer the Reply chunk exposes, at least
	// roundUp(MaxReply) bytes, registered for remote write.
	BufReplyChunk
)

func (b Buffer) String() string {
	switch b {
	case BufHead:
		return "Head"
	case BufBulk:
		return "Bulk"
	case BufPad:
		return "Pad"
	case BufTail:
		return "Tail"
	case BufReplyBulk:
		return "ReplyBulk"
	case BufReplyChunk:
		return "ReplyChunk"
	}
	return fmt.Sprintf("Buffer(%d)", uint8(b))
}

// Range is Len bytes at offset Off of buffer Buf: a piece of the Send, or one
// segment of a chunk, which the transport registers as one window.
type Range struct {
	Buf Buffer
	Off int
	Len int
}

// CallMode is how the call message travels (RFC 8166 §3.5).
type CallMode uint8

const (
	// CallInline: the whole message in the Send, RDMA_MSG (RFC 8166 §3.5.1).
	CallInline CallMode = iota
	// CallReadChunk: Bulk in a Read chunk at Plan.Position, the rest in the
	// Send, RDMA_MSG (RFC 8166 §3.5.2).
	CallReadChunk
	// CallPositionZero: the whole message in a Read chunk at position zero,
	// only the transport header in the Send, RDMA_NOMSG (RFC 8166 §3.5.3).
	CallPositionZero
)

func (m CallMode) String() string {
	switch m {
	case CallInline:
		return "inline"
	case CallReadChunk:
		return "read chunk"
	case CallPositionZero:
		return "position-zero read chunk"
	}
	return fmt.Sprintf("CallMode(%d)", uint8(m))
}

// ReplyMode is how the reply is expected to travel (RFC 8166 §3.5).
type ReplyMode uint8

const (
	// ReplyInline: no chunk offered; the largest reply fits the receive
	// buffer.
	ReplyInline ReplyMode = iota
	// ReplyWriteChunk: one Write chunk offered for the DDP-eligible result;
	// the rest of the reply fits inline.
	ReplyWriteChunk
	// ReplyInReplyChunk: a Reply chunk offered for the whole reply, sized for
	// the largest one.
	ReplyInReplyChunk
)

func (m ReplyMode) String() string {
	switch m {
	case ReplyInline:
		return "inline"
	case ReplyWriteChunk:
		return "write chunk"
	case ReplyInReplyChunk:
		return "reply chunk"
	}
	return fmt.Sprintf("ReplyMode(%d)", uint8(m))
}

// Plan is how one call travels and how its reply is expected back. Build
// fills it; its fields are read-only results. A Plan is meant to be kept per
// request slot and rebuilt for every call: its slices keep their capacity,
// so Build does not allocate once they have grown.
type Plan struct {
	Type MessageType // RDMA_MSG, or RDMA_NOMSG for a position-zero Read chunk
	Call CallMode

	// Send lists, in order, the RPC message bytes the Send carries after the
	// transport header: Head, Bulk, Pad, Tail for an inline call; Head, Tail
	// for a Read chunk call (the Bulk's pad is implicit); nothing for a
	// position-zero call. Empty ranges are left out.
	Send []Range
	// PullUp is true when the Send's ranges are to be copied into one
	// contiguous buffer behind the transport header (AppendSend), false when
	// each range gets its own SGE (or there is only one).
	PullUp bool

	// Position is the XDR position of the Read chunk: the offset, from the
	// start of the RPC message, where its data belongs (len(Head)), or 0 for
	// a position-zero Read chunk. Every segment of the chunk carries it.
	Position int
	// ReadSegments are the segments of the one Read chunk, in order: the
	// Bulk without its pad, or for position zero Head, Bulk, Pad, Tail.
	ReadSegments []Range

	Reply ReplyMode
	// WriteSegments are the segments of the one Write chunk, covering
	// exactly ReplyBulk bytes of BufReplyBulk (no pad).
	WriteSegments []Range
	// ReplySegments are the segments of the Reply chunk, covering
	// roundUp(MaxReply) bytes of BufReplyChunk.
	ReplySegments []Range

	// CallHeaderLen is the size of the call's transport header.
	CallHeaderLen int
	// ReplyHeaderLen is the size of the largest transport header the reply
	// can carry: the server returns the offered Write list and Reply chunk.
	ReplyHeaderLen int
	// SendLen is the Send's total size: CallHeaderLen plus the Send ranges.
	// Build guarantees SendLen <= Limits.InlineSend.
	SendLen int
}

func (p *Plan) reset() {
	*p = Plan{
		Send:          p.Send[:0],
		ReadSegments:  p.ReadSegments[:0],
		WriteSegments: p.WriteSegments[:0],
		ReplySegments: p.ReplySegments[:0],
	}
}

// Build plans req under lim, replacing what p held. On error p is left
// empty. The planning rules are in the package documentation.
func (p *Plan) Build(req *Request, lim Limits) error {
	p.reset()
	l, err := lim.normalized()
	if err == nil {
		err = req.validate()
	}
	if err == nil {
		// The reply first: the call's transport header carries the Write
		// list and the Reply chunk.
		err = p.planReply(req, &l)
	}
	if err == nil {
		err = p.planCall(req, &l)
	}
	if err != nil {
		p.reset()
	}
	return err
}

func (p *Plan) planReply(req *Request, l *Limits) error {
	maxReply := roundUp(req.MaxReply)
	fitsInline := MinHeaderLen+maxReply <= l.InlineRecv
	forceDDP := req.ReplyBulk > 0 && l.DDPThreshold > 0 && req.ReplyBulk >= l.DDPThreshold

	if fitsInline && !forceDDP {
		p.Reply, p.ReplyHeaderLen = ReplyInline, MinHeaderLen
		return nil
	}
	if req.ReplyBulk > 0 {
		n := segmentCount(req.ReplyBulk, l.MaxSegmentSize)
		hdr := headerLen(0, n, 0)
		rest := maxReply - roundUp(req.ReplyBulk)
		if n <= l.MaxSegments && hdr+rest <= l.InlineRecv {
			p.WriteSegments = appendSplit(p.WriteSegments, BufReplyBulk, 0, req.ReplyBulk, l.MaxSegmentSize)
			p.Reply, p.ReplyHeaderLen = ReplyWriteChunk, hdr
			return nil
		}
		if n > l.MaxSegments && !fitsInline {
			// A Reply chunk would be longer still.
			return fmt.Errorf("%w: Write chunk of %d bytes needs %d segments of at most %d, limit %d",
				ErrTooManySegments, req.ReplyBulk, n, l.MaxSegmentSize, l.MaxSegments)
		}
	}
	if fitsInline { // DDP was asked for but does not work out
		p.Reply, p.ReplyHeaderLen = ReplyInline, MinHeaderLen
		return nil
	}
	// Neither inline nor a Write chunk: the whole reply in a Reply chunk,
	// sized for the largest reply (knfsd drops the connection when a Reply
	// chunk is too small). A Write chunk is never offered alongside: knfsd
	// would put the payload in the Reply chunk anyway.
	n := segmentCount(maxReply, l.MaxSegmentSize)
	if n > l.MaxSegments {
		return fmt.Errorf("%w: Reply chunk of %d bytes needs %d segments of at most %d, limit %d",
			ErrTooManySegments, maxReply, n, l.MaxSegmentSize, l.MaxSegments)
	}
	hdr := headerLen(0, 0, n)
	if hdr > l.InlineRecv {
		return fmt.Errorf("%w: reply header of %d bytes exceeds the inline receive size %d",
			ErrHeaderTooLarge, hdr, l.InlineRecv)
	}
	p.ReplySegments = appendSplit(p.ReplySegments, BufReplyChunk, 0, maxReply, l.MaxSegmentSize)
	p.Reply, p.ReplyHeaderLen = ReplyInReplyChunk, hdr
	return nil
}

func (p *Plan) planCall(req *Request, l *Limits) error {
	head, bulk, tail := len(req.Head), len(req.Bulk), len(req.Tail)
	pad := padLen(bulk)
	nw, nr := len(p.WriteSegments), len(p.ReplySegments)

	inlineHdr := headerLen(0, nw, nr)
	fitsInline := inlineHdr+head+bulk+pad+tail <= l.InlineSend
	forceDDP := bulk > 0 && l.DDPThreshold > 0 && bulk >= l.DDPThreshold

	if fitsInline && !forceDDP {
		p.planInline(req, l, inlineHdr)
		return nil
	}
	if bulk > 0 {
		n := segmentCount(bulk, l.MaxSegmentSize)
		hdr := headerLen(n, nw, nr)
		if n <= l.MaxSegments && hdr+head+tail <= l.InlineSend {
			p.Type, p.Call, p.Position = RDMAMsg, CallReadChunk, head
			p.ReadSegments = appendSplit(p.ReadSegments, BufBulk, 0, bulk, l.MaxSegmentSize)
			// The pad stays implicit: Tail follows Head on the next XDR
			// boundary of the Send.
			p.Send = appendRange(p.Send, BufHead, head)
			p.Send = appendRange(p.Send, BufTail, tail)
			p.PullUp = len(p.Send) > 1
			p.CallHeaderLen, p.SendLen = hdr, hdr+head+tail
			return nil
		}
		if n > l.MaxSegments && !fitsInline {
			// A position-zero chunk would need more segments still.
			return fmt.Errorf("%w: Read chunk of %d bytes needs %d segments of at most %d, limit %d",
				ErrTooManySegments, bulk, n, l.MaxSegmentSize, l.MaxSegments)
		}
	}
	if fitsInline { // DDP was asked for but does not work out
		p.planInline(req, l, inlineHdr)
		return nil
	}

	// Long call: the whole message in a position-zero Read chunk. Here the
	// message is complete, so the pad is part of it.
	n := segmentCount(head, l.MaxSegmentSize) + segmentCount(bulk, l.MaxSegmentSize) +
		segmentCount(tail, l.MaxSegmentSize)
	if pad > 0 {
		n++
	}
	if n > l.MaxSegments {
		return fmt.Errorf("%w: position-zero Read chunk of %d bytes needs %d segments, limit %d",
			ErrTooManySegments, head+bulk+pad+tail, n, l.MaxSegments)
	}
	hdr := headerLen(n, nw, nr)
	if hdr > l.InlineSend {
		return fmt.Errorf("%w: call header of %d bytes, inline send size %d",
			ErrHeaderTooLarge, hdr, l.InlineSend)
	}
	p.Type, p.Call, p.Position = RDMANoMsg, CallPositionZero, 0
	p.ReadSegments = appendSplit(p.ReadSegments, BufHead, 0, head, l.MaxSegmentSize)
	p.ReadSegments = appendSplit(p.ReadSegments, BufBulk, 0, bulk, l.MaxSegmentSize)
	p.ReadSegments = appendRange(p.ReadSegments, BufPad, pad)
	p.ReadSegments = appendSplit(p.ReadSegments, BufTail, 0, tail, l.MaxSegmentSize)
	p.CallHeaderLen, p.SendLen = hdr, hdr
	return nil
}

func (p *Plan) planInline(req *Request, l *Limits, hdr int) {
	head, bulk, tail := len(req.Head), len(req.Bulk), len(req.Tail)
	pad := padLen(bulk)
	p.Type, p.Call = RDMAMsg, CallInline
	p.Send = appendRange(p.Send, BufHead, head)
	p.Send = appendRange(p.Send, BufBulk, bulk)
	p.Send = appendRange(p.Send, BufPad, pad)
	p.Send = appendRange(p.Send, BufTail, tail)
	gather := l.GatherMin > 0 && bulk >= l.GatherMin &&
		(l.MaxSendSGEs == 0 || 1+len(p.Send) <= l.MaxSendSGEs)
	p.PullUp = len(p.Send) > 1 && !gather
	p.CallHeaderLen, p.SendLen = hdr, hdr+head+bulk+pad+tail
}

// AppendSend appends to dst the RPC bytes the Send carries after the
// transport header, in order (the pull-up copy), and returns the extended
// slice. req must be the Request p was built from. Given a dst with room for
// SendLen bytes it does not allocate.
func (p *Plan) AppendSend(dst []byte, req *Request) []byte {
	for _, r := range p.Send {
		dst = req.AppendRange(dst, r)
	}
	return dst
}

// headerLen is the size of a transport header with a Read list of nRead
// segments, a Write list of one chunk of nWrite segments (none if 0) and a
// Reply chunk of nReply segments (absent if 0). A reply's header has the
// same Write list and Reply chunk as its call's and an empty Read list.
func headerLen(nRead, nWrite, nReply int) int {
	n := fixedHeaderLen + nRead*readSegmentLen + listEndLen
	if nWrite > 0 {
		n += chunkHeadLen + nWrite*plainSegmentLen
	}
	n += listEndLen
	if nReply > 0 {
		n += chunkHeadLen + nReply*plainSegmentLen
	} else {
		n += listEndLen
	}
	return n
}

// segmentCount is how many segments of at most max bytes cover n bytes.
func segmentCount(n, max int) int {
	c := n / max
	if n%max != 0 {
		c++
	}
	return c
}

// appendSplit appends segments of at most max bytes covering buf[off:off+n].
func appendSplit(dst []Range, buf Buffer, off, n, max int) []Range {
	for n > 0 {
		l := min(n, max)
		dst = append(dst, Range{Buf: buf, Off: off, Len: l})
		off += l
		n -= l
	}
	return dst
}

// appendRange appends buf[0:n] as one range unless it is empty.
func appendRange(dst []Range, buf Buffer, n int) []Range {
	if n == 0 {
		return dst
	}
	return append(dst, Range{Buf: buf, Len: n})
}

// roundUp is n rounded up to the XDR unit of 4 bytes.
func roundUp(n int) int { return (n + 3) &^ 3 }

// padLen is the XDR pad after n data bytes.
func padLen(n int) int { return -n & 3 }
