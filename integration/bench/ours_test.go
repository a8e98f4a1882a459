package bench

import (
	"context"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-billy/v5/osfs"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
	"github.com/nfsrdma/nfsrdma/verbs/sim"
	"github.com/nfsrdma/nfsrdma/xprt"
	"github.com/nfsrdma/nfsrdma/xprt/xprttest"
)

// simGuest is a Guest whose own measurements run on the simulated fabric
// against an xprttest server with go-nfs over a temporary directory (memfs races under concurrent WRITEs to one file), at a tiny plan: the
// code paths of a full guest run, checked on every `go test`. The figures
// mean nothing and are not checked.
func simGuest(t *testing.T) (*Guest, *sim.Fabric) {
	t.Helper()
	fab := sim.NewFabric(sim.PanicOnDoubleInvalidation())
	h, stop, err := xprttest.NewNFSHandler(osfs.New(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := xprttest.Start(xprttest.Config{Fabric: fab, Handler: h, Addr: netip.MustParseAddrPort("10.99.0.1:20049")})
	if err != nil {
		t.Fatal(err)
	}
	const maxIO = 64 << 10
	g := &Guest{
		Server: "10.99.0.1", Export: "/", Log: io.Discard, Report: &Report{}, Fabric: fab, SkipReferences: true,
		Plan: Plan{Rounds: 2, LatIters: 20, LatWarmup: 2, BWSize: 16 << 10, BWDepth: 8, BWIters: 40, Spin: false,
			NullWarmup: 2, NullIters: 20, IOSize: maxIO, Outstanding: 4, FileMiB: 1, Passes: 2},
	}
	g.DialNFS = func(ctx context.Context) (*NFSConn, error) {
		tr, err := xprt.Dial(ctx, xprt.Config{Fabric: fab, Addr: srv.Addr(), MaxIO: maxIO, IOBuffers: 8})
		if err != nil {
			return nil, err
		}
		m, err := nfs3.NewMountClient(tr, sunrpc.AuthNone, nil)
		if err != nil {
			tr.Close()
			return nil, err
		}
		mr, err := m.Mnt(ctx, g.Export)
		if err != nil {
			tr.Close()
			return nil, err
		}
		c, err := nfs3.NewClient(tr, &nfs3.ClientOptions{Rsize: maxIO, Wsize: maxIO})
		if err != nil {
			tr.Close()
			return nil, err
		}
		return &NFSConn{Client: c, Transport: tr, Root: mr.FH}, nil
	}
	t.Cleanup(func() {
		srv.Close()
		stop()
		if live := fab.Live(); !live.Zero() {
			t.Errorf("verbs resources left: %+v", live)
		}
		fab.Close()
	})
	return g, fab
}

func TestOursOnSim(t *testing.T) {
	g, _ := simGuest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The references a guest run measures, so that every ratio resolves.
	p := g.Plan.withDefaults()
	for _, m := range append(sendLatMeasures("ib_send_lat", 1, 1),
		Measure{Group: GroupPerftest, Name: "ib_write_bw 64KiB", Value: 1},
		Measure{Group: GroupPerftest, Name: "ib_read_bw 64KiB", Value: 1},
		Measure{Group: GroupPerftest, Name: p.shapedName("ib_write_bw"), Value: 1},
		Measure{Group: GroupPerftest, Name: p.shapedName("ib_read_bw"), Value: 1},
		Measure{Group: GroupKernel, Name: p.kernelJob(false).Name, Value: 1},
		Measure{Group: GroupKernel, Name: "rand-read 4KiB qd1 latency typical", Value: 1},
		Measure{Group: GroupKernel, Name: "rand-read 4KiB qd1 latency avg", Value: 1},
		Measure{Group: GroupKernel, Name: p.kernelJob(true).Name, Value: 1},
	) {
		g.Report.Add(m)
	}
	g.Compare(ctx)
	if len(g.Report.Errors) > 0 {
		t.Fatalf("errors: %q", g.Report.Errors)
	}
	// The other completion mode of the RDMA WRITE stream runs in the
	// first round only.
	if m, ok := g.Report.Find(GroupVerbs, p.bwName(false)); !ok || m.Value <= 0 {
		t.Errorf("busy-polling RDMA WRITE stream missing: %+v", m)
	}
	for _, want := range []string{
		GroupVerbs + "/" + p.latName("typical"), GroupVerbs + "/" + p.bwName(true),
		GroupXprt + "/NULL round trip typical", GroupXprt + "/READ 4KiB round trip typical", GroupXprt + "/" + p.rpcName(false), GroupXprt + "/" + p.rpcName(false) + " zero-copy",
		GroupXprt + "/" + p.rpcName(true), GroupXprt + "/" + p.rpcName(true) + " zero-copy",
		GroupNFS + "/" + p.seqName(false), GroupNFS + "/" + p.seqName(true),
	} {
		group, name, _ := strings.Cut(want, "/")
		if m, ok := g.Report.Find(group, name); !ok || m.Value <= 0 || !strings.Contains(m.Note, "median of rounds") {
			t.Errorf("figure %s missing, zero or not the median of two rounds: %+v", want, m)
		}
	}
	if len(g.Report.Ratios) != 17 {
		t.Errorf("%d ratios, want 17: %+v", len(g.Report.Ratios), g.Report.Ratios)
	}
	if xf := g.Report.Notes[len(g.Report.Notes)-2]; !strings.Contains(xf, "zero_copy_reads 64") {
		t.Errorf("the zero-copy READs were not all zero-copy (2 rounds of 2 passes of 16 READs): %s", xf)
	}
	var md strings.Builder
	g.Report.WriteMarkdown(&md)
	t.Logf("\n%s", md.String())
}

func TestLatency(t *testing.T) {
	l := newLatency([]time.Duration{5, 1, 3, 2, 4})
	if l.Median() != 3 || l.Mean() != 3 || l.Percentile(0) != 1 || l.Percentile(100) != 5 {
		t.Fatalf("%+v: median %v mean %v", l, l.Median(), l.Mean())
	}
	if (Latency{}).Median() != 0 || (Latency{}).Mean() != 0 {
		t.Fatal("empty latency")
	}
}
