package frwr_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/nfsrdma/nfsrdma/frwr"
	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/sim"
)

// staleInvalidate is a misbehaving peer: a Send With Invalidate naming
// rkey, which the client no longer exposes. It returns the status of the
// client's receive (the connection is in error afterwards).
func (g *rig) staleInvalidate(rkey uint32) verbs.Status {
	g.t.Helper()
	t := g.t
	if _, err := g.p.Client.QP.PostRecv([]verbs.RecvWR{{ID: 9, SGL: []verbs.SGE{g.cli.SGE(4096-msgLen, msgLen)}}}); err != nil {
		t.Fatal(err)
	}
	post(t, g.p.Server.QP, verbs.SendWR{ID: 10, Opcode: verbs.OpSendWithInv, InvalidateRKey: rkey, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{g.srv.SGE(0, msgLen)}})
	reap(t, g.p.Server.SendCQ, "stale invalidate send")
	return reap(t, g.p.Client.RecvCQ, "stale invalidate receive").Status
}

// remoteInvalidatedCall exposes a Write-chunk segment, lets the server
// write it and invalidate it with its reply, and releases it. It returns
// the segment the peer saw.
func (g *rig) remoteInvalidatedCall(b *frwr.Buffer) verbs.SendWR {
	g.t.Helper()
	reg := register(g.t, g.r, b, 0, 4096, frwr.FromPeer)
	seg := reg.Segment()
	g.call(reg)
	wc := g.reply(true, seg.Handle)
	regs := []*frwr.Registration{reg}
	if !g.r.MatchRemoteInvalidation(regs, wc) {
		g.t.Fatal("remote invalidation not matched")
	}
	g.invalidateAndRelease(regs)
	return verbs.SendWR{RKey: seg.Handle, RemoteAddr: seg.Offset}
}

// TestStaleSendWithInvalidate: a peer that invalidates the rkey of a call
// that has finished hits a window that is invalid — which crashes rxe (the
// simulated fabric counts it as a double invalidation). With
// RetireWindows the window is gone by then and the peer's Send With
// Invalidate is only an error completion.
func TestStaleSendWithInvalidate(t *testing.T) {
	for _, retire := range []bool{false, true} {
		name := "kept"
		if retire {
			name = "retired"
		}
		t.Run(name, func(t *testing.T) {
			g := newRig(t, frwr.Config{Windows: 4, RetireWindows: retire})
			b := getBuffer(t, g.r)
			defer g.r.PutBuffer(b)
			seg := g.remoteInvalidatedCall(b)
			c := g.r.Counters()
			if st := g.staleInvalidate(seg.RKey); st == verbs.StatusSuccess {
				t.Fatalf("a Send With Invalidate of a stale rkey %#x completed successfully", seg.RKey)
			}
			want := 1
			if retire {
				want = 0
				if c.WindowsRetired != 1 || c.FreeWindows != 0 {
					t.Fatalf("after one call: retired %d windows, %d free; want 1 and 0", c.WindowsRetired, c.FreeWindows)
				}
			} else if c.WindowsRetired != 0 {
				t.Fatalf("windows retired without RetireWindows: %d", c.WindowsRetired)
			}
			if d := g.f.DoubleInvalidations(); d != want {
				t.Fatalf("stale Send With Invalidate hit %d invalid windows, want %d", d, want)
			}
			// The rig's cleanup checks for no anomaly: this one was meant.
			g.f.ResetAnomalies()
		})
	}
}

