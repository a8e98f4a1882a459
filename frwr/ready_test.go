package frwr_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/frwr"
	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/sim"
)

// prime asks for a size 1+k times (all misses: it must not be stocked
// yet; the first ask only starts its stock, each other one asks for a
// registration) and makes k registrations of it ahead.
func prime(t *testing.T, r *frwr.Registry, n int, dir frwr.Direction, k int) {
	t.Helper()
	for range 1 + k {
		if _, _, ok := r.TakeReady(n, dir); ok {
			t.Fatalf("TakeReady(%d, %v) before it was stocked", n, dir)
		}
	}
	for i := range k {
		if !r.Refill() {
			t.Fatalf("Refill %d for %d made nothing: %+v", i, n, r.Counters())
		}
	}
}

func takeReady(t *testing.T, r *frwr.Registry, n int, dir frwr.Direction) (*frwr.Buffer, *frwr.Registration) {
	t.Helper()
	b, g, ok := r.TakeReady(n, dir)
	if !ok {
		t.Fatalf("TakeReady(%d, %v): none; counters %+v", n, dir, r.Counters())
	}
	return b, g
}

// TestRegisterAhead: a registration made ahead covers exactly its own
// zeroed memory with only its direction's access, is invalid once
// released, and its memory is zeroed again before it is exposed again.
func TestRegisterAhead(t *testing.T) {
	const n = 3000 // not a page multiple: the segment, not the mapping, is exposed
	g := newRig(t, frwr.Config{Mode: frwr.ModeRegister, Ready: 2})
	if _, _, ok := g.r.TakeReady(n, frwr.FromPeer); ok {
		t.Fatal("TakeReady before any Refill")
	}
	if g.r.Refill() {
		t.Fatal("Refill for a size asked for once")
	}
	if _, _, ok := g.r.TakeReady(n, frwr.FromPeer); ok {
		t.Fatal("TakeReady before any Refill")
	}
	g.r.TakeReady(n, frwr.FromPeer) // a third miss: two asked for
	if c := g.r.Counters(); c.ReadyMisses != 3 {
		t.Fatalf("counters %+v", c)
	}
	for i := range 2 {
		if !g.r.Refill() {
			t.Fatalf("Refill %d made nothing: %+v", i, g.r.Counters())
		}
	}
	if g.r.Refill() {
		t.Fatal("Refill beyond Config.Ready")
	}
	if live := g.f.Live(); live.MRs != g.base.MRs+2+2 {
		t.Fatalf("live MRs %d, want the 2 buffers' and 2 made ahead", live.MRs)
	}
	b, wr := takeReady(t, g.r, n, frwr.FromPeer)
	if len(b.Bytes()) != n || b.MR() != nil {
		t.Fatalf("buffer of %d bytes, MR %v", len(b.Bytes()), b.MR())
	}
	if !bytes.Equal(b.Bytes(), make([]byte, n)) {
		t.Fatal("memory made ahead is not zeroed")
	}
	seg := wr.Segment()
	if wr.State() != frwr.StateRegistered || wr.Direction() != frwr.FromPeer || seg.Length != n {
		t.Fatalf("registration %v %v %+v", wr.State(), wr.Direction(), seg)
	}
	g.call(wr)
	fill(g.srv.Bytes()[:n], 9)
	if st := g.serverRDMA(verbs.OpRDMAWrite, seg.Offset, seg.Handle, n); st != verbs.StatusSuccess ||
		!bytes.Equal(b.Bytes(), g.srv.Bytes()[:n]) {
		t.Fatalf("RDMA WRITE into it: %v", st)
	}
	g.reply(false, 0)
	if err := g.r.Release([]*frwr.Registration{wr}); err != nil {
		t.Fatal(err)
	}
	before := snapshot(b.Bytes())
	if st := g.serverQP().RogueWrite(seg.Offset, seg.Handle, []byte("late")); st != verbs.StatusRemAccessErr {
		t.Fatalf("write with a released rkey: %v", st)
	}
	if !bytes.Equal(before, b.Bytes()) {
		t.Fatal("memory changed")
	}
	g.r.PutBuffer(b)
	c := g.r.Counters()
	if c.ReadyMade != 2 || c.ReadyTaken != 1 || c.ReadyStocked != 1 || c.Registrations != 2 || c.Deregistrations != 1 {
		t.Fatalf("counters %+v", c)
	}

	// The memory goes round again: zeroed before it is registered.
	g.connect()
	b2, wr2 := takeReady(t, g.r, n, frwr.FromPeer) // the other one made ahead
	if !g.r.Refill() {
		t.Fatal("no Refill after a take")
	}
	b3, wr3 := takeReady(t, g.r, n, frwr.FromPeer)
	if &b3.Bytes()[0] != &b.Bytes()[0] || !bytes.Equal(b3.Bytes(), make([]byte, n)) {
		t.Fatal("the memory put back was not reused zeroed")
	}
	if wr3.Segment().Handle == seg.Handle {
		t.Fatal("the same rkey again")
	}
	if err := g.r.Release([]*frwr.Registration{wr2, wr3}); err != nil {
		t.Fatal(err)
	}
	g.r.PutBuffer(b2)
	g.r.PutBuffer(b3)
}

