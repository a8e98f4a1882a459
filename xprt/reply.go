package xprt

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/nfsrdma/nfsrdma/chunks"
	"github.com/nfsrdma/nfsrdma/rpcrdma"
	"github.com/nfsrdma/nfsrdma/sunrpc"
	"github.com/nfsrdma/nfsrdma/verbs"
)

// recvLoop is the reply handler's goroutine: it reaps receive completions.
func (c *conn) recvLoop() {
	defer c.pollers.Done()
	t := c.t
	wcs := make([]verbs.Completion, 32)
	var hdr rpcrdma.Header
	for {
		n, err := c.rcq.Poll(wcs)
		if err != nil {
			t.connLost(c, err)
			return
		}
		if n == 0 && t.cfg.BusyPoll > 0 && c.awaitingReplies() {
			if sp, ok := c.rcq.(verbs.SpinPoller); ok {
				if n, err = sp.PollSpin(wcs, t.cfg.BusyPoll); err != nil {
					t.connLost(c, err)
					return
				}
				t.ctr.busyPolls.Add(1)
				if n > 0 {
					t.ctr.busyPollHits.Add(1)
				}
			}
		}
		if n == 0 {
			if err := c.rcq.Wait(c.pollCtx); err != nil {
				if c.pollCtx.Err() == nil {
					t.connLost(c, err)
				}
				return
			}
			continue
		}
		for _, wc := range wcs[:n] {
			c.handleRecv(wc, &hdr)
		}
		t.mu.Lock()
		if !c.broken {
			if err := c.postRecvsLocked(); err != nil {
				t.mu.Unlock()
				t.connLost(c, fmt.Errorf("reposting receives: %w", err))
				t.mu.Lock()
			}
		}
		t.mu.Unlock()
		// The callers whose replies this batch completed are runnable on
		// this goroutine's P, and would otherwise wait for it to arm the
		// CQ and block (a system call or two: about 0.2 ms per call in the
		// bed's guest, measured): let them run first.
		runtime.Gosched()
	}
}

// awaitingReplies reports whether calls on c wait for their replies.
func (c *conn) awaitingReplies() bool {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	return c.credits.Outstanding() > 0
}

// handleRecv handles one receive completion. Every exit path gives the
// receive buffer back for reposting (DESIGN.md rule 7).
func (c *conn) handleRecv(wc verbs.Completion, hdr *rpcrdma.Header) {
	t := c.t
	if wc.ID == sentinelID {
		close(c.rqDrained)
		return
	}
	t.mu.Lock()
	c.recvs.Consume()
	idx := int(wc.ID)
	// The buffer is free again once its bytes are copied out below.
	defer func() {
		t.mu.Lock()
		c.recvFree = append(c.recvFree, idx)
		t.mu.Unlock()
	}()
	t.mu.Unlock()
	if wc.Status != verbs.StatusSuccess {
		if wc.Status != verbs.StatusWRFlushErr {
			t.ctr.errorCompletions.Add(1)
			t.connLost(c, &verbs.CompletionError{Completion: wc})
		}
		return
	}
	t.ctr.receives.Add(1)
	data := c.recvMem.Bytes()[idx*c.recvSize : idx*c.recvSize+int(min(wc.ByteLen, uint32(c.recvSize)))]
	hn, derr := hdr.Decode(data)
	t.mu.Lock()
	cl := t.calls[hdr.XID]
	if cl != nil && (cl.conn != c || !cl.posted || cl.replied) {
		cl = nil
	}
	if derr != nil && (cl == nil || hdr.Proc != rpcrdma.ProcError) {
		t.mu.Unlock()
		t.ctr.malformed.Add(1)
		t.log.Warn("malformed transport header", "err", derr, "len", len(data))
		var ve *rpcrdma.VersionError
		if errors.As(derr, &ve) || len(data) < rpcrdma.MinHeaderLen {
			return
		}
		if cl != nil {
			// A reply we cannot read leaves the call's windows in place:
			// the call times out and is sent again on a new connection.
			return
		}
		return
	}
	if cl == nil {
		t.mu.Unlock()
		t.ctr.badXIDs.Add(1)
		t.log.Warn("reply matches no outstanding call", "xid", fmt.Sprintf("%#08x", hdr.XID))
		// A Send With Invalidate naming one of our windows would leave
		// that window's state unknown: reset the connection.
		if wc.Flags&verbs.WCWithInv != 0 {
			t.connLost(c, fmt.Errorf("xprt: reply with unknown xid %#08x invalidated rkey %#x", hdr.XID, wc.InvalidatedRKey))
		}
		return
	}
	// Credits (RFC 8166 §3.3): clamp the grant to [1, slots], and the
	// reply frees this call's credit.
	granted := c.credits.Grant(hdr.Credits)
	t.ctr.credits.Store(uint64(granted))
	c.recvs.SetCredits(int(granted))
	cl.replied = true
	if cl.hasCredit {
		cl.hasCredit = false
		c.credits.Release()
	}
	t.grantCreditsLocked(c)
	if !cl.sendDone {
		t.ctr.replyBeforeSend.Add(1)
	}
	t.mu.Unlock()

	// Copy what the call needs out of the receive buffer.
	cl.inline = append(cl.inline[:0], data[hn:]...)
	cl.hdr.XID, cl.hdr.Credits, cl.hdr.Proc = hdr.XID, hdr.Credits, hdr.Proc
	cl.hdr.Writes = cl.hdr.Writes[:0]
	for _, w := range hdr.Writes {
		cl.hdr.Writes = append(cl.hdr.Writes, append(rpcrdma.WriteChunk(nil), w...))
	}
	cl.hdr.Reply, cl.hdr.HasReply = append(cl.hdr.Reply[:0], hdr.Reply...), hdr.HasReply
	if hdr.Proc == rpcrdma.ProcError {
		t.ctr.rdmaErrors.Add(1)
		cl.rdmaErr = hdr.RemoteError()
		if cl.rdmaErr == nil {
			cl.rdmaErr = &ProtocolError{XID: hdr.XID, Err: derr}
		}
	}

	// Remote invalidation: the server may have invalidated one of this
	// call's windows with Send With Invalidate.
	reg := t.reg
	if wc.Flags&verbs.WCWithInv != 0 && !reg.MatchRemoteInvalidation(cl.regs, wc) {
		t.connLost(c, fmt.Errorf("xprt: reply to xid %#08x invalidated rkey %#x, which is not one of its windows", hdr.XID, wc.InvalidatedRKey))
		return
	}
	// Local invalidation of the rest, in one chain whose last WR is
	// signaled; the call completes when that completion is reaped. The
	// room was reserved when the call was admitted (DESIGN.md rule 2).
	t.mu.Lock()
	inv := reg.AppendLocalInvalidations(cl.regs, c.wrs[:0])
	if len(inv) == 0 {
		t.mu.Unlock()
		t.finishReply(cl)
		return
	}
	if c.broken {
		t.mu.Unlock()
		return // the teardown settles the call
	}
	res, ok := c.ring.Reserve(len(inv), true)
	if !ok {
		t.mu.Unlock()
		t.connLost(c, errors.New("xprt: no send-queue room for LOCAL_INV despite the reservation"))
		return
	}
	for i := range inv {
		inv[i].ID = res.First + uint64(i)
		m := c.ring.Slot(inv[i].ID)
		m.kind = wrLocalInv
		if i == len(inv)-1 {
			m.last, m.call = true, cl
			inv[i].Flags |= verbs.SendSignaled
		}
	}
	cl.localInvs = len(inv)
	_, err := c.qp.PostSend(inv)
	t.mu.Unlock()
	if err != nil {
		t.connLost(c, fmt.Errorf("posting LOCAL_INV: %w", err))
	}
}

