package xprt

import (
	"fmt"

	"github.com/nfsrdma/nfsrdma/chunks"
	"github.com/nfsrdma/nfsrdma/rpcrdma"
	"github.com/nfsrdma/nfsrdma/sunrpc"
	"github.com/nfsrdma/nfsrdma/verbs"
)

// The reply handler, in the order of its named steps (rule 3):
//
//  1. decode: the transport header of each receive completion of a batch;
//  2. match: the xid to a posted call on this connection, the reply copied
//     out of the receive buffer (posted → replied);
//  3. repost: the batch's receives are posted again, before any credit is
//     released, so that the server never finds the client's receive queue
//     shorter than the credits it granted (rule 7; RNR otherwise);
//  4. credits: the grant clamped to [1, slots], each replied call's credit
//     released and handed to waiting calls in FIFO order;
//  5. remote invalidation: the server's Send With Invalidate must name one
//     of the call's own windows (it is recorded in step 2, whatever the
//     reply's xid: the device has invalidated that rkey either way);
//  6. local invalidation: LOCAL_INV for the rest (replied → invalidating),
//     finished by the completion of the chain's last WR in sendLoop;
//  7. finish: registrations released, buffers synced, the reply rebuilt and
//     only then handed to the caller (→ done).

// received is one receive completion after steps 1 and 2.
type received struct {
	cl    *call
	flags verbs.WCFlags
	rkey  uint32
	// ownInv: the Send With Invalidate named one of cl's own windows
	// (recorded as invalid in step 2).
	ownInv bool
}

// awaitingReplies reports whether calls on c wait for their replies.
func (c *conn) awaitingReplies() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.credits.Outstanding() > 0
}

// receive is steps 1 and 2 for one completion. The receive buffer is free
// for reposting when it returns, whatever the outcome (rule 7). A non-nil
// error means the connection must be reset.
func (c *conn) receive(wc verbs.Completion, hdr *rpcrdma.Header) (received, error) {
	t := c.t
	if wc.ID == sentinelID {
		close(c.rqDrained)
		return received{}, nil
	}
	idx := int(wc.ID)
	c.mu.Lock()
	c.recvs.Consume()
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.recvFree = append(c.recvFree, idx)
		c.mu.Unlock()
	}()
	if err := c.completionError(wc); err != nil {
		return received{}, err
	}
	t.ctr[ctrReceives].Add(1)
	if idx < 0 || idx >= len(c.recvBufs) {
		return received{}, fmt.Errorf("xprt: receive completion with unknown wrid %d", wc.ID)
	}
	data := c.recvBufs[idx][:min(int(wc.ByteLen), c.recvSize)]
	// 1. decode.
	hn, derr := hdr.Decode(data)
	remoteInv := wc.Flags&verbs.WCWithInv != 0
	// 2. match.
	t.mu.Lock()
	cl := t.calls[hdr.XID]
	if cl != nil && (cl.conn != c || (cl.state != stPosted && cl.state != stAbandoned)) {
		cl = nil
	}
	if remoteInv && (cl == nil || (derr != nil && hdr.Proc != rpcrdma.ProcError)) {
		// The device invalidated the rkey whatever the message says. If
		// it names one of our windows (another call's, or one of a call
		// whose reply we cannot read), that window is recorded invalid
		// now, before any reply of this batch is settled: its LOCAL_INV
		// would be a second invalidation (a kernel panic on rxe). The
		// connection is reset below: a peer that does this is broken.
		t.reg.MatchRemoteInvalidation(nil, wc)
	}
	if derr != nil && (cl == nil || hdr.Proc != rpcrdma.ProcError) {
		t.mu.Unlock()
		t.ctr[ctrMalformedReplies].Add(1)
		t.log.Warn("malformed transport header", "err", derr, "len", len(data))
		if remoteInv {
			return received{}, fmt.Errorf("xprt: malformed reply invalidated rkey %#x", wc.InvalidatedRKey)
		}
		// A reply we cannot read leaves the call's windows in place: the
		// call times out and is sent again on a new connection.
		return received{}, nil
	}
	if cl == nil {
		t.mu.Unlock()
		t.ctr[ctrBadXIDs].Add(1)
		t.log.Warn("reply matches no outstanding call", "xid", fmt.Sprintf("%#08x", hdr.XID))
		if remoteInv {
			// Recorded above; the window's call is sent again on a new
			// connection.
			return received{}, fmt.Errorf("xprt: reply with unknown xid %#08x invalidated rkey %#x", hdr.XID, wc.InvalidatedRKey)
		}
		return received{}, nil
	}
	if cl.state == stPosted {
		cl.to(stReplied)
	}
	// 5, recorded now: the window the server invalidated is invalid from
	// here on, whether or not it is the call's own.
	ownInv := remoteInv && t.reg.MatchRemoteInvalidation(cl.regs, wc)
	// The grant sizes the receive queue now, so that step 3 reposts
	// enough for it before step 4 lets more calls go (rule 7).
	c.mu.Lock()
	c.recvs.SetCredits(int(min(max(hdr.Credits, 1), uint32(c.slots))))
	c.mu.Unlock()
	// Copy what the call needs out of the receive buffer: after this the
	// buffer is reposted.
	if cl.inline == nil {
		cl.inline = cl.inlineArr[:0] // a small reply's own room
	}
	cl.inline = append(cl.inline[:0], data[hn:]...)
	cl.hdr.XID, cl.hdr.Credits, cl.hdr.Proc = hdr.XID, hdr.Credits, hdr.Proc
	cl.hdr.Writes = cl.hdrWrites[:0]
	for i, w := range hdr.Writes {
		var dst rpcrdma.WriteChunk
		if i == 0 {
			dst = cl.hdrSegs[:0] // the usual one chunk: the call's own array
		}
		cl.hdr.Writes = append(cl.hdr.Writes, append(dst, w...))
	}
	cl.hdr.Reply, cl.hdr.HasReply = append(cl.hdr.Reply[:0], hdr.Reply...), hdr.HasReply
	cl.rdmaErr = nil
	if hdr.Proc == rpcrdma.ProcError {
		t.ctr[ctrRDMAErrors].Add(1)
		cl.rdmaErr = hdr.RemoteError()
		if cl.rdmaErr == nil {
			cl.rdmaErr = &ProtocolError{XID: hdr.XID, Err: derr}
		}
	}
	t.mu.Unlock()
	return received{cl: cl, flags: wc.Flags, rkey: wc.InvalidatedRKey, ownInv: ownInv}, nil
}

