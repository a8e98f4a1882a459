package frwr_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/frwr"
	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/sim"
)

// TestReadChunkLocalInvalidation: a ToPeer window bound before the SEND
// lets the server RDMA-READ the segment; after the local invalidation and
// Release, a READ with the old rkey fails with REM_ACCESS_ERR.
func TestReadChunkLocalInvalidation(t *testing.T) {
	g := newRig(t, frwr.Config{Windows: 4})
	if g.r.Mode() != frwr.ModeWindows || !g.r.RemoteInvalidationOK() {
		t.Fatalf("mode %v, remote invalidation %v: want windows, true", g.r.Mode(), g.r.RemoteInvalidationOK())
	}
	b := getBuffer(t, g.r)
	fill(b.Bytes(), 1)
	const off, n = 100, 1000
	reg := register(t, g.r, b, off, n, frwr.ToPeer)
	seg := reg.Segment()
	if seg.Length != n || seg.Offset != b.MR().Addr()+off {
		t.Fatalf("segment %+v: want length %d at %#x", seg, n, b.MR().Addr()+off)
	}
	wr, ok := reg.BindWR()
	if !ok || wr.BindAccess != verbs.AccessRemoteRead || wr.BindRKey != seg.Handle ||
		wr.BindAddr != seg.Offset || wr.BindLength != n || wr.BindMR != b.MR() || wr.ID != 0 {
		t.Fatalf("bind WR %+v (ok %v)", wr, ok)
	}
	if s := reg.State(); s != frwr.StateBound {
		t.Fatalf("state after Register: %v", s)
	}
	g.call(reg)

	if st := g.serverRDMA(verbs.OpRDMARead, seg.Offset, seg.Handle, n); st != verbs.StatusSuccess {
		t.Fatalf("RDMA READ through the window: %v", st)
	}
	if !bytes.Equal(g.srv.Bytes()[:n], b.Bytes()[off:off+n]) {
		t.Fatal("RDMA READ returned other bytes")
	}

	wc := g.reply(false, 0)
	regs := []*frwr.Registration{reg}
	if g.r.MatchRemoteInvalidation(regs, wc) {
		t.Fatal("a plain SEND matched a remote invalidation")
	}
	g.invalidateAndRelease(regs)
	g.r.Sync(b)
	c := g.r.Counters()
	if c.Binds != 1 || c.LocalInvalidations != 1 || c.RemoteInvalidations != 0 || c.UnmatchedRemoteInvalidations != 0 ||
		c.FreeWindows != 4 || c.Syncs != 1 || c.RefusedTransitions != 0 {
		t.Fatalf("counters %+v", c)
	}

	// A late READ with the old rkey fails at the device.
	before := snapshot(b.Bytes())
	if st := g.serverRDMA(verbs.OpRDMARead, seg.Offset, seg.Handle, n); st != verbs.StatusRemAccessErr {
		t.Fatalf("RDMA READ with the invalidated rkey: %v, want REM_ACCESS_ERR", st)
	}
	if !bytes.Equal(before, b.Bytes()) {
		t.Fatal("memory changed")
	}
	g.r.PutBuffer(b)
}

// TestWriteChunkRemoteInvalidation: the server RDMA-WRITEs a FromPeer
// segment, then invalidates it with Send With Invalidate; the match needs
// no LOCAL_INV, and nothing is invalidated twice.
func TestWriteChunkRemoteInvalidation(t *testing.T) {
	g := newRig(t, frwr.Config{Windows: 4})
	b := getBuffer(t, g.r)
	const off, n = 4096, 8192
	reg := register(t, g.r, b, off, n, frwr.FromPeer)
	seg := reg.Segment()
	if wr, _ := reg.BindWR(); wr.BindAccess != verbs.AccessRemoteWrite {
		t.Fatalf("FromPeer bind access %v, want REMOTE_WRITE only", wr.BindAccess)
	}
	g.call(reg)

	fill(g.srv.Bytes()[:n], 9)
	if st := g.serverRDMA(verbs.OpRDMAWrite, seg.Offset, seg.Handle, n); st != verbs.StatusSuccess {
		t.Fatalf("RDMA WRITE through the window: %v", st)
	}
	wc := g.reply(true, seg.Handle)
	if wc.Flags&verbs.WCWithInv == 0 || wc.InvalidatedRKey != seg.Handle {
		t.Fatalf("reply completion %+v: want WITH_INV of %#x", wc, seg.Handle)
	}
	regs := []*frwr.Registration{reg}
	if !g.r.MatchRemoteInvalidation(regs, wc) {
		t.Fatal("remote invalidation not matched")
	}
	if s := reg.State(); s != frwr.StateInvalidatedRemotely {
		t.Fatalf("state %v, want InvalidatedRemotely", s)
	}
	if wrs := g.r.AppendLocalInvalidations(regs, nil); len(wrs) != 0 {
		t.Fatalf("LOCAL_INV for a remotely invalidated window: %+v", wrs)
	}
	g.invalidateAndRelease(regs)
	g.r.Sync(b)
	if !bytes.Equal(b.Bytes()[off:off+n], g.srv.Bytes()[:n]) {
		t.Fatal("RDMA WRITE data not in the buffer")
	}
	c := g.r.Counters()
	if c.RemoteInvalidations != 1 || c.LocalInvalidations != 0 || c.DoubleInvalidationsPrevented != 0 {
		t.Fatalf("counters %+v", c)
	}
	if d := g.f.DoubleInvalidations(); d != 0 {
		t.Fatalf("sim double invalidations: %d", d)
	}

	// A late WRITE with the old rkey fails and changes nothing.
	before := snapshot(b.Bytes())
	if st := g.serverQP().RogueWrite(seg.Offset, seg.Handle, []byte("late")); st != verbs.StatusRemAccessErr {
		t.Fatalf("late RDMA WRITE: %v, want REM_ACCESS_ERR", st)
	}
	if !bytes.Equal(before, b.Bytes()) {
		t.Fatal("memory changed by a late write")
	}
	g.r.PutBuffer(b)
}

