package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The workload matrix: everyday work on the kernel's NFSv3/RDMA mount and
// on nfsrdma-mount, side by side in one guest run. Both are mounted at
// once, each working in its own directory of the export; every workload
// runs on one right after the other (which goes first alternates by
// round), so that both see the same load of the host. A cold workload gets
// a fresh mount and dropped caches first. The RPCs each client sent for a
// workload are read from the client's own counters before and after it.

// Groups of the matrix.
const (
	MatrixFioDirect   = "fio direct"
	MatrixFioBuffered = "fio buffered"
	MatrixSmallFiles  = "small files"
	MatrixNconnect    = "nconnect"
)

// MatrixPlan sizes the matrix.
type MatrixPlan struct {
	Rounds      int
	FioRuntime  int   // seconds of each fio job
	FioFileMiB  int   // the direct and buffered-read jobs' file
	BufWriteMiB int   // the buffered write's file: larger than DirtyBytes
	DirtyBytes  int64 // vm.dirty_bytes during the buffered write
	SmallFiles  int   // files of SmallKiB extracted by tar
	SmallDirs   int
	SmallKiB    int
	Dirs        int // mkdir, then rmdir
	Renames     int
	TreeFiles   int // the source-like tree copied in and out
	BigDir      int // entries of the directory listed cold
	Nconnect    []int
	// Floor runs every workload but the nconnect ones a third time, on
	// the FUSE floor (floor.go): a go-fuse loopback of the export's
	// directory, no network.
	Floor       bool
	StepTimeout time.Duration // of one workload on one client
	// Only, if set, runs just the workloads whose "group/name" it matches
	// (a developer's loop over a few rows; a row may need one before it:
	// the page-cache read reads the file the direct fio jobs lay out, the
	// small-file rows work on what tar -x made).
	Only *regexp.Regexp `json:"-"`
}

// DefaultMatrixPlan is what `testbed bench` runs.
func DefaultMatrixPlan() MatrixPlan {
	return MatrixPlan{
		Rounds: 3, FioRuntime: 5, FioFileMiB: 64, BufWriteMiB: 128, DirtyBytes: 32 << 20,
		SmallFiles: 2000, SmallDirs: 40, SmallKiB: 4, Dirs: 1000, Renames: 1000, TreeFiles: 600, BigDir: 10000,
		Nconnect: []int{1, 2, 4}, Floor: true, StepTimeout: 5 * time.Minute,
	}
}

// QuickMatrixPlan is `testbed bench -quick`: one round of smaller sizes,
// for development.
func QuickMatrixPlan() MatrixPlan {
	return MatrixPlan{
		Rounds: 1, FioRuntime: 3, FioFileMiB: 16, BufWriteMiB: 48, DirtyBytes: 16 << 20,
		SmallFiles: 400, SmallDirs: 8, SmallKiB: 4, Dirs: 200, Renames: 200, TreeFiles: 200, BigDir: 2000,
		Nconnect: []int{1, 2, 4}, Floor: true, StepTimeout: 3 * time.Minute,
	}
}

