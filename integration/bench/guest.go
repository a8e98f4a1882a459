package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/nfsrdma/nfsrdma/verbs"
)

// Guest runs benchmark jobs inside the test-bed guest.
type Guest struct {
	Server  string // the guest's RDMA address (10.99.0.1)
	Device  string // rxe0
	Export  string // knfsd's export (/export)
	Mount   string // where the kernel client mounts it
	FileMiB int    // fio file size of KernelFioJobs
	Log     io.Writer
	Report  *Report

	// Fabric is what nfsrdma's own figures run on (verbs/ibv in the
	// guest); Perftest and KernelNFS do not need it.
	Fabric verbs.Fabric
	// Plan sizes Compare's rounds; zero fields take DefaultPlan's.
	Plan Plan
	// DialNFS, when set, replaces the connection to knfsd (tests use an
	// xprttest server on sim).
	DialNFS func(ctx context.Context) (*NFSConn, error)
	// SkipReferences makes Compare measure only nfsrdma's side: no
	// perftest, no kernel client (tests on sim).
	SkipReferences bool
	// MountBinary is nfsrdma-mount; when set, Compare also measures fio
	// through it (mounted at FUSEMount, default Mount+"-fuse") beside the
	// kernel client's fio.
	MountBinary, FUSEMount string
	// NoFUSECompare keeps Compare from measuring fio through
	// MountBinary (the workload matrix, Guest.Matrix, covers it).
	NoFUSECompare bool

	// syscalls counts every thread's system calls while the matrix runs
	// (nil: not counting).
	syscalls *syscallHist
	series   []*series // Compare's figures, one value per round
	latFile  string    // the kernel client's file of small-READ latency
}