// TestUnmatchedRemoteInvalidation: a Send With Invalidate naming another
// RPC's window is reported and counted, and that window is never
// invalidated locally afterwards.
func TestUnmatchedRemoteInvalidation(t *testing.T) {
	g := newRig(t, frwr.Config{Windows: 4})
	b := getBuffer(t, g.r)
	a := register(t, g.r, b, 0, 512, frwr.FromPeer)
	o := register(t, g.r, b, 1024, 512, frwr.FromPeer)
	g.call(a, o)
	regsA, regsO := []*frwr.Registration{a}, []*frwr.Registration{o}

	// Completions that are no remote invalidation at all.
	if g.r.MatchRemoteInvalidation(regsA, verbs.Completion{Status: verbs.StatusSuccess, Opcode: verbs.WCRecv}) {
		t.Fatal("matched a completion without WITH_INV")
	}
	if g.r.MatchRemoteInvalidation(regsA, verbs.Completion{Status: verbs.StatusWRFlushErr, Flags: verbs.WCWithInv, InvalidatedRKey: a.Segment().Handle}) {
		t.Fatal("matched a flushed completion")
	}
	if c := g.r.Counters(); c.UnmatchedRemoteInvalidations != 0 {
		t.Fatalf("counted %d unmatched", c.UnmatchedRemoteInvalidations)
	}

	wc := g.reply(true, o.Segment().Handle) // A's reply invalidates O's window
	if g.r.MatchRemoteInvalidation(regsA, wc) {
		t.Fatal("matched another RPC's rkey")
	}
	if c := g.r.Counters(); c.UnmatchedRemoteInvalidations != 1 || c.RemoteInvalidations != 0 {
		t.Fatalf("counters %+v", c)
	}
	if s := o.State(); s != frwr.StateInvalidatedRemotely {
		t.Fatalf("the invalidated window is %v, want InvalidatedRemotely", s)
	}
	g.invalidateAndRelease(regsA) // one LOCAL_INV: A's
	if wrs := g.r.AppendLocalInvalidations(regsO, nil); len(wrs) != 0 {
		t.Fatalf("LOCAL_INV of a window the server invalidated: %+v", wrs)
	}
	g.invalidateAndRelease(regsO)
	if c := g.r.Counters(); c.LocalInvalidations != 1 {
		t.Fatalf("LocalInvalidations %d, want 1", c.LocalInvalidations)
	}
	if d := g.f.DoubleInvalidations(); d != 0 {
		t.Fatalf("sim double invalidations: %d", d)
	}
	g.r.PutBuffer(b)
}

// TestAccessScoped: a window grants only its direction's access, and only
// to exactly [off, off+n) (sim enforces window bounds; the buffer's MR
// extends on both sides, so only the window stops these accesses).
func TestAccessScoped(t *testing.T) {
	const off, n = 8192, 4096
	cases := []struct {
		name string
		dir  frwr.Direction
		op   verbs.Opcode
		at   int64 // relative to the segment's first byte
		len  int
		want verbs.Status
	}{
		{"ToPeerReadsAll", frwr.ToPeer, verbs.OpRDMARead, 0, n, verbs.StatusSuccess},
		{"ToPeerRefusesWrite", frwr.ToPeer, verbs.OpRDMAWrite, 0, 16, verbs.StatusRemAccessErr},
		{"ToPeerOneBytePastEnd", frwr.ToPeer, verbs.OpRDMARead, 0, n + 1, verbs.StatusRemAccessErr},
		{"ToPeerLastBytePlusOne", frwr.ToPeer, verbs.OpRDMARead, n, 1, verbs.StatusRemAccessErr},
		{"ToPeerOneByteBefore", frwr.ToPeer, verbs.OpRDMARead, -1, 1, verbs.StatusRemAccessErr},
		{"FromPeerWritesAll", frwr.FromPeer, verbs.OpRDMAWrite, 0, n, verbs.StatusSuccess},
		{"FromPeerRefusesRead", frwr.FromPeer, verbs.OpRDMARead, 0, 16, verbs.StatusRemAccessErr},
		{"FromPeerOneBytePastEnd", frwr.FromPeer, verbs.OpRDMAWrite, 1, n, verbs.StatusRemAccessErr},
		{"FromPeerOneByteBefore", frwr.FromPeer, verbs.OpRDMAWrite, -1, 1, verbs.StatusRemAccessErr},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := newRig(t, frwr.Config{Windows: 2})
			b := getBuffer(t, g.r)
			fill(b.Bytes(), 3)
			reg := register(t, g.r, b, off, n, c.dir)
			g.call(reg)
			seg := reg.Segment()
			fill(g.srv.Bytes(), 77)
			before := snapshot(b.Bytes())
			st := g.serverRDMA(c.op, uint64(int64(seg.Offset)+c.at), seg.Handle, c.len)
			if st != c.want {
				t.Fatalf("%v of %d bytes at %+d: %v, want %v", c.op, c.len, c.at, st, c.want)
			}
			switch {
			case st != verbs.StatusSuccess && !bytes.Equal(before, b.Bytes()):
				t.Fatal("a refused access changed memory")
			case st == verbs.StatusSuccess && c.op == verbs.OpRDMARead && !bytes.Equal(g.srv.Bytes()[:n], b.Bytes()[off:off+n]):
				t.Fatal("read other bytes")
			case st == verbs.StatusSuccess && c.op == verbs.OpRDMAWrite &&
				(!bytes.Equal(b.Bytes()[off:off+n], g.srv.Bytes()[:n]) || !bytes.Equal(b.Bytes()[:off], before[:off]) || !bytes.Equal(b.Bytes()[off+n:], before[off+n:])):
				t.Fatal("write landed elsewhere than the segment")
			}
			regs := []*frwr.Registration{reg}
			if st == verbs.StatusSuccess {
				g.invalidateAndRelease(regs)
			} else {
				// The access error moved both QPs to the error state:
				// the window's state is unknown.
				g.r.ConnectionLost(regs)
				if c := g.r.Counters(); c.WindowsReplaced != 1 || regs[0] != nil {
					t.Fatalf("after ConnectionLost: counters %+v, entry %v", c, regs[0])
				}
			}
			g.r.PutBuffer(b)
		})
	}
}

