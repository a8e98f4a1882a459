package bench

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
	"github.com/nfsrdma/nfsrdma/xprt"
)

// Groups of figures.
const (
	GroupPerftest = "perftest"
	GroupKernel   = "kernel-nfs-rdma"
	GroupVerbs    = "nfsrdma-verbs"
	GroupXprt     = "nfsrdma-xprt"
	GroupNFS      = "nfsrdma-nfs3"
)

// Plan sizes nfsrdma's own measurements and the references they are
// compared with. The zero value of each field takes DefaultPlan's.
type Plan struct {
	Rounds                       int  // rounds of paired measurements; figures are their medians
	LatSize, LatWarmup, LatIters int  // verbs ping-pong (ib_send_lat -s 2: 1000 iterations)
	BWSize, BWDepth, BWIters     int  // verbs RDMA WRITE stream; ib_write_bw and ib_read_bw run -n BWIters
	Spin                         bool // busy-poll at the verbs layer, as perftest does
	NullWarmup, NullIters        int  // NULL RPCs
	IOSize                       int  // bytes per READ/WRITE RPC
	Outstanding                  int  // RPCs in flight in the transport streams
	FileMiB                      int  // the file of the transport and NFS-level comparisons
	Passes                       int  // times each comparison covers its file (fio --loops)
}

// DefaultPlan is what `testbed bench` runs: about seven minutes of guest
// time beyond the kernel baseline.
func DefaultPlan() Plan {
	return Plan{
		Rounds:  5,
		LatSize: 2, LatWarmup: 100, LatIters: 1000,
		BWSize: 64 << 10, BWDepth: 64, BWIters: 2000, Spin: true,
		NullWarmup: 50, NullIters: 1000,
		IOSize: 1 << 20, Outstanding: 16,
		FileMiB: 64, Passes: 2,
	}
}

func (p Plan) withDefaults() Plan {
	d := DefaultPlan()
	def := func(v *int, x int) {
		if *v == 0 {
			*v = x
		}
	}
	def(&p.Rounds, d.Rounds)
	def(&p.LatSize, d.LatSize)
	def(&p.LatWarmup, d.LatWarmup)
	def(&p.LatIters, d.LatIters)
	def(&p.BWSize, d.BWSize)
	def(&p.BWDepth, d.BWDepth)
	def(&p.BWIters, d.BWIters)
	def(&p.NullWarmup, d.NullWarmup)
	def(&p.NullIters, d.NullIters)
	def(&p.IOSize, d.IOSize)
	def(&p.Outstanding, d.Outstanding)
	def(&p.FileMiB, d.FileMiB)
	def(&p.Passes, d.Passes)
	return p
}

// Figure names shared by the measurements and the ratios.
func (p Plan) latName(what string) string {
	return fmt.Sprintf("send/recv %dB one-way %s", p.LatSize, what)
}
func (p Plan) bwName(events bool) string {
	n := fmt.Sprintf("RDMA WRITE %s qd%d", sizeName(p.BWSize), p.BWDepth)
	if events {
		n += " (CQ events)"
	}
	return n
}
func (p Plan) rpcName(write bool) string {
	op := "READ"
	if write {
		op = "WRITE"
	}
	return fmt.Sprintf("%s %s qd%d", op, sizeName(p.IOSize), p.Outstanding)
}
func (p Plan) shapedName(tool string) string {
	return fmt.Sprintf("%s %s qd%d", tool, sizeName(p.IOSize), p.Outstanding)
}
func (p Plan) seqName(write bool) string {
	op := "ReadAt"
	if write {
		op = "WriteAt"
	}
	return fmt.Sprintf("%s %dMiB x%d", op, p.FileMiB, p.Passes)
}
func (p Plan) kernelJob(write bool) FioJob {
	j := FioJob{RW: "read", BS: "1M", IODepth: 16, Runtime: 120, SizeMiB: p.FileMiB, Loops: p.Passes}
	op := "seq-read"
	if write {
		j.RW, op = "write", "seq-write"
	}
	j.Name = fmt.Sprintf("%s 1MiB qd16 %dMiB x%d", op, p.FileMiB, p.Passes)
	return j
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// series is one figure measured once per round.
type series struct {
	m    Measure
	vals []float64
}

// record adds a round's value of a figure.
func (g *Guest) record(group, name, unit, note string, v float64) {
	for _, s := range g.series {
		if s.m.Group == group && s.m.Name == name {
			s.vals = append(s.vals, v)
			return
		}
	}
	g.series = append(g.series, &series{m: Measure{Group: group, Name: name, Unit: unit, Note: note}, vals: []float64{v}})
}

// flushSeries adds each recorded figure to the report as the median of its
// rounds, the rounds listed in its note.
func (g *Guest) flushSeries() {
	for _, s := range g.series {
		m := s.m
		m.Value = median(s.vals)
		if len(s.vals) > 1 {
			m.Rounds = slices.Clone(s.vals)
			rs := make([]string, len(s.vals))
			for i, v := range s.vals {
				rs[i] = fmt.Sprintf("%.2f", v)
			}
			m.Note = strings.TrimPrefix(m.Note+"; median of rounds "+strings.Join(rs, ", "), "; ")
		}
		g.Report.Add(m)
	}
	g.series = nil
}

// cpuClock is the process's CPU time (user, system).
type cpuClock struct{ user, sys time.Duration }

func cpuNow() cpuClock {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return cpuClock{time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())}
}

