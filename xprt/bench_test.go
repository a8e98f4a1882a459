package xprt_test

import (
	"context"
	"net/netip"
	"sync"
	"testing"

	"github.com/nfsrdma/nfsrdma/sunrpc"
	"github.com/nfsrdma/nfsrdma/verbs/sim"
	"github.com/nfsrdma/nfsrdma/xprt"
	"github.com/nfsrdma/nfsrdma/xprt/xprttest"
)

// Benchmarks of the transport end to end on the simulated fabric: NULL
// calls through sunrpc and xprt to an xprttest server and back. What they
// measure is the software path of a call (marshalling, credits, the send
// ring, the reply handler, wake-ups), not a device. Run with
//
//	go test -run '^$' -bench . -benchmem ./xprt/

// nullClient dials an xprttest server answering NULL on a fresh fabric.
func nullClient(b *testing.B) *sunrpc.Client {
	b.Helper()
	fab := sim.NewFabric()
	srv, err := xprttest.Start(xprttest.Config{Fabric: fab, Addr: netip.MustParseAddrPort("10.0.0.1:20049")})
	if err != nil {
		b.Fatal(err)
	}
	tr, err := xprt.Dial(b.Context(), xprt.Config{Fabric: fab, Addr: srv.Addr(), MaxIO: 64 << 10, IOBuffers: 4})
	if err != nil {
		b.Fatal(err)
	}
	rpc, err := sunrpc.NewClient(tr, sunrpc.ClientConfig{Prog: 100003, Vers: 3})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		b.Logf("client: %s", tr.Counters())
		tr.Close()
		srv.Close()
		fab.Close()
	})
	return rpc
}

func null(ctx context.Context, rpc *sunrpc.Client) error {
	res, err := rpc.Call(ctx, 0, &sunrpc.Args{})
	if err != nil {
		return err
	}
	res.Release()
	return nil
}

// BenchmarkNullSerial is one NULL call at a time: one op is one round trip.
func BenchmarkNullSerial(b *testing.B) {
	rpc := nullClient(b)
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		if err := null(ctx, rpc); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rpcs/s")
}

// BenchmarkNullConcurrent16 keeps 16 NULL calls outstanding from 16
// goroutines: one op is one call.
func BenchmarkNullConcurrent16(b *testing.B) {
	const callers = 16
	rpc := nullClient(b)
	ctx := b.Context()
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	per := b.N / callers
	for i := range callers {
		n := per
		if i < b.N%callers {
			n++
		}
		wg.Go(func() {
			for range n {
				if err := null(ctx, rpc); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if first != nil {
		b.Fatal(first)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rpcs/s")
}