// TestRegisterAheadAccess: a ToPeer registration made ahead grants remote
// reads of exactly its bytes and nothing else; a FromPeer one, remote
// writes only.
func TestRegisterAheadAccess(t *testing.T) {
	const n = 1024
	for _, c := range []struct {
		name string
		dir  frwr.Direction
		try  func(g *rig, s uint64, k uint32) verbs.Status
	}{
		{"ToPeerNoWrite", frwr.ToPeer, func(g *rig, s uint64, k uint32) verbs.Status {
			return g.serverQP().RogueWrite(s, k, []byte{1})
		}},
		{"ToPeerNotPast", frwr.ToPeer, func(g *rig, s uint64, k uint32) verbs.Status {
			_, st := g.serverQP().RogueRead(s+n-4, k, 8)
			return st
		}},
		{"FromPeerNoRead", frwr.FromPeer, func(g *rig, s uint64, k uint32) verbs.Status {
			_, st := g.serverQP().RogueRead(s, k, 4)
			return st
		}},
		{"FromPeerNotPast", frwr.FromPeer, func(g *rig, s uint64, k uint32) verbs.Status {
			return g.serverQP().RogueWrite(s+n, k, []byte{1})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newRig(t, frwr.Config{Mode: frwr.ModeRegister, Ready: 1})
			prime(t, g.r, n, c.dir, 1)
			b, reg := takeReady(t, g.r, n, c.dir)
			fill(b.Bytes(), 3)
			g.call(reg)
			s := reg.Segment()
			if c.dir == frwr.ToPeer {
				if st := g.serverRDMA(verbs.OpRDMARead, s.Offset, s.Handle, n); st != verbs.StatusSuccess ||
					!bytes.Equal(g.srv.Bytes()[:n], b.Bytes()) {
					t.Fatalf("RDMA READ of the segment: %v", st)
				}
			}
			before := snapshot(b.Bytes())
			if st := c.try(g, s.Offset, s.Handle); st != verbs.StatusRemAccessErr {
				t.Fatalf("access outside the grant: %v, want REM_ACCESS_ERR", st)
			}
			if !bytes.Equal(before, b.Bytes()) {
				t.Fatal("memory changed")
			}
			if err := g.r.Release([]*frwr.Registration{reg}); err != nil {
				t.Fatal(err)
			}
			g.r.PutBuffer(b)
		})
	}
}

