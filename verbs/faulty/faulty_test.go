package faulty_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/sunrpc/sunrpctest"
	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/faulty"
	"github.com/nfsrdma/nfsrdma/verbs/sim"
	"github.com/nfsrdma/nfsrdma/xprt"
	"github.com/nfsrdma/nfsrdma/xprt/xprttest"
)

// The decorator on the simulated fabric, under the real client transport:
// a broken QP and a failed post each cost the connection, and the call in
// flight is retransmitted on a new one with its data intact.
func TestFaultsUnderTransport(t *testing.T) {
	h := sunrpctest.NewHandler()
	base := sim.NewFabric(sim.PanicOnDoubleInvalidation())
	defer base.Close()
	srv, err := xprttest.Start(xprttest.Config{Fabric: base, Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	defer h.Close()
	f := faulty.New(base)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := xprt.Dial(ctx, xprt.Config{Fabric: f, Addr: srv.Addr(), MaxIO: 64 << 10, IOBuffers: 8})
	if err != nil {
		t.Fatal(err)
	}
	xid := uint32(1)
	read := func() {
		t.Helper()
		xid++
		rep, err := tr.RoundTrip(ctx, sunrpctest.ReadRequest(xid, sunrpctest.Control{}, xid, 60<<10, make([]byte, 60<<10)))
		if err == nil {
			err = sunrpctest.CheckRead(rep, xid, xid, 60<<10)
			rep.Release()
		}
		if err != nil {
			t.Fatalf("READ %d: %v", xid, err)
		}
	}
	read()
	if f.LiveQPs() != 1 {
		t.Fatalf("%d live QPs through the decorator, want 1", f.LiveQPs())
	}

	// A QP moved to the error state: the transport reconnects.
	if n, err := f.BreakQPs(); n != 1 || err != nil {
		t.Fatalf("BreakQPs: %d, %v", n, err)
	}
	read()
	if c := tr.Counters(); c.Reconnects < 1 {
		t.Errorf("no reconnect after the QP was broken: %s", c)
	}

	// A failed post of the call's SEND: the call goes on a new connection.
	before := tr.Counters()
	fired := f.FailPostSend(faulty.HasOpcode(verbs.OpSend))
	read()
	select {
	case <-fired:
	default:
		t.Fatal("the armed post failure never fired")
	}
	c := tr.Counters()
	if c.PostFailures != before.PostFailures+1 {
		t.Errorf("post failures %d, want %d", c.PostFailures, before.PostFailures+1)
	}
	if c.Reconnects <= before.Reconnects {
		t.Errorf("no reconnect after the failed post: %s", c)
	}
	if s := f.Stats(); s.PostsFailed != 1 || s.QPsBroken != 1 || s.QPs < 3 {
		t.Errorf("stats %+v", s)
	}
	if n := f.Disarm(); n != 0 {
		t.Errorf("%d faults still armed", n)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if n := f.LiveQPs(); n != 0 {
		t.Errorf("%d QPs live after Close", n)
	}
	srv.Close()
	if live := base.Live(); !live.Zero() {
		t.Errorf("resources left: %+v", live)
	}
}

func TestFailPostSendMatchAndDisarm(t *testing.T) {
	f := faulty.New(sim.NewFabric())
	f.FailPostSend(faulty.HasOpcode(verbs.OpRDMAWrite))
	f.FailPostSend(nil)
	if n := f.Disarm(); n != 2 {
		t.Fatalf("Disarm: %d, want 2", n)
	}
	if !faulty.HasOpcode(verbs.OpSend)([]verbs.SendWR{{Opcode: verbs.OpBindMW}, {Opcode: verbs.OpSend}}) {
		t.Error("HasOpcode missed a SEND after a bind")
	}
	if faulty.HasOpcode(verbs.OpLocalInv)([]verbs.SendWR{{Opcode: verbs.OpSend}}) {
		t.Error("HasOpcode matched a chain without LOCAL_INV")
	}
	if !errors.Is(faulty.ErrInjected, faulty.ErrInjected) {
		t.Error("ErrInjected")
	}
}