// completionError is rule 6's test of a work completion: any status but
// success ends the connection (connLost is idempotent, so the flushes of a
// teardown already under way cost nothing). A flush the transport did not
// ask for means the QP went to error on its own: as much a loss as the
// error completion that caused it. Flushes are not counted as errors.
func (c *conn) completionError(wc verbs.Completion) error {
	if wc.Status == verbs.StatusSuccess {
		return nil
	}
	if wc.Status != verbs.StatusWRFlushErr {
		c.t.ctr[ctrErrorCompletions].Add(1)
	}
	return &verbs.CompletionError{Completion: wc}
}

// settle is steps 4 to 7 for one matched reply.
func (c *conn) settle(r received) error {
	t, cl := c.t, r.cl
	// 4. credits.
	c.mu.Lock()
	granted := c.credits.Grant(cl.hdr.Credits)
	t.ctr[ctrCredits].Store(uint64(granted))
	if cl.hasCredit {
		cl.hasCredit = false
		c.credits.Release()
	}
	c.grantCreditsLocked()
	if !cl.sendDone {
		t.ctr[ctrReplyBeforeSend].Add(1)
	}
	c.mu.Unlock()

	// 5. remote invalidation (recorded in receive): at most one rkey, and
	// it must be one of this call's windows.
	reg := t.reg
	if r.flags&verbs.WCWithInv != 0 && !r.ownInv {
		t.ctr[ctrForeignInvalidations].Add(1)
		return fmt.Errorf("xprt: reply to xid %#08x invalidated rkey %#x, which is not one of its windows", cl.req.XID, r.rkey)
	}
	// 6. local invalidation of the rest.
	t.mu.Lock()
	if cl.state == stAbandoned {
		// Only calls without windows are abandoned: nothing to
		// invalidate, and nobody to hand the reply to.
		t.mu.Unlock()
		t.finishReply(cl)
		return nil
	}
	c.mu.Lock()
	if c.broken && reg.ValidWindows(cl.regs) > 0 {
		// The connection is being reset (perhaps by this very batch):
		// no LOCAL_INV goes on it, and no reply whose windows are still
		// valid completes. The teardown settles the call: it destroys
		// those windows once the QP is drained, and sends the call
		// again.
		c.mu.Unlock()
		t.mu.Unlock()
		return nil
	}
	inv := reg.AppendLocalInvalidations(cl.regs, c.wrs[:0])
	if len(inv) == 0 {
		c.mu.Unlock()
		t.mu.Unlock()
		t.finishReply(cl)
		return nil
	}
	cl.to(stInvalidating)
	t.mu.Unlock()
	err := c.postLocalInvalidationsLocked(cl, inv)
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("xprt: posting LOCAL_INV: %w", err)
	}
	return nil
}