// TestDetachAttach: the registry leaves its device (nothing of it stays
// allocated), keeps the buffers' memory, and works on another PD.
func TestDetachAttach(t *testing.T) {
	for _, mode := range []frwr.Mode{frwr.ModeWindows, frwr.ModeRegister} {
		t.Run(mode.String(), func(t *testing.T) {
			g := newRig(t, frwr.Config{Windows: 4, Mode: mode})
			b := getBuffer(t, g.r)
			fill(b.Bytes(), 3)
			want := snapshot(b.Bytes())
			held := register(t, g.r, b, 0, 4096, frwr.ToPeer)
			if err := g.r.Detach(); !errors.Is(err, frwr.ErrBusy) {
				t.Fatalf("Detach with a registration outstanding: %v, want ErrBusy", err)
			}
			if _, ok := held.BindWR(); ok {
				held.Abort()
			} else {
				g.invalidateAndRelease([]*frwr.Registration{held})
			}
			before := g.f.Live()
			if err := g.r.Detach(); err != nil {
				t.Fatalf("Detach: %v", err)
			}
			after := g.f.Live()
			if after.MRs != before.MRs-2 || after.MWs != 0 {
				t.Fatalf("after Detach %+v (before %+v): want the 2 buffer MRs and every window gone", after, before)
			}
			if b.MR() != nil {
				t.Fatal("a detached buffer still has an MR")
			}
			if _, err := g.r.Register(ctxT(t), b, 0, 4096, frwr.ToPeer); !errors.Is(err, frwr.ErrDetached) {
				t.Fatalf("Register while detached: %v, want ErrDetached", err)
			}
			if !bytes.Equal(b.Bytes(), want) {
				t.Fatal("the buffer's memory changed across Detach")
			}
			b2 := getBuffer(t, g.r) // the pool works without a device
			g.r.PutBuffer(b2)

			pd2, err := g.dev.AllocPD()
			if err != nil {
				t.Fatal(err)
			}
			defer pd2.Close()
			if err := g.r.Attach(pd2, g.dev.Attr()); err != nil {
				t.Fatalf("Attach: %v", err)
			}
			if got := g.f.Live(); got.MRs != before.MRs || (mode == frwr.ModeWindows) != (got.MWs == 4) {
				t.Fatalf("after Attach %+v (before Detach %+v): want the buffer MRs and windows back", got, before)
			}
			if b.MR() == nil || !bytes.Equal(b.Bytes(), want) {
				t.Fatal("after Attach the buffer has no MR or other bytes")
			}
			reg := register(t, g.r, b, 0, 4096, frwr.ToPeer)
			if _, ok := reg.BindWR(); ok {
				reg.Abort()
			} else if err := g.r.Release([]*frwr.Registration{reg}); err != nil {
				t.Fatal(err)
			}
			c := g.r.Counters()
			if c.Detaches != 1 || c.Attaches != 1 {
				t.Fatalf("counters %+v", c)
			}
			g.r.PutBuffer(b)
			// Close before the PD it is attached to.
			if err := g.r.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestModeAutoUnboundedWindows: on a device whose windows reach their
// whole MR (rxe), ModeAuto registers each segment as its own MR, so the
// peer reaches exactly the segment: not the caller's other bytes in the
// buffer, not what an earlier RPC left there.
func TestModeAutoUnboundedWindows(t *testing.T) {
	for _, unbounded := range []bool{false, true} {
		attr := sim.DefaultDeviceAttr("dev")
		attr.WindowsUnbounded = unbounded
		g := newRig(t, frwr.Config{Windows: 4, Attr: attr})
		want := frwr.ModeWindows
		if unbounded {
			want = frwr.ModeRegister
		}
		if m := g.r.Mode(); m != want {
			t.Fatalf("WindowsUnbounded %v: mode %v, want %v", unbounded, m, want)
		}
		// Either way the segment works.
		b := getBuffer(t, g.r)
		fill(b.Bytes(), 5)
		reg := register(t, g.r, b, 4096, 4096, frwr.ToPeer)
		g.call(reg)
		seg := reg.Segment()
		if st := g.serverRDMA(verbs.OpRDMARead, seg.Offset, seg.Handle, 4096); st != verbs.StatusSuccess {
			t.Fatalf("RDMA READ of the segment: %v", st)
		}
		g.invalidateAndRelease([]*frwr.Registration{reg})
		g.r.PutBuffer(b)
	}
}

// TestRetireWindowsNoneSitsFree: with RetireWindows no window exists
// unbound: none is allocated before Register needs it, and each is
// deallocated as soon as it is invalid. A peer guessing rkeys (an index
// and an 8-bit key) finds no allocated, unbound window to invalidate —
// which crashes rxe.
func TestRetireWindowsNoneSitsFree(t *testing.T) {
	g := newRig(t, frwr.Config{Windows: 4, RetireWindows: true})
	mws := func() int { return g.f.Live().MWs - g.base.MWs }
	if n := mws(); n != 0 {
		t.Fatalf("%d windows allocated before any Register", n)
	}
	b := getBuffer(t, g.r)
	defer g.r.PutBuffer(b)
	for range 3 {
		var regs []*frwr.Registration
		for i := range 3 {
			regs = append(regs, register(t, g.r, b, i*4096, 4096, frwr.FromPeer))
		}
		if n := mws(); n != 3 {
			t.Fatalf("%d windows allocated for 3 segments", n)
		}
		g.call(regs...)
		g.invalidateAndRelease(regs)
		if n, c := mws(), g.r.Counters(); n != 0 || c.FreeWindows != 0 {
			t.Fatalf("%d windows left allocated (%d free) after their segments were invalidated", n, c.FreeWindows)
		}
	}
	// A registration given back unposted does not leave its window either.
	reg := register(t, g.r, b, 0, 4096, frwr.ToPeer)
	if !reg.Abort() {
		t.Fatal("Abort refused")
	}
	if n := mws(); n != 0 {
		t.Fatalf("%d windows left allocated after Abort", n)
	}
}

// TestForcedWindowsRefusedOnUnsafeDevice: ModeWindows forced on a device
// whose windows a hostile peer can abuse (unbounded windows, or a stale
// Send With Invalidate that crashes the kernel: rxe) is refused with
// ErrUnsafeWindows, by New and by Attach, unless UnsafeWindows is set;
// ModeAuto picks per-segment registration there.
func TestForcedWindowsRefusedOnUnsafeDevice(t *testing.T) {
	for _, q := range []string{"unbounded", "stale-invalidate-panics"} {
		t.Run(q, func(t *testing.T) {
			attr := sim.DefaultDeviceAttr("rxe-like")
			attr.WindowsUnbounded = q == "unbounded"
			attr.StaleInvalidatePanics = q != "unbounded"
			f := sim.NewFabric(sim.WithDevice(attr))
			defer f.Close()
			dev, err := f.OpenDevice("rxe-like")
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			pd, err := dev.AllocPD()
			if err != nil {
				t.Fatal(err)
			}
			defer pd.Close()
			cfg := frwr.Config{PD: pd, Attr: attr, Mode: frwr.ModeWindows, BufferSize: 4096, Buffers: 1, Windows: 2}
			if r, err := frwr.New(cfg); !errors.Is(err, frwr.ErrUnsafeWindows) {
				if r != nil {
					r.Close()
				}
				t.Fatalf("New with ModeWindows forced: %v, want ErrUnsafeWindows", err)
			}
			cfg.Mode = frwr.ModeAuto
			r, err := frwr.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if r.Mode() != frwr.ModeRegister {
				t.Errorf("ModeAuto picked %v", r.Mode())
			}
			r.Close()
			cfg.Mode, cfg.UnsafeWindows = frwr.ModeWindows, true
			r, err = frwr.New(cfg)
			if err != nil {
				t.Fatalf("New with UnsafeWindows: %v", err)
			}
			defer r.Close()
			// Attach checks the device it moves to.
			safe := r
			cfg.UnsafeWindows = false
			cfg.Attr = sim.DefaultDeviceAttr("safe")
			if safe, err = frwr.New(cfg); err != nil {
				t.Fatal(err)
			}
			defer safe.Close()
			if err := safe.Detach(); err != nil {
				t.Fatal(err)
			}
			if err := safe.Attach(pd, attr); !errors.Is(err, frwr.ErrUnsafeWindows) {
				t.Fatalf("Attach of a windows registry to an unsafe device: %v, want ErrUnsafeWindows", err)
			}
		})
	}
}
