package sim_test

import (
	"context"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/sim"
	"github.com/nfsrdma/nfsrdma/verbs/verbstest"
)

var (
	listenAddr  = netip.MustParseAddrPort("10.99.0.1:0")
	connectAddr = netip.MustParseAddrPort("10.99.0.1:0")
)

func simEnv(f *sim.Fabric) verbstest.Env {
	return verbstest.Env{Fabric: f, ListenAddr: listenAddr, ConnectAddr: connectAddr, Quirks: verbstest.SpecQuirks(), Timeout: 5 * time.Second}
}

// TestConformance runs the verbs conformance suite on the simulated fabric.
func TestConformance(t *testing.T) {
	base := runtime.NumGoroutine()
	f := sim.NewFabric()
	verbstest.Run(t, simEnv(f))
	if a := f.Anomalies(); a != (sim.Anomalies{}) {
		t.Errorf("anomalies: %+v", a)
	}
	f.Close()
	checkGoroutines(t, base)
}

// TestConformanceWithoutWindows runs the suite on a device without type-2
// windows: the window cases skip.
func TestConformanceWithoutWindows(t *testing.T) {
	f := sim.NewFabric(sim.WithoutMemWindows())
	defer f.Close()
	verbstest.Run(t, simEnv(f))
}

// checkGoroutines waits briefly for the goroutine count to return to base.
func checkGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutines: %d, want %d\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// --- helpers for the sim-only tests ---

func newPair(t *testing.T, f *sim.Fabric, cfg verbstest.PairConfig) *verbstest.Pair {
	t.Helper()
	return verbstest.NewPair(t, simEnv(f), cfg)
}

func simQP(s *verbstest.Side) *sim.QP { return s.QP.(*sim.QP) }

// pollN polls cq once and requires exactly n completions.
func pollN(t *testing.T, cq verbs.CQ, n int, what string) []verbs.Completion {
	t.Helper()
	wcs := make([]verbs.Completion, n+8)
	got, err := cq.Poll(wcs)
	if err != nil || got != n {
		t.Fatalf("%s: polled %d completions %+v (%v), want %d", what, got, wcs[:got], err, n)
	}
	return wcs[:n]
}

func reapN(t *testing.T, cq verbs.CQ, n int, what string) []verbs.Completion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wcs, err := verbstest.Reap(ctx, cq, n)
	if err != nil {
		t.Fatalf("%s: reaped %+v: %v", what, wcs, err)
	}
	return wcs
}

func want(t *testing.T, wc verbs.Completion, id uint64, st verbs.Status) {
	t.Helper()
	if wc.ID != id || wc.Status != st {
		t.Fatalf("completion {id %d %s}, want {id %d %s}", wc.ID, wc.Status, id, st)
	}
}

func post(t *testing.T, q verbs.QP, wrs ...verbs.SendWR) {
	t.Helper()
	if bad, err := q.PostSend(wrs); err != nil {
		t.Fatalf("PostSend WR %d: %v", bad, err)
	}
}

func recv(t *testing.T, q verbs.QP, id uint64, sgl ...verbs.SGE) {
	t.Helper()
	if _, err := q.PostRecv([]verbs.RecvWR{{ID: id, SGL: sgl}}); err != nil {
		t.Fatalf("PostRecv: %v", err)
	}
}

func sendWR(id uint64, signaled bool, sgl ...verbs.SGE) verbs.SendWR {
	wr := verbs.SendWR{ID: id, Opcode: verbs.OpSend, SGL: sgl}
	if signaled {
		wr.Flags = verbs.SendSignaled
	}
	return wr
}

func state(t *testing.T, q verbs.QP) verbs.QPState {
	t.Helper()
	s, err := q.State()
	if err != nil {
		t.Fatalf("State: %v", err)
	}
	return s
}

// bindWindow binds a fresh window over [off, off+n) of b on side s and
// returns it with its rkey (manual fabric: it steps).
func bindWindow(t *testing.T, f *sim.Fabric, s *verbstest.Side, b *verbstest.Buffer, off, n uint64, access verbs.Access) (*sim.MW, uint32) {
	t.Helper()
	w, err := s.PD.AllocMW()
	if err != nil {
		t.Fatalf("AllocMW: %v", err)
	}
	t.Cleanup(func() { w.Close() })
	rkey := verbs.NextRKey(w.RKey(), uint8(w.RKey())+1)
	post(t, s.QP, verbs.SendWR{ID: 500, Opcode: verbs.OpBindMW, Flags: verbs.SendSignaled, MW: w, BindMR: b.MR,
		BindAddr: b.Addr(off), BindLength: n, BindAccess: access, BindRKey: rkey})
	f.RunUntilIdle()
	want(t, reapN(t, s.SendCQ, 1, "bind")[0], 500, verbs.StatusSuccess)
	return w.(*sim.MW), rkey
}
