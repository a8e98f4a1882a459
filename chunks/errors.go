package chunks

import (
	"errors"
	"fmt"
)

// Errors of Plan.Build. Each is returned wrapped with the numbers that caused
// it; test with errors.Is.
var (
	// ErrInvalidRequest: the Request is malformed (Head or Tail not a multiple
	// of four bytes, negative or inconsistent reply sizes, an empty Head).
	ErrInvalidRequest = errors.New("chunks: invalid request")
	// ErrInvalidLimits: a negative limit, or an inline size smaller than the
	// smallest transport header.
	ErrInvalidLimits = errors.New("chunks: invalid limits")
	// ErrTooManySegments: a chunk needs more segments than
	// Limits.MaxSegments allows.
	ErrTooManySegments = errors.New("chunks: chunk needs too many segments")
	// ErrHeaderTooLarge: a transport header alone does not fit: the
	// position-zero call's in the inline send size, or that of a reply in
	// the Reply chunk in the inline receive size.
	ErrHeaderTooLarge = errors.New("chunks: transport header exceeds the inline size")
)

// Errors of Plan.Rebuild: the server's reply does not match what the call
// offered. The connection's peer is misbehaving; the reply must not be
// handed to the RPC layer.
var (
	// ErrMessageType: the reply is neither RDMA_MSG nor RDMA_NOMSG.
	ErrMessageType = errors.New("chunks: reply is neither RDMA_MSG nor RDMA_NOMSG")
	// ErrUnexpectedChunk: the server returned a chunk that was not offered,
	// more chunks or segments than were offered, or data in a chunk that the
	// message type says is unused.
	ErrUnexpectedChunk = errors.New("chunks: reply uses a chunk that was not offered")
	// ErrChunkOverrun: a segment reports more bytes than were offered in it.
	ErrChunkOverrun = errors.New("chunks: segment length exceeds the offered length")
	// ErrChunkGap: a segment was filled after an earlier one was left short,
	// so the data would not be contiguous.
	ErrChunkGap = errors.New("chunks: segment filled after a short one")
	// ErrEmptyReply: no RPC message bytes at all.
	ErrEmptyReply = errors.New("chunks: empty reply")
	// ErrShortBuffer: a buffer given to Rebuild is shorter than the bytes
	// the server reports writing into its chunk.
	ErrShortBuffer = errors.New("chunks: buffer shorter than the chunk data")
)

// ChunkKind names the chunk a SegmentError is about.
type ChunkKind uint8

const (
	ChunkWrite ChunkKind = iota + 1 // the Write chunk of the Write list
	ChunkReply                      // the Reply chunk
)

func (k ChunkKind) String() string {
	switch k {
	case ChunkWrite:
		return "write chunk"
	case ChunkReply:
		return "reply chunk"
	}
	return fmt.Sprintf("ChunkKind(%d)", uint8(k))
}

// SegmentError is a segment of the server's Write list or Reply chunk that
// does not match the segment offered in the call (RFC 8166 §3.4: the
// responder reports in each segment's length how much it wrote, never more
// than offered). Err is ErrChunkOverrun or ErrChunkGap.
type SegmentError struct {
	Chunk    ChunkKind
	Index    int    // the segment's index in its chunk
	Offered  int    // bytes offered in the call
	Reported uint32 // bytes the server reports writing
	Err      error
}

func (e *SegmentError) Error() string {
	return fmt.Sprintf("%v: %s segment %d: offered %d bytes, server reports %d",
		e.Err, e.Chunk, e.Index, e.Offered, e.Reported)
}

func (e *SegmentError) Unwrap() error { return e.Err }
