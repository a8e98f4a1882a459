package sim

import (
	"fmt"
	"hash/maphash"

	"github.com/nfsrdma/nfsrdma/verbs"
)

// executeLocked runs the head WR of q's send queue: its effect at the
// responder and its completion, in one step. Any error completion moves q
// to the error state after the completion is generated, so the flushes of
// the WRs behind it follow it in order.
func (f *Fabric) executeLocked(q *QP) {
	w := q.sq[0]
	q.sq[0] = nil
	q.sq = q.sq[1:]
	q.faults.sendCount++
	if q.faults.failSendAt != 0 && q.faults.sendCount == q.faults.failSendAt {
		st := q.faults.failSendStatus
		q.faults.failSendAt = 0
		q.completeSendLocked(w, st, 0)
		if st != verbs.StatusSuccess {
			q.toErrorLocked()
			if remoteStatus(st) && q.peer != nil {
				q.peer.toErrorLocked()
			}
		}
		return
	}
	var r result
	switch w.wr.Opcode {
	case verbs.OpSend, verbs.OpSendWithInv:
		r = f.sendLocked(q, w)
	case verbs.OpRDMAWrite:
		r = f.rdmaWriteLocked(q, w.wr.SGL, w.inline, w.wr.RemoteAddr, w.wr.RKey)
	case verbs.OpRDMARead:
		r = f.rdmaReadLocked(q, w.wr.SGL, nil, w.wr.RemoteAddr, w.wr.RKey)
	case verbs.OpBindMW:
		r = f.bindLocked(q, w)
	case verbs.OpLocalInv:
		r = f.localInvLocked(q, w.wr.InvalidateRKey)
	}
	if r.status == verbs.StatusSuccess {
		q.completeSendLocked(w, r.status, r.byteLen, r.checks...)
		return
	}
	q.completeSendLocked(w, r.status, 0)
	r.fail(q)
}

// result is the outcome of an operation at the requester: its status, and
// whether the responder's QP goes to the error state with it.
type result struct {
	status     verbs.Status
	byteLen    uint32
	peerErrors bool
	checks     []bufCheck
}

func ok(n uint64, checks ...bufCheck) result {
	return result{status: verbs.StatusSuccess, byteLen: uint32(n), checks: checks}
}
func local(st verbs.Status) result  { return result{status: st} }
func remote(st verbs.Status) result { return result{status: st, peerErrors: true} }

// fail moves the requester (and the responder if the error was detected
// there) to the error state.
func (r result) fail(q *QP) {
	q.toErrorLocked()
	if r.peerErrors && q.peer != nil {
		q.peer.toErrorLocked()
	}
}

func remoteStatus(st verbs.Status) bool {
	switch st {
	case verbs.StatusRemAccessErr, verbs.StatusRemInvReqErr, verbs.StatusRemOpErr, verbs.StatusRNRRetryExcErr:
		return true
	}
	return false
}

// connectedPeerLocked returns the responder, or nil if there is none that
// answers (never connected, closed, or not able to receive): the requester
// then exhausts its transport retries.
func (q *QP) connectedPeerLocked() *QP {
	p := q.peer
	if p == nil || p.closed || (p.state != verbs.QPRTS && p.state != verbs.QPRTR) {
		return nil
	}
	return p
}

// gatherLocked reads the bytes of a local SGL (LOC_PROT_ERR if an SGE is
// not valid: MR closed, another PD, out of bounds).
func (q *QP) gatherLocked(sgl []verbs.SGE) ([]byte, bool) {
	n := sglLen(sgl)
	buf := make([]byte, 0, n)
	for _, g := range sgl {
		b, ok := q.sgeBytesLocked(g, 0)
		if !ok {
			return nil, false
		}
		buf = append(buf, b...)
	}
	return buf, true
}

// sgeBytesLocked returns the memory of a local SGE, checking the lkey's
// validity, PD, bounds and access.
func (q *QP) sgeBytesLocked(g verbs.SGE, need verbs.Access) ([]byte, bool) {
	m, ok := g.MR.(*MR)
	if !ok || m.closed || m.pd != q.pd || m.access&need != need {
		return nil, false
	}
	if g.Offset > uint64(len(m.mem)) || uint64(g.Length) > uint64(len(m.mem))-g.Offset {
		return nil, false
	}
	return m.mem[g.Offset : g.Offset+uint64(g.Length)], true
}

