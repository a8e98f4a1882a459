package xprt

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/nfsrdma/nfsrdma/rpcrdma"
	"github.com/nfsrdma/nfsrdma/verbs"
)

// The send queue: posting SEND and LOCAL_INV chains, reaping send
// completions, retiring the send-context ring. Everything here runs under
// the connection's mutex but the posting of calls' chains.
//
// The ring hands out wrids in reservation order and retires them in that
// order when a signaled completion comes, so chains must reach the device
// in the order of their wrids. Holding conn.mu across ibv_post_send would
// keep that order, but on rxe the post runs the whole send inside the
// call (the requester, and on a loopback the server's receive: 0.2-0.7 ms
// on the test bed), and under conn.mu nothing else of the connection
// moves meanwhile: no other call posts, no reply is settled, no receive is
// reposted. So posting is combined. A call reserves its wrids and appends
// its chain to pend under conn.mu; if nobody is posting, it becomes the
// poster: it takes all of pend, releases conn.mu, posts the batch in
// order, and goes on until pend is empty. Calls arriving meanwhile append
// behind and return at once; their chains go out in the poster's next
// ibv_post_send, in wrid order, all of them in one crossing. A LOCAL_INV
// chain is posted under conn.mu when nobody posts, else appended too.
// Once the connection is broken the poster stops, and what it leaves in
// pend was never posted: its ring slots are retired by the teardown's
// Flush, after the drain, which waits for the poster before its sentinel.

// post marshals the call and posts its binds and its SEND as one chain.
func (cl *call) post(c *conn) error {
	t := cl.t
	if len(cl.regs) > 2*t.segs {
		return fmt.Errorf("xprt: internal error: %d segments, limit %d", len(cl.regs), 2*t.segs)
	}
	segs := make([]rpcrdma.Segment, len(cl.regs))
	n := 0
	for _, g := range cl.regs {
		segs[n] = g.Segment()
		n++
	}
	// Lock order: Transport.mu, then conn.mu. Everything that can fail
	// is checked before the call moves to stPosted, so a failure here
	// leaves an unposted attempt for undo.
	t.mu.Lock()
	c.mu.Lock()
	unlockBoth := func() { c.mu.Unlock(); t.mu.Unlock() }
	if c.broken {
		unlockBoth()
		return errRetry
	}
	if len(c.sendFree) == 0 || c.ring.Room() < len(cl.regs)+1 {
		// Cannot happen: every SEND in the ring holds one buffer, and
		// the gate bounds the ring.
		unlockBoth()
		return errors.New("xprt: internal error: no send buffer or ring room after admission")
	}
	sb := c.sendFree[len(c.sendFree)-1]
	buf := c.sendMem.Bytes()[sb*c.sendSize : (sb+1)*c.sendSize]
	msg, err := marshal(buf[:min(c.inlineSend, c.sendSize)], cl.req.XID, uint32(t.cfg.Slots), &cl.plan, &cl.creq, segs[:n])
	if err != nil {
		unlockBoth()
		return err
	}
	// From here on the server may see the windows: only the reply or the
	// teardown settles them.
	if !cl.to(stPosted) {
		unlockBoth()
		return errors.New("xprt: internal error: call not posted")
	}
	t.startReplyTimeoutLocked(cl)
	t.mu.Unlock()
	defer c.mu.Unlock()
	if cl.plan.PullUp {
		t.ctr[ctrPullUps].Add(1)
		t.ctr[ctrPullUpBytes].Add(uint64(sendBodyLen(&cl.plan)))
	}
	wrs := c.wrs
	nw := 0
	for _, g := range cl.regs {
		if wr, ok := g.BindWR(); ok {
			wrs[nw] = wr
			nw++
		}
	}
	cl.binds = nw
	c.sendSGEs[sb] = verbs.SGE{MR: c.sendMR, Offset: uint64(sb * c.sendSize), Length: uint32(len(msg))}
	wrs[nw] = verbs.SendWR{Opcode: verbs.OpSend, SGL: c.sendSGEs[sb : sb+1 : sb+1]}
	nw++
	res, ok := c.ring.Reserve(nw, false)
	if !ok { // checked above
		c.mu.Unlock()
		t.connLost(c, errors.New("xprt: send queue full after admission"))
		c.mu.Lock()
		return nil
	}
	for i := 0; i < nw; i++ {
		wrs[i].ID = res.First + uint64(i)
		m := c.ring.Slot(wrs[i].ID)
		*m = sendMeta{kind: wrBind}
		if i == nw-1 {
			*m = sendMeta{kind: wrSend, sendBuf: sb, call: cl}
			if res.Signal {
				wrs[i].Flags |= verbs.SendSignaled
				t.ctr[ctrSignaledSends].Add(1)
			}
		}
	}
	c.sendFree = c.sendFree[:len(c.sendFree)-1]
	c.pend = append(c.pend, wrs[:nw]...)
	t.ctr[ctrSends].Add(1)
	if c.posting {
		t.ctr[ctrPostsCombined].Add(1) // the poster sends it with its next batch
		return nil
	}
	c.postPendingLocked()
	return nil
}

