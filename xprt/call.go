package xprt

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nfsrdma/nfsrdma/chunks"
	"github.com/nfsrdma/nfsrdma/frwr"
	"github.com/nfsrdma/nfsrdma/rpcrdma"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// call is one RPC and its attempts (one per connection).
type call struct {
	t    *Transport
	req  *sunrpc.Request
	creq chunks.Request
	plan chunks.Plan

	wakeCh chan struct{} // buffered 1: something the caller waits for changed
	doneCh chan struct{} // closed when the call reaches stDone

	// reg is the registry of the attempt's buffers and windows: the call
	// uses it, not Transport.reg, so that a Close racing the attempt
	// leaves it a closed registry (whose calls fail or do nothing), never
	// a missing one.
	reg *frwr.Registry

	// Guarded by Transport.mu.
	state    callState
	conn     *conn        // the connection of the current attempt
	giveUp   error        // the caller gave up with this error: settle, never retry
	budget   budgetWaiter // buffers and windows held or awaited (budget.go)
	attempts int
	result   *sunrpc.Reply
	err      error

	// Guarded by the attempt's conn.mu.
	hasCredit bool // holds one of conn's credits
	roomHeld  int  // send-queue room reserved at the congestion gate (0: none)
	inGate    bool // waiting in the congestion gate's queue
	inCreditQ bool // waiting in conn's credit queue
	sendDone  bool // the SEND's completion (or a later signaled one) was reaped
	binds     int  // bind WRs posted in the chain
	localInvs int  // LOCAL_INVs posted for the reply

	// The attempt's memory: owned by the caller's goroutine until posted,
	// then by the reply handler or the teardown (see callState).
	readBufs  []*frwr.Buffer // Read chunk data: the bulk, or the message's pieces at position zero
	replyBuf  *frwr.Buffer   // Write chunk or Reply chunk landing area
	readLent  bool           // readBufs[0] is the caller's borrowed buffer
	replyLent bool           // replyBuf is the caller's borrowed buffer
	regs      []*frwr.Registration

	// Backing arrays for the usual call (a registration or two, a reply
	// with one Write chunk of a few segments), so that neither an
	// attempt's registrations nor the reply handler's copy of the Write
	// list nor rebuild's lengths allocate: regs, hdr.Writes and the
	// chunks.Received rebuild passes on start in them.
	regsArr   [2]*frwr.Registration
	hdrWrites [1]rpcrdma.WriteChunk
	hdrSegs   [4]rpcrdma.Segment
	writeList [1][]uint32
	writeLens [4]uint32
	inlineArr [256]byte // inline starts here: a READ's or GETATTR's reply fits

	// The reply timeout (timeouts.go), guarded by Transport.mu: on the
	// transport's queue from the post until the call is done.
	deadline       time.Time
	tqPrev, tqNext *call

	// The reply, copied out of its receive buffer by the reply handler.
	hdr     rpcrdma.Header
	inline  []byte
	rdmaErr error
}

func (cl *call) wake() {
	select {
	case cl.wakeCh <- struct{}{}:
	default:
	}
}

// to moves the call to state s (Transport.mu held). A transition that is
// not drawn in callState's diagram is refused, counted and logged.
func (cl *call) to(s callState) bool {
	t := cl.t
	if !canMove(cl.state, s) {
		t.ctr[ctrRefusedTransitions].Add(1)
		t.log.Error("refused call transition", "err", &TransitionError{XID: cl.req.XID, From: cl.state.String(), To: s.String()})
		return false
	}
	cl.state = s
	if s == stDone {
		t.timeouts.removeLocked(cl)
		close(cl.doneCh)
	} else if s == stQueued {
		cl.wake()
	}
	return true
}

// finishLocked completes the call with r or err (Transport.mu held). A call
// whose caller has gone (abandoned) drops the reply.
func (cl *call) finishLocked(r *sunrpc.Reply, err error) {
	if cl.state == stDone {
		if r != nil {
			r.Release()
		}
		return
	}
	abandoned := cl.state == stAbandoned
	if !cl.to(stDone) {
		return
	}
	if abandoned {
		if r != nil {
			r.Release()
		}
		r, err = nil, errAbandoned
	}
	cl.result, cl.err = r, err
	t := cl.t
	if t.calls[cl.req.XID] == cl && (abandoned || cl.giveUp != nil) {
		delete(t.calls, cl.req.XID)
	}
}

var (
	errRetry     = errors.New("xprt: retry on the next connection")
	errAbandoned = errors.New("xprt: call abandoned by its caller")
)