// scatterLocked writes data over a local SGL that needs LOCAL_WRITE. It
// reports LOC_PROT_ERR for an invalid SGE and LOC_LEN_ERR if data does
// not fit; nothing is written unless all is well.
func (q *QP) scatterLocked(sgl []verbs.SGE, data []byte) verbs.Status {
	var bufs [][]byte
	room := 0
	for _, g := range sgl {
		b, ok := q.sgeBytesLocked(g, verbs.AccessLocalWrite)
		if !ok {
			return verbs.StatusLocProtErr
		}
		bufs = append(bufs, b)
		room += len(b)
	}
	if room < len(data) {
		return verbs.StatusLocLenErr
	}
	for _, b := range bufs {
		data = data[copy(b, data):]
	}
	return verbs.StatusSuccess
}

// sendLocked executes a SEND or SEND_WITH_INV.
func (f *Fabric) sendLocked(q *QP, w *sendWQE) result {
	data, check := w.inline, []bufCheck(nil)
	if data == nil {
		var ok bool
		if data, ok = q.gatherLocked(w.wr.SGL); !ok {
			return local(verbs.StatusLocProtErr)
		}
		check = []bufCheck{f.newBufCheck(w.wr.SGL, data)}
	}
	inv := w.wr.Opcode == verbs.OpSendWithInv
	st := f.deliverLocked(q, data, inv, w.wr.InvalidateRKey)
	if st.status != verbs.StatusSuccess {
		return st
	}
	return ok(uint64(len(data)), check...)
}

// deliverLocked delivers a message from q to its peer's next receive.
func (f *Fabric) deliverLocked(q *QP, data []byte, inv bool, invRKey uint32) result {
	p := q.connectedPeerLocked()
	if p == nil {
		return local(verbs.StatusRetryExcErr)
	}
	if off := q.faults.corrupt; off >= 0 && len(data) > 0 {
		q.faults.corrupt = -1
		data = append([]byte(nil), data...) // the sender's buffer stays intact
		data[min(off, len(data)-1)] ^= 0xff
	}
	if len(p.rq) == 0 {
		// RNR NAK; with a retry count of 7 the WR would have waited.
		return remote(verbs.StatusRNRRetryExcErr)
	}
	r := p.rq[0]
	p.rq[0] = nil
	p.rq = p.rq[1:]
	p.faults.recvCount++
	recvFail := func(recvSt, sendSt verbs.Status) result {
		p.pushRecvLocked(cqe{wc: verbs.Completion{ID: r.wr.ID, Status: recvSt, QPNum: p.num, VendorErr: 0x52}, qp: p})
		return remote(sendSt)
	}
	if p.faults.failRecvAt != 0 && p.faults.recvCount == p.faults.failRecvAt {
		p.faults.failRecvAt = 0
		return recvFail(p.faults.failRecvStatus, verbs.StatusRemOpErr)
	}
	wc := verbs.Completion{ID: r.wr.ID, Status: verbs.StatusSuccess, Opcode: verbs.WCRecv, ByteLen: uint32(len(data)), QPNum: p.num}
	if inv {
		w := f.validWindowLocked(invRKey)
		if w == nil || w.qp != p {
			if w == nil && f.invalidWindowLocked(invRKey) {
				f.doubleInvalidationLocked("SEND_WITH_INV", invRKey)
			}
			return recvFail(verbs.StatusRemInvReqErr, verbs.StatusRemInvReqErr)
		}
		// Check the receive before invalidating: a failed receive
		// leaves the window as it was.
		if st := p.scatterLocked(r.wr.SGL, data); st != verbs.StatusSuccess {
			return recvFail(st, verbs.StatusRemInvReqErr)
		}
		w.unbindLocked()
		wc.Flags |= verbs.WCWithInv
		wc.InvalidatedRKey = invRKey
	} else if st := p.scatterLocked(r.wr.SGL, data); st != verbs.StatusSuccess {
		sendSt := verbs.StatusRemInvReqErr // length error: the responder NAKs an invalid request
		if st == verbs.StatusLocProtErr {
			sendSt = verbs.StatusRemOpErr
		}
		return recvFail(st, sendSt)
	}
	p.pushRecvLocked(cqe{wc: wc, qp: p})
	return ok(uint64(len(data)))
}

