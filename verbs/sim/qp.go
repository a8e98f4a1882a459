package sim

import (
	"fmt"
	"syscall"
	"time"

	"github.com/nfsrdma/nfsrdma/verbs"
)

// QP is a simulated RC queue pair. Besides verbs.QP it carries the fault
// injection controls (faults.go).
type QP struct {
	f         *Fabric
	ep        *Endpoint
	pd        *PD
	scq, rcq  *CQ
	num       uint32
	caps      verbs.QPCaps
	signalAll bool
	state     verbs.QPState
	closed    bool

	peer     *QP
	rnrRetry int  // from the peer's ConnParam, as the IB CM negotiates it
	readOK   bool // the peer offered responder resources

	sq []*sendWQE // posted, not yet executed
	// undrained: the QP was closed with work requests posted and not
	// flushed, or with completions not yet polled (see ClosedUndrained).
	undrained bool
	rq        []*recvWQE // posted, not yet consumed
	sqUsed    int        // slots held until the retiring completion is polled
	rqUsed    int

	// Successful unsignaled WRs waiting for a completion to retire them.
	unsignaled     int
	unsignaledBufs []bufCheck

	// Send completions generated but not yet in the CQ (held or delayed).
	pendingCQE []heldCQE

	faults faultState
}

type sendWQE struct {
	wr     verbs.SendWR
	seq    uint64
	due    time.Time
	inline []byte // SendInline data, copied at post time
	mwKey  uint32 // BIND_MW: the window's rkey as the consumer knew it at post
}

type recvWQE struct {
	wr verbs.RecvWR
}

type heldCQE struct {
	e   cqe
	seq uint64
	due time.Time
}

var _ verbs.QP = (*QP)(nil)

func (q *QP) Num() uint32        { return q.num }
func (q *QP) Caps() verbs.QPCaps { return q.caps }
func (q *QP) isClosed() bool     { return q.closed }
func (q *QP) name() string       { return fmt.Sprintf("qp %#x", q.num) }

// State returns the QP state.
func (q *QP) State() (verbs.QPState, error) {
	q.f.mu.Lock()
	defer q.f.mu.Unlock()
	if q.closed {
		return 0, verbs.ErrClosed
	}
	return q.state, nil
}

// localMR checks an SGE's MR at post time (the lkey must be one of this
// fabric's).
func (q *QP) localMR(g verbs.SGE) bool {
	m, ok := g.MR.(*MR)
	return ok && m != nil && m.f == q.f
}

// PostSend queues a chain of send WRs. A QP in RESET, INIT or RTR refuses
// them (EINVAL); a QP in the error state accepts and flushes them.
func (q *QP) PostSend(wrs []verbs.SendWR) (int, error) {
	f := q.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if q.closed || f.closed {
		return 0, verbs.ErrClosed
	}
	if q.state < verbs.QPRTS {
		return 0, opErr("ibv_post_send", q.name(), syscall.EINVAL, "the QP is in state %s; connect it first", q.state)
	}
	now := f.nowLocked()
	for i := range wrs {
		wr := &wrs[i]
		if err := q.checkSendWR(wr); err != nil {
			return i, err
		}
		if q.sqUsed >= q.caps.MaxSendWR {
			return i, opErr("ibv_post_send", q.name(), syscall.ENOMEM,
				"send queue full: %d WRs outstanding (a WR's slot is freed when the completion retiring it is polled)", q.sqUsed)
		}
		w := &sendWQE{wr: *wr, seq: f.nextSeqLocked(), due: now.Add(q.faults.sqDelay)}
		w.wr.SGL = append([]verbs.SGE(nil), wr.SGL...)
		if wr.Flags&verbs.SendInline != 0 {
			w.inline = make([]byte, 0, sglLen(wr.SGL))
			for _, g := range wr.SGL {
				m := g.MR.(*MR)
				if g.Offset > uint64(len(m.mem)) || uint64(g.Length) > uint64(len(m.mem))-g.Offset {
					return i, opErr("ibv_post_send", q.name(), syscall.EINVAL, "inline SGE beyond its buffer")
				}
				w.inline = append(w.inline, m.mem[g.Offset:g.Offset+uint64(g.Length)]...)
			}
		}
		if wr.Opcode == verbs.OpBindMW {
			mw := wr.MW.(*MW)
			w.mwKey = mw.rkey
			mw.rkey = wr.BindRKey // the consumer now holds the new key
		}
		q.sqUsed++
		if q.state == verbs.QPError {
			q.completeSendLocked(w, verbs.StatusWRFlushErr, 0)
			continue
		}
		q.sq = append(q.sq, w)
	}
	f.kickLocked()
	return len(wrs), nil
}