// stepTimeout bounds each of our measurements.
const stepTimeout = 3 * time.Minute

// timed runs fn with a context bounded by stepTimeout and, in the first
// round, notes the CPU the process used: the rest of the machine's time
// went to the kernel (rxe, knfsd).
func (g *Guest) timed(ctx context.Context, round int, what string, fn func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	c0, t0 := cpuNow(), time.Now()
	err := fn(ctx)
	if err == nil && round == 0 {
		el := time.Since(t0)
		c := cpuNow()
		u, s := c.user-c0.user, c.sys-c0.sys
		g.Report.Note("%s: %.2f s wall, process CPU %.2f s user + %.2f s system (%.0f%% of one CPU)",
			what, el.Seconds(), u.Seconds(), s.Seconds(), 100*(u+s).Seconds()/el.Seconds())
	}
	return err
}

// NFSConn is an NFSv3 client over nfsrdma's transport and the export's root.
type NFSConn struct {
	Client    *nfs3.Client
	Transport *xprt.Transport
	Root      nfs3.FileHandle
}

// dialNFS connects to knfsd in the guest the way the integration tests do:
// MOUNT over TCP for the root handle, NFS over RDMA on port 20049 through
// xprt on g.Fabric, AUTH_SYS.
func (g *Guest) dialNFS(ctx context.Context) (*NFSConn, error) {
	if g.DialNFS != nil {
		return g.DialNFS(ctx)
	}
	if g.Fabric == nil {
		return nil, fmt.Errorf("no verbs fabric")
	}
	addr, err := netip.ParseAddr(g.Server)
	if err != nil {
		return nil, err
	}
	m, err := nfs3.DialMount(ctx, g.Server, 0, sunrpc.AuthNone, nil)
	if err != nil {
		return nil, fmt.Errorf("MOUNT over TCP: %w", err)
	}
	mr, err := m.Mnt(ctx, g.Export)
	m.Close()
	if err != nil {
		return nil, fmt.Errorf("MNT %s: %w", g.Export, err)
	}
	tr, err := xprt.Dial(ctx, xprt.Config{Fabric: g.Fabric, Addr: netip.AddrPortFrom(addr, 20049)})
	if err != nil {
		return nil, err
	}
	cred, err := (&sunrpc.AuthSys{MachineName: "testbed"}).Credential()
	if err != nil {
		tr.Close()
		return nil, err
	}
	c, err := nfs3.NewClient(tr, &nfs3.ClientOptions{Cred: cred})
	if err != nil {
		tr.Close()
		return nil, err
	}
	return &NFSConn{Client: c, Transport: tr, Root: mr.FH}, nil
}

// benchFile creates (or opens) name in the root and returns its handle.
func benchFile(ctx context.Context, n *NFSConn, name string) (nfs3.FileHandle, error) {
	cr, err := n.Client.Create(ctx, n.Root, name, nfs3.CreateHow{Mode: nfs3.Unchecked})
	if err != nil {
		return nil, fmt.Errorf("CREATE %s: %w", name, err)
	}
	if cr.FH != nil {
		return cr.FH, nil
	}
	lr, err := n.Client.Lookup(ctx, n.Root, name)
	if err != nil {
		return nil, fmt.Errorf("LOOKUP %s: %w", name, err)
	}
	return lr.FH, nil
}

