package frwr_test

import (
	"bytes"
	"context"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/frwr"
	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/sim"
	"github.com/nfsrdma/nfsrdma/verbs/verbstest"
)

var simAddr = netip.MustParseAddrPort("10.99.0.1:0")

func simEnv(f *sim.Fabric) verbstest.Env {
	return verbstest.Env{Fabric: f, ListenAddr: simAddr, ConnectAddr: simAddr,
		Quirks: verbstest.SpecQuirks(), Timeout: 5 * time.Second}
}

const (
	testBufSize = 64 << 10
	msgLen      = 64
)

// rig is a registry on the client PD of a connected simulated pair, with a
// server buffer for RDMA and message buffers on both sides. The client PD
// is the rig's own, so a second connection can share it (a reconnect).
type rig struct {
	t    *testing.T
	f    *sim.Fabric
	dev  verbs.Device
	pd   verbs.PD
	p    *verbstest.Pair
	r    *frwr.Registry
	srv  *verbstest.Buffer // server: RDMA source and target, receive buffer
	cli  *verbstest.Buffer // client: SEND source, receive buffer
	base verbs.ResourceCounts
}

// newRig builds the fabric, the client PD, a pair and the registry. At the
// end of the test it checks that the fabric has no live resources and no
// anomalies (double invalidations, QPs closed with windows bound).
func newRig(t *testing.T, cfg frwr.Config, opts ...sim.Option) *rig {
	t.Helper()
	return newRigPD(t, cfg, nil, opts...)
}

// newRigPD is newRig with the registry's PD wrapped by wrap (nil: none).
func newRigPD(t *testing.T, cfg frwr.Config, wrap func(verbs.PD) verbs.PD, opts ...sim.Option) *rig {
	t.Helper()
	f := sim.NewFabric(opts...)
	base := runtime.NumGoroutine()
	t.Cleanup(func() {
		if live := f.Live(); !live.Zero() {
			t.Errorf("live resources at the end: %+v", live)
		}
		if a := f.Anomalies(); a != (sim.Anomalies{}) {
			t.Errorf("anomalies: %+v", a)
		}
		f.Close()
		checkGoroutines(t, base)
	})
	g := &rig{t: t, f: f}
	var err error
	if g.dev, err = f.OpenDevice("sim0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.dev.Close() })
	if g.pd, err = g.dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.pd.Close() })
	g.connect()
	g.base = f.Live()
	cfg.PD = g.pd
	if wrap != nil {
		cfg.PD = wrap(g.pd)
	}
	if cfg.Attr.Name == "" {
		cfg.Attr = g.dev.Attr()
	}
	if cfg.BufferSize == 0 {
		cfg.BufferSize = testBufSize
	}
	if cfg.Buffers == 0 {
		cfg.Buffers = 2
	}
	if g.r, err = frwr.New(cfg); err != nil {
		t.Fatalf("frwr.New: %v", err)
	}
	t.Cleanup(func() {
		if err := g.r.Close(); err != nil {
			t.Errorf("Registry.Close: %v", err)
		}
	})
	return g
}