// validWindowLocked returns the window whose device rkey is rkey and that
// is valid, or nil.
func (f *Fabric) validWindowLocked(rkey uint32) *MW {
	w, ok := f.keys[rkey>>8].(*MW)
	if !ok || w.closed || !w.valid || w.hwKey != rkey {
		return nil
	}
	return w
}

// invalidWindowLocked reports whether rkey names an open window, with that
// very key, that is not valid: what rxe does not survive being invalidated
// again by a peer. An rkey naming no window (a closed one, or another key
// on its index) is only an error completion there.
func (f *Fabric) invalidWindowLocked(rkey uint32) bool {
	w, ok := f.keys[rkey>>8].(*MW)
	return ok && !w.closed && !w.valid && w.hwKey == rkey
}

func (f *Fabric) doubleInvalidationLocked(verb string, rkey uint32) {
	f.anomalies.DoubleInvalidations++
	if verb == "LOCAL_INV" {
		f.anomalies.DoubleLocalInvalidations++
	}
	if f.cfg.panicOnDoubleI {
		panic(fmt.Sprintf("sim: %s of rkey %#x, which is not a valid window (this panics the rxe kernel driver)", verb, rkey))
	}
}

// remoteMemLocked resolves [addr, addr+n) with rkey at responder p for an
// access needing need: an MR of p's PD whose rkey grants it, or a valid
// window bound to p. Zero-length accesses check nothing (IBTA 9.4.1.1).
func (f *Fabric) remoteMemLocked(p *QP, rkey uint32, addr, n uint64, need verbs.Access) ([]byte, bool) {
	if n == 0 {
		return nil, true
	}
	var m *MR
	switch o := f.keys[rkey>>8].(type) {
	case *MR:
		if o.closed || o.rkey == 0 || o.rkey != rkey || o.pd != p.pd || o.access&need != need {
			return nil, false
		}
		m = o
	case *MW:
		if o.closed || !o.valid || o.hwKey != rkey || o.qp != p || o.access&need != need {
			return nil, false
		}
		if addr < o.addr || n > o.length || addr-o.addr > o.length-n {
			return nil, false // window bounds: the spec (rxe does not check them)
		}
		m = o.mr
	default:
		return nil, false
	}
	if m.closed || !m.contains(addr, n) {
		return nil, false
	}
	off := addr - m.addr
	return m.mem[off : off+n], true
}

// rdmaWriteLocked writes the local SGL (or inline data) to the peer.
func (f *Fabric) rdmaWriteLocked(q *QP, sgl []verbs.SGE, data []byte, raddr uint64, rkey uint32) result {
	var checks []bufCheck
	if data == nil {
		var ok bool
		if data, ok = q.gatherLocked(sgl); !ok {
			return local(verbs.StatusLocProtErr)
		}
		if len(sgl) > 0 {
			checks = []bufCheck{f.newBufCheck(sgl, data)}
		}
	}
	p := q.connectedPeerLocked()
	if p == nil {
		return local(verbs.StatusRetryExcErr)
	}
	dst, good := f.remoteMemLocked(p, rkey, raddr, uint64(len(data)), verbs.AccessRemoteWrite)
	if !good {
		return remote(verbs.StatusRemAccessErr)
	}
	copy(dst, data)
	return ok(uint64(len(data)), checks...)
}