// RoundTrip sends one call and waits for its reply (sunrpc.Transport).
//
// When ctx ends first, RoundTrip returns ctx's error only once nothing can
// touch the caller's memory any more: a call not yet posted is undone; a
// posted call without windows is left to be settled by its reply or its
// connection's teardown (its reply is then discarded); a posted call with
// windows has its connection torn down, and RoundTrip waits for the drain
// that makes those windows unreachable. A retransmission with the XID of
// an abandoned call goes on a new connection (RFC 8166 §4.5: a requester
// does not retransmit on the connection it sent the call on).
func (t *Transport) RoundTrip(ctx context.Context, req *sunrpc.Request) (*sunrpc.Reply, error) {
	if len(req.Bulk) > t.cfg.MaxIO || len(req.ReplyBulk) > t.cfg.MaxIO {
		return nil, fmt.Errorf("%w: %d/%d bytes, limit %d", ErrTooLarge, len(req.Bulk), len(req.ReplyBulk), t.cfg.MaxIO)
	}
	if req.MaxReply > t.bufSize() {
		return nil, fmt.Errorf("%w: a reply of up to %d bytes", ErrTooLarge, req.MaxReply)
	}
	if err := ctx.Err(); err != nil {
		return nil, err // never send a call whose caller has already gone
	}
	cl := &call{t: t, req: req, wakeCh: make(chan struct{}, 1), doneCh: make(chan struct{})}
	cl.regs = cl.regsArr[:0]
	cl.creq = chunks.Request{Head: req.Head, Bulk: req.Bulk, Tail: req.Tail, ReplyBulk: len(req.ReplyBulk), MaxReply: max(req.MaxReply, 32)}
	if err := t.enter(ctx, cl); err != nil {
		return nil, err
	}
	t.ctr[ctrCalls].Add(1)
	err := cl.run(ctx)
	t.mu.Lock()
	defer t.mu.Unlock()
	switch cl.state {
	case stDone:
		if t.calls[req.XID] == cl {
			delete(t.calls, req.XID)
		}
		if cl.err == errAbandoned {
			return nil, err
		}
		return cl.result, cl.err
	case stAbandoned:
		return nil, err // the reply or the teardown settles it
	case stQueued:
		if t.calls[req.XID] == cl {
			delete(t.calls, req.XID)
		}
		cl.to(stDone)
		return nil, err
	}
	// Cannot happen: run returns only in the states above.
	t.ctr[ctrRefusedTransitions].Add(1)
	t.log.Error("RoundTrip returning in a state that exposes memory", "xid", req.XID, "state", cl.state)
	return nil, fmt.Errorf("xprt: internal error: call %#08x left in state %s", req.XID, cl.state)
}

