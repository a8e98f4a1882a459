//go:build integration

package integration

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/ibv"
	"github.com/nfsrdma/nfsrdma/verbs/verbstest"
)

// TestVerbsConformanceRXE runs the verbs conformance suite (the same one
// the unit tests run on verbs/sim) on rdma-core over rxe0. The device's
// departures from the verbs specification come from verbs/ibv's quirk
// table, the one place they live.
func TestVerbsConformanceRXE(t *testing.T) {
	fab, err := ibv.Open()
	if err != nil {
		t.Fatal(err)
	}
	dev, err := fab.OpenDevice("rxe0")
	if err != nil {
		t.Fatal(err)
	}
	q, ok := ibv.QuirksOf(dev)
	dev.Close()
	if !ok {
		t.Fatal("no quirks for an ibv device")
	}
	t.Logf("rxe0 quirks from verbs/ibv: %+v", q)
	addr := netip.AddrPortFrom(serverAddr, 0)
	verbstest.Run(t, verbstest.Env{
		Fabric: fab, ListenAddr: addr, ConnectAddr: addr, Device: "rxe0", Timeout: 20 * time.Second,
		Quirks: verbstest.Quirks{WindowBoundsEnforced: q.WindowBoundsEnforced, DoubleLocalInvPanics: q.DoubleLocalInvPanics},
	})
}

// TestVerbsPollSpinRXE: the provider-side busy-poll (verbs.SpinPoller)
// returns a completion that arrives while it spins, and returns empty
// after its spin time when none does.
func TestVerbsPollSpinRXE(t *testing.T) {
	fab, err := ibv.Open()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := netip.AddrPortFrom(serverAddr, 0)
	p, err := verbstest.Connect(ctx, fab, addr, addr, verbstest.PairConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cb := verbstest.MustBuffer(t, p.Client.PD, 4096, verbs.AccessLocalWrite)
	sb := verbstest.MustBuffer(t, p.Server.PD, 4096, verbs.AccessLocalWrite)
	defer cb.Close()
	defer sb.Close()
	sp, ok := p.Server.RecvCQ.(verbs.SpinPoller)
	if !ok {
		t.Fatal("ibv CQs do not implement verbs.SpinPoller")
	}
	wcs := make([]verbs.Completion, 4)
	start := time.Now()
	if n, err := sp.PollSpin(wcs, 20*time.Millisecond); n != 0 || err != nil {
		t.Fatalf("PollSpin on an empty CQ: %d, %v", n, err)
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Fatalf("PollSpin returned after %v, before its 20ms", d)
	}
	if _, err := p.Server.QP.PostRecv([]verbs.RecvWR{{ID: 7, SGL: []verbs.SGE{sb.SGE(0, 64)}}}); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(5 * time.Millisecond)
		p.Client.QP.PostSend([]verbs.SendWR{{ID: 1, Opcode: verbs.OpSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{cb.SGE(0, 8)}}})
	}()
	n, err := sp.PollSpin(wcs, 5*time.Second)
	if err != nil || n != 1 || wcs[0].ID != 7 || wcs[0].Status != verbs.StatusSuccess {
		t.Fatalf("PollSpin while a SEND arrives: %d %v %+v", n, err, wcs[0])
	}
	verbstest.Reap(ctx, p.Client.SendCQ, 1)
}
