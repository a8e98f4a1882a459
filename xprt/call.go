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
	"github.com/nfsrdma/nfsrdma/verbs"
)

// call is one RPC in flight. Fields below mu-guarded are guarded by
// Transport.mu.
type call struct {
	t    *Transport
	req  *sunrpc.Request
	creq chunks.Request
	plan chunks.Plan

	wakeCh chan struct{} // buffered 1: credit granted, admitted, or connection lost
	doneCh chan struct{}

	// One attempt (one connection).
	conn      *conn
	readBuf   *frwr.Buffer // Read chunk data (the bulk, or the whole message at position zero)
	replyBuf  *frwr.Buffer // Write chunk or Reply chunk landing area
	lent      bool         // replyBuf is the caller's borrowed buffer (zero-copy)
	readLent  bool         // readBuf is the caller's borrowed buffer (zero-copy)
	regs      []*frwr.Registration
	reserved  int // gate room held: binds + SEND + possible LOCAL_INVs
	binds     int // bind WRs in the posted chain
	localInvs int // LOCAL_INVs posted for the reply
	hasCredit bool
	admitted  bool
	posted    bool
	sendDone  bool
	replied   bool
	needRetry bool
	timer     *time.Timer

	// The reply as received.
	hdr     rpcrdma.Header
	inline  []byte
	rdmaErr error

	abandoned bool // the caller gave up after the call was posted

	done     bool
	result   *sunrpc.Reply
	err      error
	attempts int
}

func (cl *call) wake() {
	select {
	case cl.wakeCh <- struct{}{}:
	default:
	}
}

// retry marks the call for another attempt on the next connection.
func (cl *call) retry() {
	cl.t.mu.Lock()
	cl.needRetry = true
	cl.t.mu.Unlock()
	cl.wake()
}

// finish completes the call (mu held).
func (cl *call) finish(r *sunrpc.Reply, err error) {
	if cl.done {
		return
	}
	cl.done = true
	cl.result, cl.err = r, err
	if cl.timer != nil {
		cl.timer.Stop()
	}
	close(cl.doneCh)
}

// releaseAttempt returns the attempt's I/O buffers. Only after its windows
// are invalid (released or destroyed).
func (cl *call) releaseAttempt() {
	reg := cl.t.reg
	if cl.readBuf != nil {
		if !cl.readLent {
			reg.PutBuffer(cl.readBuf)
		}
		cl.readBuf, cl.readLent = nil, false
	}
	if cl.replyBuf != nil {
		if !cl.lent {
			reg.PutBuffer(cl.replyBuf)
		}
		cl.replyBuf, cl.lent = nil, false
	}
	cl.regs = cl.regs[:0]
}

// RoundTrip sends one call and waits for its reply (sunrpc.Transport).
func (t *Transport) RoundTrip(ctx context.Context, req *sunrpc.Request) (*sunrpc.Reply, error) {
	if len(req.Bulk) > t.cfg.MaxIO || len(req.ReplyBulk) > t.cfg.MaxIO {
		return nil, fmt.Errorf("%w: %d/%d bytes, limit %d", ErrTooLarge, len(req.Bulk), len(req.ReplyBulk), t.cfg.MaxIO)
	}
	if req.MaxReply > t.cfg.MaxIO+4096 {
		return nil, fmt.Errorf("%w: a reply of up to %d bytes", ErrTooLarge, req.MaxReply)
	}
	cl := &call{t: t, req: req, wakeCh: make(chan struct{}, 1), doneCh: make(chan struct{})}
	cl.creq = chunks.Request{Head: req.Head, Bulk: req.Bulk, Tail: req.Tail, ReplyBulk: len(req.ReplyBulk), MaxReply: max(req.MaxReply, 32)}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, ErrClosed
	}
	if old, dup := t.calls[req.XID]; dup {
		if !old.abandoned {
			t.mu.Unlock()
			return nil, sunrpc.ErrXIDInUse
		}
		// A retransmission of a call its caller gave up on: the old one
		// keeps its windows until the connection settles it (its timer
		// resets the connection), the new one takes its xid.
		t.orphans[old] = struct{}{}
	}
	t.calls[req.XID] = cl
	t.mu.Unlock()
	t.ctr.calls.Add(1)

	err := cl.run(ctx)
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil && !cl.done {
		// The caller gave up (or the call could not be sent). A call whose
		// windows may still be exposed stays in the table: the reply
		// handler or the connection teardown settles it.
		if !cl.posted {
			if t.calls[req.XID] == cl {
				delete(t.calls, req.XID)
			}
			cl.finish(nil, err)
		} else {
			cl.abandoned = true
		}
		return nil, err
	}
	if t.calls[req.XID] == cl {
		delete(t.calls, req.XID)
	}
	return cl.result, cl.err
}