// TestRegisterAheadDropped: what was made ahead and not taken is
// deregistered by Detach and Close (not by ConnectionLost: it was never
// advertised), and gives way to newer sizes; windows mode makes none.
func TestRegisterAheadDropped(t *testing.T) {
	stock := func(g *rig, sizes ...int) {
		t.Helper()
		for _, n := range sizes {
			prime(t, g.r, n, frwr.FromPeer, 1)
		}
	}
	t.Run("ConnectionLost", func(t *testing.T) {
		g := newRig(t, frwr.Config{Mode: frwr.ModeRegister, Ready: 1})
		// Taken ones are deregistered; the rest, never advertised, stay.
		stock(g, 512, 1024)
		b, reg := takeReady(t, g.r, 512, frwr.FromPeer)
		g.call(reg)
		s := reg.Segment()
		g.serverQP().Break()
		g.r.ConnectionLost()
		if live, c := g.f.Live(), g.r.Counters(); live.MRs != g.base.MRs+2+1 || c.ReadyStocked != 1 || reg.State() != frwr.StateDead {
			t.Fatalf("live MRs %d (base %d), state %v, counters %+v", live.MRs, g.base.MRs, reg.State(), c)
		}
		if err := g.r.Release([]*frwr.Registration{reg}); err != nil {
			t.Fatal(err)
		}
		g.r.PutBuffer(b)
		g.connect()
		if st := g.serverQP().RogueWrite(s.Offset, s.Handle, []byte{1}); st != verbs.StatusRemAccessErr {
			t.Fatalf("write with the lost connection's rkey: %v", st)
		}
		g.connect()
		b, reg = takeReady(t, g.r, 1024, frwr.FromPeer)
		g.call(reg)
		if st := g.serverRDMA(verbs.OpRDMAWrite, reg.Segment().Offset, reg.Segment().Handle, 1024); st != verbs.StatusSuccess {
			t.Fatalf("RDMA WRITE into a registration made before the loss: %v", st)
		}
		if err := g.r.Release([]*frwr.Registration{reg}); err != nil {
			t.Fatal(err)
		}
		g.r.PutBuffer(b)
	})
	t.Run("Detach", func(t *testing.T) {
		g := newRig(t, frwr.Config{Mode: frwr.ModeRegister, Ready: 1})
		stock(g, 512)
		if err := g.r.Detach(); err != nil {
			t.Fatalf("Detach with registrations made ahead: %v", err)
		}
		if live := g.f.Live(); live.MRs != g.base.MRs {
			t.Fatalf("live MRs %d after Detach, want %d", live.MRs, g.base.MRs)
		}
		if _, _, ok := g.r.TakeReady(512, frwr.FromPeer); ok || g.r.Refill() {
			t.Fatal("made ahead while detached")
		}
		if err := g.r.Attach(g.pd, g.dev.Attr()); err != nil {
			t.Fatal(err)
		}
		stock(g, 512)
		b, reg := takeReady(t, g.r, 512, frwr.FromPeer)
		if err := g.r.Release([]*frwr.Registration{reg}); err != nil {
			t.Fatal(err)
		}
		g.r.PutBuffer(b)
	})
	t.Run("Close", func(t *testing.T) {
		// The rig checks that no MR is left; one buffer is still out.
		g := newRig(t, frwr.Config{Mode: frwr.ModeRegister, Ready: 2})
		prime(t, g.r, 512, frwr.FromPeer, 2)
		stock(g, 4096)
		takeReady(t, g.r, 512, frwr.FromPeer) // held through Close
		if err := g.r.Close(); err != nil {
			t.Fatal(err)
		}
		if live := g.f.Live(); live.MRs != g.base.MRs {
			t.Fatalf("live MRs %d after Close, want %d", live.MRs, g.base.MRs)
		}
		if _, _, ok := g.r.TakeReady(512, frwr.FromPeer); ok || g.r.Refill() {
			t.Fatal("made ahead after Close")
		}
	})
	t.Run("GiveWay", func(t *testing.T) {
		g := newRig(t, frwr.Config{Mode: frwr.ModeRegister, Ready: 1})
		for i := range frwr.ReadyKeys {
			stock(g, 512+4*i)
		}
		if c := g.r.Counters(); c.ReadyStocked != frwr.ReadyKeys {
			t.Fatalf("counters %+v", c)
		}
		// A new size does not push out sizes in use...
		if _, _, ok := g.r.TakeReady(64, frwr.FromPeer); ok {
			t.Fatal("a new size stocked")
		}
		if c := g.r.Counters(); c.ReadyDropped != 0 {
			t.Fatalf("a size in use gave way: %+v", c)
		}
		// ...but the least recently used one (512) gives way once idle.
		for range frwr.ReadyIdle {
			g.r.TakeReady(64, frwr.FromPeer)
		}
		if !g.r.Refill() {
			t.Fatal("the new size was not stocked")
		}
		if live, c := g.f.Live(), g.r.Counters(); c.ReadyStocked != frwr.ReadyKeys || c.ReadyDropped != 1 || live.MRs != g.base.MRs+2+frwr.ReadyKeys {
			t.Fatalf("live MRs %d, counters %+v", live.MRs, c)
		}
		b, reg := takeReady(t, g.r, 516, frwr.FromPeer)
		if _, _, ok := g.r.TakeReady(512, frwr.FromPeer); ok {
			t.Fatal("the size that gave way is still stocked")
		}
		if err := g.r.Release([]*frwr.Registration{reg}); err != nil {
			t.Fatal(err)
		}
		g.r.PutBuffer(b)
	})
	t.Run("Cap", func(t *testing.T) {
		g := newRig(t, frwr.Config{Mode: frwr.ModeRegister, Ready: 4, ReadyMax: 8192, ReadyBytes: 8192})
		g.r.TakeReady(4096, frwr.FromPeer) // three registrations asked for:
		prime(t, g.r, 4096, frwr.FromPeer, 2)
		if g.r.Refill() {
			t.Fatal("Refill beyond Config.ReadyBytes")
		}
		if _, _, ok := g.r.TakeReady(8193, frwr.FromPeer); ok {
			t.Fatal("TakeReady beyond Config.ReadyMax")
		}
		if c := g.r.Counters(); c.ReadyFailures != 1 || c.ReadyStocked != 2 {
			t.Fatalf("counters %+v", c)
		}
	})
	t.Run("Windows", func(t *testing.T) {
		g := newRig(t, frwr.Config{Mode: frwr.ModeWindows, Windows: 2, Ready: 4})
		if _, _, ok := g.r.TakeReady(512, frwr.FromPeer); ok || g.r.Refill() {
			t.Fatal("made ahead in windows mode")
		}
	})
}