func (q *QP) checkSendWR(wr *verbs.SendWR) error {
	bad := func(hint string, args ...any) error {
		return opErr("ibv_post_send", q.name(), syscall.EINVAL, "WR %d (%s): "+hint, append([]any{wr.ID, wr.Opcode}, args...)...)
	}
	switch wr.Opcode {
	case verbs.OpSend, verbs.OpSendWithInv, verbs.OpRDMAWrite, verbs.OpRDMARead, verbs.OpLocalInv:
	case verbs.OpBindMW:
		mw, ok := wr.MW.(*MW)
		if !ok || mw == nil || mw.f != q.f {
			return bad("BIND_MW needs a window of this fabric")
		}
		if wr.BindMR != nil {
			if m, ok := wr.BindMR.(*MR); !ok || m == nil || m.f != q.f {
				return bad("BIND_MW needs an MR of this fabric")
			}
		}
	default:
		return bad("unknown opcode")
	}
	if len(wr.SGL) > q.caps.MaxSendSGE {
		return bad("%d SGEs; the QP takes %d", len(wr.SGL), q.caps.MaxSendSGE)
	}
	for _, g := range wr.SGL {
		if !q.localMR(g) {
			return bad("SGE without an MR of this fabric")
		}
	}
	if wr.Flags&verbs.SendInline != 0 {
		if wr.Opcode != verbs.OpSend && wr.Opcode != verbs.OpSendWithInv && wr.Opcode != verbs.OpRDMAWrite {
			return bad("inline data only for SEND and RDMA WRITE")
		}
		if n := sglLen(wr.SGL); n > uint64(q.caps.MaxInlineData) {
			return bad("%d bytes inline; the QP takes %d", n, q.caps.MaxInlineData)
		}
	}
	return nil
}

// PostRecv queues receive WRs. A QP in the error state accepts and
// flushes them.
func (q *QP) PostRecv(wrs []verbs.RecvWR) (int, error) {
	f := q.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if q.closed || f.closed {
		return 0, verbs.ErrClosed
	}
	if q.state == verbs.QPReset {
		return 0, opErr("ibv_post_recv", q.name(), syscall.EINVAL, "the QP is in state RESET")
	}
	for i := range wrs {
		wr := &wrs[i]
		if len(wr.SGL) > q.caps.MaxRecvSGE {
			return i, opErr("ibv_post_recv", q.name(), syscall.EINVAL, "WR %d: %d SGEs; the QP takes %d", wr.ID, len(wr.SGL), q.caps.MaxRecvSGE)
		}
		for _, g := range wr.SGL {
			if !q.localMR(g) {
				return i, opErr("ibv_post_recv", q.name(), syscall.EINVAL, "WR %d: SGE without an MR of this fabric", wr.ID)
			}
		}
		if q.rqUsed >= q.caps.MaxRecvWR {
			return i, opErr("ibv_post_recv", q.name(), syscall.ENOMEM, "receive queue full: %d WRs outstanding", q.rqUsed)
		}
		r := &recvWQE{wr: *wr}
		r.wr.SGL = append([]verbs.SGE(nil), wr.SGL...)
		q.rqUsed++
		if q.state == verbs.QPError {
			q.pushRecvLocked(cqe{wc: verbs.Completion{ID: r.wr.ID, Status: verbs.StatusWRFlushErr, QPNum: q.num}, qp: q})
			continue
		}
		q.rq = append(q.rq, r)
	}
	f.kickLocked() // a SEND may be waiting for this receive
	return len(wrs), nil
}