// ourFile is a connection and a file of Plan.FileMiB on it.
type ourFile struct {
	*NFSConn
	name string
	fh   nfs3.FileHandle
}

func (g *Guest) openOurFile(ctx context.Context, name string) (*ourFile, error) {
	n, err := g.dialNFS(ctx)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	fh, err := benchFile(ctx, n, name)
	if err != nil {
		n.Client.Close()
		return nil, err
	}
	return &ourFile{NFSConn: n, name: name, fh: fh}, nil
}

func (f *ourFile) close(ctx context.Context) {
	f.Client.Remove(context.WithoutCancel(ctx), f.Root, f.name)
	f.Client.Close()
}

// Compare measures nfsrdma beside its references in Plan.Rounds rounds. In
// each round every figure of ours runs right after the reference it is
// compared with, so that the load of the host (the guest's CPUs are host
// threads) weighs on both alike:
//
//	ib_send_lat; our SEND/RECV ping-pong on g.Fabric; the same sleeping on
//	CQ events (ib_send_lat -e, ours); NULL RPCs through xprt
//	ib_write_bw -n; our RDMA WRITE stream; READs through xprt (the server
//	RDMA-WRITEs), copied to the caller's memory and zero-copy
//	ib_read_bw -n; WRITEs through xprt (the server RDMA-READs)
//	fio seq-write on the kernel client; our NFS client's WriteAt; with
//	MountBinary, the same fio through nfsrdma-mount
//	fio seq-read on the kernel client; our ReadAt; fio through
//	nfsrdma-mount
//
// Each figure is the median of its rounds. ib_send_bw runs once, before
// the rounds. Ratios are added at the end. With SkipReferences (tests on
// sim) only our side runs.
func (g *Guest) Compare(ctx context.Context) {
	p := g.Plan.withDefaults()
	defer g.flushSeries()
	addr, err := netip.ParseAddr(g.Server)
	if err != nil {
		g.fail("compare", err)
		return
	}
	ap := netip.AddrPortFrom(addr, 0)
	if g.Fabric == nil {
		g.fail("compare", fmt.Errorf("no verbs fabric"))
		return
	}
	if !g.SkipReferences {
		g.logf("ib_send_bw 64KiB")
		if bw, err := g.perftestBW(ctx, "ib_send_bw"); err != nil {
			g.fail("ib_send_bw", err)
		} else {
			g.Report.Add(Measure{Group: GroupPerftest, Name: "ib_send_bw 64KiB", Value: bw, Unit: "MiB/s", Note: "once, before the rounds"})
		}
	}
	// Our connections and files, the transport's laid out by one
	// unmeasured WRITE pass so that the READs read data.
	xf, err := g.openOurFile(ctx, "bench-xprt")
	if err != nil {
		g.fail("xprt", err)
		return
	}
	defer xf.close(ctx)
	if _, err := RPCThroughput(ctx, xf.Client, xf.fh, RPCStream{Write: true, Size: p.IOSize, FileSize: p.FileMiB << 20, Passes: 1, Outstanding: p.Outstanding}); err != nil {
		g.fail("xprt layout", err)
		return
	}
	nf, err := g.openOurFile(ctx, "bench-nfs3")
	if err != nil {
		g.fail("nfs3", err)
		return
	}
	defer nf.close(ctx)
	buf := make([]byte, p.FileMiB<<20)
	for i := range buf {
		buf[i] = byte(i>>12 + i)
	}
	kernelFile := ""
	if !g.SkipReferences {
		unmount, err := g.mountKernel(ctx)
		if err != nil {
			g.fail("kernel mount", err)
			return
		}
		defer unmount()
		kernelFile = filepath.Join(g.Mount, "fio-compare")
		lat := filepath.Join(g.Mount, "fio-latency")
		if err := fioLayout(ctx, lat, latFileMiB); err != nil {
			g.fail("kernel latency file", err)
		} else {
			g.latFile = lat
			defer command(context.WithoutCancel(ctx), "rm", "-f", lat)
		}
	}
	fuseFile := ""
	if g.MountBinary != "" && !g.SkipReferences && !g.NoFUSECompare {
		f, unmount, err := g.mountFUSE(ctx, p)
		if err != nil {
			g.fail("nfsrdma-mount", err)
		} else {
			defer unmount()
			defer os.Remove(f)
			fuseFile = f
		}
	}

	clock := ClockCost()
	spinNote := "busy-polling"
	if !p.Spin {
		spinNote = "CQ events"
	}
	for round := range p.Rounds {
		g.logf("round %d of %d", round+1, p.Rounds)
		g.roundLatency(ctx, round, p, ap, clock, spinNote, xf)
		g.roundWriteChunks(ctx, round, p, ap, xf)
		g.roundReadChunks(ctx, round, p, xf)
		g.roundNFS(ctx, round, p, nf, buf, kernelFile, fuseFile)
	}
	if fuseFile != "" {
		g.noteMountStats(ctx)
	}
	if kernelFile != "" {
		command(context.WithoutCancel(ctx), "rm", "-f", kernelFile)
	}
	g.Report.Note("xprt counters (NULL, WRITE and READ streams; registration %v): %s", xf.Transport.RegistrationMode(), xf.Transport.Counters())
	g.Report.Note("nfs3 transport counters (WriteAt, ReadAt): %s", nf.Transport.Counters())
	g.flushSeries()
	g.Ratios()
}