// TestRegisterAheadUnsent: a registration made ahead and given back
// unposted (the call was never sent) is deregistered, not stocked again.
func TestRegisterAheadUnsent(t *testing.T) {
	g := newRig(t, frwr.Config{Mode: frwr.ModeRegister, Ready: 1})
	prime(t, g.r, 512, frwr.ToPeer, 1)
	b, reg := takeReady(t, g.r, 512, frwr.ToPeer)
	s := reg.Segment()
	if !reg.Abort() {
		t.Fatal("Abort refused")
	}
	g.r.PutBuffer(b)
	if _, st := g.serverQP().RogueRead(s.Offset, s.Handle, 4); st != verbs.StatusRemAccessErr {
		t.Fatalf("read with an aborted rkey: %v", st)
	}
	if c := g.r.Counters(); c.ReadyStocked != 0 || c.Deregistrations != 1 {
		t.Fatalf("counters %+v", c)
	}
	if err := g.r.Close(); err != nil && !errors.Is(err, frwr.ErrClosed) {
		t.Fatal(err)
	}
}

// blockingPD holds RegMR calls of segment-sized memory (not the pool's
// buffers) until release is closed, telling entered when one starts.
type blockingPD struct {
	verbs.PD
	max     int
	entered chan struct{}
	release chan struct{}
}

func (p *blockingPD) RegMR(mem []byte, access verbs.Access) (verbs.MR, error) {
	if len(mem) <= p.max {
		p.entered <- struct{}{}
		<-p.release
	}
	return p.PD.RegMR(mem, access)
}