// SetError moves the QP to the error state; outstanding WRs flush in order.
func (q *QP) SetError() error {
	q.f.mu.Lock()
	defer q.f.mu.Unlock()
	if q.closed {
		return verbs.ErrClosed
	}
	q.toErrorLocked()
	return nil
}

// toErrorLocked moves the QP to the error state: every WR not yet executed
// completes with WR_FLUSH_ERR in posting order (send completions queue
// behind any held or delayed ones), signaled or not.
func (q *QP) toErrorLocked() {
	if q.closed || q.state == verbs.QPError {
		return
	}
	q.state = verbs.QPError
	sq, rq := q.sq, q.rq
	q.sq, q.rq = nil, nil
	for _, w := range sq {
		q.completeSendLocked(w, verbs.StatusWRFlushErr, 0)
	}
	for _, r := range rq {
		q.pushRecvLocked(cqe{wc: verbs.Completion{ID: r.wr.ID, Status: verbs.StatusWRFlushErr, QPNum: q.num}, qp: q})
	}
	q.f.kickLocked()
}

// completeSendLocked ends a send WR: a successful unsignaled WR only waits
// to be retired; anything else produces a completion that retires it and
// every earlier unsignaled WR. The completion goes to the CQ now or, if
// completions are held or delayed, to the pending list (in order).
func (q *QP) completeSendLocked(w *sendWQE, st verbs.Status, byteLen uint32, checks ...bufCheck) {
	signaled := q.signalAll || w.wr.Flags&verbs.SendSignaled != 0
	if st == verbs.StatusSuccess && !signaled {
		q.unsignaled++
		q.unsignaledBufs = append(q.unsignaledBufs, checks...)
		return
	}
	wc := verbs.Completion{ID: w.wr.ID, Status: st, QPNum: q.num}
	if st == verbs.StatusSuccess {
		wc.Opcode = wcOpcode(w.wr.Opcode)
		wc.ByteLen = byteLen
	} else if st != verbs.StatusWRFlushErr {
		wc.VendorErr = 0x51 // any nonzero value, as devices report
	}
	e := cqe{wc: wc, qp: q, send: true, slots: q.unsignaled + 1, checks: append(q.unsignaledBufs, checks...)}
	q.unsignaled, q.unsignaledBufs = 0, nil
	f := q.f
	now := f.nowLocked()
	if !q.faults.cqeHold && q.faults.cqeDelay == 0 && len(q.pendingCQE) == 0 {
		q.scq.pushLocked(e)
		return
	}
	due := now.Add(q.faults.cqeDelay)
	if n := len(q.pendingCQE); n > 0 && due.Before(q.pendingCQE[n-1].due) {
		due = q.pendingCQE[n-1].due // completions stay in order
	}
	q.pendingCQE = append(q.pendingCQE, heldCQE{e: e, seq: f.nextSeqLocked(), due: due})
	f.kickLocked()
}

func wcOpcode(op verbs.Opcode) verbs.WCOpcode {
	switch op {
	case verbs.OpRDMAWrite:
		return verbs.WCRDMAWrite
	case verbs.OpRDMARead:
		return verbs.WCRDMARead
	case verbs.OpBindMW:
		return verbs.WCBindMW
	case verbs.OpLocalInv:
		return verbs.WCLocalInv
	}
	return verbs.WCSend
}

// dueCQELocked reports the sequence number of a pending completion that can
// move to the CQ now.
func (q *QP) dueCQELocked(now time.Time) (uint64, bool) {
	if q.faults.cqeHold || len(q.pendingCQE) == 0 || q.pendingCQE[0].due.After(now) {
		return 0, false
	}
	return q.pendingCQE[0].seq, true
}

func (q *QP) releaseCQELocked() {
	h := q.pendingCQE[0]
	q.pendingCQE[0] = heldCQE{}
	q.pendingCQE = q.pendingCQE[1:]
	q.scq.pushLocked(h.e)
}

