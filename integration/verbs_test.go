//go:build integration

package integration

import (
	"net/netip"
	"testing"
	"time"

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