// TestRegisterAheadCloseWaits: Close does not release the registry's
// device resources, nor unmap memory, while a Refill is registering: it
// waits for it, and the registration made meanwhile is not kept.
func TestRegisterAheadCloseWaits(t *testing.T) {
	bpd := &blockingPD{max: 4096, entered: make(chan struct{}, 1), release: make(chan struct{})}
	g := newRigPD(t, frwr.Config{Mode: frwr.ModeRegister, Ready: 1}, func(pd verbs.PD) verbs.PD {
		bpd.PD = pd
		return bpd
	})
	for range 2 {
		g.r.TakeReady(4096, frwr.FromPeer)
	}
	refilled := make(chan bool)
	go func() { refilled <- g.r.Refill() }()
	<-bpd.entered
	closed := make(chan error)
	go func() { closed <- g.r.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a Refill was registering", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(bpd.release)
	if <-refilled {
		t.Fatal("Refill kept a registration made while the registry closed")
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if live := g.f.Live(); live.MRs != g.base.MRs {
		t.Fatalf("live MRs %d after Close, want %d", live.MRs, g.base.MRs)
	}
}

// TestRegisterAheadFollowsDemand: a stocked size is replenished only as it
// is taken (or missed), not by calls of other sizes.
func TestRegisterAheadFollowsDemand(t *testing.T) {
	g := newRig(t, frwr.Config{Mode: frwr.ModeRegister, Ready: 8})
	prime(t, g.r, 512, frwr.FromPeer, 1)
	for range 5 {
		if g.r.Refill() {
			t.Fatalf("Refill of a size nobody took: %+v", g.r.Counters())
		}
	}
	b, reg := takeReady(t, g.r, 512, frwr.FromPeer)
	if !g.r.Refill() || g.r.Refill() {
		t.Fatalf("a take must be replaced once: %+v", g.r.Counters())
	}
	if err := g.r.Release([]*frwr.Registration{reg}); err != nil {
		t.Fatal(err)
	}
	g.r.PutBuffer(b)
	if c := g.r.Counters(); c.ReadyStocked != 1 || c.ReadyMade != 2 {
		t.Fatalf("counters %+v", c)
	}
}

// TestReadyNoRemoteAccessUntilTaken: a registration made ahead grants no
// remote access while it waits — a peer that knows its address and
// guesses its key exactly (its lkey, which becomes its rkey) reaches
// nothing — and gets the one remote right its direction needs only when a
// call takes it to advertise it.
func TestReadyNoRemoteAccessUntilTaken(t *testing.T) {
	for _, dir := range []frwr.Direction{frwr.ToPeer, frwr.FromPeer} {
		t.Run(dir.String(), func(t *testing.T) {
			g := newRig(t, frwr.Config{Mode: frwr.ModeRegister, Ready: 2})
			prime(t, g.r, 4096, dir, 2)
			mrs := frwr.ReadyMRs(g.r)
			if len(mrs) != 2 {
				t.Fatalf("%d made ahead, want 2", len(mrs))
			}
			for _, mr := range mrs {
				if mr.RKey() != 0 || mr.Access()&(verbs.AccessRemoteRead|verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0 {
					t.Fatalf("made ahead with access %v, rkey %#x", mr.Access(), mr.RKey())
				}
				for _, op := range []verbs.Opcode{verbs.OpRDMAWrite, verbs.OpRDMARead} {
					if st := g.serverRDMA(op, mr.Addr(), mr.LKey(), 64); st == verbs.StatusSuccess {
						t.Fatalf("a peer reached a registration made ahead (%v with its key %#x) before any call took it", op, mr.LKey())
					}
					g.connect() // the failed access broke the pair
				}
			}
			b, reg := takeReady(t, g.r, 4096, dir)
			seg := reg.Segment()
			if seg.Handle == 0 {
				t.Fatal("a registration taken has no rkey")
			}
			g.call(reg)
			op, other := verbs.OpRDMARead, verbs.OpRDMAWrite
			if dir == frwr.FromPeer {
				op, other = other, op
			}
			if st := g.serverRDMA(op, seg.Offset, seg.Handle, 64); st != verbs.StatusSuccess {
				t.Fatalf("%v of the taken registration: %v", op, st)
			}
			if st := g.serverRDMA(other, seg.Offset, seg.Handle, 64); st == verbs.StatusSuccess {
				t.Fatalf("%v of a %v registration succeeded", other, dir)
			}
			g.connect()
			if err := g.r.Release([]*frwr.Registration{reg}); err != nil {
				t.Fatal(err)
			}
			g.r.PutBuffer(b)
			if c := g.r.Counters(); c.ReadyGrants != 1 || c.ReadyUnsupported {
				t.Fatalf("counters %+v", c)
			}
		})
	}
}

// TestReadyWithoutRereg: on a device that cannot change an MR's access,
// the registry stops making registrations ahead at the first refusal and
// the call registers at use (TakeReady misses); nothing made ahead is
// left with or without rights.
func TestReadyWithoutRereg(t *testing.T) {
	g := newRig(t, frwr.Config{Mode: frwr.ModeRegister, Ready: 2}, sim.WithoutRereg())
	prime(t, g.r, 4096, frwr.FromPeer, 2)
	if _, _, ok := g.r.TakeReady(4096, frwr.FromPeer); ok {
		t.Fatal("TakeReady handed out a registration it could not grant remote access")
	}
	c := g.r.Counters()
	if !c.ReadyUnsupported || c.ReadyStocked != 0 {
		t.Fatalf("counters %+v", c)
	}
	if g.r.Refill() {
		t.Fatal("Refill after the device refused")
	}
	if live := g.f.Live(); live.MRs != g.base.MRs+2 {
		t.Fatalf("live MRs %d, want only the 2 buffers'", live.MRs)
	}
}