// TestRKeysChangeUnpredictably: every bind of the same window gets a new
// rkey with the same index and an unpredictable key byte.
func TestRKeysChangeUnpredictably(t *testing.T) {
	g := newRig(t, frwr.Config{Windows: 1})
	b := getBuffer(t, g.r)
	const binds = 200
	var keys []uint32
	for i := range binds {
		reg := register(t, g.r, b, 64*(i%16), 64, frwr.Direction(i%2))
		wr, _ := reg.BindWR()
		wr.ID = 1
		invs := g.r.AppendLocalInvalidations([]*frwr.Registration{reg}, nil)
		if len(invs) != 0 {
			t.Fatal("LOCAL_INV before the bind was posted")
		}
		post(t, g.p.Client.QP, wr) // unsignaled
		keys = append(keys, reg.Segment().Handle)
		g.invalidateAndRelease([]*frwr.Registration{reg}) // the signaled LOCAL_INV completes after the bind
	}
	increments, distinct := 0, map[uint8]bool{}
	for i, k := range keys {
		distinct[uint8(k)] = true
		if i == 0 {
			continue
		}
		prev := keys[i-1]
		if k>>8 != prev>>8 {
			t.Fatalf("bind %d changed the window index: %#x after %#x", i, k, prev)
		}
		if uint8(k) == uint8(prev) {
			t.Fatalf("bind %d kept the key byte: %#x after %#x", i, k, prev)
		}
		if uint8(k) == uint8(prev)+1 {
			increments++
		}
		// A late access with one of the window's recent rkeys never
		// matches its current binding.
		for j := max(0, i-16); j < i; j++ {
			if keys[j] == k {
				t.Fatalf("bind %d reused rkey %#x of bind %d", i, k, j)
			}
		}
	}
	// Uniform bytes give about one increment in 255 and ~140 distinct
	// values in 200 draws.
	if increments > 10 || len(distinct) < 100 {
		t.Fatalf("key bytes look predictable: %d increments, %d distinct in %d binds", increments, len(distinct), binds)
	}
	if c := g.r.Counters(); c.Binds != binds || c.LocalInvalidations != binds || c.BindsNotPosted != binds {
		t.Fatalf("counters %+v", c)
	}
	g.r.PutBuffer(b)
}

// constReader yields one byte value forever.
type constReader byte

func (c constReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(c)
	}
	return len(p), nil
}

// TestKeyBytesFromRand: key bytes come from Config.Rand, and a byte equal
// to the current key byte is never used.
func TestKeyBytesFromRand(t *testing.T) {
	g := newRig(t, frwr.Config{Windows: 1, Rand: constReader(0x42)}, sim.WithSeed(1))
	b := getBuffer(t, g.r)
	reg, err := g.r.Register(ctxT(t), b, 0, 64, frwr.ToPeer)
	if err != nil {
		t.Fatalf("Register: %v (the seeded window's initial key byte is 0x42: pick another seed)", err)
	}
	if k := uint8(reg.Segment().Handle); k != 0x42 {
		t.Fatalf("key byte %#x, want Rand's 0x42", k)
	}
	g.call(reg)
	g.invalidateAndRelease([]*frwr.Registration{reg})
	// Now the window holds key byte 0x42 and Rand gives nothing else.
	if _, err := g.r.Register(ctxT(t), b, 0, 64, frwr.ToPeer); err == nil {
		t.Fatal("Register reused the current key byte")
	}
	if c := g.r.Counters(); c.FreeWindows != 1 || c.Binds != 1 {
		t.Fatalf("after a failed Register: %+v", c)
	}
	g.r.PutBuffer(b)

	g2 := newRig(t, frwr.Config{Windows: 1, Rand: bytes.NewReader(nil)})
	b2 := getBuffer(t, g2.r)
	if _, err := g2.r.Register(ctxT(t), b2, 0, 64, frwr.ToPeer); !errors.Is(err, io.EOF) {
		t.Fatalf("Register with an exhausted Rand: %v, want EOF", err)
	}
	g2.r.PutBuffer(b2)
}

