//go:build integration

package integration

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/sunrpc/sunrpctest"
	"github.com/nfsrdma/nfsrdma/verbs/ibv"
	"github.com/nfsrdma/nfsrdma/xprt"
	"github.com/nfsrdma/nfsrdma/xprt/xprttest"
)

// The sunrpc.Transport contract on the real device: the conformance suite
// (close, cancel and timeouts that leave caller memory alone, same-XID
// retries, long calls, concurrency) runs the RDMA transport over rxe
// against the in-process server, itself on verbs/ibv over rxe, so that the
// server can hold replies back and misbehave on demand as knfsd cannot.
func TestTransportSuiteRXE(t *testing.T) {
	port := uint16(21049)
	sunrpctest.RunTransportSuite(t, func(t *testing.T, h *sunrpctest.Handler) sunrpctest.Target {
		fab, err := ibv.Open()
		if err != nil {
			t.Fatal(err)
		}
		port++
		srv, err := xprttest.Start(xprttest.Config{Fabric: fab, Handler: h, Addr: netip.AddrPortFrom(serverAddr, port)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		tr, err := xprt.Dial(ctx, xprt.Config{Fabric: fab, Addr: srv.Addr(), MaxIO: 256 << 10, IOBuffers: 16, Timeout: 10 * time.Second})
		if err != nil {
			srv.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() {
			t.Logf("client: %s", tr.Counters())
			t.Logf("server: %+v", srv.Stats())
			tr.Close()
			h.Close()
			srv.Close()
		})
		return sunrpctest.Target{Transport: tr, Server: srv, MaxBulk: 256 << 10}
	})
}