// connect makes a (new) connection on the rig's client PD.
func (g *rig) connect() {
	g.t.Helper()
	g.p = verbstest.NewPair(g.t, simEnv(g.f), verbstest.PairConfig{ClientPD: g.pd, SendDepth: 32, RecvDepth: 8})
	g.srv = verbstest.MustBuffer(g.t, g.p.Server.PD, testBufSize, verbs.AccessLocalWrite)
	g.cli = verbstest.MustBuffer(g.t, g.pd, 4096, verbs.AccessLocalWrite)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func post(t *testing.T, q verbs.QP, wrs ...verbs.SendWR) {
	t.Helper()
	if bad, err := q.PostSend(wrs); err != nil {
		t.Fatalf("PostSend WR %d: %v", bad, err)
	}
}

func reap(t *testing.T, cq verbs.CQ, what string) verbs.Completion {
	t.Helper()
	wcs, err := verbstest.Reap(ctxT(t), cq, 1)
	if err != nil {
		t.Fatalf("%s: reaped %+v: %v", what, wcs, err)
	}
	return wcs[0]
}

func wantOK(t *testing.T, wc verbs.Completion, what string) {
	t.Helper()
	if wc.Status != verbs.StatusSuccess {
		t.Fatalf("%s: completion %s, want SUCCESS", what, wc.Status)
	}
}

func getBuffer(t *testing.T, r *frwr.Registry) *frwr.Buffer {
	t.Helper()
	b, err := r.GetBuffer(ctxT(t))
	if err != nil {
		t.Fatalf("GetBuffer: %v", err)
	}
	return b
}

func register(t *testing.T, r *frwr.Registry, b *frwr.Buffer, off, n int, dir frwr.Direction) *frwr.Registration {
	t.Helper()
	g, err := r.Register(ctxT(t), b, off, n, dir)
	if err != nil {
		t.Fatalf("Register(%d, %d, %v): %v", off, n, dir, err)
	}
	return g
}

// call is what the transport does to send a call: the bind WRs of its
// registrations chained unsignaled before a signaled SEND, in one post.
// The server has a receive posted for it.
func (g *rig) call(regs ...*frwr.Registration) {
	g.t.Helper()
	t := g.t
	if _, err := g.p.Server.QP.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{g.srv.SGE(testBufSize-msgLen, msgLen)}}}); err != nil {
		t.Fatal(err)
	}
	var wrs []verbs.SendWR
	for _, reg := range regs {
		if wr, ok := reg.BindWR(); ok {
			if wr.Flags&verbs.SendSignaled != 0 || wr.Opcode != verbs.OpBindMW {
				t.Fatalf("bind WR %+v: want an unsignaled BIND_MW", wr)
			}
			wr.ID = 100
			wrs = append(wrs, wr)
		}
	}
	wrs = append(wrs, verbs.SendWR{ID: 101, Opcode: verbs.OpSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{g.cli.SGE(0, msgLen)}})
	post(t, g.p.Client.QP, wrs...)
	wc := reap(t, g.p.Client.SendCQ, "call send")
	if wc.ID != 101 {
		t.Fatalf("call: completion %+v, want the SEND's", wc)
	}
	wantOK(t, wc, "call send")
	wantOK(t, reap(t, g.p.Server.RecvCQ, "call receive"), "call receive")
}

// reply sends the server's reply, with invalidation of invRKey when inv,
// and returns the client's receive completion.
func (g *rig) reply(inv bool, invRKey uint32) verbs.Completion {
	g.t.Helper()
	t := g.t
	if _, err := g.p.Client.QP.PostRecv([]verbs.RecvWR{{ID: 7, SGL: []verbs.SGE{g.cli.SGE(4096-msgLen, msgLen)}}}); err != nil {
		t.Fatal(err)
	}
	wr := verbs.SendWR{ID: 8, Opcode: verbs.OpSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{g.srv.SGE(0, msgLen)}}
	if inv {
		wr.Opcode, wr.InvalidateRKey = verbs.OpSendWithInv, invRKey
	}
	post(t, g.p.Server.QP, wr)
	wantOK(t, reap(t, g.p.Server.SendCQ, "reply send"), "reply send")
	wc := reap(t, g.p.Client.RecvCQ, "reply receive")
	wantOK(t, wc, "reply receive")
	return wc
}

// invalidateAndRelease is the rest of the reply handler: the LOCAL_INV
// chain (last signaled), its completion, Release.
func (g *rig) invalidateAndRelease(regs []*frwr.Registration) {
	g.t.Helper()
	t := g.t
	wrs := g.r.AppendLocalInvalidations(regs, nil)
	if len(wrs) > 0 {
		for i := range wrs {
			if wrs[i].Opcode != verbs.OpLocalInv || wrs[i].Flags != 0 {
				t.Fatalf("LOCAL_INV WR %+v: want an unsignaled LOCAL_INV", wrs[i])
			}
			wrs[i].ID = 200 + uint64(i)
		}
		wrs[len(wrs)-1].Flags = verbs.SendSignaled
		post(t, g.p.Client.QP, wrs...)
		wantOK(t, reap(t, g.p.Client.SendCQ, "LOCAL_INV"), "LOCAL_INV")
	}
	if err := g.r.Release(regs); err != nil {
		t.Fatalf("Release: %v", err)
	}
	for i, reg := range regs {
		if reg != nil {
			t.Fatalf("Release left entry %d", i)
		}
	}
}

// serverRDMA posts a signaled RDMA READ (into the server buffer) or WRITE
// (from it) against seg-like coordinates and returns its status.
func (g *rig) serverRDMA(op verbs.Opcode, addr uint64, rkey uint32, n int) verbs.Status {
	g.t.Helper()
	post(g.t, g.p.Server.QP, verbs.SendWR{ID: 300, Opcode: op, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{g.srv.SGE(0, n)}, RemoteAddr: addr, RKey: rkey})
	return reap(g.t, g.p.Server.SendCQ, op.String()).Status
}

func (g *rig) serverQP() *sim.QP { return g.p.Server.QP.(*sim.QP) }

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

func snapshot(b []byte) []byte { return bytes.Clone(b) }

func checkGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Errorf("goroutines: %d, want %d\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitFor polls cond (a counter the code under test bumps) until it holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