// run drives the call's attempts until it completes.
func (cl *call) run(ctx context.Context) error {
	t := cl.t
	for {
		c, err := t.waitConn(ctx)
		if err != nil {
			return err
		}
		if cl.attempts > 0 {
			t.ctr.retransmits.Add(1)
		}
		cl.attempts++
		err = cl.attempt(ctx, c)
		if err == errRetry {
			continue
		}
		if err != nil {
			return err
		}
		// Posted: wait for completion or a connection loss.
		select {
		case <-cl.doneCh:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-cl.wakeCh:
		}
		for {
			t.mu.Lock()
			retry, done := cl.needRetry, cl.done
			cl.needRetry = false
			t.mu.Unlock()
			if done {
				return nil
			}
			if retry {
				cl.resetAttempt()
				break
			}
			select {
			case <-cl.doneCh:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			case <-cl.wakeCh:
			}
		}
	}
}

var errRetry = errors.New("xprt: retry on the next connection")

func (cl *call) resetAttempt() {
	t := cl.t
	t.mu.Lock()
	defer t.mu.Unlock()
	cl.conn, cl.hasCredit, cl.admitted, cl.posted, cl.sendDone, cl.replied = nil, false, false, false, false, false
	cl.reserved, cl.binds, cl.localInvs, cl.rdmaErr = 0, 0, 0, nil
	cl.hdr.Reset()
}

// attempt sends the call on c. It returns nil once the chain is posted.
func (cl *call) attempt(ctx context.Context, c *conn) (err error) {
	t := cl.t
	cl.resetAttempt()
	// 1. A credit (RFC 8166 §3.3): never more calls outstanding than granted.
	t.mu.Lock()
	if c.broken {
		t.mu.Unlock()
		return errRetry
	}
	cl.conn = c
	if len(c.creditQ) == 0 && c.credits.TryAcquire() {
		cl.hasCredit = true
	} else {
		c.creditQ = append(c.creditQ, cl)
		t.ctr.creditWaits.Add(1)
	}
	t.mu.Unlock()
	defer func() {
		if err != nil {
			cl.abandonAttempt(c)
		}
	}()
	if err := cl.waitUntil(ctx, c, func() bool { return cl.hasCredit }); err != nil {
		return err
	}
	// 2. Plan and register.
	lim := chunks.Limits{InlineSend: c.inlineSend, InlineRecv: c.inlineRecv, MaxSegmentSize: t.cfg.MaxSegment, MaxSegments: 8}
	if err := cl.plan.Build(&cl.creq, lim); err != nil {
		return err
	}
	if err := cl.register(ctx); err != nil {
		return err
	}
	// 3. Room in the send queue for the whole compound (DESIGN.md rule 2):
	// the binds, the SEND, and the LOCAL_INVs the reply may need.
	n := 2*len(cl.regs) + 1
	t.mu.Lock()
	if c.broken {
		t.mu.Unlock()
		return errRetry
	}
	if c.gate.Admit(cl, n) {
		cl.admitted = true
	} else {
		t.ctr.congestionWaits.Add(1)
	}
	cl.reserved = n
	t.mu.Unlock()
	// The gate's callback (admitLocked) admits us when room allows.
	if err := cl.waitUntil(ctx, c, func() bool { return cl.admitted }); err != nil {
		return err
	}
	// 4. Marshal and post BIND…BIND,SEND in one chain.
	return cl.post(c)
}

