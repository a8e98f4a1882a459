// Package xprttest is an in-process RPC-over-RDMA version 1 server (RFC 8166,
// RFC 8797, NFS binding RFC 8267) on the verbs interfaces, for fast tests of
// the client transport on verbs/sim. It plays the role of the Linux kernel
// NFS server's RDMA transport (knfsd, net/sunrpc/xprtrdma/svc_rdma_*.c) and
// misbehaves on request.
//
// # What it does, like knfsd
//
//   - Connection: receives are posted before the accept; the accept carries
//     its own RFC 8797 private data (f6ab0e18 01 00 03 03 for the default
//     4096-byte inline size: version 1, no flags), and reads the client's.
//     Every receive is reposted at once. The accept offers no responder
//     resources: the client never RDMA-reads from the server.
//   - Calls: RDMA_MSG carries the RPC call after the transport header; each
//     Read chunk at position P > 0 is pulled with RDMA READ and spliced in
//     at P (the inline part resumes after the chunk data and its implicit
//     XDR pad). RDMA_NOMSG carries the call in a position-zero Read chunk.
//     A header that cannot be decoded is answered with RDMA_ERROR: ERR_VERS
//     (low = high = 1) for a version other than 1, ERR_CHUNK for anything
//     else malformed (bad chunk lists, RDMA_NOMSG without a position-zero
//     chunk, positions out of the message, RDMA_MSGP or an unknown
//     procedure). As knfsd does, every reply header echoes the call's
//     rdma_vers word (so an ERR_VERS reply carries the caller's own
//     unsupported version), and a message shorter than the 16-byte fixed
//     header, an RDMA_DONE or an RDMA_ERROR from the client is dropped.
//   - Replies: for NFSv3 READ and READLINK (RFC 8267 §3) with a Write chunk
//     offered, the result's data bytes are RDMA-written into the first Write
//     chunk (in segment order, never beyond a segment) and removed, with
//     their XDR pad, from the inline reply; the length word stays. Every
//     Write chunk of the call is echoed with each segment's length set to
//     what was written (0 when unused). A reply that does not fit inline
//     goes into the Reply chunk (RDMA_NOMSG, the Reply chunk echoed with
//     the bytes written per segment); one too large for the Reply chunk
//     drops the connection without a reply (knfsd: E2BIG); one that needs a
//     Reply chunk when none was offered is answered with ERR_CHUNK, and so
//     is a DDP result larger than the Write chunk. With
//     Config.ReplyChunk = ReplyChunkAlways the server behaves as the
//     measured 6.1 knfsd does: whenever a Reply chunk is offered the whole
//     reply, payload included, goes there as RDMA_NOMSG.
//   - Remote invalidation: when the client's private data sets the Send
//     With Invalidate flag and the call's chunks (Read list, Write list,
//     Reply chunk) name exactly one distinct rkey, the reply is a
//     SEND_WITH_INV of that rkey; otherwise a plain SEND. RDMA_ERROR replies
//     always use a plain SEND.
//   - Ordering: a reply's RDMA WRITEs are posted before its SEND on the same
//     QP, so RC ordering lands the data before the reply.
//   - Credits: every reply grants Config.Credits. Calls are served
//     concurrently; the server counts the calls outstanding per connection
//     and each call that arrives beyond the grant (1 until the connection's
//     first reply, then max(Credits, 1)) in Stats.OverCredit. A call that is
//     never answered keeps its credit for the life of the connection.
//
// # Misbehaviour
//
// Config.Misbehave (or Server.SetMisbehavior) selects calls (all, the n-th,
// or by a predicate) and what to do to their replies: delay, drop, answer
// with RDMA_ERROR, send a truncated header or a bad version, an unknown xid
// first, an overstated Write segment length, Send With Invalidate the
// client did not allow, an RDMA WRITE into the Write chunk after the reply
// (with an rkey the client must have invalidated by then), or a
// disconnect. Stats reports what happened.
//
// The server needs a fabric that executes work by itself (verbs/sim without
// sim.Manual); delays use real time.
package xprttest