// MatrixRow is one workload of the matrix: both clients' figures per round
// and the ratio, oriented so that above 1 means nfsrdma-mount is better
// (a throughput ratio ours/kernel, or a time ratio kernel/ours).
type MatrixRow struct {
	Group  string    `json:"group"`
	Name   string    `json:"name"`
	Unit   string    `json:"unit"`   // "MiB/s", "IOPS" or "s"
	Better string    `json:"better"` // "higher" (throughput) or "lower" (time)
	Kernel []float64 `json:"kernel"` // per round; 0: failed
	Ours   []float64 `json:"ours"`
	// Rounds are the per-round ratios of the rounds where both clients
	// measured; Ratio is their median, Min and Max their spread.
	Rounds []float64 `json:"rounds,omitempty"`
	Ratio  float64   `json:"ratio"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Target float64   `json:"target"` // the floor of Ratio
	Met    bool      `json:"met"`
	Per    string    `json:"per"` // what the RPC counts are divided by: "I/O", "file"...
	RPCs   [2]RowRPC `json:"rpcs"`
	// FUSE is nfsrdma-mount's FUSE requests per Per unit by kind, over
	// all rounds, and FUSETotal their sum: each is a round trip between
	// the application and the mount server, with or without an RPC.
	FUSE      map[string]float64 `json:"fuse_per_unit,omitempty"`
	FUSETotal float64            `json:"fuse_total,omitempty"`
	Note      string             `json:"note,omitempty"`
	Unsupprt  string             `json:"unsupported,omitempty"` // why nfsrdma-mount was not measured
	// Floor is the FUSE floor's figure per round (MatrixPlan.Floor; 0:
	// not measured), and FloorRatio the median of its per-round ratios
	// against the kernel, oriented as Ratio: the most a FUSE file system
	// reaches on this work on the bed.
	Floor      []float64 `json:"floor,omitempty"`
	FloorRatio float64   `json:"floor_ratio,omitempty"`
	// Cost is what each client's work cost per Per unit (opcost.go):
	// the kernel's, nfsrdma-mount's and the floor's, those measured.
	Cost []OpCost `json:"cost,omitempty"`
}

// CostOf is the cost of client's work ("kernel", "nfsrdma-mount", "FUSE
// floor"); nil when not measured.
func (x MatrixRow) CostOf(client string) *OpCost {
	for i := range x.Cost {
		if x.Cost[i].Client == client {
			return &x.Cost[i]
		}
	}
	return nil
}

// RowRPC is one client's RPCs for a workload.
type RowRPC struct {
	Client string `json:"client"`
	// PerOp is the RPCs per Per unit of work (e.g. per I/O, per file) by
	// procedure, over all rounds; Total their sum.
	PerOp map[string]float64 `json:"per_op"`
	Total float64            `json:"total"`
	// Payload is the mean bytes per READ reply and per WRITE call
	// (headers included), over all rounds.
	Payload map[string]float64 `json:"payload_bytes,omitempty"`
	// Last is the raw counts of the last round that measured, and Units
	// the work they were for.
	Last  RPCCounts `json:"last"`
	Units int64     `json:"units"`
}

// Medians of the rows' values.
func (x MatrixRow) KernelMedian() float64 { return medianNonZero(x.Kernel) }
func (x MatrixRow) OursMedian() float64   { return medianNonZero(x.Ours) }
func (x MatrixRow) FloorMedian() float64  { return medianNonZero(x.Floor) }

func medianNonZero(v []float64) float64 {
	var nz []float64
	for _, x := range v {
		if x > 0 {
			nz = append(nz, x)
		}
	}
	return median(nz)
}

// GeoMean is the geometric mean of the rows' ratios (rows without one are
// left out) and how many rows it covers.
func GeoMean(rows []MatrixRow) (float64, int) {
	var s float64
	n := 0
	for _, x := range rows {
		if x.Ratio > 0 {
			s += math.Log(x.Ratio)
			n++
		}
	}
	if n == 0 {
		return 0, 0
	}
	return math.Exp(s / float64(n)), n
}

// sample is one client's measurement of one workload in one round.
type sample struct {
	value float64
	units int64
	rpcs  RPCCounts
	fuse  FUSECounts // nfsrdma-mount's FUSE requests; nil for the others
	cost  *costDelta // what the work cost (opcost.go); nil: not measured
}

// cell gathers a workload's samples over the rounds.
type cell struct {
	w           *workload
	kernel      []*sample // per round; nil: not measured
	ours        []*sample
	floor       []*sample
	unsupported string
}

// floorName is the FUSE floor's client name.
const floorName = "FUSE floor"

// mclient is one of the two clients under test, or the FUSE floor.
type mclient struct {
	name     string // "kernel", "nfsrdma-mount" or "FUSE floor"
	key      string // the directory of its work in the export: "kernel", "ours", "floor"
	dir      string // mount point
	nconnect int    // 0: not given
	g        *Guest
	mounted  bool
	floor    *floorProc // the floor's loopback server while mounted
}

func (c *mclient) ours() bool    { return c.key == "ours" }
func (c *mclient) isFloor() bool { return c.key == "floor" }

// work is the client's directory in the mount.
func (c *mclient) work() string { return filepath.Join(c.dir, "bench", c.key) }

func (c *mclient) opts() string {
	o := "vers=3,proto=rdma"
	if !c.ours() {
		o += ",port=20049"
	}
	if c.nconnect > 0 {
		o += fmt.Sprintf(",nconnect=%d", c.nconnect)
	}
	return o
}

// ErrNconnect reports a mount helper that does not accept nconnect=.
var ErrNconnect = errors.New("nconnect not supported")

func (c *mclient) mount(ctx context.Context) error {
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return err
	}
	var out string
	var err error
	spec := c.g.Server + ":" + c.g.Export
	if c.isFloor() {
		p, err := startFloor(ctx, c.g.Export, c.dir)
		if err != nil {
			return err
		}
		c.floor, c.mounted = p, true
		return nil
	}
	if c.ours() {
		out, err = command(ctx, c.g.MountBinary, "-o", c.opts(), spec, c.dir)
	} else {
		out, err = command(ctx, "mount", "-t", "nfs", "-o", c.opts(), spec, c.dir)
	}
	if err != nil {
		if c.nconnect > 0 && strings.Contains(out, "nconnect") {
			return fmt.Errorf("%s: %w: %s", c.name, ErrNconnect, strings.TrimSpace(out))
		}
		return fmt.Errorf("mounting %s: %w", c.name, err)
	}
	c.mounted = true
	return nil
}

func (c *mclient) unmount() {
	if !c.mounted {
		return
	}
	c.mounted = false
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	if c.isFloor() {
		c.floor.stop()
		c.floor = nil
		if mounted(c.dir) {
			err = errors.New("the loopback is still mounted")
		}
	} else if c.ours() {
		_, err = command(ctx, c.g.MountBinary, "-u", c.dir)
	} else {
		_, err = command(ctx, "umount", c.dir)
	}
	if err != nil {
		c.g.logf("unmounting %s: %v; lazily", c.dir, err)
		command(ctx, "umount", "-l", c.dir)
	}
}

// remount gives the client a fresh mount.
func (c *mclient) remount(ctx context.Context) error {
	c.unmount()
	return c.mount(ctx)
}

// counters are a client's counters at one time.
type counters struct {
	rpcs RPCCounts
	fuse FUSECounts // nfsrdma-mount's FUSE requests; nil for the others
	// pid is the FUSE server process (0: the kernel client), allocs its
	// Go heap allocations so far (-1: not reported).
	pid    int
	allocs int64
}

// counters reads the client's per-operation counters, and nfsrdma-mount's
// FUSE requests and Go allocations.
func (c *mclient) counters(ctx context.Context) (counters, error) {
	if c.isFloor() {
		return counters{rpcs: RPCCounts{}, pid: c.floor.cmd.Process.Pid, allocs: -1}, nil // no network
	}
	if c.ours() {
		out, err := command(ctx, c.g.MountBinary, "stats", c.dir)
		if err != nil {
			return counters{}, err
		}
		r, err := ParseOurStats(out)
		if err != nil {
			return counters{}, err
		}
		f, err := ParseOurFUSE(out)
		if err != nil {
			return counters{}, err
		}
		pid, allocs, err := ParseOurGo(out)
		return counters{rpcs: r, fuse: f, pid: pid, allocs: allocs}, err
	}
	data, err := os.ReadFile("/proc/self/mountstats")
	if err != nil {
		return counters{}, err
	}
	r, err := ParseMountstats(string(data), c.dir)
	return counters{rpcs: r, allocs: -1}, err
}

// dropCaches writes back and drops the guest's page cache, dentries and
// inodes.
func dropCaches() error {
	syscall.Sync()
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0o200)
}

// wctx is what a workload runs with.
type wctx struct {
	g     *Guest
	c     *mclient
	p     MatrixPlan
	round int
	local string // the guest-local tmpfs with the inputs
}

// rdir is the client's directory of this round.
func (w *wctx) rdir() string { return filepath.Join(w.c.work(), fmt.Sprintf("r%d", w.round)) }

// fioFile is the client's laid-out fio file.
func (w *wctx) fioFile() string { return filepath.Join(w.c.work(), "fio") }

// workload is one line of the matrix.
type workload struct {
	group, name string
	unit        string // "MiB/s", "IOPS" or "s"
	per         string // the unit of work RPCs are counted per
	cold        bool   // a fresh mount and dropped caches first
	target      float64
	note        string
	run         func(ctx context.Context, w *wctx) (value float64, units int64, err error)
}

func (w *workload) better() string {
	if w.unit == "s" {
		return "lower"
	}
	return "higher"
}

// fioSpec is one fio job of the matrix.
type fioSpec struct {
	rw      string
	bs      string
	depth   int
	mixRead int  // randrw: percentage of reads
	direct  bool // else buffered, psync
}

func (f fioSpec) args(file string, p MatrixPlan) []string {
	a := []string{"--name=job", "--filename=" + file, "--rw=" + f.rw, "--bs=" + f.bs,
		fmt.Sprintf("--size=%dM", p.FioFileMiB), fmt.Sprintf("--runtime=%d", p.FioRuntime), "--time_based",
		"--randrepeat=0", "--output-format=json"}
	if f.direct {
		a = append(a, "--direct=1", "--ioengine=libaio", fmt.Sprintf("--iodepth=%d", f.depth))
	} else {
		// --invalidate=0: fio would drop the file's cached pages first.
		a = append(a, "--direct=0", "--ioengine=psync", "--invalidate=0")
	}
	if f.mixRead > 0 {
		a = append(a, fmt.Sprintf("--rwmixread=%d", f.mixRead))
	}
	return a
}

// runFio runs a job and returns MiB/s (iops false) or IOPS, and its I/Os.
func runFio(ctx context.Context, file string, p MatrixPlan, f fioSpec, iops bool) (float64, int64, error) {
	out, err := command(ctx, "fio", f.args(file, p)...)
	if err != nil {
		return 0, 0, err
	}
	r, err := ParseFio([]byte(out))
	if err != nil {
		return 0, 0, err
	}
	if r.Errors > 0 {
		return 0, 0, fmt.Errorf("fio reported %d job errors", r.Errors)
	}
	if iops {
		return r.ReadIOPS + r.WriteIOPS, r.IOs, nil
	}
	return r.ReadMiBps + r.WriteMiBps, r.IOs, nil
}

func fioWorkload(group, name string, f fioSpec, target float64) *workload {
	iops := strings.HasPrefix(f.rw, "rand") && f.bs == "4k"
	unit := "MiB/s"
	if iops {
		unit = "IOPS"
	}
	return &workload{group: group, name: name, unit: unit, per: "I/O", target: target,
		run: func(ctx context.Context, w *wctx) (float64, int64, error) {
			return runFio(ctx, w.fioFile(), w.p, f, iops)
		}}
}

// timedCmd runs a command and returns its wall time in seconds; its
// standard output goes to stdout (nil: discarded).
func timedCmd(ctx context.Context, stdout *bytes.Buffer, name string, args ...string) (float64, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var errb bytes.Buffer
	if stdout != nil {
		cmd.Stdout = stdout
	}
	cmd.Stderr = &errb
	cmd.WaitDelay = 10 * time.Second
	t0 := time.Now()
	err := cmd.Run()
	el := time.Since(t0).Seconds()
	if err != nil {
		return 0, fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, firstLines(errb.String(), 5))
	}
	return el, nil
}

func firstLines(s string, n int) string {
	l := strings.SplitN(strings.TrimSpace(s), "\n", n+1)
	if len(l) > n {
		l = l[:n]
	}
	return strings.Join(l, " | ")
}

// timedLoop runs fn(i) for i < n and returns the wall time in seconds; a
// call that hangs past ctx is abandoned.
func timedLoop(ctx context.Context, n int, fn func(i int) error) (float64, error) {
	done := make(chan error, 1)
	t0 := time.Now()
	go func() {
		for i := range n {
			if err := ctx.Err(); err != nil {
				done <- err
				return
			}
			if err := fn(i); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		return time.Since(t0).Seconds(), err
	case <-ctx.Done():
		return 0, fmt.Errorf("abandoned: %w", ctx.Err())
	}
}

// countLines counts the lines of ls -l output that list a regular file.
func countFiles(ls []byte) int {
	n := 0
	for _, l := range bytes.Split(ls, []byte("\n")) {
		if len(l) > 0 && l[0] == '-' {
			n++
		}
	}
	return n
}

// setDirtyBytes sets vm.dirty_bytes and vm.dirty_background_bytes (half
// of it) and returns the restore of the ratios in force before.
func setDirtyBytes(n int64) (restore func(), err error) {
	const vm = "/proc/sys/vm/"
	old := map[string][]byte{}
	for _, k := range []string{"dirty_ratio", "dirty_background_ratio", "dirty_bytes", "dirty_background_bytes"} {
		b, err := os.ReadFile(vm + k)
		if err != nil {
			return nil, err
		}
		old[k] = bytes.TrimSpace(b)
	}
	restore = func() {
		// Writing a *_bytes zeroes its *_ratio and the other way round:
		// restore whichever was in force.
		for _, pair := range [][2]string{{"dirty_bytes", "dirty_ratio"}, {"dirty_background_bytes", "dirty_background_ratio"}} {
			k := pair[1]
			if string(old[pair[0]]) != "0" {
				k = pair[0]
			}
			os.WriteFile(vm+k, old[k], 0o644)
		}
	}
	if err := os.WriteFile(vm+"dirty_bytes", []byte(strconv.FormatInt(n, 10)), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(vm+"dirty_background_bytes", []byte(strconv.FormatInt(n/2, 10)), 0o644); err != nil {
		restore()
		return nil, err
	}
	return restore, nil
}

// matrixWorkloads are the matrix's workloads in their order of a round.
// Their state carries from one to the next on the same client (the files
// tar extracts are listed, read and deleted by the next three).
func matrixWorkloads(p MatrixPlan) []*workload {
	d, b := MatrixFioDirect, MatrixFioBuffered
	sf := MatrixSmallFiles
	ws := []*workload{
		fioWorkload(d, "seq-read 1MiB qd1", fioSpec{rw: "read", bs: "1M", depth: 1, direct: true}, 0),
		fioWorkload(d, "seq-read 1MiB qd16", fioSpec{rw: "read", bs: "1M", depth: 16, direct: true}, 0),
		fioWorkload(d, "seq-write 1MiB qd1", fioSpec{rw: "write", bs: "1M", depth: 1, direct: true}, 0),
		fioWorkload(d, "seq-write 1MiB qd16", fioSpec{rw: "write", bs: "1M", depth: 16, direct: true}, 0),
		fioWorkload(d, "rand-read 4KiB qd1", fioSpec{rw: "randread", bs: "4k", depth: 1, direct: true}, 0),
		fioWorkload(d, "rand-read 4KiB qd16", fioSpec{rw: "randread", bs: "4k", depth: 16, direct: true}, 1.0),
		fioWorkload(d, "rand-read 4KiB qd64", fioSpec{rw: "randread", bs: "4k", depth: 64, direct: true}, 0),
		fioWorkload(d, "rand-write 4KiB qd1", fioSpec{rw: "randwrite", bs: "4k", depth: 1, direct: true}, 0),
		fioWorkload(d, "rand-write 4KiB qd16", fioSpec{rw: "randwrite", bs: "4k", depth: 16, direct: true}, 0),
		fioWorkload(d, "rand-write 4KiB qd64", fioSpec{rw: "randwrite", bs: "4k", depth: 64, direct: true}, 0),
		fioWorkload(d, "rand-read 64KiB qd8", fioSpec{rw: "randread", bs: "64k", depth: 8, direct: true}, 0),
		fioWorkload(d, "randrw 70/30 4KiB qd16", fioSpec{rw: "randrw", bs: "4k", depth: 16, mixRead: 70, direct: true}, 0),
	}
	cached := fioWorkload(b, "seq-read 1MiB, file read before (page cache)", fioSpec{rw: "read", bs: "1M", direct: false}, 0)
	inner := cached.run
	cached.note = "psync; the file is read once, unmeasured, right before"
	cached.run = func(ctx context.Context, w *wctx) (float64, int64, error) {
		if _, err := timedCmd(ctx, nil, "cat", w.fioFile()); err != nil {
			return 0, 0, err
		}
		return inner(ctx, w)
	}
	ws = append(ws, cached, &workload{group: b, unit: "MiB/s", per: "MiB",
		name: fmt.Sprintf("seq-write %d MiB > dirty limit %d MiB", p.BufWriteMiB, p.DirtyBytes>>20),
		note: "write(2) of 1 MiB, then fsync and close, all timed; vm.dirty_bytes lowered for it",
		run: func(ctx context.Context, w *wctx) (float64, int64, error) {
			restore, err := setDirtyBytes(p.DirtyBytes)
			if err != nil {
				return 0, 0, err
			}
			defer restore()
			name := filepath.Join(w.rdir(), "bufwrite")
			buf := make([]byte, 1<<20)
			fillText(newRand(5), buf)
			var f *os.File
			el, err := timedLoop(ctx, p.BufWriteMiB+2, func(i int) error {
				var err error
				switch {
				case i == 0:
					f, err = os.Create(name)
				case i <= p.BufWriteMiB:
					_, err = f.Write(buf)
				default:
					if err = f.Sync(); err == nil {
						err = f.Close()
					}
				}
				return err
			})
			if err != nil {
				return 0, 0, err
			}
			os.Remove(name)
			return float64(p.BufWriteMiB) / el, int64(p.BufWriteMiB), nil
		}})

	files := func(n int) int64 { return int64(n) }
	tree := func(w *wctx) string { return filepath.Join(w.rdir(), "tree") }
	ws = append(ws,
		&workload{group: sf, unit: "s", per: "file", target: 1.0,
			name: fmt.Sprintf("create %d files of %d KiB (tar -x)", p.SmallFiles, p.SmallKiB),
			run: func(ctx context.Context, w *wctx) (float64, int64, error) {
				dir := filepath.Join(w.rdir(), "sf")
				if err := os.Mkdir(dir, 0o755); err != nil {
					return 0, 0, err
				}
				el, err := timedCmd(ctx, nil, "tar", "-xf", filepath.Join(w.local, "small.tar"), "-C", dir)
				return el, files(p.SmallFiles), err
			}},
		&workload{group: sf, unit: "s", per: "file", cold: true,
			name: fmt.Sprintf("stat all %d, cold (ls -lR)", p.SmallFiles),
			run: func(ctx context.Context, w *wctx) (float64, int64, error) {
				var out bytes.Buffer
				el, err := timedCmd(ctx, &out, "ls", "-lR", filepath.Join(w.rdir(), "sf"))
				if err == nil && countFiles(out.Bytes()) != p.SmallFiles {
					err = fmt.Errorf("ls -lR listed %d files, want %d", countFiles(out.Bytes()), p.SmallFiles)
				}
				return el, files(p.SmallFiles), err
			}},
		&workload{group: sf, unit: "s", per: "file", cold: true, target: 1.0,
			name: fmt.Sprintf("read all %d, cold (cat)", p.SmallFiles),
			run: func(ctx context.Context, w *wctx) (float64, int64, error) {
				var out bytes.Buffer
				el, err := timedCmd(ctx, &out, "sh", "-c", `cat "$0"/*/*`, filepath.Join(w.rdir(), "sf"))
				if want := p.SmallFiles * p.SmallKiB << 10; err == nil && out.Len() != want {
					err = fmt.Errorf("cat read %d bytes, want %d", out.Len(), want)
				}
				return el, files(p.SmallFiles), err
			}},
		&workload{group: sf, unit: "s", per: "file", target: 1.0,
			name: fmt.Sprintf("delete all %d (rm -rf)", p.SmallFiles),
			run: func(ctx context.Context, w *wctx) (float64, int64, error) {
				el, err := timedCmd(ctx, nil, "rm", "-rf", filepath.Join(w.rdir(), "sf"))
				return el, files(p.SmallFiles), err
			}},
		&workload{group: sf, unit: "s", per: "dir", name: fmt.Sprintf("mkdir %d", p.Dirs),
			note: "mkdir(2) calls from one process",
			run: func(ctx context.Context, w *wctx) (float64, int64, error) {
				dir := filepath.Join(w.rdir(), "md")
				if err := os.Mkdir(dir, 0o755); err != nil {
					return 0, 0, err
				}
				el, err := timedLoop(ctx, p.Dirs, func(i int) error {
					return os.Mkdir(filepath.Join(dir, fmt.Sprintf("d%05d", i)), 0o755)
				})
				return el, int64(p.Dirs), err
			}},
		&workload{group: sf, unit: "s", per: "dir", name: fmt.Sprintf("rmdir %d", p.Dirs),
			note: "rmdir(2) calls from one process",
			run: func(ctx context.Context, w *wctx) (float64, int64, error) {
				dir := filepath.Join(w.rdir(), "md")
				el, err := timedLoop(ctx, p.Dirs, func(i int) error {
					return syscall.Rmdir(filepath.Join(dir, fmt.Sprintf("d%05d", i)))
				})
				return el, int64(p.Dirs), err
			}},
		&workload{group: sf, unit: "s", per: "file", cold: true, name: fmt.Sprintf("rename %d files, cold", p.Renames),
			note: "rename(2) calls from one process, in one directory; the files are made at the server beforehand",
			run: func(ctx context.Context, w *wctx) (float64, int64, error) {
				dir := filepath.Join(w.rdir(), "ren")
				el, err := timedLoop(ctx, p.Renames, func(i int) error {
					return os.Rename(filepath.Join(dir, fmt.Sprintf("a%05d", i)), filepath.Join(dir, fmt.Sprintf("b%05d", i)))
				})
				return el, int64(p.Renames), err
			}},
		&workload{group: sf, unit: "s", per: "file", name: fmt.Sprintf("cp -a of a source tree in (%d files, 1-64 KiB)", p.TreeFiles),
			run: func(ctx context.Context, w *wctx) (float64, int64, error) {
				el, err := timedCmd(ctx, nil, "cp", "-a", filepath.Join(w.local, "tree"), tree(w))
				return el, int64(p.TreeFiles), err
			}},
		&workload{group: sf, unit: "s", per: "file", cold: true, name: "cp -a of the tree back out, cold",
			note: "then diff -r against the source (unmeasured)",
			run: func(ctx context.Context, w *wctx) (float64, int64, error) {
				out := filepath.Join(w.local, fmt.Sprintf("out-%s-%d", w.c.key, w.round))
				defer os.RemoveAll(out)
				el, err := timedCmd(ctx, nil, "cp", "-a", tree(w), out)
				if err != nil {
					return 0, 0, err
				}
				if _, err := timedCmd(ctx, nil, "diff", "-r", filepath.Join(w.local, "tree"), out); err != nil {
					return 0, 0, fmt.Errorf("the tree came back different: %w", err)
				}
				return el, int64(p.TreeFiles), nil
			}},
		&workload{group: sf, unit: "s", per: "entry", cold: true, name: fmt.Sprintf("list a %d-entry directory, cold (ls -l)", p.BigDir),
			run: func(ctx context.Context, w *wctx) (float64, int64, error) {
				var out bytes.Buffer
				el, err := timedCmd(ctx, &out, "ls", "-l", filepath.Join(w.c.dir, "bench", "bigdir"))
				if err == nil && countFiles(out.Bytes()) != p.BigDir {
					err = fmt.Errorf("ls -l listed %d files, want %d", countFiles(out.Bytes()), p.BigDir)
				}
				return el, int64(p.BigDir), err
			}},
	)
	return ws
}

// nconnectWorkloads are the matrix's workloads run again at each
// nconnect.
func nconnectWorkloads(n int) []*workload {
	return []*workload{
		fioWorkload(MatrixNconnect, fmt.Sprintf("seq-read 1MiB qd16 nconnect=%d", n), fioSpec{rw: "read", bs: "1M", depth: 16, direct: true}, 0),
		fioWorkload(MatrixNconnect, fmt.Sprintf("rand-read 4KiB qd64 nconnect=%d", n), fioSpec{rw: "randread", bs: "4k", depth: 64, direct: true}, 0),
	}
}

// Matrix runs the workload matrix of p and adds its rows to the report.
// checkpoint, when set, is called after every round (to save what was
// measured so far).
func (g *Guest) Matrix(ctx context.Context, p MatrixPlan, checkpoint func()) {
	if g.MountBinary == "" {
		g.fail("matrix", fmt.Errorf("no nfsrdma-mount binary"))
		return
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		command(ctx, "modprobe", "fuse")
	}
	local, cleanup, err := g.matrixInputs(ctx, p)
	if err != nil {
		g.fail("matrix inputs", err)
		return
	}
	defer cleanup()
	g.Report.Note("matrix plan: %+v", p)
	if h, err := startSyscallHist(); err != nil {
		g.logf("matrix: the mount servers' system calls are not counted: %v", err)
		g.Report.Note("matrix: the mount servers' system calls are not counted: %v", err)
	} else {
		g.syscalls = h
		defer func() { h.stop(); g.syscalls = nil }()
	}
	kern := &mclient{name: "kernel", key: "kernel", dir: "/mnt/bench-kernel", g: g}
	ours := &mclient{name: "nfsrdma-mount", key: "ours", dir: "/mnt/bench-ours", g: g}
	floor := &mclient{name: floorName, key: "floor", dir: "/mnt/bench-floor", g: g}
	main := p.only(matrixWorkloads(p))
	var cells []*cell
	byName := map[string]*cell{}
	cellOf := func(w *workload) *cell {
		k := w.group + "/" + w.name
		if c, ok := byName[k]; ok {
			return c
		}
		c := &cell{w: w, kernel: make([]*sample, p.Rounds), ours: make([]*sample, p.Rounds), floor: make([]*sample, p.Rounds)}
		byName[k] = c
		cells = append(cells, c)
		return c
	}
	for _, w := range main {
		cellOf(w)
	}
	for _, n := range p.Nconnect {
		for _, w := range p.only(nconnectWorkloads(n)) {
			cellOf(w)
		}
	}
	unsupported := map[int]string{}
	for round := range p.Rounds {
		order := []*mclient{kern, ours}
		if round%2 == 1 {
			order = []*mclient{ours, kern}
		}
		if p.Floor {
			// The floor's place turns with the rounds too.
			order = slices.Insert(order, round%3, floor)
		}
		g.logf("matrix round %d of %d (%s first)", round+1, p.Rounds, order[0].name)
		kern.nconnect, ours.nconnect = 0, 0
		if g.mountPair(ctx, order) {
			for _, w := range main {
				g.runPair(ctx, p, round, local, w, cellOf(w), order)
			}
		}
		kern.unmount()
		ours.unmount()
		floor.unmount()
		for _, n := range p.Nconnect {
			ws := p.only(nconnectWorkloads(n))
			if len(ws) == 0 {
				continue
			}
			kern.nconnect, ours.nconnect = n, n
			kern.dir, ours.dir = fmt.Sprintf("/mnt/bench-kernel-nc%d", n), fmt.Sprintf("/mnt/bench-ours-nc%d", n)
			order = []*mclient{kern, ours}
			if round%2 == 1 {
				order = []*mclient{ours, kern}
			}
			if _, known := unsupported[n]; !known {
				if err := ours.mount(ctx); errors.Is(err, ErrNconnect) {
					g.logf("nconnect=%d: %v", n, err)
					g.Report.Note("nconnect=%d: %v", n, err)
					unsupported[n] = "not supported"
				} else if err != nil {
					g.fail(fmt.Sprintf("nconnect=%d mount", n), err)
					continue
				}
			}
			if why, ok := unsupported[n]; ok {
				for _, w := range ws {
					cellOf(w).unsupported = why
				}
				// The kernel's side alone, for reference.
				order = []*mclient{kern}
			}
			if err := kern.mount(ctx); err != nil {
				g.fail(fmt.Sprintf("nconnect=%d kernel mount", n), err)
			} else {
				for _, w := range ws {
					g.runPair(ctx, p, round, local, w, cellOf(w), order)
				}
			}
			kern.unmount()
			ours.unmount()
		}
		kern.dir, ours.dir = "/mnt/bench-kernel", "/mnt/bench-ours"
		g.Report.Matrix = buildRows(cells, kern, ours)
		if checkpoint != nil {
			checkpoint()
		}
	}
	g.Report.Matrix = buildRows(cells, kern, ours)
	if gm, n := GeoMean(g.Report.Matrix); n > 0 {
		g.Report.Note("matrix: geometric mean of %d ratios %.2fx", n, gm)
	}
}

// only keeps the workloads p.Only matches (all without it).
func (p MatrixPlan) only(ws []*workload) []*workload {
	if p.Only == nil {
		return ws
	}
	var out []*workload
	for _, w := range ws {
		if p.Only.MatchString(w.group + "/" + w.name) {
			out = append(out, w)
		}
	}
	return out
}

// mountPair mounts both clients (fresh), reporting a failure.
func (g *Guest) mountPair(ctx context.Context, cs []*mclient) bool {
	for _, c := range cs {
		if err := c.mount(ctx); err != nil {
			g.fail("matrix mount", err)
			return false
		}
	}
	return true
}

// runPair runs one workload on each client of order, one right after the
// other, and records the samples.
func (g *Guest) runPair(ctx context.Context, p MatrixPlan, round int, local string, w *workload, c *cell, order []*mclient) {
	for _, cl := range order {
		s, err := g.runOne(ctx, p, round, local, w, cl)
		if err != nil {
			g.fail(fmt.Sprintf("matrix round %d %s %s on %s", round+1, w.group, w.name, cl.name), err)
			continue
		}
		g.logf("  %-14s %-52s %10.2f %s", cl.name, w.name, s.value, w.unit)
		switch {
		case cl.isFloor():
			c.floor[round] = s
		case cl.ours():
			c.ours[round] = s
		default:
			c.kernel[round] = s
		}
	}
}

func (g *Guest) runOne(ctx context.Context, p MatrixPlan, round int, local string, w *workload, cl *mclient) (*sample, error) {
	ctx, cancel := context.WithTimeout(ctx, p.StepTimeout)
	defer cancel()
	if w.cold {
		if err := cl.remount(ctx); err != nil {
			return nil, err
		}
		if err := dropCaches(); err != nil {
			return nil, err
		}
	}
	wc := &wctx{g: g, c: cl, p: p, round: round, local: local}
	before, err := cl.counters(ctx)
	if err != nil {
		return nil, fmt.Errorf("RPC counters: %w", err)
	}
	// The cost counters are read inside the RPC counters' window, so
	// that running `nfsrdma-mount stats` falls outside theirs.
	cBefore, costErr := readCost(before.pid, before.allocs, g.syscalls, false)
	v, units, err := w.run(ctx, wc)
	if err != nil {
		return nil, err
	}
	var cAfter *costSnap
	if costErr == nil {
		cAfter, costErr = readCost(before.pid, -1, g.syscalls, true)
	}
	after, err := cl.counters(ctx)
	if err != nil {
		return nil, fmt.Errorf("RPC counters: %w", err)
	}
	if v <= 0 {
		return nil, fmt.Errorf("no figure (%v)", v)
	}
	s := &sample{value: v, units: units, rpcs: after.rpcs.Sub(before.rpcs)}
	if after.fuse != nil {
		s.fuse = after.fuse.Sub(before.fuse)
	}
	if costErr != nil {
		g.logf("  %s %s: cost not counted: %v", cl.name, w.name, costErr)
	} else {
		if cAfter.server != nil && after.pid == before.pid {
			cAfter.server.allocs = after.allocs
		}
		s.cost = cAfter.sub(cBefore)
	}
	return s, nil
}

// matrixInputs lays out what the workloads need before any mount: in a
// guest-local tmpfs, the tarball and the source tree; in the export (at
// the server, so that no client pays for it), each client's fio file, the
// rename files of every round and the big directory.
func (g *Guest) matrixInputs(ctx context.Context, p MatrixPlan) (local string, cleanup func(), err error) {
	local = "/bench-local"
	if err := os.MkdirAll(local, 0o755); err != nil {
		return "", nil, err
	}
	if _, err := command(ctx, "mount", "-t", "tmpfs", "-o", "size=1g", "tmpfs", local); err != nil {
		return "", nil, err
	}
	exp := filepath.Join(g.Export, "bench")
	cleanup = func() {
		os.RemoveAll(exp)
		command(context.Background(), "umount", local)
	}
	fail := func(err error) (string, func(), error) { cleanup(); return "", nil, err }
	g.logf("matrix: laying out the inputs")
	if _, err := WriteSmallTarball(filepath.Join(local, "small.tar"), p.SmallFiles, p.SmallDirs, p.SmallKiB); err != nil {
		return fail(err)
	}
	t, err := WriteSourceTree(filepath.Join(local, "tree"), p.TreeFiles)
	if err != nil {
		return fail(err)
	}
	g.Report.Note("matrix: source tree of %d files (%.1f MiB) in %d directories", t.Files, float64(t.Bytes)/(1<<20), t.Dirs)
	os.RemoveAll(exp)
	if err := makeEmptyFiles(filepath.Join(exp, "bigdir"), "entry", p.BigDir); err != nil {
		return fail(err)
	}
	for _, key := range []string{"kernel", "ours", "floor"} {
		dir := filepath.Join(exp, key)
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return fail(err)
		}
		if err := writeFileMiB(filepath.Join(dir, "fio"), p.FioFileMiB); err != nil {
			return fail(err)
		}
		for r := range p.Rounds {
			if err := makeEmptyFiles(filepath.Join(dir, fmt.Sprintf("r%d", r), "ren"), "a", p.Renames); err != nil {
				return fail(err)
			}
		}
	}
	return local, cleanup, nil
}

// writeFileMiB writes a file of n MiB of non-zero data.
func writeFileMiB(path string, n int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	fillText(newRand(7), buf)
	for range n {
		if _, err := f.Write(buf); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// buildRows turns the cells into the report's rows.
func buildRows(cells []*cell, kern, ours *mclient) []MatrixRow {
	var rows []MatrixRow
	for _, c := range cells {
		w := c.w
		x := MatrixRow{Group: w.group, Name: w.name, Unit: w.unit, Better: w.better(), Per: w.per, Note: w.note, Unsupprt: c.unsupported,
			Kernel: make([]float64, len(c.kernel)), Ours: make([]float64, len(c.ours)), Target: 0.8}
		if w.target > 0 {
			x.Target = w.target
		}
		var floorRounds []float64
		for i := range c.kernel {
			if i < len(c.floor) && c.floor[i] != nil {
				f := c.floor[i]
				if x.Floor == nil {
					x.Floor = make([]float64, len(c.floor))
				}
				x.Floor[i] = f.value
				if k := c.kernel[i]; k != nil {
					floorRounds = append(floorRounds, orient(x.Better, f.value, k.value))
				}
			}
			k, o := c.kernel[i], c.ours[i]
			if k != nil {
				x.Kernel[i] = k.value
			}
			if o != nil {
				x.Ours[i] = o.value
			}
			if k == nil || o == nil {
				continue
			}
			x.Rounds = append(x.Rounds, orient(x.Better, o.value, k.value))
		}
		if len(floorRounds) > 0 {
			x.FloorRatio = median(floorRounds)
		}
		if len(x.Rounds) > 0 {
			x.Ratio = median(x.Rounds)
			x.Min, x.Max = slices.Min(x.Rounds), slices.Max(x.Rounds)
			x.Met = x.Ratio >= x.Target
		}
		x.RPCs = [2]RowRPC{rowRPC(kern.name, c.kernel), rowRPC(ours.name, c.ours)}
		x.FUSE, x.FUSETotal = rowFUSE(c.ours)
		for _, k := range []struct {
			name string
			ss   []*sample
		}{{kern.name, c.kernel}, {ours.name, c.ours}, {floorName, c.floor}} {
			if oc := rowCost(k.name, k.ss); oc != nil {
				x.Cost = append(x.Cost, *oc)
			}
		}
		rows = append(rows, x)
	}
	return rows
}

// orient is the ratio of v against the kernel's k, above 1 when v is
// better.
func orient(better string, v, k float64) float64 {
	if better == "lower" {
		return k / v
	}
	return v / k
}

// rowFUSE is the FUSE requests per unit of work, by kind and in all, over
// the rounds that counted them (nil when none did).
func rowFUSE(ss []*sample) (map[string]float64, float64) {
	sum := FUSECounts{}
	var units int64
	for _, s := range ss {
		if s == nil || s.fuse == nil {
			continue
		}
		for k, n := range s.fuse {
			sum[k] += n
		}
		units += s.units
	}
	if units == 0 || len(sum) == 0 {
		return nil, 0
	}
	per := map[string]float64{}
	var total float64
	for k, n := range sum {
		per[k] = float64(n) / float64(units)
		total += per[k]
	}
	return per, total
}

// rowRPC sums a client's RPCs of a workload over the rounds.
func rowRPC(name string, ss []*sample) RowRPC {
	r := RowRPC{Client: name, PerOp: map[string]float64{}}
	sum := RPCCounts{}
	var units int64
	for _, s := range ss {
		if s == nil {
			continue
		}
		for op, n := range s.rpcs {
			t := sum[op]
			sum[op] = OpCount{Calls: t.Calls + n.Calls, Sent: t.Sent + n.Sent, Recv: t.Recv + n.Recv}
		}
		units += s.units
		r.Last, r.Units = s.rpcs, s.units
	}
	if units == 0 {
		return r
	}
	for op, n := range sum {
		r.PerOp[op] = float64(n.Calls) / float64(units)
		r.Total += float64(n.Calls) / float64(units)
		if b := sum.Payload(op); b > 0 {
			if r.Payload == nil {
				r.Payload = map[string]float64{}
			}
			r.Payload[op] = b
		}
	}
	return r
}