// rdmaReadLocked reads from the peer into the local SGL, or, when sgl is
// nil, into *into (the rogue helper).
func (f *Fabric) rdmaReadLocked(q *QP, sgl []verbs.SGE, into *[]byte, raddr uint64, rkey uint32) result {
	n := sglLen(sgl)
	if into != nil {
		n = uint64(len(*into))
	}
	var bufs [][]byte
	for _, g := range sgl {
		b, ok := q.sgeBytesLocked(g, verbs.AccessLocalWrite)
		if !ok {
			return local(verbs.StatusLocProtErr)
		}
		bufs = append(bufs, b)
	}
	p := q.connectedPeerLocked()
	if p == nil {
		return local(verbs.StatusRetryExcErr)
	}
	if !q.readOK {
		return remote(verbs.StatusRemInvReqErr) // the peer offered no responder resources
	}
	src, good := f.remoteMemLocked(p, rkey, raddr, n, verbs.AccessRemoteRead)
	if !good {
		return remote(verbs.StatusRemAccessErr)
	}
	if into != nil {
		copy(*into, src)
	}
	for _, b := range bufs {
		src = src[copy(b, src):]
	}
	return ok(n)
}

// bindLocked executes BIND_MW (type 2B).
func (f *Fabric) bindLocked(q *QP, w *sendWQE) result {
	wr := &w.wr
	mw := wr.MW.(*MW)
	fail := local(verbs.StatusMWBindErr)
	switch {
	case mw.closed, mw.pd != q.pd:
		return fail
	case w.mwKey != mw.hwKey: // the consumer's key is stale (a failed bind)
		return fail
	case mw.valid: // a type-2 window must be invalid to bind
		return fail
	case wr.BindRKey>>8 != mw.idx, wr.BindRKey&0xff == mw.hwKey&0xff:
		return fail // the index is the device's; the key byte must change
	}
	var m *MR
	if wr.BindMR != nil {
		m = wr.BindMR.(*MR)
	}
	if wr.BindLength > 0 || m != nil {
		switch {
		case m == nil, m.closed, m.pd != q.pd:
			return fail
		case m.access&verbs.AccessMWBind == 0:
			return fail
		case wr.BindAccess&(verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0 && m.access&verbs.AccessLocalWrite == 0:
			return fail
		case !m.contains(wr.BindAddr, wr.BindLength):
			return fail
		}
	}
	mw.hwKey = wr.BindRKey
	if m == nil {
		return ok(0) // a zero-length bind leaves the window invalid
	}
	mw.valid = true
	mw.qp, mw.mr = q, m
	mw.addr, mw.length = wr.BindAddr, wr.BindLength
	mw.access = wr.BindAccess & (verbs.AccessRemoteRead | verbs.AccessRemoteWrite | verbs.AccessRemoteAtomic)
	m.bound++
	return ok(0)
}

// localInvLocked executes LOCAL_INV. An rkey that is not a currently valid
// window is an error completion and a counted double invalidation.
func (f *Fabric) localInvLocked(q *QP, rkey uint32) result {
	w := f.validWindowLocked(rkey)
	if w == nil {
		if _, isMR := f.keys[rkey>>8].(*MR); !isMR {
			f.doubleInvalidationLocked("LOCAL_INV", rkey)
		}
		return local(verbs.StatusLocProtErr)
	}
	if w.qp != q { // a type-2B window is invalidated on the QP it is bound to
		return local(verbs.StatusLocProtErr)
	}
	w.unbindLocked()
	return ok(0)
}

// bufCheck remembers what a SEND or RDMA WRITE read from its source
// buffers, to detect a buffer changed before its completion was polled.
type bufCheck struct {
	sgl []verbs.SGE
	sum uint64
}

func (f *Fabric) newBufCheck(sgl []verbs.SGE, data []byte) bufCheck {
	return bufCheck{sgl: sgl, sum: maphash.Bytes(f.hash, data)}
}

func (b bufCheck) unchanged(f *Fabric) bool {
	var h maphash.Hash
	h.SetSeed(f.hash)
	for _, g := range b.sgl {
		m := g.MR.(*MR)
		if m.closed || g.Offset > uint64(len(m.mem)) || uint64(g.Length) > uint64(len(m.mem))-g.Offset {
			return true // nothing to compare against
		}
		h.Write(m.mem[g.Offset : g.Offset+uint64(g.Length)])
	}
	return h.Sum64() == b.sum
}
