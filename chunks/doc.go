// Package chunks plans how one RPC-over-RDMA version 1 call travels and
// rebuilds the RPC reply from what the server sent back (RFC 8166 §3.4–3.5,
// NFS binding RFC 8267 §3). It is pure: no I/O, no registration, no wire
// encoding. It speaks of byte ranges of named buffers (Head, Bulk, Tail,
// ReplyBulk, the Reply chunk buffer); the transport maps them to registered
// memory and the rpcrdma codec turns them into segments on the wire.
//
// # The call
//
// A Request is an RPC call in three parts, as the sunrpc layer builds it:
// Head (RPC header and arguments up to and including the XDR length word of
// the DDP-eligible item), Bulk (that item's data, unpadded) and Tail (the
// arguments after it). RFC 8267 §3 names the DDP-eligible items of NFSv3:
// WRITE data and the SYMLINK path in calls, READ data and the READLINK path
// in replies. Plan.Build picks one of three ways, the first that fits:
//
//   - Inline (RDMA_MSG, RFC 8166 §3.5.1): transport header, Head, Bulk, the
//     Bulk's XDR pad (0–3 zero bytes) and Tail all in the Send, when that is
//     at most Limits.InlineSend bytes.
//   - Read chunk (RDMA_MSG, RFC 8166 §3.5.2): Bulk travels in one Read chunk
//     at XDR position len(Head); the Send carries Head then Tail.
//   - Position-zero Read chunk (RDMA_NOMSG, RFC 8166 §3.5.3): the whole RPC
//     message (Head, Bulk, pad, Tail) travels in a Read chunk at position
//     zero and the Send carries only the transport header. Used when even
//     Head and Tail without the Bulk do not fit.
//
// # XDR roundup
//
// A reduced item's XDR pad is never carried in a chunk (RFC 8166 §3.4,
// "XDR roundup"): a Read chunk holds exactly len(Bulk) bytes, the pad is
// implicit, and the Tail follows Head in the Send on the next 4-byte
// boundary. This is what the Linux client sends and what knfsd expects. A
// Write chunk is offered for exactly ReplyBulk bytes, with no pad segment:
// knfsd writes no roundup into a Write chunk and strips it from the inline
// part. In a position-zero Read chunk the message is whole, so the pad is
// present there (as a Pad range between Bulk and Tail).
//
// # Thresholds
//
// The inline sizes are the thresholds, as in the Linux client: a call goes
// inline whenever the whole of it fits the Send, and a reply is received
// inline whenever its largest possible size fits the receive buffer. Moving a
// small item to a chunk costs a registration (a window bind and an
// invalidation, 170–250 µs on the test bed's rxe) to save a copy of at most
// a few KiB, so chunks are used only when the message does not fit.
// Limits.DDPThreshold can force DDP for items at least that long; it is off
// by default.
//
// # The reply
//
// For a reply whose largest size does not fit inline, Build offers either a
// Write chunk for the DDP-eligible result (when the rest of the reply fits
// inline) or a Reply chunk sized for the largest possible reply, never both.
// knfsd, when given both, puts the whole reply, payload included, in the
// Reply chunk and answers RDMA_NOMSG (measured on kernel 6.1), so a Write
// chunk next to a Reply chunk would only cost a registration; and a Reply chunk
// too small for the reply makes knfsd drop the connection without a reply,
// so a Reply chunk always covers MaxReply rounded up to a multiple of four.
// The Linux client makes the same choice.
//
// Plan.Rebuild checks the server's Write list and Reply chunk against what
// was offered and returns the reply the RPC layer decodes.
package chunks
