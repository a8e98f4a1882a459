//go:build integration

package integration

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/ibv"
)

// TestRawNullCallOverRDMA proves cgo, rdma_cm and the guest plumbing end to
// end: an RPC-over-RDMA v1 NFS NULL call to knfsd built by hand on the raw
// verbs binding (the transport tests do the same through xprt).
func TestRawNullCallOverRDMA(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fab, err := ibv.Open()
	if err != nil {
		t.Fatal(err)
	}
	ep, err := fab.Resolve(ctx, nfsRDMA)
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	dev := ep.Device()
	t.Logf("device %s driver %s, caps %#x, max_mw %d", dev.Name(), dev.Attr().Driver, dev.Attr().Caps, dev.Attr().MaxMW)
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Close()
	scq, err := dev.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	defer scq.Close()
	rcq, err := dev.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	defer rcq.Close()
	qp, err := ep.CreateQP(pd, verbs.QPConfig{SendCQ: scq, RecvCQ: rcq, MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Close()
	mem, err := verbs.Map(8192)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	mr, err := pd.RegMR(mem.Bytes(), verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Close()
	if _, err := qp.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{{MR: mr, Offset: 4096, Length: 4096}}}}); err != nil {
		t.Fatal(err)
	}
	// RFC 8797 private data: magic, version 1, Send With Invalidate OK, 4096/4096.
	priv := []byte{0xf6, 0xab, 0x0e, 0x18, 1, 1, 3, 3}
	peer, err := ep.Connect(ctx, verbs.ConnParam{PrivateData: priv, ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("server private data % x", peer)
	if len(peer) >= 4 && binary.BigEndian.Uint32(peer) != 0xf6ab0e18 {
		t.Errorf("server private data lacks the RFC 8797 magic: % x", peer)
	}
	const xid = 0x1234abcd
	msg := mem.Bytes()[:0]
	for _, w := range []uint32{xid, 1, 32, 0, 0, 0, 0, // RPC-over-RDMA: xid, vers, credits, RDMA_MSG, no chunks
		xid, 0, 2, 100003, 3, 0, 0, 0, 0, 0} { // RPC CALL NFSv3 NULL, AUTH_NONE
		msg = binary.BigEndian.AppendUint32(msg, w)
	}
	if _, err := qp.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.OpSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{MR: mr, Offset: 0, Length: uint32(len(msg))}}}}); err != nil {
		t.Fatal(err)
	}
	wcs := make([]verbs.Completion, 4)
	var recv *verbs.Completion
	sent := false
	for recv == nil || !sent {
		n, err := scq.Poll(wcs)
		if err != nil {
			t.Fatal(err)
		}
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.StatusSuccess {
				t.Fatalf("send completion %+v", wc)
			}
			sent = true
		}
		n, err = rcq.Poll(wcs)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			wc := wcs[0]
			recv = &wc
			continue
		}
		if !sent {
			if err := scq.Wait(ctx); err != nil {
				t.Fatal("waiting for the send completion: ", err)
			}
		} else if err := rcq.Wait(ctx); err != nil {
			t.Fatal("waiting for the reply: ", err)
		}
	}
	if recv.Status != verbs.StatusSuccess || recv.Opcode != verbs.WCRecv {
		t.Fatalf("receive completion %+v", *recv)
	}
	reply := mem.Bytes()[4096 : 4096+recv.ByteLen]
	if len(reply) < 7*4+6*4 {
		t.Fatalf("short reply (%d bytes): % x", len(reply), reply)
	}
	word := func(i int) uint32 { return binary.BigEndian.Uint32(reply[4*i:]) }
	if word(0) != xid || word(1) != 1 || word(3) != 0 {
		t.Fatalf("transport header: xid %#x vers %d proc %d", word(0), word(1), word(3))
	}
	if word(2) == 0 {
		t.Errorf("server granted 0 credits")
	}
	t.Logf("knfsd granted %d credits", word(2))
	// RPC reply: xid, REPLY, MSG_ACCEPTED, verf AUTH_NONE, SUCCESS.
	if word(7) != xid || word(8) != 1 || word(9) != 0 || word(12) != 0 {
		t.Fatalf("RPC reply % x", reply[28:])
	}
	if err := ep.Disconnect(); err != nil {
		t.Error(err)
	}
	qp.Close()
	mr.Close()
	rcq.Close()
	scq.Close()
	pd.Close()
	ep.Close()
	if live := fab.Live(); !live.Zero() {
		t.Errorf("resources left: %+v", live)
	}
}