// TestRegisterMode: without type-2 windows (or when asked), each segment
// is its own MR, registered in Register and deregistered in Release.
func TestRegisterMode(t *testing.T) {
	for _, c := range []struct {
		name string
		mode frwr.Mode
		opts []sim.Option
	}{
		{"AutoWithoutWindows", frwr.ModeAuto, []sim.Option{sim.WithoutMemWindows()}},
		{"Forced", frwr.ModeRegister, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newRig(t, frwr.Config{Mode: c.mode, Buffers: 2}, c.opts...)
			if g.r.Mode() != frwr.ModeRegister || g.r.RemoteInvalidationOK() {
				t.Fatalf("mode %v, remote invalidation %v", g.r.Mode(), g.r.RemoteInvalidationOK())
			}
			if live := g.f.Live(); live.MRs != g.base.MRs+2 || live.MWs != 0 {
				t.Fatalf("live after New: %+v (base %+v)", live, g.base)
			}
			b := getBuffer(t, g.r)
			fill(b.Bytes(), 5)
			rd := register(t, g.r, b, 512, 1024, frwr.ToPeer)
			wr := register(t, g.r, b, 4096, 2048, frwr.FromPeer)
			if _, ok := rd.BindWR(); ok {
				t.Fatal("a bind WR in register mode")
			}
			if s := rd.State(); s != frwr.StateRegistered {
				t.Fatalf("state %v", s)
			}
			if live := g.f.Live(); live.MRs != g.base.MRs+4 {
				t.Fatalf("live MRs %d, want %d", live.MRs, g.base.MRs+4)
			}
			g.call(rd, wr)
			rs, ws := rd.Segment(), wr.Segment()
			if rs.Length != 1024 || ws.Length != 2048 {
				t.Fatalf("segments %+v %+v", rs, ws)
			}
			if st := g.serverRDMA(verbs.OpRDMARead, rs.Offset, rs.Handle, 1024); st != verbs.StatusSuccess ||
				!bytes.Equal(g.srv.Bytes()[:1024], b.Bytes()[512:512+1024]) {
				t.Fatalf("RDMA READ: %v", st)
			}
			fill(g.srv.Bytes()[:2048], 11)
			if st := g.serverRDMA(verbs.OpRDMAWrite, ws.Offset, ws.Handle, 2048); st != verbs.StatusSuccess ||
				!bytes.Equal(b.Bytes()[4096:4096+2048], g.srv.Bytes()[:2048]) {
				t.Fatalf("RDMA WRITE: %v", st)
			}
			regs := []*frwr.Registration{rd, wr}
			wc := g.reply(false, 0)
			if g.r.MatchRemoteInvalidation(regs, wc) {
				t.Fatal("matched without WITH_INV")
			}
			if g.r.MatchRemoteInvalidation(regs, verbs.Completion{Flags: verbs.WCWithInv, InvalidatedRKey: rs.Handle}) {
				t.Fatal("matched a remote invalidation in register mode")
			}
			g.invalidateAndRelease(regs) // no LOCAL_INV: dereg
			cn := g.r.Counters()
			if cn.Registrations != 2 || cn.Deregistrations != 2 || cn.Binds != 0 || cn.LocalInvalidations != 0 || cn.UnmatchedRemoteInvalidations != 1 {
				t.Fatalf("counters %+v", cn)
			}
			if live := g.f.Live(); live.MRs != g.base.MRs+2 {
				t.Fatalf("live MRs %d after Release, want %d", live.MRs, g.base.MRs+2)
			}
			before := snapshot(b.Bytes())
			if st := g.serverQP().RogueWrite(ws.Offset, ws.Handle, []byte("late")); st != verbs.StatusRemAccessErr {
				t.Fatalf("write with a deregistered rkey: %v", st)
			}
			if !bytes.Equal(before, b.Bytes()) {
				t.Fatal("memory changed")
			}
			g.r.PutBuffer(b)
		})
	}
}