// finishReply is step 7: the call's windows are all invalid. Release the
// registrations, sync, rebuild the reply and hand it over: only now does
// the caller see the data.
func (t *Transport) finishReply(cl *call) {
	reg := t.reg
	if err := reg.Release(cl.regs); err != nil {
		t.log.Error("releasing registrations", "xid", cl.req.XID, "err", err)
	}
	cl.regs = cl.regs[:0]
	if cl.replyBuf != nil {
		reg.Sync(cl.replyBuf)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if cl.state != stReplied && cl.state != stInvalidating && cl.state != stAbandoned {
		// The teardown settled it first.
		return
	}
	var reply *sunrpc.Reply
	var err error
	switch {
	case cl.state == stAbandoned:
	case cl.rdmaErr != nil:
		err = cl.rdmaErr
	default:
		// The caller waits (it does not return while the call is replied
		// or invalidating): its ReplyBulk may be written.
		reply, err = cl.rebuild()
	}
	c := cl.conn
	c.mu.Lock()
	if !c.broken {
		// Give back the LOCAL_INV room reserved and not used.
		if unused := cl.roomHeld - (cl.binds + 1) - cl.localInvs; unused > 0 {
			c.gate.Free(unused, admitLocked)
		}
	}
	cl.roomHeld = 0
	c.mu.Unlock()
	keep := reply != nil && cl.replyBuf != nil && !cl.replyLent && cl.plan.Reply == chunks.ReplyInReplyChunk
	if keep {
		// The reply's bytes stay in the Reply chunk's buffer until the
		// caller releases the reply; so does the buffer's budget.
		rb := cl.replyBuf
		cl.replyBuf = nil
		held := cl.budget
		cl.budget = budgetWaiter{granted: held.granted}
		rest := budgetWaiter{n: need{bufs: held.n.bufs - 1, wins: held.n.wins}, held: held.held}
		kept := &budgetWaiter{n: need{bufs: 1}, held: held.held}
		t.budget.put(&rest)
		cl.releaseMemoryLocked()
		reply = sunrpc.NewReply(reply.Inline, reply.Bulk, func() {
			reg.PutBuffer(rb)
			t.mu.Lock()
			t.budget.put(kept)
			t.mu.Unlock()
		})
	} else {
		cl.releaseMemoryLocked()
	}
	cl.finishLocked(reply, err)
}

// rebuild checks the reply against what the call offered and returns it
// (Transport.mu held; the caller waits).
func (cl *call) rebuild() (*sunrpc.Reply, error) {
	in := chunks.Received{Type: chunks.MessageType(cl.hdr.Proc), Inline: cl.inline}
	// The usual reply's lengths (one Write chunk of a few segments) go
	// in the call's own arrays.
	in.WriteList = cl.writeList[:0]
	for _, w := range cl.hdr.Writes {
		var lens []uint32
		if len(in.WriteList) == 0 && len(w) <= len(cl.writeLens) {
			lens = cl.writeLens[:len(w)]
		} else {
			lens = make([]uint32, len(w))
		}
		for i, s := range w {
			lens[i] = s.Length
		}
		in.WriteList = append(in.WriteList, lens)
	}
	if cl.hdr.HasReply {
		in.ReplyChunk = make([]uint32, len(cl.hdr.Reply))
		for i, s := range cl.hdr.Reply {
			in.ReplyChunk[i] = s.Length
		}
	}
	var replyBulk, replyChunk []byte
	if cl.replyBuf != nil {
		if cl.plan.Reply == chunks.ReplyWriteChunk {
			replyBulk = cl.replyBuf.Bytes()[:cl.creq.ReplyBulk]
		} else {
			replyChunk = cl.replyBuf.Bytes()
		}
	}
	r, err := cl.plan.Rebuild(in, replyBulk, replyChunk)
	if err != nil {
		cl.t.ctr[ctrMalformedReplies].Add(1)
		return nil, &ProtocolError{XID: cl.req.XID, Err: err}
	}
	var bulk []byte
	if r.Bulk != nil {
		if cl.replyLent {
			// Already in the caller's borrowed buffer.
			bulk = cl.req.ReplyBulk[:len(r.Bulk)]
		} else {
			// The caller's buffer: one copy out of the registered I/O
			// buffer.
			n := copy(cl.req.ReplyBulk, r.Bulk)
			bulk = cl.req.ReplyBulk[:n]
		}
	}
	// The message is in the call's own copy of the inline bytes, or in
	// the Reply chunk's buffer (kept until the reply is released).
	return sunrpc.NewReply(r.Message, bulk, nil), nil
}
