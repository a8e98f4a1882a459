package sim

import (
	"time"

	"github.com/nfsrdma/nfsrdma/verbs"
)

// faultState is a QP's injected faults.
type faultState struct {
	sqHold   bool
	sqDelay  time.Duration
	cqeHold  bool
	cqeDelay time.Duration
	rcqeHold bool  // receive completions wait in heldRecv
	heldRecv []cqe // receive completions withheld, in order

	sendCount      int // send WRs executed
	failSendAt     int // fail the WR whose count this is (0: none)
	failSendStatus verbs.Status
	recvCount      int // receives consumed
	failRecvAt     int
	failRecvStatus verbs.Status

	corrupt int // byte offset to corrupt in the next message sent; -1: none
}

// HoldSendQueue stops executing this QP's send WRs: they stay queued (the
// peer sees nothing) until ReleaseSendQueue.
func (q *QP) HoldSendQueue() {
	q.f.mu.Lock()
	defer q.f.mu.Unlock()
	q.faults.sqHold = true
}

// ReleaseSendQueue lets held send WRs execute.
func (q *QP) ReleaseSendQueue() {
	q.f.mu.Lock()
	defer q.f.mu.Unlock()
	q.faults.sqHold = false
	q.f.kickLocked()
}

// DelaySendQueue makes every send WR posted from now on execute no earlier
// than d after its post (d = 0 ends the delay). Delivery order is kept.
func (q *QP) DelaySendQueue(d time.Duration) {
	q.f.mu.Lock()
	defer q.f.mu.Unlock()
	q.faults.sqDelay = d
}

// HoldSendCompletions withholds this QP's send completions from its CQ:
// WRs execute (the peer receives, memory moves) but their completions wait,
// in order, until ReleaseSendCompletions. With it a test makes a reply
// arrive before the send completion of its request.
func (q *QP) HoldSendCompletions() {
	q.f.mu.Lock()
	defer q.f.mu.Unlock()
	q.faults.cqeHold = true
}

// ReleaseSendCompletions delivers the withheld send completions that are
// due to the CQ at once, in order, and stops withholding.
func (q *QP) ReleaseSendCompletions() {
	f := q.f
	f.mu.Lock()
	defer f.mu.Unlock()
	q.faults.cqeHold = false
	now := f.nowLocked()
	for len(q.pendingCQE) > 0 && !q.pendingCQE[0].due.After(now) {
		q.releaseCQELocked()
	}
	f.kickLocked()
}

// HoldRecvCompletions withholds this QP's receive completions from its CQ:
// messages are received (into the posted buffers, invalidations done) but
// their completions wait, in order, until ReleaseRecvCompletions delivers
// them all at once. With it a test makes several receives reach the
// consumer in one poll (one batch of its reply handler).
func (q *QP) HoldRecvCompletions() {
	q.f.mu.Lock()
	defer q.f.mu.Unlock()
	q.faults.rcqeHold = true
}

// ReleaseRecvCompletions delivers the withheld receive completions to the
// CQ at once, in order, and stops withholding.
func (q *QP) ReleaseRecvCompletions() {
	f := q.f
	f.mu.Lock()
	defer f.mu.Unlock()
	q.faults.rcqeHold = false
	held := q.faults.heldRecv
	q.faults.heldRecv = nil
	for _, e := range held {
		q.rcq.pushLocked(e)
	}
	f.kickLocked()
}

// HeldRecvCompletions returns how many receive completions are withheld.
func (q *QP) HeldRecvCompletions() int {
	q.f.mu.Lock()
	defer q.f.mu.Unlock()
	return len(q.faults.heldRecv)
}

// pushRecvLocked hands a receive completion to the receive CQ, or holds it
// (HoldRecvCompletions).
func (q *QP) pushRecvLocked(e cqe) {
	if q.faults.rcqeHold {
		q.faults.heldRecv = append(q.faults.heldRecv, e)
		return
	}
	q.rcq.pushLocked(e)
}

// HeldSendCompletions returns how many send completions are generated but
// not yet in the CQ.
func (q *QP) HeldSendCompletions() int {
	q.f.mu.Lock()
	defer q.f.mu.Unlock()
	return len(q.pendingCQE)
}