// roundLatency: ib_send_lat, our ping-pong (also at GOMAXPROCS=4 when
// busy-polling), NULL round trips.
func (g *Guest) roundLatency(ctx context.Context, round int, p Plan, ap netip.AddrPort, clock time.Duration, spinNote string, xf *ourFile) {
	sendLat := func(tool string, extra ...string) {
		if g.SkipReferences {
			return
		}
		g.logf("%s 2B", tool)
		if typ, avg, err := g.perftestLat(ctx, extra...); err != nil {
			g.fail(tool, err)
		} else {
			for _, m := range sendLatMeasures(tool, typ, avg) {
				g.record(m.Group, m.Name, m.Unit, m.Note, m.Value)
			}
		}
	}
	pingPong := func(procs int, spin bool, suffix, note string) {
		if procs > 0 {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		}
		g.logf("verbs: send/recv ping-pong %dB x%d%s", p.LatSize, p.LatIters, suffix)
		sctx, cancel := context.WithTimeout(ctx, stepTimeout)
		defer cancel()
		lat, err := PingPong(sctx, g.Fabric, ap, ap, PingPongConfig{Size: p.LatSize, Warmup: p.LatWarmup, Iters: p.LatIters, Spin: spin})
		if err != nil {
			g.fail("verbs ping-pong"+suffix, err)
			return
		}
		g.record(GroupVerbs, p.latName("typical")+suffix, "us", note, us(lat.Median()))
		g.record(GroupVerbs, p.latName("avg")+suffix, "us", note, us(lat.Mean()))
		if suffix == "" {
			g.record(GroupVerbs, p.latName("p99"), "us", note, us(lat.Percentile(99)))
		}
	}
	sendLat("ib_send_lat")
	pingPong(0, p.Spin, "", fmt.Sprintf("half the round trip less a %.1f us clock read, %s", us(clock), spinNote))
	if p.Spin && runtime.GOMAXPROCS(0) < 4 {
		// The two busy-polling goroutines hold both Ps. With no P idle,
		// the runtime's sysmon retakes the P of a goroutine that stays in
		// a cgo call (rxe's doorbell is a system call) for over 20 µs and
		// starts another thread for it, which competes with the spinners
		// for the guest's two CPUs. With spare Ps it does not: the same
		// ping-pong at GOMAXPROCS=4 shows what that costs. No ratio.
		pingPong(4, true, " GOMAXPROCS=4", fmt.Sprintf("as above with GOMAXPROCS=4 (default %d); no ratio", runtime.GOMAXPROCS(0)))
	}
	// The interrupt-driven pair: perftest sleeping on CQ events, and our
	// ping-pong waiting on the completion channel, which is how the
	// transport waits. A NULL RPC pays such wake-ups at both ends (knfsd
	// never busy-polls), so it is compared with this too.
	if p.Spin {
		sendLat("ib_send_lat -e", "-e")
		pingPong(0, false, " (CQ events)", fmt.Sprintf("half the round trip less a %.1f us clock read, CQ events", us(clock)))
	}
	g.logf("xprt: %d NULL calls", p.NullIters)
	sctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	lat, err := NullLatency(sctx, xf.Client, p.NullWarmup, p.NullIters)
	if err != nil {
		g.fail("xprt NULL", err)
		return
	}
	note := "one call at a time (includes a clock read)"
	g.record(GroupXprt, "NULL round trip typical", "us", note, us(lat.Median()))
	g.record(GroupXprt, "NULL round trip avg", "us", note, us(lat.Mean()))
	g.record(GroupXprt, "NULL round trip p99", "us", note, us(lat.Percentile(99)))

	// A small READ, beside the kernel client's: the same knfsd work and
	// wake-ups at the server, so this is the fair latency reference.
	if g.latFile != "" {
		g.logf("kernel: fio randread 4KiB qd1 for %d s", latSeconds)
		if kl, err := kernelReadLatency(ctx, g.latFile, latFileMiB, latSeconds); err != nil {
			g.fail("kernel fio randread 4KiB qd1", err)
		} else {
			note := "fio randread, psync, direct: submission to completion"
			g.record(GroupKernel, "rand-read 4KiB qd1 latency typical", "us", note, us(kl.Median))
			g.record(GroupKernel, "rand-read 4KiB qd1 latency avg", "us", note, us(kl.Mean))
		}
	}
	g.logf("xprt: READ 4KiB x%d, one at a time", p.NullIters)
	rl, err := ReadLatency(sctx, xf.Client, xf.fh, 4096, p.FileMiB<<20, p.NullWarmup, p.NullIters)
	if err != nil {
		g.fail("xprt READ 4KiB latency", err)
		return
	}
	note = "nfs3.Client.Read at random offsets, one at a time"
	g.record(GroupXprt, "READ 4KiB round trip typical", "us", note, us(rl.Median()))
	g.record(GroupXprt, "READ 4KiB round trip avg", "us", note, us(rl.Mean()))
}