// runnableWRLocked reports the sequence number of the head send WR if it
// can execute now.
func (q *QP) runnableWRLocked(now time.Time) (uint64, bool) {
	if !q.headReadyLocked() || q.sq[0].due.After(now) {
		return 0, false
	}
	return q.sq[0].seq, true
}

// headReadyLocked reports whether the head WR could run, time aside: the
// send queue is not held and a SEND is not waiting (RNR retry forever)
// for a receive.
func (q *QP) headReadyLocked() bool {
	if q.closed || q.state != verbs.QPRTS || q.faults.sqHold || len(q.sq) == 0 {
		return false
	}
	switch q.sq[0].wr.Opcode {
	case verbs.OpSend, verbs.OpSendWithInv:
		p := q.peer
		if q.rnrRetry == 7 && p != nil && !p.closed && p.state == verbs.QPRTS && len(p.rq) == 0 && q.faults.failSendAt != q.faults.sendCount+1 {
			return false
		}
	}
	return true
}

// pendingDueLocked lists when this QP's pending items become runnable.
func (q *QP) pendingDueLocked() []time.Time {
	var ts []time.Time
	if !q.faults.cqeHold && len(q.pendingCQE) > 0 {
		ts = append(ts, q.pendingCQE[0].due)
	}
	if q.headReadyLocked() {
		ts = append(ts, q.sq[0].due)
	}
	return ts
}

// Close destroys the QP. Windows still bound on it are invalidated and
// counted in Anomalies.QPClosedWithBoundWindows (close windows first). Its
// completions still in the CQs are removed, as ibv_destroy_qp cleans them.
func (q *QP) Close() error {
	q.f.mu.Lock()
	defer q.f.mu.Unlock()
	return q.closeLocked(false)
}

func (q *QP) closeLocked(bool) error {
	if q.closed {
		return nil
	}
	f := q.f
	for _, o := range f.keys {
		if w, ok := o.(*MW); ok && w.valid && w.qp == q {
			f.anomalies.QPClosedWithBoundWindows++
			w.unbindLocked()
		}
	}
	q.closed = true
	q.undrained = len(q.sq) > 0 || len(q.rq) > 0 || len(q.pendingCQE) > 0
	q.state = verbs.QPReset
	q.sq, q.rq, q.pendingCQE, q.unsignaledBufs = nil, nil, nil, nil
	for _, c := range []*CQ{q.scq, q.rcq} {
		kept := c.q[:0]
		for _, e := range c.q {
			if e.qp != q {
				kept = append(kept, e)
			} else {
				q.undrained = true
			}
		}
		clear(c.q[len(kept):])
		c.q = kept
		c.refs--
	}
	for i, o := range f.qps {
		if o == q {
			f.qps = append(f.qps[:i], f.qps[i+1:]...)
			break
		}
	}
	q.pd.children--
	f.live.QPs--
	return nil
}

// SendQueueUsed returns the send-queue slots in use: WRs posted and not yet
// retired by a polled completion.
func (q *QP) SendQueueUsed() int {
	q.f.mu.Lock()
	defer q.f.mu.Unlock()
	return q.sqUsed
}

// RecvQueueUsed returns the receive-queue slots in use.
func (q *QP) RecvQueueUsed() int {
	q.f.mu.Lock()
	defer q.f.mu.Unlock()
	return q.rqUsed
}

// Peer returns the QP this one is connected to, or nil.
func (q *QP) Peer() *QP {
	q.f.mu.Lock()
	defer q.f.mu.Unlock()
	return q.peer
}

func sglLen(sgl []verbs.SGE) uint64 {
	var n uint64
	for _, g := range sgl {
		n += uint64(g.Length)
	}
	return n
}

// ClosedUndrained reports whether the QP was closed while work requests
// were still posted (not executed or flushed) or their completions not yet
// polled: closed without the drain that proves the device is done with
// every buffer (move to error, flush, reap the sentinels' completions).
func (q *QP) ClosedUndrained() bool {
	q.f.mu.Lock()
	defer q.f.mu.Unlock()
	return q.closed && q.undrained
}
