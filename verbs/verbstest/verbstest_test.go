package verbstest_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/sim"
	"github.com/nfsrdma/nfsrdma/verbs/verbstest"
)

// TestPairHelpers shows the helpers other packages' tests use: a connected
// pair, registered buffers, and Reap.
func TestPairHelpers(t *testing.T) {
	f := sim.NewFabric()
	defer f.Close()
	env := verbstest.Env{Fabric: f, ListenAddr: netip.MustParseAddrPort("10.99.0.1:0"),
		ConnectAddr: netip.MustParseAddrPort("10.99.0.1:0"), Quirks: verbstest.SpecQuirks()}
	t.Run("SendRecv", func(t *testing.T) {
		p := verbstest.NewPair(t, env, verbstest.PairConfig{SendDepth: 4, RecvDepth: 4})
		cb := verbstest.MustBuffer(t, p.Client.PD, 4096, verbs.AccessLocalWrite)
		sb := verbstest.MustBuffer(t, p.Server.PD, 4096, verbs.AccessLocalWrite)
		if _, err := p.Server.QP.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{sb.SGE(0, 64)}}}); err != nil {
			t.Fatal(err)
		}
		copy(cb.Bytes(), "hello")
		if _, err := p.Client.QP.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.OpSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{cb.SGE(0, 5)}}}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		wcs, err := verbstest.Reap(ctx, p.Server.RecvCQ, 1)
		if err != nil || wcs[0].ByteLen != 5 || string(sb.Bytes()[:5]) != "hello" {
			t.Fatalf("receive %+v, %v", wcs, err)
		}
		if _, err := verbstest.Reap(ctx, p.Client.SendCQ, 1); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("ReapHonoursContext", func(t *testing.T) {
		p := verbstest.NewPair(t, env, verbstest.PairConfig{})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if wcs, err := verbstest.Reap(ctx, p.Client.RecvCQ, 1); !errors.Is(err, context.DeadlineExceeded) || len(wcs) != 0 {
			t.Fatalf("Reap on an idle CQ: %v, %v", wcs, err)
		}
	})
	if live := f.Live(); !live.Zero() {
		t.Fatalf("live after the pairs closed: %+v", live)
	}
}