// The kernel client's small-READ latency file and run.
const (
	latFileMiB = 16
	latSeconds = 8
)

// roundWriteChunks: ib_write_bw, our RDMA WRITE stream, READs through xprt
// (their data comes back by RDMA WRITE).
func (g *Guest) roundWriteChunks(ctx context.Context, round int, p Plan, ap netip.AddrPort, xf *ourFile) {
	if !g.SkipReferences {
		g.logf("ib_write_bw 64KiB -n %d", p.BWIters)
		if bw, err := g.perftestBW(ctx, "ib_write_bw", "-n", fmt.Sprint(p.BWIters)); err != nil {
			g.fail("ib_write_bw", err)
		} else {
			g.record(GroupPerftest, "ib_write_bw 64KiB", "MiB/s", fmt.Sprintf("-n %d", p.BWIters), bw)
		}
		g.perftestShaped(ctx, p, "ib_write_bw")
	}
	modes := []bool{p.Spin}
	if round == 0 {
		modes = append(modes, !p.Spin) // the other completion mode, once
	}
	for _, spin := range modes {
		name := p.bwName(!spin)
		g.logf("verbs: %s x%d", name, p.BWIters)
		var bw float64
		err := g.timed(ctx, round, "verbs "+name, func(ctx context.Context) (err error) {
			bw, err = WriteBandwidth(ctx, g.Fabric, ap, ap, BandwidthConfig{Size: p.BWSize, Depth: p.BWDepth, Iters: p.BWIters, Spin: spin})
			return err
		})
		if err != nil {
			g.fail("verbs "+name, err)
			continue
		}
		note := "busy-polling"
		if !spin {
			note = "CQ events"
		}
		g.record(GroupVerbs, name, "MiB/s", note, bw)
	}
	g.rpcStream(ctx, round, p, xf, false, false)
	g.rpcStream(ctx, round, p, xf, false, true)
}

// roundReadChunks: ib_read_bw, WRITEs through xprt (the server pulls
// their data by RDMA READ).
func (g *Guest) roundReadChunks(ctx context.Context, round int, p Plan, xf *ourFile) {
	if !g.SkipReferences {
		g.logf("ib_read_bw 64KiB -n %d", p.BWIters)
		if bw, err := g.perftestBW(ctx, "ib_read_bw", "-n", fmt.Sprint(p.BWIters)); err != nil {
			g.fail("ib_read_bw", err)
		} else {
			g.record(GroupPerftest, "ib_read_bw 64KiB", "MiB/s", fmt.Sprintf("-n %d", p.BWIters), bw)
		}
		g.perftestShaped(ctx, p, "ib_read_bw")
	}
	g.rpcStream(ctx, round, p, xf, true, false)
	g.rpcStream(ctx, round, p, xf, true, true)
}