// postPendingLocked is the poster (c.mu held, nobody posting): it posts
// pend in batches with c.mu released until pend is empty or c breaks.
// It returns with c.mu held.
func (c *conn) postPendingLocked() {
	t := c.t
	c.posting = true
	for len(c.pend) > 0 && !c.broken {
		batch := c.pend
		c.pend, c.pendFree = c.pendFree[:0], nil
		c.mu.Unlock()
		err := c.postBatch(batch)
		clear(batch) // no gather list or window stays reachable from the spare
		c.mu.Lock()
		c.pendFree = batch[:0]
		if err != nil {
			// Never flow control (rule 1): a failed post means the QP
			// is broken. WRs before the failed one went out, the rest
			// did not, so the windows of the batch's calls are in an
			// unknown state: the teardown destroys them and sends the
			// calls again.
			t.ctr[ctrPostFailures].Add(1)
			c.mu.Unlock()
			t.log.Error("ibv_post_send failed", "err", err)
			t.connLost(c, fmt.Errorf("xprt: ibv_post_send: %w", err))
			c.mu.Lock()
		}
	}
	// Broken: what is left was never posted; the teardown's Flush
	// retires its ring slots and send buffers after the drain.
	c.pend = c.pend[:0]
	c.posting = false
	c.postIdle.Broadcast()
}

// postBatchMax is the most WRs one ibv_post_send of a batch carries (the
// verbs binding posts at most 64 at once); a longer batch goes out in
// several posts, in order.
const postBatchMax = 64

// postBatch posts a batch of chains in order (c.mu released, c.posting
// set: the poster alone touches the QP's send queue but for LOCAL_INV
// chains, which wait for the poster).
func (c *conn) postBatch(batch []verbs.SendWR) error {
	for len(batch) > 0 {
		n := min(len(batch), postBatchMax)
		c.t.ctr[ctrPosts].Add(1)
		if _, err := c.qp.PostSend(batch[:n]); err != nil {
			return err
		}
		batch = batch[n:]
	}
	return nil
}

// postLocalInvalidationsLocked posts the LOCAL_INV chain of a replied call
// with its last WR signaled (c.mu held); the call completes when that
// completion is reaped. The room was reserved at admission (rule 2).
func (c *conn) postLocalInvalidationsLocked(cl *call, inv []verbs.SendWR) error {
	res, ok := c.ring.Reserve(len(inv), true)
	if !ok {
		return errors.New("xprt: no send-queue room for LOCAL_INV despite the reservation")
	}
	for i := range inv {
		inv[i].ID = res.First + uint64(i)
		m := c.ring.Slot(inv[i].ID)
		*m = sendMeta{kind: wrLocalInv}
		if i == len(inv)-1 {
			*m = sendMeta{kind: wrLocalInv, last: true, call: cl}
			inv[i].Flags |= verbs.SendSignaled
		}
	}
	cl.localInvs = len(inv)
	if c.posting {
		// Behind the chains the poster has yet to post, in wrid order.
		c.pend = append(c.pend, inv...)
		c.t.ctr[ctrPostsCombined].Add(1)
		return nil
	}
	c.t.ctr[ctrPosts].Add(1)
	_, err := c.qp.PostSend(inv)
	return err
}

// retireLocked handles one retired send WR (c.mu held): its send buffer
// returns to the pool and the congestion gate gets its room back. done
// collects calls whose last LOCAL_INV completed.
func (c *conn) retireLocked(m *sendMeta, done *[]*call) {
	switch m.kind {
	case wrSend:
		c.sendFree = append(c.sendFree, m.sendBuf)
		if m.call != nil {
			m.call.sendDone = true
		}
	case wrLocalInv:
		if m.last && m.call != nil && done != nil {
			*done = append(*done, m.call)
		}
	}
	*m = sendMeta{}
	if !c.broken {
		c.gate.Free(1, admitLocked)
	}
}

// sendLoop reaps send completions: they alone free send-queue room
// (rule 1), and a LOCAL_INV chain's completion finishes its call.
func (c *conn) sendLoop() {
	defer c.pollers.Done()
	t := c.t
	wcs := make([]verbs.Completion, 32)
	var done []*call
	for {
		n, err := c.scq.Poll(wcs)
		if err != nil {
			t.connLost(c, err)
			return
		}
		if n == 0 {
			if err := c.scq.Wait(c.pollCtx); err != nil {
				if c.pollCtx.Err() == nil {
					t.connLost(c, err)
				}
				return
			}
			continue
		}
		done = done[:0]
		var lost error
		c.mu.Lock()
		for _, wc := range wcs[:n] {
			if wc.ID == sentinelID {
				close(c.sqDrained)
				continue
			}
			if err := c.completionError(wc); err != nil {
				if lost == nil {
					lost = err
				}
				// Retired with the rest by the drain's Flush.
				continue
			}
			if _, err := c.ring.Complete(wc.ID, func(_ uint64, m *sendMeta) { c.retireLocked(m, &done) }); err != nil {
				t.log.Error("send completion for an unknown wrid", "wrid", wc.ID)
			}
		}
		c.mu.Unlock()
		if lost != nil {
			// Any error completion disconnects once (rule 6); the calls
			// whose LOCAL_INVs did complete are finished by the teardown.
			t.connLost(c, lost)
			continue
		}
		for _, cl := range done {
			t.finishReply(cl)
		}
		if len(done) > 0 {
			runtime.Gosched() // the completed callers first, as in recvLoop
		}
	}
}