// DelaySendCompletions makes every send completion generated from now on
// reach the CQ d after the WR executed (d = 0 ends the delay).
func (q *QP) DelaySendCompletions(d time.Duration) {
	q.f.mu.Lock()
	defer q.f.mu.Unlock()
	q.faults.cqeDelay = d
}

// FailSend makes the n-th send WR to execute from now on (n = 1: the next)
// complete with status st without any effect. An error status moves the
// QP to the error state, and the peer too for a remote status
// (REM_ACCESS_ERR, REM_INV_REQ_ERR, REM_OP_ERR, RNR_RETRY_EXC_ERR).
func (q *QP) FailSend(n int, st verbs.Status) {
	q.f.mu.Lock()
	defer q.f.mu.Unlock()
	q.faults.failSendAt = q.faults.sendCount + n
	q.faults.failSendStatus = st
	q.f.kickLocked()
}

// FailRecv makes the n-th message to arrive from now on (n = 1: the next)
// complete its receive with status st without writing the buffer; the
// sender's WR fails with REM_OP_ERR and both QPs move to the error state.
func (q *QP) FailRecv(n int, st verbs.Status) {
	q.f.mu.Lock()
	defer q.f.mu.Unlock()
	q.faults.failRecvAt = q.faults.recvCount + n
	q.faults.failRecvStatus = st
}

// CorruptNextSend flips the byte at offset (the last byte if the message is
// shorter) of the next message this QP sends, in flight: the sender's
// buffer is unchanged.
func (q *QP) CorruptNextSend(offset int) {
	q.f.mu.Lock()
	defer q.f.mu.Unlock()
	q.faults.corrupt = max(offset, 0)
}

// Break loses the connection: both QPs move to the error state and both
// endpoints get CMDisconnected.
func (q *QP) Break() {
	q.f.mu.Lock()
	defer q.f.mu.Unlock()
	if q.ep != nil {
		q.ep.disconnectLocked()
		return
	}
	q.toErrorLocked()
	if q.peer != nil {
		q.peer.toErrorLocked()
	}
}

// RogueWrite makes this QP's side write data at remoteAddr with rkey into
// its peer at once, bypassing its send queue (no completion is generated):
// a late or malicious peer using an old rkey. It returns the status the WR
// would have completed with; a failure has the usual effect (REM_ACCESS_ERR
// leaves the memory unchanged and moves both QPs to the error state).
func (q *QP) RogueWrite(remoteAddr uint64, rkey uint32, data []byte) verbs.Status {
	f := q.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if st, ok := q.rogueReadyLocked(); !ok {
		return st
	}
	r := f.rdmaWriteLocked(q, nil, append([]byte{}, data...), remoteAddr, rkey)
	if r.status != verbs.StatusSuccess {
		r.fail(q)
	}
	return r.status
}

// RogueRead reads n bytes at remoteAddr with rkey from the peer at once,
// bypassing the send queue, like RogueWrite.
func (q *QP) RogueRead(remoteAddr uint64, rkey uint32, n int) ([]byte, verbs.Status) {
	f := q.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if st, ok := q.rogueReadyLocked(); !ok {
		return nil, st
	}
	buf := make([]byte, n)
	r := f.rdmaReadLocked(q, nil, &buf, remoteAddr, rkey)
	if r.status != verbs.StatusSuccess {
		r.fail(q)
		return nil, r.status
	}
	return buf, r.status
}

// RogueSend sends data to the peer at once, bypassing the send queue: it
// consumes the peer's next receive, or fails with RNR_RETRY_EXC_ERR (both
// QPs to error) when none is posted. With inv, it is a Send With
// Invalidate of invRKey.
func (q *QP) RogueSend(data []byte, inv bool, invRKey uint32) verbs.Status {
	f := q.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if st, ok := q.rogueReadyLocked(); !ok {
		return st
	}
	r := f.deliverLocked(q, append([]byte{}, data...), inv, invRKey)
	if r.status != verbs.StatusSuccess {
		r.fail(q)
	}
	return r.status
}

func (q *QP) rogueReadyLocked() (verbs.Status, bool) {
	if q.closed || q.state != verbs.QPRTS {
		return verbs.StatusWRFlushErr, false
	}
	return verbs.StatusSuccess, true
}