// perftestShaped runs tool in the shape of the transport's streams: messages
// of Plan.IOSize, Plan.Outstanding in flight (-t), as many bytes as a
// stream moves.
func (g *Guest) perftestShaped(ctx context.Context, p Plan, tool string) {
	name := p.shapedName(tool)
	iters := max(p.FileMiB<<20*p.Passes/p.IOSize, 16)
	g.logf("%s -n %d", name, iters)
	bw, err := g.perftestBWSize(ctx, tool, p.IOSize, "-t", fmt.Sprint(p.Outstanding), "-n", fmt.Sprint(iters))
	if err != nil {
		g.fail(name, err)
		return
	}
	g.record(GroupPerftest, name, "MiB/s", fmt.Sprintf("-t %d -n %d: the shape of the transport's streams", p.Outstanding, iters), bw)
}

// rpcStream runs READs or WRITEs through xprt; borrow makes each READ land
// in a buffer the transport lends (xprt.Transport.Borrow: no copy).
func (g *Guest) rpcStream(ctx context.Context, round int, p Plan, xf *ourFile, write, borrow bool) {
	name := p.rpcName(write)
	s := RPCStream{Write: write, Size: p.IOSize, FileSize: p.FileMiB << 20, Passes: p.Passes, Outstanding: p.Outstanding}
	note := fmt.Sprintf("nfs3.Client.Read into the caller's memory (copied), %d goroutines", p.Outstanding)
	if write {
		note = fmt.Sprintf("nfs3.Client.Write UNSTABLE + COMMIT, %d goroutines", p.Outstanding)
	}
	if borrow {
		name += " zero-copy"
		note = fmt.Sprintf("nfs3.Client.Read into buffers lent by xprt.Transport.Borrow (no copy), %d goroutines", p.Outstanding)
		if write {
			note = fmt.Sprintf("nfs3.Client.Write UNSTABLE + COMMIT from buffers lent by xprt.Transport.Borrow (no copy), %d goroutines", p.Outstanding)
		}
		s.Borrow = func(ctx context.Context) ([]byte, func(), error) {
			b, err := xf.Transport.Borrow(ctx)
			if err != nil {
				return nil, nil, err
			}
			return b.Bytes()[:p.IOSize], b.Release, nil
		}
	}
	g.logf("xprt: %s over %d MiB x%d", name, p.FileMiB, p.Passes)
	var bw float64
	err := g.timed(ctx, round, "xprt "+name, func(ctx context.Context) (err error) {
		bw, err = RPCThroughput(ctx, xf.Client, xf.fh, s)
		return err
	})
	if err != nil {
		g.fail("xprt "+name, err)
		return
	}
	g.record(GroupXprt, name, "MiB/s", note, bw)
}

// roundNFS: fio seq-write on the kernel client, our WriteAt, the same fio
// through nfsrdma-mount (when fuseFile is set); fio seq-read, our ReadAt,
// fio through nfsrdma-mount.
func (g *Guest) roundNFS(ctx context.Context, round int, p Plan, nf *ourFile, buf []byte, kernelFile, fuseFile string) {
	for _, write := range []bool{true, false} {
		if kernelFile != "" {
			g.kernelRound(ctx, p, write, kernelFile)
		}
		name := p.seqName(write)
		g.logf("nfs3: %s", name)
		var bw float64
		err := g.timed(ctx, round, "nfs3 "+name, func(ctx context.Context) (err error) {
			bw, err = SeqThroughput(ctx, nf.Client, nf.fh, write, buf, p.Passes)
			return err
		})
		if err != nil {
			g.fail("nfs3 "+name, err)
		} else {
			g.record(GroupNFS, name, "MiB/s", fmt.Sprintf("window %d, whole file per call", nfs3.DefaultWindow), bw)
		}
		if fuseFile != "" {
			g.fuseRound(ctx, p, write, fuseFile)
		}
	}
}

