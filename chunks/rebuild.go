package chunks

import "fmt"

// Received is what the transport decoded from a reply's transport header
// (RFC 8166 §4.2) and where its RPC bytes are.
type Received struct {
	// Type is the reply's rdma_proc. RDMA_ERROR is the transport's to
	// handle before Rebuild.
	Type MessageType
	// Inline is the RPC message bytes after the transport header in the
	// Send (RDMA_MSG). Ignored for RDMA_NOMSG.
	Inline []byte
	// WriteList holds, for each Write chunk in the reply's Write list, the
	// lengths the server reports in its segments: the bytes it wrote into
	// each (RFC 8166 §3.4: the responder updates each segment's length).
	WriteList [][]uint32
	// ReplyChunk holds the lengths the server reports in the Reply chunk's
	// segments; nil when the reply has no Reply chunk.
	ReplyChunk []uint32
}

// Reply is the RPC reply as the RPC layer decodes it, in the shape of
// sunrpc.Reply.
type Reply struct {
	// Message is the RPC reply message: the inline bytes, or for RDMA_NOMSG
	// the filled part of the Reply chunk buffer. When Bulk is not nil it
	// lacks the DDP-eligible result's data and pad; the result's XDR length
	// word is still in Message, and the decoder checks it against len(Bulk).
	Message []byte
	// Bulk is the DDP-eligible result's data when the server RDMA-wrote it
	// into the Write chunk: the filled start of the ReplyBulk buffer, at
	// most Request.ReplyBulk bytes. nil when the result, if any, is inside
	// Message: no Write chunk was offered, or the server returned the data
	// inline anyway (all segment lengths 0).
	Bulk []byte
}

// Rebuild checks a reply against what p offered and returns the reply the
// RPC layer sees. replyBulk and replyChunk are the buffers p.WriteSegments
// and p.ReplySegments exposed (nil when not offered). It only reads and
// slices its inputs.
//
// Every length the server reports is bounded by what was offered: a segment
// reporting more than it was offered is a *SegmentError wrapping
// ErrChunkOverrun, one filled after a short one wraps ErrChunkGap (the data
// would have a hole), and chunks or segments that were never offered are
// ErrUnexpectedChunk.
func (p *Plan) Rebuild(in Received, replyBulk, replyChunk []byte) (Reply, error) {
	var written int
	switch len(in.WriteList) {
	case 0:
		// Also taken as "Write chunk unused": RFC 8166 wants the offered
		// chunk echoed with zero lengths, but nothing was written either way.
	case 1:
		var err error
		written, err = checkChunk(ChunkWrite, p.WriteSegments, in.WriteList[0])
		if err != nil {
			return Reply{}, err
		}
	default:
		return Reply{}, fmt.Errorf("%w: Write list of %d chunks, offered %d",
			ErrUnexpectedChunk, len(in.WriteList), min(len(p.WriteSegments), 1))
	}
	replied, err := checkChunk(ChunkReply, p.ReplySegments, in.ReplyChunk)
	if err != nil {
		return Reply{}, err
	}

	switch in.Type {
	case RDMAMsg:
		if replied > 0 {
			return Reply{}, fmt.Errorf("%w: RDMA_MSG reply with %d bytes in the Reply chunk",
				ErrUnexpectedChunk, replied)
		}
		if len(in.Inline) == 0 {
			return Reply{}, fmt.Errorf("%w: RDMA_MSG without RPC bytes", ErrEmptyReply)
		}
		if written == 0 {
			return Reply{Message: in.Inline}, nil
		}
		if written > len(replyBulk) {
			return Reply{}, fmt.Errorf("%w: server wrote %d bytes into the Write chunk, buffer has %d",
				ErrShortBuffer, written, len(replyBulk))
		}
		return Reply{Message: in.Inline, Bulk: replyBulk[:written]}, nil
	case RDMANoMsg:
		if len(p.ReplySegments) == 0 {
			return Reply{}, fmt.Errorf("%w: RDMA_NOMSG reply but no Reply chunk was offered",
				ErrUnexpectedChunk)
		}
		if written > 0 {
			// The whole reply is in the Reply chunk; data in a Write chunk
			// beside it would have no place in the message.
			return Reply{}, fmt.Errorf("%w: RDMA_NOMSG reply with %d bytes in the Write chunk",
				ErrUnexpectedChunk, written)
		}
		if replied == 0 {
			return Reply{}, fmt.Errorf("%w: RDMA_NOMSG with an empty Reply chunk", ErrEmptyReply)
		}
		if replied > len(replyChunk) {
			return Reply{}, fmt.Errorf("%w: server wrote %d bytes into the Reply chunk, buffer has %d",
				ErrShortBuffer, replied, len(replyChunk))
		}
		return Reply{Message: replyChunk[:replied]}, nil
	}
	return Reply{}, fmt.Errorf("%w: %v", ErrMessageType, in.Type)
}

// checkChunk bounds the server's segment lengths by the offered segments and
// returns their sum. The data must be contiguous from the chunk's start:
// once a segment is short, every later one must be empty.
func checkChunk(kind ChunkKind, offered []Range, reported []uint32) (int, error) {
	if len(reported) > len(offered) {
		return 0, fmt.Errorf("%w: %s with %d segments, offered %d",
			ErrUnexpectedChunk, kind, len(reported), len(offered))
	}
	total, short := 0, false
	for i, n := range reported {
		o := offered[i].Len
		if uint64(n) > uint64(o) {
			return 0, &SegmentError{Chunk: kind, Index: i, Offered: o, Reported: n, Err: ErrChunkOverrun}
		}
		if short && n > 0 {
			return 0, &SegmentError{Chunk: kind, Index: i, Offered: o, Reported: n, Err: ErrChunkGap}
		}
		if int(n) < o {
			short = true
		}
		total += int(n)
	}
	return total, nil
}
