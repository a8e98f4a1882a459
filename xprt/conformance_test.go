package xprt

import (
	"context"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/sunrpc/sunrpctest"
	"github.com/nfsrdma/nfsrdma/verbs/sim"
	"github.com/nfsrdma/nfsrdma/xprt/xprttest"
)

// simTarget is an RDMA transport on the simulated fabric against an
// xprttest server that serves h; cfg's zero fields get test defaults.
func simTarget(t *testing.T, h *sunrpctest.Handler, cfg Config, scfg xprttest.Config, opts ...sim.Option) (*Transport, *xprttest.Server, *sim.Fabric) {
	t.Helper()
	fab := sim.NewFabric(append([]sim.Option{sim.PanicOnDoubleInvalidation()}, opts...)...)
	scfg.Fabric, scfg.Handler = fab, h
	srv, err := xprttest.Start(scfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Fabric, cfg.Addr = fab, srv.Addr()
	if cfg.MaxIO == 0 {
		cfg.MaxIO = 256 << 10
	}
	if cfg.IOBuffers == 0 {
		cfg.IOBuffers = 16
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tr, err := Dial(ctx, cfg)
	if err != nil {
		srv.Close()
		fab.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		t.Logf("client: %s", tr.Counters())
		t.Logf("server: %+v", srv.Stats())
		tr.Close()
		h.Close()
		srv.Close()
		if a := fab.Anomalies(); a != (sim.Anomalies{}) {
			t.Errorf("fabric anomalies: %+v", a)
		}
		if live := fab.Live(); !live.Zero() {
			t.Errorf("resources left: %+v", live)
		}
		fab.Close()
	})
	return tr, srv, fab
}

// The RDMA transport keeps the sunrpc.Transport contract on the simulated
// fabric: with the defaults (one window per chunk, remote invalidation),
// with small segments (several windows per chunk, local invalidation), and
// with per-I/O registration (no windows).
func TestTransportSuiteSim(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		opts []sim.Option
	}{
		{"windows", Config{}, nil},
		{"segments", Config{MaxSegment: 32 << 10}, nil},
		{"register", Config{}, []sim.Option{sim.WithoutMemWindows()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sunrpctest.RunTransportSuite(t, func(t *testing.T, h *sunrpctest.Handler) sunrpctest.Target {
				cfg := tc.cfg
				cfg.Timeout = 5 * time.Second
				tr, srv, _ := simTarget(t, h, cfg, xprttest.Config{}, tc.opts...)
				return sunrpctest.Target{Transport: tr, Server: srv, MaxBulk: tr.cfg.MaxIO}
			})
		})
	}
}