// TestConnectionLost: after a lost connection every window in unknown
// state is destroyed and replaced, remotely invalidated ones are kept, and
// a new connection on the same PD works with the pool.
func TestConnectionLost(t *testing.T) {
	g := newRig(t, frwr.Config{Windows: 5, Buffers: 2})
	b := getBuffer(t, g.r)
	bound := register(t, g.r, b, 0, 512, frwr.ToPeer)
	local := register(t, g.r, b, 1024, 512, frwr.FromPeer)
	remote := register(t, g.r, b, 2048, 512, frwr.FromPeer)
	orphan := register(t, g.r, b, 3072, 512, frwr.ToPeer) // an RPC the transport no longer tracks
	g.call(bound, local, remote, orphan)
	if !g.r.MatchRemoteInvalidation([]*frwr.Registration{remote}, g.reply(true, remote.Segment().Handle)) {
		t.Fatal("remote invalidation not matched")
	}
	if wrs := g.r.AppendLocalInvalidations([]*frwr.Registration{local}, nil); len(wrs) != 1 {
		t.Fatalf("LOCAL_INVs %+v", wrs) // never posted: the connection breaks first
	}
	g.serverQP().Break()

	held := []*frwr.Registration{bound, local}
	g.r.ConnectionLost(held)
	if held[0] != nil || held[1] != nil {
		t.Fatal("ConnectionLost left released entries")
	}
	c := g.r.Counters()
	if c.WindowsReplaced != 3 || c.FreeWindows != 4 || c.WindowAllocFailures != 0 {
		t.Fatalf("after ConnectionLost: %+v", c)
	}
	if live := g.f.Live(); live.MWs != 5 {
		t.Fatalf("live windows %d, want 5", live.MWs)
	}
	if s := remote.State(); s != frwr.StateInvalidatedRemotely {
		t.Fatalf("remotely invalidated window: %v", s)
	}
	if s := orphan.State(); s != frwr.StateDead {
		t.Fatalf("untracked bound window: %v, want Dead", s)
	}
	if _, ok := orphan.BindWR(); ok {
		t.Fatal("a dead registration still offers its bind WR")
	}
	if err := g.r.Release([]*frwr.Registration{remote, orphan}); err != nil {
		t.Fatalf("Release after ConnectionLost: %v", err)
	}
	if c := g.r.Counters(); c.FreeWindows != 5 {
		t.Fatalf("free windows %d, want 5", c.FreeWindows)
	}
	if err := errors.Join(g.srv.Close(), g.p.Close()); err != nil { // windows were freed before their QP
		t.Fatal(err)
	}

	// A new connection on the same PD: every window of the pool binds.
	g.connect()
	var regs []*frwr.Registration
	for i := range 5 {
		regs = append(regs, register(t, g.r, b, 512*i, 512, frwr.ToPeer))
	}
	g.call(regs...)
	for _, reg := range regs {
		s := reg.Segment()
		if st := g.serverRDMA(verbs.OpRDMARead, s.Offset, s.Handle, int(s.Length)); st != verbs.StatusSuccess {
			t.Fatalf("RDMA READ on the new connection: %v", st)
		}
	}
	g.invalidateAndRelease(regs)
	if d := g.f.DoubleInvalidations(); d != 0 {
		t.Fatalf("sim double invalidations: %d", d)
	}
	g.r.PutBuffer(b)
}

// TestConnectionLostRegisterMode: segment MRs are deregistered (a new QP in
// the PD could reach them).
func TestConnectionLostRegisterMode(t *testing.T) {
	g := newRig(t, frwr.Config{Mode: frwr.ModeRegister})
	b := getBuffer(t, g.r)
	reg := register(t, g.r, b, 0, 512, frwr.FromPeer)
	g.call(reg)
	g.serverQP().Break()
	g.r.ConnectionLost()
	if s := reg.State(); s != frwr.StateDead {
		t.Fatalf("state %v, want Dead", s)
	}
	if live := g.f.Live(); live.MRs != g.base.MRs+2 {
		t.Fatalf("live MRs %d, want %d", live.MRs, g.base.MRs+2)
	}
	if err := g.r.Release([]*frwr.Registration{reg}); err != nil {
		t.Fatal(err)
	}
	if c := g.r.Counters(); c.Deregistrations != 1 {
		t.Fatalf("counters %+v", c)
	}
	g.r.PutBuffer(b)
}

