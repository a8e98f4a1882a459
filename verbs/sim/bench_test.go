package sim_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/sim"
	"github.com/nfsrdma/nfsrdma/verbs/verbstest"
)

// Benchmarks of the simulated fabric's post and poll paths: what every
// rule and fault test on sim pays per message. Run with
//
//	go test -run '^$' -bench . -benchmem ./verbs/sim/

// benchPoll reaps at least one completion from cq: poll, then wait.
func benchPoll(ctx context.Context, cq verbs.CQ, wcs []verbs.Completion) (int, error) {
	for {
		n, err := cq.Poll(wcs)
		if err != nil {
			return 0, err
		}
		if n > 0 {
			for _, wc := range wcs[:n] {
				if wc.Status != verbs.StatusSuccess {
					return 0, &verbs.CompletionError{Completion: wc}
				}
			}
			return n, nil
		}
		if err := cq.Wait(ctx); err != nil {
			return 0, err
		}
	}
}

// BenchmarkPingPong is SEND/RECV round trips on a connected pair: one op is
// the client's post of a 64-byte SEND, the server's receive completion and
// its SEND back, and the client's receive completion, each receive
// reposted. Sends are signaled one in eight and reaped as they come.
// Reported: round trips/s and allocations per round trip.
func BenchmarkPingPong(b *testing.B) {
	for _, size := range []int{64, 4096} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) { benchPingPong(b, size) })
	}
}

func benchPingPong(b *testing.B, size int) {
	f := sim.NewFabric()
	defer f.Close()
	const depth, signalEvery = 32, 8
	p := verbstest.NewPair(b, simEnv(f), verbstest.PairConfig{SendDepth: depth, RecvDepth: depth})
	ctx := b.Context()

	type side struct {
		s       *verbstest.Side
		buf     *verbstest.Buffer
		send    []verbs.SendWR
		recv    []verbs.RecvWR
		wcs     []verbs.Completion
		swcs    []verbs.Completion
		sent    int
		pending int // signaled sends not reaped
	}
	mk := func(s *verbstest.Side) *side {
		x := &side{s: s, buf: verbstest.MustBuffer(b, s.PD, 2*size, verbs.AccessLocalWrite),
			wcs: make([]verbs.Completion, 1), swcs: make([]verbs.Completion, depth)}
		x.send = []verbs.SendWR{{Opcode: verbs.OpSend, SGL: []verbs.SGE{x.buf.SGE(uint64(size), size)}}}
		x.recv = []verbs.RecvWR{{SGL: []verbs.SGE{x.buf.SGE(0, size)}}}
		for range depth / 2 {
			if _, err := s.QP.PostRecv(x.recv); err != nil {
				b.Fatal(err)
			}
		}
		return x
	}
	// post sends one message, first reaping signaled sends when two are
	// outstanding (at most 23 unreaped WRs in a queue of 32).
	post := func(ctx context.Context, x *side) error {
		if x.pending >= 2 {
			n, err := benchPoll(ctx, x.s.SendCQ, x.swcs)
			if err != nil {
				return err
			}
			x.pending -= n
		}
		x.send[0].Flags = 0
		if x.sent%signalEvery == signalEvery-1 {
			x.send[0].Flags = verbs.SendSignaled
			x.pending++
		}
		x.sent++
		_, err := x.s.QP.PostSend(x.send)
		return err
	}
	// recv waits for one message and reposts its receive.
	recv := func(ctx context.Context, x *side) error {
		if _, err := benchPoll(ctx, x.s.RecvCQ, x.wcs); err != nil {
			return err
		}
		_, err := x.s.QP.PostRecv(x.recv)
		return err
	}
	cli, srv := mk(p.Client), mk(p.Server)

	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() {
		for {
			err := recv(sctx, srv)
			if err == nil {
				err = post(sctx, srv)
			}
			if err != nil {
				served <- err
				return
			}
		}
	}()
	b.ReportAllocs()
	for b.Loop() {
		if err := post(ctx, cli); err != nil {
			b.Fatal(err)
		}
		if err := recv(ctx, cli); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "roundtrips/s")
	stop()
	if err := <-served; !errors.Is(err, context.Canceled) {
		b.Errorf("server side: %v", err)
	}
}

// BenchmarkRDMAWrite streams 64 KiB RDMA WRITEs, 16 outstanding, posted in
// chains of up to 8, one in four signaled. One op is one WRITE; the byte
// rate is the simulated fabric's copy rate.
func BenchmarkRDMAWrite(b *testing.B) {
	f := sim.NewFabric()
	defer f.Close()
	const size, depth, chain, signalEvery = 64 << 10, 16, 8, 4
	p := verbstest.NewPair(b, simEnv(f), verbstest.PairConfig{SendDepth: depth})
	src := verbstest.MustBuffer(b, p.Client.PD, size, verbs.AccessLocalWrite)
	dst := verbstest.MustBuffer(b, p.Server.PD, size, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	ctx := b.Context()
	sgl := []verbs.SGE{src.SGE(0, size)}
	wrs := make([]verbs.SendWR, chain)
	wcs := make([]verbs.Completion, depth)
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	posted, done := 0, 0
	for done < b.N {
		for posted < b.N && posted-done < depth {
			n := min(chain, b.N-posted, depth-(posted-done))
			for i := range n {
				id := posted + i
				wrs[i] = verbs.SendWR{ID: uint64(id), Opcode: verbs.OpRDMAWrite, SGL: sgl, RemoteAddr: dst.Addr(0), RKey: dst.MR.RKey()}
				if id%signalEvery == signalEvery-1 || id == b.N-1 {
					wrs[i].Flags = verbs.SendSignaled
				}
			}
			if _, err := p.Client.QP.PostSend(wrs[:n]); err != nil {
				b.Fatal(err)
			}
			posted += n
		}
		n, err := benchPoll(ctx, p.Client.SendCQ, wcs)
		if err != nil {
			b.Fatal(err)
		}
		for _, wc := range wcs[:n] {
			done = max(done, int(wc.ID)+1)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
}