func (g *Guest) logf(format string, args ...any) {
	fmt.Fprintf(g.Log, "[bench %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func (g *Guest) fail(what string, err error) {
	g.logf("%s: %v", what, err)
	g.Report.Errors = append(g.Report.Errors, fmt.Sprintf("%s: %v", what, err))
}

func command(ctx context.Context, name string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Time limits of the external tools: a hung perftest pair (seen once on
// the bed) or fio job must not hold the guest until its own timeout.
const (
	perftestTimeout = 90 * time.Second
	fioSlack        = 2 * time.Minute // beyond the job's --runtime
)

// perftest runs one perftest pair (server in the background, client
// against it) over rdma_cm and returns the client's output. A pair that
// fails or hangs is run once more.
func (g *Guest) perftest(ctx context.Context, tool string, args ...string) (string, error) {
	out, err := g.perftestOnce(ctx, tool, args...)
	if err != nil && ctx.Err() == nil {
		g.logf("%s failed (%s); running it again", tool, strings.SplitN(err.Error(), "\n", 2)[0])
		out, err = g.perftestOnce(ctx, tool, args...)
	}
	return out, err
}

func (g *Guest) perftestOnce(ctx context.Context, tool string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, perftestTimeout)
	defer cancel()
	common := append([]string{"-d", g.Device, "-R", "-F"}, args...)
	srv := exec.CommandContext(ctx, tool, common...)
	var srvOut strings.Builder
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		return "", err
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	var out string
	var err error
	for try := 0; try < 10 && ctx.Err() == nil; try++ {
		time.Sleep(500 * time.Millisecond)
		out, err = command(ctx, tool, append(common, g.Server)...)
		if err == nil {
			return out, nil
		}
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("%s: no result within %v: %w", tool, perftestTimeout, err)
	}
	return out, fmt.Errorf("%w\nserver: %s", err, srvOut.String())
}

// perftestBW runs one bandwidth tool at 64 KiB (extra: more flags, such as
// -n) and returns its average bandwidth in MiB/s.
func (g *Guest) perftestBW(ctx context.Context, tool string, extra ...string) (float64, error) {
	return g.perftestBWSize(ctx, tool, 64<<10, extra...)
}

// perftestBWSize is perftestBW with messages of size bytes.
func (g *Guest) perftestBWSize(ctx context.Context, tool string, size int, extra ...string) (float64, error) {
	out, err := g.perftest(ctx, tool, append([]string{"-s", fmt.Sprint(size)}, extra...)...)
	if err != nil {
		return 0, err
	}
	bw, err := ParsePerftestBW(out)
	if err == nil && bw <= 0 {
		err = fmt.Errorf("bench: perftest reported no bandwidth:\n%s", out)
	}
	return bw, err
}

// perftestLat runs ib_send_lat with 2-byte messages (extra: more flags,
// such as -e to sleep on CQ events) and returns t_typical and t_avg (µs,
// one-way).
func (g *Guest) perftestLat(ctx context.Context, extra ...string) (typical, avg float64, err error) {
	out, err := g.perftest(ctx, "ib_send_lat", append([]string{"-s", "2"}, extra...)...)
	if err != nil {
		return 0, 0, err
	}
	return ParsePerftestLat(out)
}

// Perftest measures the RDMA ceiling of the bed: ib_write_bw, ib_read_bw,
// ib_send_bw (64 KiB) and ib_send_lat.
func (g *Guest) Perftest(ctx context.Context) {
	for _, tool := range []string{"ib_write_bw", "ib_read_bw", "ib_send_bw"} {
		g.logf("%s 64KiB", tool)
		bw, err := g.perftestBW(ctx, tool)
		if err != nil {
			g.fail(tool, err)
			continue
		}
		g.Report.Add(Measure{Group: GroupPerftest, Name: tool + " 64KiB", Value: bw, Unit: "MiB/s"})
	}
	g.logf("ib_send_lat 2B")
	typ, avg, err := g.perftestLat(ctx)
	if err != nil {
		g.fail("ib_send_lat", err)
		return
	}
	for _, m := range sendLatMeasures("ib_send_lat", typ, avg) {
		g.Report.Add(m)
	}
}

// sendLatMeasures are ib_send_lat's figures (tool: "ib_send_lat", or
// "ib_send_lat -e" sleeping on CQ events), and the round trips (twice them)
// that RPCs, being round trips, are compared with.
func sendLatMeasures(tool string, typ, avg float64) []Measure {
	return []Measure{
		{Group: GroupPerftest, Name: tool + " typical", Value: typ, Unit: "us", Note: "one-way: half the round trip"},
		{Group: GroupPerftest, Name: tool + " avg", Value: avg, Unit: "us", Note: "one-way: half the round trip"},
		{Group: GroupPerftest, Name: tool + " typical round trip", Value: 2 * typ, Unit: "us", Note: "2 x typical"},
		{Group: GroupPerftest, Name: tool + " avg round trip", Value: 2 * avg, Unit: "us", Note: "2 x avg"},
	}
}

// FioJob is one fio measurement.
type FioJob struct {
	Name    string // e.g. "seq-read 1MiB qd16"
	RW      string // read, write, randread, randwrite
	BS      string
	IODepth int
	Runtime int // seconds cap (time_based for random jobs)
	SizeMiB int // the part of the file used; 0: Guest.FileMiB
	Loops   int // times the job runs over it (fio --loops); 0: once
}

// KernelFioJobs are the fio jobs run against the kernel client.
var KernelFioJobs = []FioJob{
	{Name: "seq-write 1MiB qd1", RW: "write", BS: "1M", IODepth: 1, Runtime: 30},
	{Name: "seq-write 1MiB qd16", RW: "write", BS: "1M", IODepth: 16, Runtime: 30},
	{Name: "seq-read 1MiB qd1", RW: "read", BS: "1M", IODepth: 1, Runtime: 30},
	{Name: "seq-read 1MiB qd16", RW: "read", BS: "1M", IODepth: 16, Runtime: 30},
	{Name: "rand-read 4KiB qd32", RW: "randread", BS: "4k", IODepth: 32, Runtime: 10},
}

func (g *Guest) fioSize(j FioJob) int {
	if j.SizeMiB > 0 {
		return j.SizeMiB
	}
	return g.FileMiB
}

// fioLayout writes a file of sizeMiB so that read jobs read real data.
func fioLayout(ctx context.Context, file string, sizeMiB int) error {
	_, err := command(ctx, "fio", "--name=prefill", "--filename="+file, "--rw=write", "--bs=1M",
		fmt.Sprintf("--size=%dM", sizeMiB), "--direct=1", "--ioengine=libaio", "--iodepth=16", "--output-format=json")
	return err
}

// kernelReadLatency runs fio's 4 KiB randread at iodepth 1 (psync, direct)
// on file for seconds and returns its latency, submission included.
func kernelReadLatency(ctx context.Context, file string, sizeMiB, seconds int) (FioLatency, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(seconds)*time.Second+fioSlack)
	defer cancel()
	out, err := command(ctx, "fio", "--name=lat", "--filename="+file, "--rw=randread", "--bs=4k",
		fmt.Sprintf("--size=%dM", sizeMiB), "--direct=1", "--ioengine=psync", "--iodepth=1",
		fmt.Sprintf("--runtime=%d", seconds), "--time_based", "--randrepeat=0", "--lat_percentiles=1", "--output-format=json")
	if err != nil {
		return FioLatency{}, err
	}
	return ParseFioLatency([]byte(out))
}

// fioJob runs one job on file and returns its figure: MiB/s, or IOPS for
// random jobs.
func (g *Guest) fioJob(ctx context.Context, file string, j FioJob) (Measure, error) {
	args := []string{"--name=" + strings.ReplaceAll(j.Name, " ", "_"), "--filename=" + file, "--rw=" + j.RW, "--bs=" + j.BS,
		fmt.Sprintf("--size=%dM", g.fioSize(j)), "--direct=1", "--ioengine=libaio", fmt.Sprintf("--iodepth=%d", j.IODepth),
		fmt.Sprintf("--runtime=%d", j.Runtime), "--output-format=json"}
	if strings.HasPrefix(j.RW, "rand") {
		args = append(args, "--time_based", "--randrepeat=0")
	}
	if j.Loops > 1 {
		args = append(args, fmt.Sprintf("--loops=%d", j.Loops))
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(j.Runtime)*time.Second+fioSlack)
	defer cancel()
	out, err := command(ctx, "fio", args...)
	if err != nil {
		return Measure{}, err
	}
	r, err := ParseFio([]byte(out))
	if err != nil {
		return Measure{}, err
	}
	if r.Errors > 0 {
		return Measure{}, fmt.Errorf("fio reported %d job errors", r.Errors)
	}
	if strings.HasPrefix(j.RW, "rand") {
		return Measure{Name: j.Name, Value: r.ReadIOPS + r.WriteIOPS, Unit: "IOPS"}, nil
	}
	return Measure{Name: j.Name, Value: r.ReadMiBps + r.WriteMiBps, Unit: "MiB/s"}, nil
}

// Fio runs jobs on a file under dir and records them in group.
func (g *Guest) Fio(ctx context.Context, group, dir string, jobs []FioJob) {
	file := filepath.Join(dir, "fio-bench")
	layout := 0
	for _, j := range jobs {
		layout = max(layout, g.fioSize(j))
	}
	g.logf("%s: laying out a %d MiB file", group, layout)
	if err := fioLayout(ctx, file, layout); err != nil {
		g.fail(group+" prefill", err)
		return
	}
	for _, j := range jobs {
		g.logf("%s: fio %s", group, j.Name)
		m, err := g.fioJob(ctx, file, j)
		if err != nil {
			g.fail(group+" "+j.Name, err)
			continue
		}
		m.Group = group
		g.Report.Add(m)
	}
	os.Remove(file)
}

// mountKernel mounts the export with the kernel's NFSv3/RDMA client at
// g.Mount and returns the unmount.
func (g *Guest) mountKernel(ctx context.Context) (unmount func(), err error) {
	if err := os.MkdirAll(g.Mount, 0o755); err != nil {
		return nil, err
	}
	if _, err := command(ctx, "mount", "-t", "nfs", "-o", "vers=3,proto=rdma,port=20049", g.Server+":"+g.Export, g.Mount); err != nil {
		return nil, err
	}
	return func() { command(context.Background(), "umount", g.Mount) }, nil
}

// KernelNFS mounts the export with the kernel's NFSv3/RDMA client and runs
// KernelFioJobs on it.
func (g *Guest) KernelNFS(ctx context.Context) {
	unmount, err := g.mountKernel(ctx)
	if err != nil {
		g.fail("kernel mount", err)
		return
	}
	defer unmount()
	g.Fio(ctx, GroupKernel, g.Mount, KernelFioJobs)
}

// KernelVersion is the running kernel's release.
func KernelVersion() string {
	data, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(data))
}