// waitUntil sleeps until granted (read under Transport.mu) holds, woken by
// whoever changes it; it returns errRetry when c breaks meanwhile.
func (cl *call) waitUntil(ctx context.Context, c *conn, granted func() bool) error {
	t := cl.t
	for {
		t.mu.Lock()
		ok, broken := granted(), c.broken
		t.mu.Unlock()
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

// admitLocked is the congestion gate's callback: room was found for a
// waiting call's compound.
func admitLocked(cl *call, _ int) {
	cl.admitted = true
	cl.wake()
}

// abandonAttempt undoes an attempt that was not posted.
func (cl *call) abandonAttempt(c *conn) {
	t := cl.t
	t.mu.Lock()
	if !c.broken {
		for i, w := range c.creditQ {
			if w == cl {
				c.creditQ = append(c.creditQ[:i], c.creditQ[i+1:]...)
				break
			}
		}
		if cl.hasCredit {
			c.credits.Release()
			t.grantCreditsLocked(c)
		}
		if cl.admitted {
			c.gate.Free(cl.reserved, admitLocked)
		} else if cl.reserved > 0 {
			c.gate.Cancel(cl, admitLocked)
		}
	}
	cl.hasCredit, cl.admitted, cl.reserved = false, false, 0
	t.mu.Unlock()
	for _, g := range cl.regs {
		g.Abort()
	}
	cl.releaseAttempt()
}

// grantCreditsLocked hands free credits to waiting calls in FIFO order.
func (t *Transport) grantCreditsLocked(c *conn) {
	for len(c.creditQ) > 0 && c.credits.TryAcquire() {
		w := c.creditQ[0]
		c.creditQ = c.creditQ[1:]
		w.hasCredit = true
		w.wake()
	}
	if out := uint64(c.credits.Outstanding()); out > t.ctr.maxOut.Load() {
		t.ctr.maxOut.Store(out)
	}
}

// register copies the bulk into a registered I/O buffer (unless it is in a
// buffer the caller borrowed) and binds a window for every chunk segment,
// with only the access its direction needs.
func (cl *call) register(ctx context.Context) error {
	t, p, req := cl.t, &cl.plan, cl.req
	reg := t.reg
	if len(p.ReadSegments) > 0 && p.Call != chunks.CallPositionZero {
		// Zero-copy: WRITE data the caller placed in a borrowed
		// registered buffer is read by the server from there.
		if b := t.lentBuffer(req.Bulk); b != nil && len(req.Bulk) <= len(b.Bytes()) {
			cl.readBuf, cl.readLent = b, true
			t.ctr.zeroCopyWrites.Add(1)
		}
	}
	if len(p.ReadSegments) > 0 {
		var mem []byte
		if cl.readBuf == nil {
			b, err := reg.GetBuffer(ctx)
			if err != nil {
				return err
			}
			cl.readBuf = b
			mem = b.Bytes()
		}
		b := cl.readBuf
		if p.Call == chunks.CallPositionZero {
			// The whole message, contiguous: Head, Bulk, pad, Tail.
			n := copy(mem, req.Head)
			n += copy(mem[n:], req.Bulk)
			for range (4 - len(req.Bulk)%4) % 4 {
				mem[n] = 0
				n++
			}
			n += copy(mem[n:], req.Tail)
			g, err := reg.Register(ctx, b, 0, n, frwr.ToPeer)
			if err != nil {
				return err
			}
			cl.regs = append(cl.regs, g)
			t.ctr.pos0.Add(1)
		} else {
			n := len(req.Bulk)
			if !cl.readLent {
				n = copy(mem, req.Bulk)
			}
			for _, s := range p.ReadSegments {
				if s.Off+s.Len > n {
					return fmt.Errorf("xprt: read segment %+v beyond the bulk", s)
				}
				g, err := reg.Register(ctx, b, s.Off, s.Len, frwr.ToPeer)
				if err != nil {
					return err
				}
				cl.regs = append(cl.regs, g)
			}
			t.ctr.readChunks.Add(1)
		}
	}
	segs := p.WriteSegments
	if p.Reply == chunks.ReplyInReplyChunk {
		segs = p.ReplySegments
		t.ctr.replyChunks.Add(1)
	} else if len(segs) > 0 {
		t.ctr.writeChunks.Add(1)
	}
	if len(segs) > 0 {
		var b *frwr.Buffer
		if p.Reply == chunks.ReplyWriteChunk {
			// Zero-copy: READ data straight into the caller's borrowed
			// registered buffer.
			if b = t.lentBuffer(req.ReplyBulk); b != nil {
				cl.lent = true
				t.ctr.zeroCopy.Add(1)
			}
		}
		if b == nil {
			var err error
			if b, err = reg.GetBuffer(ctx); err != nil {
				return err
			}
		}
		cl.replyBuf = b
		for _, s := range segs {
			g, err := reg.Register(ctx, b, s.Off, s.Len, frwr.FromPeer)
			if err != nil {
				return err
			}
			cl.regs = append(cl.regs, g)
		}
	}
	return nil
}

// post marshals the transport header and the inline part into a send
// buffer and posts the binds and the SEND as one chain.
func (cl *call) post(c *conn) error {
	t, p := cl.t, &cl.plan
	n := 0
	t.mu.Lock()
	defer t.mu.Unlock()
	if c.broken {
		return errRetry
	}
	wrs := &c.wrs
	if len(c.sendFree) == 0 {
		// Cannot happen: every SEND in the ring holds one buffer and the
		// gate bounds the ring.
		return errors.New("xprt: no send buffer free")
	}
	var h rpcrdma.Header
	h.XID = cl.req.XID
	h.Credits = uint32(t.cfg.Slots)
	h.Proc = rpcrdma.Proc(p.Type)
	ri := 0
	if len(p.ReadSegments) > 0 {
		segs := 1
		if p.Call != chunks.CallPositionZero {
			segs = len(p.ReadSegments)
		}
		for i := 0; i < segs; i++ {
			h.Reads = append(h.Reads, rpcrdma.ReadSegment{Position: uint32(p.Position), Segment: cl.regs[ri].Segment()})
			ri++
		}
	}
	if len(cl.regs) > ri {
		chunk := make(rpcrdma.WriteChunk, 0, len(cl.regs)-ri)
		for _, g := range cl.regs[ri:] {
			chunk = append(chunk, g.Segment())
		}
		if p.Reply == chunks.ReplyInReplyChunk {
			h.Reply, h.HasReply = chunk, true
		} else {
			h.Writes = append(h.Writes, chunk)
		}
	}
	sb := c.sendFree[len(c.sendFree)-1]
	buf := c.sendMem.Bytes()[sb*c.sendSize : (sb+1)*c.sendSize]
	msg, err := h.Append(buf[:0])
	if err != nil {
		return err
	}
	before := len(msg)
	msg = p.AppendSend(msg, &cl.creq)
	if len(msg) > c.inlineSend || len(msg) > c.sendSize || &msg[0] != &buf[0] {
		return fmt.Errorf("xprt: send of %d bytes exceeds the inline size %d", len(msg), c.inlineSend)
	}
	if len(p.Send) > 1 {
		t.ctr.pullUps.Add(1)
		t.ctr.pullUpBytes.Add(uint64(len(msg) - before))
	}
	for _, g := range cl.regs {
		wr, ok := g.BindWR()
		if ok {
			wrs[n] = wr
			n++
		}
	}
	cl.binds = n
	c.sendSGE[0] = verbs.SGE{MR: c.sendMR, Offset: uint64(sb * c.sendSize), Length: uint32(len(msg))}
	wrs[n] = verbs.SendWR{Opcode: verbs.OpSend, SGL: c.sendSGE[:]}
	n++
	res, ok := c.ring.Reserve(n, false)
	if !ok {
		return errors.New("xprt: send queue full after admission")
	}
	for i := 0; i < n; i++ {
		wrs[i].ID = res.First + uint64(i)
		m := c.ring.Slot(wrs[i].ID)
		m.kind = wrBind
		if i == n-1 {
			m.kind, m.sendBuf, m.call = wrSend, sb, cl
			if res.Signal {
				wrs[i].Flags |= verbs.SendSignaled
				t.ctr.signaled.Add(1)
			}
		}
	}
	c.sendFree = c.sendFree[:len(c.sendFree)-1]
	cl.posted = true
	posted, err := c.qp.PostSend(wrs[:n])
	if err != nil {
		// Never flow control (DESIGN.md rule 1): a failed post means the
		// QP is broken. WRs before posted went out, the rest did not, so
		// the call's windows are in an unknown state: the teardown
		// destroys them and sends the call again.
		t.log.Error("ibv_post_send failed", "err", err, "posted", posted)
		go t.connLost(c, err)
	}
	t.ctr.sends.Add(1)
	if cl.timer == nil {
		cl.timer = time.AfterFunc(t.cfg.Timeout, func() { t.callTimeout(cl) })
	} else {
		cl.timer.Reset(t.cfg.Timeout)
	}
	return nil
}

// callTimeout resets the connection of a call that got no reply in time;
// the call is retransmitted on the next connection.
func (t *Transport) callTimeout(cl *call) {
	t.mu.Lock()
	c := cl.conn
	stale := cl.done || c == nil || c.broken || cl.replied
	t.mu.Unlock()
	if stale {
		return
	}
	t.ctr.timeouts.Add(1)
	t.connLost(c, fmt.Errorf("xprt: no reply to xid %#08x within %s", cl.req.XID, t.cfg.Timeout))
}