// TestOutOfOrder: transitions the state does not allow are refused,
// counted, and change nothing.
func TestOutOfOrder(t *testing.T) {
	g := newRig(t, frwr.Config{Windows: 2})
	b := getBuffer(t, g.r)

	// Release of a Bound registration.
	reg := register(t, g.r, b, 0, 512, frwr.ToPeer)
	g.call(reg)
	regs := []*frwr.Registration{reg}
	err := g.r.Release(regs)
	var te *frwr.TransitionError
	if !errors.As(err, &te) || te.State != frwr.StateBound || te.Op != "Release" {
		t.Fatalf("Release of a Bound registration: %v", err)
	}
	if regs[0] == nil || reg.State() != frwr.StateBound {
		t.Fatal("a refused Release changed the registration")
	}
	// Abort of a posted bind.
	if reg.Abort() {
		t.Fatal("Abort of a posted bind reported the registration given back")
	}
	if reg.State() != frwr.StateBound {
		t.Fatal("Abort of a posted bind freed the window")
	}
	// Two local invalidations of one rkey: the second is never issued.
	first := g.r.AppendLocalInvalidations(regs, nil)
	if second := g.r.AppendLocalInvalidations(regs, nil); len(first) != 1 || len(second) != 0 {
		t.Fatalf("LOCAL_INVs %d then %d, want 1 then 0", len(first), len(second))
	}
	// Matching after LOCAL_INV was posted.
	if g.r.MatchRemoteInvalidation(regs, verbs.Completion{Flags: verbs.WCWithInv, InvalidatedRKey: reg.Segment().Handle}) {
		t.Fatal("matched a window whose LOCAL_INV was posted")
	}
	first[0].ID, first[0].Flags = 9, verbs.SendSignaled
	post(t, g.p.Client.QP, first...)
	wantOK(t, reap(t, g.p.Client.SendCQ, "LOCAL_INV"), "LOCAL_INV")
	if err := g.r.Release(regs); err != nil {
		t.Fatal(err)
	}
	// Release again: not held.
	if err := g.r.Release([]*frwr.Registration{reg}); !errors.Is(err, frwr.ErrNotOwned) {
		t.Fatalf("second Release: %v, want ErrNotOwned", err)
	}
	c := g.r.Counters()
	if c.RefusedTransitions != 4 || c.DoubleInvalidationsPrevented != 1 {
		t.Fatalf("counters %+v", c)
	}

	// A bind never posted: no LOCAL_INV, Release refuses, Abort frees,
	// and the window binds again with a key the device accepts.
	un := register(t, g.r, b, 0, 512, frwr.ToPeer)
	if wrs := g.r.AppendLocalInvalidations([]*frwr.Registration{un}, nil); len(wrs) != 0 {
		t.Fatal("LOCAL_INV of a window whose bind was never posted")
	}
	if err := g.r.Release([]*frwr.Registration{un}); !errors.As(err, &te) {
		t.Fatalf("Release of an unposted bind: %v", err)
	}
	if !un.Abort() {
		t.Fatal("Abort of an unposted bind did not report the registration given back")
	}
	if c := g.r.Counters(); c.FreeWindows != 2 || c.Aborts != 1 || c.BindsNotPosted != 1 {
		t.Fatalf("after Abort: %+v", c)
	}
	again := register(t, g.r, b, 0, 512, frwr.ToPeer)
	g.call(again)
	g.invalidateAndRelease([]*frwr.Registration{again})
	if d := g.f.DoubleInvalidations(); d != 0 {
		t.Fatalf("sim double invalidations: %d", d)
	}
	g.r.PutBuffer(b)
}

// TestRegisterArguments: segments must lie in a buffer the caller holds.
func TestRegisterArguments(t *testing.T) {
	g := newRig(t, frwr.Config{Windows: 1})
	b := getBuffer(t, g.r)
	for _, c := range []struct{ off, n int }{{-1, 10}, {0, 0}, {0, -5}, {testBufSize, 1}, {testBufSize - 10, 11}, {1, testBufSize}} {
		if _, err := g.r.Register(ctxT(t), b, c.off, c.n, frwr.ToPeer); !errors.Is(err, frwr.ErrSegment) {
			t.Errorf("Register(%d, %d): %v, want ErrSegment", c.off, c.n, err)
		}
	}
	if _, err := g.r.Register(ctxT(t), b, 0, 1, frwr.Direction(7)); err == nil {
		t.Error("Register with an unknown direction succeeded")
	}
	g.r.PutBuffer(b)
	if _, err := g.r.Register(ctxT(t), b, 0, 1, frwr.ToPeer); !errors.Is(err, frwr.ErrNotOwned) {
		t.Errorf("Register on a buffer put back: %v, want ErrNotOwned", err)
	}
	if c := g.r.Counters(); c.FreeWindows != 1 || c.Binds != 0 {
		t.Fatalf("counters %+v", c)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("PutBuffer twice did not panic")
			}
		}()
		g.r.PutBuffer(b)
	}()
}

// TestBufferPool: GetBuffer waits in FIFO order, honours its context, and
// a buffer put back while exposed returns only when released.
func TestBufferPool(t *testing.T) {
	g := newRig(t, frwr.Config{Windows: 2, Buffers: 2})
	r := g.r
	b1, b2 := getBuffer(t, r), getBuffer(t, r)
	if len(b1.Bytes()) != testBufSize || b1.MR().Access() != verbs.AccessLocalWrite|verbs.AccessMWBind || b1.MR().RKey() != 0 {
		t.Fatalf("buffer: %d bytes, MR access %v, rkey %#x", len(b1.Bytes()), b1.MR().Access(), b1.MR().RKey())
	}
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := r.GetBuffer(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GetBuffer on an empty pool: %v", err)
	}

	type got struct {
		who string
		b   *frwr.Buffer
		err error
	}
	results := make(chan got, 3)
	waiter := func(ctx context.Context, who string) {
		b, err := r.GetBuffer(ctx)
		results <- got{who, b, err}
	}
	waits := func() uint64 { return r.Counters().BufferWaits }
	go waiter(context.Background(), "A")
	waitFor(t, "A waiting", func() bool { return waits() == 2 })
	cctx, ccancel := context.WithCancel(context.Background())
	go waiter(cctx, "C") // gives up
	waitFor(t, "C waiting", func() bool { return waits() == 3 })
	go waiter(context.Background(), "B")
	waitFor(t, "B waiting", func() bool { return waits() == 4 })

	ccancel()
	if x := <-results; x.who != "C" || !errors.Is(x.err, context.Canceled) {
		t.Fatalf("cancelled waiter: %+v", x)
	}
	r.PutBuffer(b1)
	if x := <-results; x.who != "A" || x.b != b1 || x.err != nil {
		t.Fatalf("first Put went to %+v, want A", x)
	}
	r.PutBuffer(b2)
	if x := <-results; x.who != "B" || x.b != b2 || x.err != nil {
		t.Fatalf("second Put went to %+v, want B", x)
	}

	// Put back while a window still exposes it: held until released.
	reg := register(t, r, b1, 0, 64, frwr.ToPeer)
	r.PutBuffer(b1)
	if c := r.Counters(); c.FreeBuffers != 0 || c.BuffersPutWhileExposed != 1 {
		t.Fatalf("buffer put while exposed: %+v", c)
	}
	reg.Abort()
	if c := r.Counters(); c.FreeBuffers != 1 {
		t.Fatalf("buffer not back after its registration ended: %+v", c)
	}
	r.PutBuffer(b2)

	// Close wakes a waiter.
	x1, x2 := getBuffer(t, r), getBuffer(t, r)
	_, _ = x1, x2
	go waiter(context.Background(), "D")
	waitFor(t, "D waiting", func() bool { return waits() == 5 })
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if x := <-results; !errors.Is(x.err, frwr.ErrClosed) {
		t.Fatalf("waiter at Close: %+v", x)
	}
}

