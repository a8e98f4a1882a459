package xprt

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/nfsrdma/nfsrdma/chunks"
	"github.com/nfsrdma/nfsrdma/flowctl"
	"github.com/nfsrdma/nfsrdma/rpcrdma"
	"github.com/nfsrdma/nfsrdma/sunrpc"
	"github.com/nfsrdma/nfsrdma/verbs"
)

// FuzzReplyHandler feeds the reply handler's receive and settle steps
// arbitrary receive completions (bytes, flags, an invalidated rkey) against
// three outstanding calls, and checks what must hold whatever the peer
// sends: no panic; the receive buffer is always given back (rule 7); a
// call completes only with a reply that carries its own XID, and its
// result is exactly the bytes after the transport header; a reply with an
// unknown XID or a foreign invalidated rkey completes nothing, and a Send
// With Invalidate the handler cannot attribute to one of the call's own
// windows resets the connection.
func FuzzReplyHandler(f *testing.F) {
	rpc := []byte{0, 0, 0, 100, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	valid := func(xid uint32, proc rpcrdma.Proc) []byte {
		h := rpcrdma.Header{XID: xid, Credits: 32, Proc: proc}
		b, _ := h.Append(nil)
		return append(b, rpc...)
	}
	f.Add(valid(100, rpcrdma.ProcMsg), uint8(0), uint32(0))
	f.Add(valid(101, rpcrdma.ProcMsg), uint8(1), uint32(0x1234))
	f.Add(valid(999, rpcrdma.ProcMsg), uint8(1), uint32(0x1234))
	f.Add(valid(102, rpcrdma.ProcNoMsg), uint8(0), uint32(0))
	bad := valid(100, rpcrdma.ProcMsg)
	binary.BigEndian.PutUint32(bad[4:], 2)
	f.Add(bad, uint8(0), uint32(0))
	f.Add(valid(100, rpcrdma.ProcMsg)[:10], uint8(0), uint32(0))
	eh := rpcrdma.Header{XID: 101, Credits: 1, Proc: rpcrdma.ProcError, ErrCode: rpcrdma.ErrCodeChunk}
	eb, _ := eh.Append(nil)
	f.Add(eb, uint8(0), uint32(0))

	s := newStack(f, stackOpts{})
	tr := s.tr
	f.Fuzz(func(t *testing.T, data []byte, flags uint8, rkey uint32) {
		const recvSize = 4096
		c := &conn{t: tr, recvSize: recvSize, recvBufs: [][]byte{make([]byte, recvSize)}}
		c.credits = flowctl.NewCredits(64)
		c.recvs = flowctl.NewReceives(16, 8, 8)
		c.gate = flowctl.NewCongestionGate[*call](64)
		c.recvs.Post(1)
		n := copy(c.recvBufs[0], data)
		calls := make(map[uint32]*call)
		tr.mu.Lock()
		for xid := uint32(100); xid < 103; xid++ {
			cl := &call{t: tr, req: &sunrpc.Request{XID: xid}, wakeCh: make(chan struct{}, 1), doneCh: make(chan struct{}),
				state: stPosted, conn: c, hasCredit: true}
			cl.creq = chunks.Request{Head: make([]byte, 4), MaxReply: 1024}
			if err := cl.plan.Build(&cl.creq, chunks.Limits{InlineSend: 4096, InlineRecv: recvSize}); err != nil {
				t.Fatal(err)
			}
			c.credits.TryAcquire()
			calls[xid] = cl
			tr.calls[xid] = cl
		}
		tr.mu.Unlock()
		defer func() {
			tr.mu.Lock()
			for xid, cl := range calls {
				if tr.calls[xid] == cl {
					delete(tr.calls, xid)
				}
			}
			tr.mu.Unlock()
		}()
		wc := verbs.Completion{ID: 0, Status: verbs.StatusSuccess, ByteLen: uint32(n), InvalidatedRKey: rkey}
		if flags&1 != 0 {
			wc.Flags |= verbs.WCWithInv
		}
		var hdr rpcrdma.Header
		r, err := c.receive(wc, &hdr)
		if len(c.recvFree) != 1 {
			t.Fatalf("the receive buffer was not given back: %d free", len(c.recvFree))
		}
		var serr error
		if r.cl != nil {
			serr = c.settle(r)
		}
		var want rpcrdma.Header
		hn, derr := want.Decode(data[:n])
		for xid, cl := range calls {
			tr.mu.Lock()
			st, res, cerr := cl.state, cl.result, cl.err
			tr.mu.Unlock()
			if st != stDone {
				if st != stPosted && st != stReplied {
					t.Fatalf("call %d left in %s", xid, st)
				}
				continue
			}
			if r.cl != cl || want.XID != xid {
				t.Fatalf("call %d completed by a reply to xid %d", xid, want.XID)
			}
			if wc.Flags&verbs.WCWithInv != 0 {
				t.Fatalf("call %d without windows completed by a reply that invalidated rkey %#x", xid, rkey)
			}
			if cerr == nil && derr == nil && want.Proc == rpcrdma.ProcMsg && !bytes.Equal(res.Inline, data[hn:n]) {
				t.Fatalf("call %d: result %x, want %x", xid, res.Inline, data[hn:n])
			}
			if res != nil {
				res.Release()
			}
		}
		if wc.Flags&verbs.WCWithInv != 0 && err == nil && serr == nil {
			t.Fatalf("a Send With Invalidate of rkey %#x matched no window of a call and reset nothing (xid %d)", rkey, want.XID)
		}
		if r.cl == nil && derr == nil && calls[want.XID] != nil {
			t.Fatalf("a well-formed reply to outstanding xid %d was not matched", want.XID)
		}
	})
}