// finishReply completes a call whose windows are all invalid: release the
// registrations, sync, rebuild the reply and hand it over (DESIGN.md rule
// 3: only now does the caller see the data).
func (t *Transport) finishReply(cl *call) {
	reg := t.reg
	if err := reg.Release(cl.regs); err != nil {
		t.log.Error("releasing registrations", "xid", cl.req.XID, "err", err)
	}
	if cl.replyBuf != nil {
		reg.Sync(cl.replyBuf)
	}
	var reply *sunrpc.Reply
	var err error
	if cl.rdmaErr != nil {
		err = cl.rdmaErr
	} else {
		reply, err = cl.rebuild()
	}
	t.mu.Lock()
	c := cl.conn
	if c != nil && !c.broken {
		// Give back the LOCAL_INV room reserved and not used.
		unused := cl.reserved - (cl.binds + 1) - cl.localInvs
		if unused > 0 {
			c.gate.Free(unused, admitLocked)
		}
	}
	cl.reserved = 0
	keepReplyBuf := reply != nil && cl.replyBuf != nil && !cl.lent && cl.plan.Reply == chunks.ReplyInReplyChunk
	if !keepReplyBuf {
		cl.releaseAttempt()
	} else {
		rb := cl.replyBuf
		cl.replyBuf = nil
		cl.releaseAttempt()
		reply = sunrpc.NewReply(reply.Inline, reply.Bulk, func() { reg.PutBuffer(rb) })
	}
	if cl.abandoned {
		delete(t.calls, cl.req.XID)
		delete(t.orphans, cl)
		if reply != nil {
			reply.Release()
		}
		cl.finish(nil, errAbandoned)
	} else {
		cl.finish(reply, err)
	}
	t.mu.Unlock()
}

var errAbandoned = errors.New("xprt: call abandoned by its caller")

// rebuild checks the reply against what the call offered and returns it.
func (cl *call) rebuild() (*sunrpc.Reply, error) {
	in := chunks.Received{Type: chunks.MessageType(cl.hdr.Proc), Inline: cl.inline}
	for _, w := range cl.hdr.Writes {
		lens := make([]uint32, len(w))
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
		cl.t.ctr.malformed.Add(1)
		return nil, &ProtocolError{XID: cl.req.XID, Err: err}
	}
	var bulk []byte
	if r.Bulk != nil {
		if cl.lent {
			// Already in the caller's borrowed buffer.
			bulk = cl.req.ReplyBulk[:len(r.Bulk)]
		} else {
			// The caller's buffer: one copy out of the registered I/O
			// buffer.
			n := copy(cl.req.ReplyBulk, r.Bulk)
			bulk = cl.req.ReplyBulk[:n]
		}
	}
	return sunrpc.NewReply(r.Message, bulk, nil), nil
}