// enter puts cl in the call table. An abandoned call with the same XID is
// settled first by resetting its connection; a live one is ErrXIDInUse.
func (t *Transport) enter(ctx context.Context, cl *call) error {
	xid := cl.req.XID
	for {
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return ErrClosed
		}
		old, dup := t.calls[xid]
		if !dup {
			t.calls[xid] = cl
			t.mu.Unlock()
			return nil
		}
		if old.state != stAbandoned {
			t.mu.Unlock()
			return sunrpc.ErrXIDInUse
		}
		c := old.conn
		t.mu.Unlock()
		t.ctr[ctrRetransmitResets].Add(1)
		t.connLost(c, fmt.Errorf("xprt: xid %#08x retransmitted: the earlier attempt's connection is reset", xid))
		select {
		case <-old.doneCh:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// run drives the call's attempts until it is done, abandoned, or back in
// the queue after its caller gave up.
func (cl *call) run(ctx context.Context) error {
	t := cl.t
	for {
		c, err := t.waitConn(ctx)
		if err != nil {
			return err
		}
		t.mu.Lock()
		if cl.attempts > 0 {
			t.ctr[ctrRetransmits].Add(1)
		}
		cl.attempts++
		t.mu.Unlock()
		err = cl.attempt(ctx, c)
		if err == errRetry {
			continue
		}
		if err != nil {
			return err
		}
		if err := cl.await(ctx, c); err != errRetry {
			return err
		}
	}
}

// await waits for a posted call: done, sent back to the queue by a
// teardown (errRetry), or given up when ctx ends. While nobody else reaps
// c's receive CQ, the caller reaps it itself (reap.go).
func (cl *call) await(ctx context.Context, c *conn) error {
	t := cl.t
	// While the server works on the call: replace the registration made
	// ahead that the call took, if it took one (register mode).
	cl.reg.Refill()
	cl.reapOwn(ctx, c)
	for {
		select {
		case <-cl.doneCh:
			return nil
		case <-cl.wakeCh:
			t.mu.Lock()
			queued := cl.state == stQueued
			t.mu.Unlock()
			if queued {
				return errRetry
			}
		case <-ctx.Done():
			return cl.abandon(ctx.Err())
		}
	}
}

// abandon is the caller giving up on a posted call. It returns once nothing
// can touch the caller's memory (see callState).
func (cl *call) abandon(why error) error {
	t := cl.t
	t.mu.Lock()
	switch cl.state {
	case stDone:
		t.mu.Unlock()
		return nil
	case stQueued:
		t.mu.Unlock()
		return why
	case stPosted:
		if len(cl.regs) == 0 {
			cl.to(stAbandoned)
			t.mu.Unlock()
			t.ctr[ctrAbandoned].Add(1)
			return why
		}
		// Windows are exposed: only the end of the connection makes
		// them unreachable at once (a LOCAL_INV now would race the
		// server's Send With Invalidate of the same rkey, which the rxe
		// driver does not survive).
		cl.giveUp = why
		c := cl.conn
		t.mu.Unlock()
		t.ctr[ctrAbandonResets].Add(1)
		t.connLost(c, fmt.Errorf("xprt: caller gave up on xid %#08x with windows exposed: %w", cl.req.XID, why))
	default: // replied, invalidating: the reply handler finishes it shortly
		cl.giveUp = why
		t.mu.Unlock()
	}
	<-cl.doneCh // bounded: the LOCAL_INV completion, or the drain's limits
	return why
}

// attempt sends the call on c: a credit, then every buffer and window it
// needs and its send-queue room, all at once, then the post. It returns nil
// once the chain is posted; on any error the attempt is undone (the call
// is back in stQueued) and errRetry means: try the next connection.
func (cl *call) attempt(ctx context.Context, c *conn) (err error) {
	t := cl.t
	t.mu.Lock()
	cl.conn = c
	cl.reg = t.reg
	if cl.reg == nil {
		t.mu.Unlock()
		return ErrClosed
	}
	cl.hdr.Reset()
	cl.rdmaErr = nil
	t.mu.Unlock()
	defer func() {
		if err != nil {
			cl.undo(c)
		}
	}()
	// 1. A credit (RFC 8166 §3.3): never more calls outstanding than
	// granted; waiters are served in FIFO order.
	c.mu.Lock()
	if c.broken {
		c.mu.Unlock()
		return errRetry
	}
	cl.sendDone, cl.binds, cl.localInvs = false, 0, 0
	if len(c.creditQ) == 0 && c.credits.TryAcquire() {
		cl.hasCredit = true
		c.noteOutstandingLocked()
	} else {
		c.creditQ = append(c.creditQ, cl)
		cl.inCreditQ = true
		t.ctr[ctrCreditWaits].Add(1)
	}
	c.mu.Unlock()
	if err := cl.waitConnGrant(ctx, c, func() bool { return cl.hasCredit }); err != nil {
		return err
	}
	t.mu.Lock()
	ok := cl.to(stAdmitted)
	t.mu.Unlock()
	if !ok {
		return errors.New("xprt: internal error: call not admitted")
	}
	// 2. The plan, from the connection's negotiated sizes.
	lim := chunks.Limits{InlineSend: c.inlineSend, InlineRecv: c.inlineRecv, MaxSegmentSize: t.cfg.MaxSegment, MaxSegments: t.segs}
	if err := cl.plan.Build(&cl.creq, lim); err != nil {
		return fmt.Errorf("xprt: %w", err)
	}
	// 3. Buffers and windows, all at once or not at all: a call holding
	// some while waiting for more could wait for itself.
	if err := t.takeBudget(ctx, cl, cl.budgetNeed()); err != nil {
		return err
	}
	if err := cl.register(ctx); err != nil {
		if errors.Is(err, frwr.ErrDetached) && c.isBroken() {
			// The device went away after this call took its credit on
			// c (while it waited for budget): connLost marked c broken
			// before its teardown detached the registry, so the call
			// is caught by the removal like any other, and goes on the
			// connection through the device that comes back.
			return errRetry
		}
		return err
	}
	// 4. Room in the send queue for the whole compound (rule 2): the binds,
	// the SEND, and the LOCAL_INVs the reply may need.
	n := 2*len(cl.regs) + 1
	c.mu.Lock()
	if c.broken {
		c.mu.Unlock()
		return errRetry
	}
	cl.roomHeld = n
	if !c.gate.Admit(cl, n) {
		cl.inGate = true
		t.ctr[ctrCongestionWaits].Add(1)
	}
	c.mu.Unlock()
	if err := cl.waitConnGrant(ctx, c, func() bool { return !cl.inGate }); err != nil {
		return err
	}
	t.mu.Lock()
	ok = cl.to(stRegistered)
	t.mu.Unlock()
	if !ok {
		return errors.New("xprt: internal error: call not registered")
	}
	// 5. Marshal and post BIND…BIND,SEND in one chain, unless the caller
	// gave up meanwhile (nothing is exposed yet: undo is enough).
	if err := ctx.Err(); err != nil {
		return err
	}
	return cl.post(c)
}

// waitConnGrant sleeps until granted (read under c.mu) holds, woken by
// whoever changes it; errRetry when c breaks meanwhile.
func (cl *call) waitConnGrant(ctx context.Context, c *conn, granted func() bool) error {
	for {
		c.mu.Lock()
		ok, broken := granted(), c.broken
		c.mu.Unlock()
		if broken {
			return errRetry
		}
		if ok {
			return nil
		}
		select {
		case <-cl.wakeCh:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// admitLocked is the congestion gate's callback (conn.mu held): room was
// found for a waiting call's compound.
func admitLocked(cl *call, _ int) {
	cl.inGate = false
	cl.wake()
}

// undo gives back everything an attempt that was not posted holds, and
// puts the call back in stQueued.
func (cl *call) undo(c *conn) {
	t := cl.t
	c.mu.Lock()
	if cl.inCreditQ {
		for i, w := range c.creditQ {
			if w == cl {
				c.creditQ = append(c.creditQ[:i], c.creditQ[i+1:]...)
				break
			}
		}
		cl.inCreditQ = false
	}
	if cl.hasCredit {
		cl.hasCredit = false
		if !c.broken {
			c.credits.Release()
			c.grantCreditsLocked()
		}
	}
	if cl.inGate {
		if !c.broken {
			c.gate.Cancel(cl, admitLocked)
		}
		cl.inGate = false
	} else if cl.roomHeld > 0 && !c.broken {
		c.gate.Free(cl.roomHeld, admitLocked)
	}
	cl.roomHeld = 0
	c.mu.Unlock()
	cl.dropRegistrations()
	t.mu.Lock()
	cl.releaseMemoryLocked()
	if cl.state != stQueued {
		cl.to(stQueued)
	}
	t.mu.Unlock()
}

// dropRegistrations gives back registrations whose binds were never
// posted (Abort), and drops those a teardown already destroyed. A
// registration Abort gave back is the registry's at once (another call may
// be handed it): it is not looked at again.
func (cl *call) dropRegistrations() {
	reg := cl.reg
	for i, g := range cl.regs {
		if g == nil {
			continue
		}
		if g.State() == frwr.StateBound && g.Abort() {
			cl.regs[i] = nil
			continue
		}
		if g.State() != frwr.StateFree {
			if err := reg.Release(cl.regs[i : i+1]); err != nil {
				cl.t.log.Error("releasing an unposted registration", "xid", cl.req.XID, "err", err)
			}
		}
		cl.regs[i] = nil
	}
	cl.regs = cl.regs[:0]
}

// releaseMemoryLocked returns the attempt's I/O buffers and its budget
// (Transport.mu held). Only once its windows are invalid or destroyed.
func (cl *call) releaseMemoryLocked() {
	t := cl.t
	if !cl.readLent {
		for _, b := range cl.readBufs {
			cl.reg.PutBuffer(b)
		}
	}
	clear(cl.readBufs)
	cl.readBufs = cl.readBufs[:0]
	if cl.replyBuf != nil && !cl.replyLent {
		cl.reg.PutBuffer(cl.replyBuf)
	}
	cl.readLent, cl.replyBuf, cl.replyLent = false, nil, false
	t.putBudgetLocked(cl)
}

// callTimeout resets the connection of a call that got no reply in time;
// the call is retransmitted on the next connection.
func (t *Transport) callTimeout(cl *call) {
	t.mu.Lock()
	c := cl.conn
	stale := cl.state != stPosted && cl.state != stAbandoned
	t.mu.Unlock()
	if stale || c == nil {
		return
	}
	t.ctr[ctrTimeouts].Add(1)
	t.connLost(c, fmt.Errorf("xprt: no reply to xid %#08x within %s", cl.req.XID, t.cfg.Timeout))
}