// TestWindowPoolWaits: Register waits for a free window and honours its
// context.
func TestWindowPoolWaits(t *testing.T) {
	g := newRig(t, frwr.Config{Windows: 1})
	r := g.r
	b := getBuffer(t, r)
	first := register(t, r, b, 0, 64, frwr.ToPeer)
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := r.Register(short, b, 0, 64, frwr.ToPeer); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Register without a free window: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		reg, err := r.Register(context.Background(), b, 64, 64, frwr.FromPeer)
		if err == nil {
			reg.Abort()
		}
		done <- err
	}()
	waitFor(t, "a Register waiting", func() bool { return r.Counters().WindowWaits == 2 })
	first.Abort()
	if err := <-done; err != nil {
		t.Fatalf("waiting Register: %v", err)
	}
	if c := r.Counters(); c.FreeWindows != 1 || c.Aborts != 2 {
		t.Fatalf("counters %+v", c)
	}
	r.PutBuffer(b)
}

// TestConcurrentRegister: Register and Abort from many goroutines (run with
// -race). Windows = Buffers + 1 keeps holders of one window from
// deadlocking while each wants two.
func TestConcurrentRegister(t *testing.T) {
	const workers, rounds, buffers = 16, 100, 8
	g := newRig(t, frwr.Config{Windows: buffers + 1, Buffers: buffers})
	r := g.r
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for i := range rounds {
				b, err := r.GetBuffer(ctx)
				if err != nil {
					errs <- err
					return
				}
				a, err := r.Register(ctx, b, 0, 4096, frwr.ToPeer)
				if err != nil {
					errs <- err
					return
				}
				c, err := r.Register(ctx, b, 4096, 4096, frwr.FromPeer)
				if err != nil {
					errs <- err
					return
				}
				if a.Segment().Handle == c.Segment().Handle {
					errs <- errors.New("two registrations share an rkey")
					return
				}
				if _, ok := a.BindWR(); !ok {
					errs <- errors.New("no bind WR")
					return
				}
				if (w+i)%2 == 0 {
					r.PutBuffer(b) // held back until both are aborted
					a.Abort()
					c.Abort()
				} else {
					a.Abort()
					c.Abort()
					r.PutBuffer(b)
				}
				_ = r.Counters()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	c := r.Counters()
	if c.Binds != workers*rounds*2 || c.Aborts != c.Binds || c.FreeWindows != buffers+1 || c.FreeBuffers != buffers || c.RefusedTransitions != 0 {
		t.Fatalf("counters %+v", c)
	}
}

// TestNewAndClose: configuration errors, cleanup of a failed New, and
// Close returning the fabric's counts to where they were.
func TestNewAndClose(t *testing.T) {
	f := sim.NewFabric(sim.WithoutMemWindows())
	defer f.Close()
	dev, err := f.OpenDevice("sim0")
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Close()
	base := f.Live()
	for _, cfg := range []frwr.Config{
		{BufferSize: 4096, Buffers: 1},
		{PD: pd, Buffers: 1},
		{PD: pd, BufferSize: 4096},
		{PD: pd, BufferSize: 4096, Buffers: 1, Mode: frwr.ModeWindows},
		{PD: pd, BufferSize: 4096, Buffers: 1, Mode: frwr.Mode(9)},
	} {
		if r, err := frwr.New(cfg); err == nil {
			r.Close()
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
	// Windows asked for on a device without them: EOPNOTSUPP, nothing left.
	if _, err := frwr.New(frwr.Config{PD: pd, Mode: frwr.ModeWindows, BufferSize: 4096, Buffers: 3, Windows: 2}); !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Fatalf("windows on a device without them: %v", err)
	}
	if live := f.Live(); live != base {
		t.Fatalf("a failed New left %+v (base %+v)", live, base)
	}

	r, err := frwr.New(frwr.Config{PD: pd, Attr: dev.Attr(), BufferSize: 10000, Buffers: 3})
	if err != nil {
		t.Fatal(err)
	}
	if r.Mode() != frwr.ModeRegister {
		t.Fatalf("auto mode on a device without windows: %v", r.Mode())
	}
	b, err := r.GetBuffer(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Bytes()) != 10000 {
		t.Fatalf("buffer of %d bytes", len(b.Bytes()))
	}
	if _, err := r.Register(context.Background(), b, 0, 100, frwr.FromPeer); err != nil { // left registered
		t.Fatal(err)
	}
	if live := f.Live(); live.MRs != base.MRs+4 {
		t.Fatalf("live %+v", live)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if live := f.Live(); live != base {
		t.Fatalf("after Close: %+v, want %+v", live, base)
	}
	if _, err := r.GetBuffer(context.Background()); !errors.Is(err, frwr.ErrClosed) {
		t.Fatalf("GetBuffer after Close: %v", err)
	}
	if _, err := r.Register(context.Background(), b, 0, 1, frwr.ToPeer); !errors.Is(err, frwr.ErrClosed) {
		t.Fatalf("Register after Close: %v", err)
	}
}

// TestCloseWithBoundWindows: Close frees windows before the MRs they pin,
// and the fabric's counts return to where they were before New.
func TestCloseWithBoundWindows(t *testing.T) {
	g := newRig(t, frwr.Config{Windows: 3, Buffers: 2})
	b := getBuffer(t, g.r)
	reg := register(t, g.r, b, 0, 4096, frwr.FromPeer)
	g.call(reg)
	if live := g.f.Live(); live.MWs != 3 || live.MRs != g.base.MRs+2 {
		t.Fatalf("live %+v", live)
	}
	if err := g.r.Close(); err != nil {
		t.Fatalf("Close with a bound window: %v", err)
	}
	if live := g.f.Live(); live != g.base {
		t.Fatalf("after Close: %+v, want %+v", live, g.base)
	}
}

// failingPD fails AllocMW while fail is set.
type failingPD struct {
	verbs.PD
	fail atomic.Bool
}

func (p *failingPD) AllocMW() (verbs.MW, error) {
	if p.fail.Load() {
		return nil, syscall.ENOMEM
	}
	return p.PD.AllocMW()
}

// TestReplacementWindowsLater: windows that cannot be replaced at once are
// allocated by Register when it needs them; with no window left at all,
// Register fails instead of waiting forever.
func TestReplacementWindowsLater(t *testing.T) {
	var fpd *failingPD
	g := newRigPD(t, frwr.Config{Windows: 2}, func(pd verbs.PD) verbs.PD {
		fpd = &failingPD{PD: pd}
		return fpd
	})
	b := getBuffer(t, g.r)
	regs := []*frwr.Registration{register(t, g.r, b, 0, 512, frwr.ToPeer), register(t, g.r, b, 512, 512, frwr.ToPeer)}
	g.call(regs...)
	g.serverQP().Break()
	fpd.fail.Store(true)
	g.r.ConnectionLost(regs)
	c := g.r.Counters()
	if c.WindowsReplaced != 2 || c.WindowAllocFailures != 2 || c.FreeWindows != 0 {
		t.Fatalf("after ConnectionLost with AllocMW failing: %+v", c)
	}
	if live := g.f.Live(); live.MWs != 0 {
		t.Fatalf("live windows %d", live.MWs)
	}
	if _, err := g.r.Register(ctxT(t), b, 0, 64, frwr.ToPeer); !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("Register with no window and AllocMW failing: %v, want ENOMEM", err)
	}
	fpd.fail.Store(false)
	if err := errors.Join(g.srv.Close(), g.p.Close()); err != nil {
		t.Fatal(err)
	}
	g.connect()
	regs = []*frwr.Registration{register(t, g.r, b, 0, 512, frwr.FromPeer), register(t, g.r, b, 512, 512, frwr.ToPeer)}
	g.call(regs...)
	s := regs[1].Segment()
	if st := g.serverRDMA(verbs.OpRDMARead, s.Offset, s.Handle, int(s.Length)); st != verbs.StatusSuccess {
		t.Fatalf("RDMA READ through a late replacement: %v", st)
	}
	g.invalidateAndRelease(regs)
	if live := g.f.Live(); live.MWs != 2 {
		t.Fatalf("live windows %d, want 2", live.MWs)
	}
	g.r.PutBuffer(b)
}

func TestStrings(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{frwr.ToPeer.String(), "to-peer"},
		{frwr.FromPeer.String(), "from-peer"},
		{frwr.ModeWindows.String(), "windows"},
		{frwr.ModeRegister.String(), "register"},
		{frwr.StateLocalInvPosted.String(), "LocalInvPosted"},
		{frwr.State(42).String(), "State(42)"},
		{(&frwr.TransitionError{Op: "Release", State: frwr.StateBound, RKey: 0x1234, Hint: "invalidate it first"}).Error(),
			"frwr: Release of registration rkey 0x1234 in state Bound: invalidate it first"},
	} {
		if c.got != c.want {
			t.Errorf("%q, want %q", c.got, c.want)
		}
	}
}

// TestRegisterAllocations: the per-segment path reuses its objects.
func TestRegisterAllocations(t *testing.T) {
	g := newRig(t, frwr.Config{Windows: 2})
	b := getBuffer(t, g.r)
	ctx := context.Background()
	allocs := testing.AllocsPerRun(200, func() {
		reg, err := g.r.Register(ctx, b, 0, 4096, frwr.FromPeer)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := reg.BindWR(); !ok {
			t.Fatal("no bind WR")
		}
		_ = reg.Segment()
		reg.Abort()
	})
	if allocs > 0 {
		t.Fatalf("%.1f allocations per Register/Abort, want 0", allocs)
	}
	g.r.PutBuffer(b)
}