// Ratios records nfsrdma's figures against their references in this run.
// Every ratio is ours/theirs; latency targets are ceilings, throughput
// targets floors.
func (g *Guest) Ratios() {
	p := g.Plan.withDefaults()
	r := g.Report
	pt := func(name string) [2]string { return [2]string{GroupPerftest, name} }
	kn := func(write bool) [2]string { return [2]string{GroupKernel, p.kernelJob(write).Name} }
	r.AddRatio("verbs latency typical (ping-pong / ib_send_lat)", [2]string{GroupVerbs, p.latName("typical")}, pt("ib_send_lat typical"), "lower", 1.2)
	r.AddRatio("verbs latency avg (ping-pong / ib_send_lat)", [2]string{GroupVerbs, p.latName("avg")}, pt("ib_send_lat avg"), "lower", 1.2)
	r.AddRatio("verbs RDMA WRITE bw (ours / ib_write_bw)", [2]string{GroupVerbs, p.bwName(!p.Spin)}, pt("ib_write_bw 64KiB"), "higher", 0.9)
	r.AddRatio("xprt NULL RTT typical (/ ib_send_lat round trip)", [2]string{GroupXprt, "NULL round trip typical"}, pt("ib_send_lat typical round trip"), "lower", 1.2)
	r.AddRatio("xprt NULL RTT avg (/ ib_send_lat round trip)", [2]string{GroupXprt, "NULL round trip avg"}, pt("ib_send_lat avg round trip"), "lower", 1.2)
	if p.Spin {
		// Against the interrupt-driven reference (how the transport and
		// knfsd wait).
		r.AddRatio("verbs latency typical, CQ events (ping-pong / ib_send_lat -e)", [2]string{GroupVerbs, p.latName("typical") + " (CQ events)"}, pt("ib_send_lat -e typical"), "lower", 1.2)
		r.AddRatio("xprt NULL RTT typical (/ ib_send_lat -e round trip)", [2]string{GroupXprt, "NULL round trip typical"}, pt("ib_send_lat -e typical round trip"), "lower", 1.2)
	}
	// The transport's streams against perftest in their own shape (1 MiB,
	// 16 in flight) and at perftest's 64 KiB.
	for _, ref := range []struct{ write, read string }{
		{p.shapedName("ib_write_bw"), p.shapedName("ib_read_bw")},
		{"ib_write_bw 64KiB", "ib_read_bw 64KiB"},
	} {
		r.AddRatio("xprt READ bw (/ "+ref.write+")", [2]string{GroupXprt, p.rpcName(false)}, pt(ref.write), "higher", 0.9)
		r.AddRatio("xprt READ zero-copy bw (/ "+ref.write+")", [2]string{GroupXprt, p.rpcName(false) + " zero-copy"}, pt(ref.write), "higher", 0.9)
		r.AddRatio("xprt WRITE bw (/ "+ref.read+")", [2]string{GroupXprt, p.rpcName(true)}, pt(ref.read), "higher", 0.9)
		r.AddRatio("xprt WRITE zero-copy bw (/ "+ref.read+")", [2]string{GroupXprt, p.rpcName(true) + " zero-copy"}, pt(ref.read), "higher", 0.9)
	}
	// The library's latency target: a 4 KiB READ within 1.1x of the kernel client's.
	r.AddRatio("xprt READ 4KiB latency typical (/ kernel client fio qd1)", [2]string{GroupXprt, "READ 4KiB round trip typical"}, [2]string{GroupKernel, "rand-read 4KiB qd1 latency typical"}, "lower", 1.1)
	r.AddRatio("xprt READ 4KiB latency avg (/ kernel client fio qd1)", [2]string{GroupXprt, "READ 4KiB round trip avg"}, [2]string{GroupKernel, "rand-read 4KiB qd1 latency avg"}, "lower", 1.1)
	r.AddRatio("nfs3 seq read (ReadAt / kernel fio)", [2]string{GroupNFS, p.seqName(false)}, kn(false), "higher", 1.0)
	r.AddRatio("nfs3 seq write (WriteAt / kernel fio)", [2]string{GroupNFS, p.seqName(true)}, kn(true), "higher", 1.0)
	if g.MountBinary != "" && !g.SkipReferences && !g.NoFUSECompare {
		g.fuseRatios()
	}
}
