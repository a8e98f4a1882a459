package xprt

import (
	"context"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/rpcrdma"
	"github.com/nfsrdma/nfsrdma/sunrpc"
	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/sim"
)

// nullResponder answers every call inline with an accepted, successful
// RPC reply (enough for NULL) and grants credits.
func nullResponder(t *testing.T, fab *sim.Fabric, addr netip.AddrPort, credits uint32) (stop func()) {
	l, err := fab.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	stop = func() { cancel(); l.Close(); <-done }
	t.Cleanup(stop)
	go func() {
		defer close(done)
		ep, err := l.Accept(ctx)
		if err != nil {
			return
		}
		defer ep.Close()
		dev := ep.Device()
		pd, _ := dev.AllocPD()
		defer pd.Close()
		scq, _ := dev.CreateCQ(64)
		defer scq.Close()
		rcq, _ := dev.CreateCQ(64)
		defer rcq.Close()
		qp, err := ep.CreateQP(pd, verbs.QPConfig{SendCQ: scq, RecvCQ: rcq, MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: 1, MaxRecvSGE: 1})
		if err != nil {
			t.Error(err)
			return
		}
		defer qp.Close()
		m, _ := verbs.Map(64 * 4096)
		defer m.Close()
		mr, _ := pd.RegMR(m.Bytes(), verbs.AccessLocalWrite)
		defer mr.Close()
		for i := 0; i < 16; i++ {
			qp.PostRecv([]verbs.RecvWR{{ID: uint64(i), SGL: []verbs.SGE{{MR: mr, Offset: uint64(i * 4096), Length: 4096}}}})
		}
		pdata := rpcrdma.PrivateData{SendSize: 4096, RecvSize: 4096}
		if err := ep.Accept(ctx, verbs.ConnParam{PrivateData: pdata.Append(nil), ResponderResources: 4, InitiatorDepth: 4, RNRRetryCount: 7}); err != nil {
			return
		}
		wcs := make([]verbs.Completion, 16)
		next := 0
		for ctx.Err() == nil {
			n, err := rcq.Poll(wcs)
			if err != nil {
				return
			}
			sn, _ := scq.Poll(wcs[n:])
			_ = sn
			if n == 0 {
				wctx, c := context.WithTimeout(ctx, 20*time.Millisecond)
				rcq.Wait(wctx)
				c()
				continue
			}
			for _, wc := range wcs[:n] {
				if wc.Status != verbs.StatusSuccess {
					return
				}
				buf := m.Bytes()[wc.ID*4096:]
				xid := binary.BigEndian.Uint32(buf)
				out := m.Bytes()[(16+next%16)*4096:]
				next++
				msg := out[:0]
				for _, w := range []uint32{xid, 1, credits, 0, 0, 0, 0, xid, 1, 0, 0, 0, 0} {
					msg = binary.BigEndian.AppendUint32(msg, w)
				}
				qp.PostSend([]verbs.SendWR{{ID: 1, Opcode: verbs.OpSend, Flags: verbs.SendSignaled,
					SGL: []verbs.SGE{{MR: mr, Offset: uint64((16 + (next-1)%16) * 4096), Length: uint32(len(msg))}}}})
				qp.PostRecv([]verbs.RecvWR{{ID: wc.ID, SGL: []verbs.SGE{{MR: mr, Offset: wc.ID * 4096, Length: 4096}}}})
			}
		}
	}()
	return stop
}

func TestSmokeNull(t *testing.T) {
	fab := sim.NewFabric()
	defer fab.Close()
	addr := netip.MustParseAddrPort("10.0.0.1:20049")
	stop := nullResponder(t, fab, addr, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := Dial(ctx, Config{Fabric: fab, Addr: addr, Slots: 16, IOBuffers: 4, MaxIO: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	rpc, err := sunrpc.NewClient(tr, sunrpc.ClientConfig{Prog: 100003, Vers: 3})
	if err != nil {
		t.Fatal(err)
	}
	if n := tr.Credits(); n != 1 {
		t.Errorf("Credits %d on a new connection, want 1 (RFC 8166 §3.3.3)", n)
	}
	for i := 0; i < 50; i++ {
		res, err := rpc.Call(ctx, 0, &sunrpc.Args{MaxResults: 0})
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		res.Release()
	}
	c := tr.Counters()
	if c.Calls != 50 || c.Credits != 8 {
		t.Errorf("counters: %s", c)
	}
	if n := tr.Credits(); n != 8 {
		t.Errorf("Credits %d after the server granted 8", n)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	stop()
	if live := fab.Live(); !live.Zero() {
		t.Errorf("resources left: %+v", live)
	}
}
