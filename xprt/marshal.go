package xprt

import (
	"fmt"

	"github.com/nfsrdma/nfsrdma/chunks"
	"github.com/nfsrdma/nfsrdma/rpcrdma"
)

// marshal builds a call's Send into buf: the transport header (RFC 8166
// §4.2) with the chunk lists the plan asks for, advertising segs (the
// registered segments, in the plan's order: the Read chunk's, then the
// Write or Reply chunk's), followed by the inline part of the message. It
// touches no fabric; an inconsistent input is an error, never a panic or a
// message longer than buf.
func marshal(buf []byte, xid, credits uint32, p *chunks.Plan, req *chunks.Request, segs []rpcrdma.Segment) ([]byte, error) {
	nr := len(p.ReadSegments)
	nw := len(p.WriteSegments) + len(p.ReplySegments)
	if len(segs) != nr+nw {
		return nil, fmt.Errorf("xprt: marshal: %d segments registered for a plan of %d", len(segs), nr+nw)
	}
	var h rpcrdma.Header
	var writes [1]rpcrdma.WriteChunk // on the stack: a call offers one Write chunk at most
	h.XID, h.Credits, h.Proc, h.Writes = xid, credits, rpcrdma.Proc(p.Type), writes[:0]
	pos := uint32(p.Position)
	for _, s := range segs[:nr] {
		h.Reads = append(h.Reads, rpcrdma.ReadSegment{Position: pos, Segment: s})
	}
	if nw > 0 {
		chunk := rpcrdma.WriteChunk(segs[nr:])
		if p.Reply == chunks.ReplyInReplyChunk {
			h.Reply, h.HasReply = chunk, true
		} else {
			h.Writes = append(h.Writes, chunk)
		}
	}
	msg, err := h.Append(buf[:0])
	if err != nil {
		return nil, fmt.Errorf("xprt: marshal: %w", err)
	}
	if len(msg)+sendBodyLen(p) > len(buf) {
		return nil, fmt.Errorf("xprt: marshal: a Send of %d bytes exceeds the inline size %d", len(msg)+sendBodyLen(p), len(buf))
	}
	msg = p.AppendSend(msg, req)
	if len(msg) > len(buf) || &msg[0] != &buf[0] {
		return nil, fmt.Errorf("xprt: marshal: a Send of %d bytes exceeds the inline size %d", len(msg), len(buf))
	}
	return msg, nil
}

// sendBodyLen is the length of the inline part of the plan's Send.
func sendBodyLen(p *chunks.Plan) int {
	n := 0
	for _, r := range p.Send {
		n += r.Len
	}
	return n
}
