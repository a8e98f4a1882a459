package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/nfsrdma/nfsrdma"
	"github.com/nfsrdma/nfsrdma/nfs3"
)

// The library matrix: the work a Go program does with files, written once
// (against libFS) and run with the library (nfsrdma.Mount's nfs3.Target:
// its path API and Files, one client, goroutines for concurrency, the
// default options) and with os calls on the kernel's NFSv3/RDMA mount of
// the same export, in paired rounds of one guest run. It measures the
// project's promise to Go programs: that calling the library beats going
// through the kernel's mount.

// Groups of the library matrix.
const (
	LibRandIO     = "random I/O"
	LibSmallFiles = "small files"
	LibTrees      = "directories and trees"
)

// Targets of the library matrix: every row at least LibRowTarget, their
// geometric mean at least LibGeoTarget.
const (
	LibRowTarget = 1.0
	LibGeoTarget = 1.2
)

// oDirect opens a file past the kernel's page cache: the random-I/O rows
// measure the server's work, as fio's direct jobs do, not the kernel's
// cache (which would answer repeated reads and absorb writes). The library
// keeps no cache and ignores it.
const oDirect = syscall.O_DIRECT

// LibPlan sizes the library matrix.
type LibPlan struct {
	Rounds      int
	IOSeconds   float64 // of each random-I/O row on each side
	IOFileMiB   int     // the file the random I/O works on
	Goroutines  []int   // of the random-I/O rows
	SmallFiles  int     // created, read and deleted
	SmallDirs   int     // they are spread over
	SmallKiB    int     // each one's size
	BigDir      int     // entries of the directory listed with attributes
	TreeFiles   int     // of the source-like tree copied in and out
	StepTimeout time.Duration
	// Only, if set, runs just the rows whose "group/name" it matches (a
	// row may need one before it: the read and delete rows read and delete
	// what the create row made, the copy out copies what the copy in made).
	Only *regexp.Regexp `json:"-"`
}

// DefaultLibPlan is what `testbed bench` runs.
func DefaultLibPlan() LibPlan {
	return LibPlan{Rounds: 3, IOSeconds: 5, IOFileMiB: 64, Goroutines: []int{1, 16, 64},
		SmallFiles: 2000, SmallDirs: 40, SmallKiB: 4, BigDir: 10000, TreeFiles: 600, StepTimeout: 5 * time.Minute}
}

// QuickLibPlan is `testbed bench -quick`: one round of smaller sizes.
func QuickLibPlan() LibPlan {
	return LibPlan{Rounds: 1, IOSeconds: 2, IOFileMiB: 16, Goroutines: []int{1, 16, 64},
		SmallFiles: 400, SmallDirs: 8, SmallKiB: 4, BigDir: 2000, TreeFiles: 200, StepTimeout: 3 * time.Minute}
}

// LibMatrix is the library matrix's part of the report.
type LibMatrix struct {
	Rows []LibRow `json:"rows"`
	// GeoMean is the geometric mean of the rows' ratios (GeoRows of them);
	// Met says whether every measured row reaches RowTarget and GeoMean
	// GeoTarget.
	GeoMean   float64 `json:"geomean"`
	GeoRows   int     `json:"geomean_rows"`
	RowTarget float64 `json:"row_target"`
	GeoTarget float64 `json:"geomean_target"`
	Met       bool    `json:"met"`
}

// LibRow is one workload of the library matrix: both sides' figures per
// round and the ratio, above 1 when the library is better (throughput
// library/kernel, or time kernel/library).
type LibRow struct {
	Group   string    `json:"group"`
	Name    string    `json:"name"`
	Unit    string    `json:"unit"`    // "IOPS", "MiB/s" or "s"
	Better  string    `json:"better"`  // "higher" or "lower"
	Kernel  []float64 `json:"kernel"`  // os on the kernel's mount, per round; 0: failed
	Library []float64 `json:"library"` // per round; 0: failed
	// Rounds are the per-round ratios of the rounds where both sides
	// measured; Ratio is their median, Min and Max their spread.
	Rounds []float64 `json:"rounds,omitempty"`
	Ratio  float64   `json:"ratio"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Target float64   `json:"target"`
	Met    bool      `json:"met"`
	Note   string    `json:"note,omitempty"`
	// Per is the unit of work RPCs are counted per ("I/O", "file",
	// "entry"); RPCs are each side's (kernel's, library's) calls per
	// unit by procedure, over all rounds, as knfsd counted them (nil: not
	// counted), and RPCTotal their sums.
	Per      string                `json:"per,omitempty"`
	RPCs     [2]map[string]float64 `json:"rpcs_per_unit,omitempty"`
	RPCTotal [2]float64            `json:"rpcs_total_per_unit,omitempty"`
}

// KernelMedian and LibraryMedian are the medians of the rounds that
// measured.
func (x LibRow) KernelMedian() float64  { return medianNonZero(x.Kernel) }
func (x LibRow) LibraryMedian() float64 { return medianNonZero(x.Library) }

// newLibRow computes a row's ratios from the sides' per-round figures (0:
// not measured in that round).
func newLibRow(group, name, unit, note string, kernel, library []float64) LibRow {
	better := "higher"
	if unit == "s" {
		better = "lower"
	}
	x := LibRow{Group: group, Name: name, Unit: unit, Better: better, Note: note,
		Kernel: slices.Clone(kernel), Library: slices.Clone(library), Target: LibRowTarget}
	for i := range min(len(kernel), len(library)) {
		if kernel[i] > 0 && library[i] > 0 {
			x.Rounds = append(x.Rounds, orient(better, library[i], kernel[i]))
		}
	}
	if len(x.Rounds) > 0 {
		x.Ratio = median(x.Rounds)
		x.Min, x.Max = slices.Min(x.Rounds), slices.Max(x.Rounds)
		x.Met = x.Ratio >= x.Target
	}
	return x
}

// summarize fills in the matrix's geometric mean and whether its targets
// are met: every row measured at or above its target, and the geometric
// mean at or above LibGeoTarget. A matrix with no measured row meets
// nothing.
func (m *LibMatrix) summarize() {
	m.RowTarget, m.GeoTarget = LibRowTarget, LibGeoTarget
	var s float64
	m.GeoRows = 0
	all := true
	for _, x := range m.Rows {
		if x.Ratio <= 0 {
			all = false
			continue
		}
		s += math.Log(x.Ratio)
		m.GeoRows++
		all = all && x.Met
	}
	m.GeoMean = 0
	if m.GeoRows > 0 {
		m.GeoMean = math.Exp(s / float64(m.GeoRows))
	}
	m.Met = m.GeoRows > 0 && all && m.GeoMean >= m.GeoTarget
}

// Below lists the rows measured below their target.
func (m *LibMatrix) Below() []LibRow {
	var out []LibRow
	for _, x := range m.Rows {
		if x.Ratio > 0 && !x.Met {
			out = append(out, x)
		}
	}
	return out
}

// libSide is one side of the library matrix.
type libSide struct {
	name string // "kernel mount (os)" or "library"
	key  string // its directory in the export: "lm-kernel", "lm-lib"
	fs   libFS
	// cold prepares a cold row: a fresh kernel mount; dropped caches for
	// both (the server's too, as it runs in the guest).
	cold func(ctx context.Context) error
}

// libCtx is what a library-matrix workload runs with.
type libCtx struct {
	p     LibPlan
	side  *libSide
	round int
	local string // guest-local inputs (the source tree) and outputs
}

// dir is the side's directory of this round.
func (c *libCtx) dir() string { return fmt.Sprintf("%s/r%d", c.side.key, c.round) }

// libWork is one row of the library matrix.
type libWork struct {
	group, name, unit string
	cold              bool
	note              string
	per               string // the unit of work RPCs are counted per
	// run does the work and returns its figure and how many units of
	// work (per) it did.
	run func(ctx context.Context, c *libCtx) (float64, int64, error)
}

// libSample is one side's figure of one row in one round (value 0: not
// measured), with the units of work and the RPCs the server answered for
// it (nil: not counted).
type libSample struct {
	value float64
	units int64
	rpcs  RPCCounts
}

// libBigDir is the directory of the listing row, made at the server.
const libBigDir = "lm-bigdir"

// libWorkloads are the rows of p, in the order they run.
func libWorkloads(p LibPlan) []*libWork {
	var ws []*libWork
	for _, write := range []bool{false, true} {
		for _, bs := range []int{4 << 10, 64 << 10} {
			for _, n := range p.Goroutines {
				op := "read"
				if write {
					op = "write"
				}
				unit := "IOPS"
				if bs > 4<<10 {
					unit = "MiB/s"
				}
				note := "ReadAt from each goroutine on one open file"
				if write {
					note = "WriteAt from each goroutine on one open file, then Close (the library commits there)"
				}
				ws = append(ws, &libWork{group: LibRandIO, unit: unit, note: note, per: "I/O",
					name: fmt.Sprintf("rand-%s %s, %d goroutines", op, sizeName(bs), n),
					run: func(ctx context.Context, c *libCtx) (float64, int64, error) {
						return randIO(ctx, c.side.fs, c.side.key+"/io", int64(p.IOFileMiB)<<20, bs, n, write,
							time.Duration(p.IOSeconds*float64(time.Second)))
					}})
			}
		}
	}
	data := smallFileData(p.SmallKiB)
	smallName := func(c *libCtx, i int) string {
		return fmt.Sprintf("%s/sf/d%02d/f%04d", c.dir(), i%p.SmallDirs, i/p.SmallDirs)
	}
	ws = append(ws,
		&libWork{group: LibSmallFiles, unit: "s", per: "file", name: fmt.Sprintf("create %d files of %d KiB", p.SmallFiles, p.SmallKiB),
			note: fmt.Sprintf("WriteFile each, in %d directories made first (Mkdir)", p.SmallDirs),
			run: func(ctx context.Context, c *libCtx) (float64, int64, error) {
				return units(p.SmallFiles)(timedLoop(ctx, 1, func(int) error {
					if err := c.side.fs.Mkdir(ctx, c.dir()+"/sf", 0o755); err != nil {
						return err
					}
					for d := range p.SmallDirs {
						if err := c.side.fs.Mkdir(ctx, fmt.Sprintf("%s/sf/d%02d", c.dir(), d), 0o755); err != nil {
							return err
						}
					}
					for i := range p.SmallFiles {
						if err := c.side.fs.WriteFile(ctx, smallName(c, i), data, 0o644); err != nil {
							return err
						}
					}
					return nil
				}))
			}},
		&libWork{group: LibSmallFiles, unit: "s", per: "file", cold: true, name: fmt.Sprintf("read all %d, cold", p.SmallFiles),
			note: "ReadFile each, checked against what was written",
			run: func(ctx context.Context, c *libCtx) (float64, int64, error) {
				return units(p.SmallFiles)(timedLoop(ctx, p.SmallFiles, func(i int) error {
					b, err := c.side.fs.ReadFile(ctx, smallName(c, i))
					if err == nil && !bytes.Equal(b, data) {
						err = fmt.Errorf("%s: read %d bytes that differ from the %d written", smallName(c, i), len(b), len(data))
					}
					return err
				}))
			}},
		&libWork{group: LibSmallFiles, unit: "s", per: "file", name: fmt.Sprintf("delete all %d", p.SmallFiles),
			note: "Remove each file, then each directory (RmDir)",
			run: func(ctx context.Context, c *libCtx) (float64, int64, error) {
				return units(p.SmallFiles)(timedLoop(ctx, 1, func(int) error {
					for i := range p.SmallFiles {
						if err := c.side.fs.Remove(ctx, smallName(c, i)); err != nil {
							return err
						}
					}
					for d := range p.SmallDirs {
						if err := c.side.fs.RmDir(ctx, fmt.Sprintf("%s/sf/d%02d", c.dir(), d)); err != nil {
							return err
						}
					}
					return c.side.fs.RmDir(ctx, c.dir()+"/sf")
				}))
			}},
		&libWork{group: LibTrees, unit: "s", per: "entry", cold: true, name: fmt.Sprintf("list a %d-entry directory with attributes, cold", p.BigDir),
			note: "ReadDir, then each entry's Info",
			run: func(ctx context.Context, c *libCtx) (float64, int64, error) {
				return units(p.BigDir)(timedLoop(ctx, 1, func(int) error {
					ents, err := c.side.fs.ReadDir(ctx, libBigDir)
					if err != nil {
						return err
					}
					n := 0
					for _, e := range ents {
						fi, err := e.Info()
						if err != nil {
							return err
						}
						if fi.Mode().IsRegular() && fi.Size() == 0 {
							n++
						}
					}
					if n != p.BigDir {
						return fmt.Errorf("listed %d empty files, want %d", n, p.BigDir)
					}
					return nil
				}))
			}},
		&libWork{group: LibTrees, unit: "s", per: "file", name: fmt.Sprintf("copy a source tree in (%d files, 1-64 KiB)", p.TreeFiles),
			note: "walk the local tree: Mkdir each directory, WriteFile each file",
			run: func(ctx context.Context, c *libCtx) (float64, int64, error) {
				return units(p.TreeFiles)(timedLoop(ctx, 1, func(int) error {
					return copyTreeIn(ctx, filepath.Join(c.local, "tree"), c.side.fs, c.dir()+"/tree")
				}))
			}},
		&libWork{group: LibTrees, unit: "s", per: "file", cold: true, name: "copy the tree back out, cold",
			note: "ReadDir each directory, ReadFile each file; then compared with the source (unmeasured)",
			run: func(ctx context.Context, c *libCtx) (float64, int64, error) {
				out := filepath.Join(c.local, fmt.Sprintf("out-%s-%d", c.side.key, c.round))
				defer os.RemoveAll(out)
				el, err := timedLoop(ctx, 1, func(int) error {
					return copyTreeOut(ctx, c.side.fs, c.dir()+"/tree", out)
				})
				if err != nil {
					return 0, 0, err
				}
				if err := sameTree(filepath.Join(c.local, "tree"), out); err != nil {
					return 0, 0, fmt.Errorf("the tree came back different: %w", err)
				}
				return el, int64(p.TreeFiles), nil
			}},
	)
	return ws
}

// units adds n units of work to a timed loop's result.
func units(n int) func(float64, error) (float64, int64, error) {
	return func(el float64, err error) (float64, int64, error) { return el, int64(n), err }
}

// smallFileData is the content of every small file.
func smallFileData(kib int) []byte {
	b := make([]byte, kib<<10)
	fillText(newRand(31), b)
	return b
}

// alignedBuf is a buffer of n bytes aligned to 4 KiB, as O_DIRECT needs.
func alignedBuf(n int) []byte {
	const align = 4096
	b := make([]byte, n+align)
	off := 0
	if r := int(uintptr(unsafe.Pointer(&b[0])) % align); r != 0 {
		off = align - r
	}
	return b[off : off+n : off+n]
}

// randIO opens name and does random, aligned I/Os of bs bytes within its
// first size bytes from n goroutines for dur, and returns IOPS (bs of 4
// KiB) or MiB/s, and the I/Os done. A write run ends with the file's
// Close, inside the time.
func randIO(ctx context.Context, lfs libFS, name string, size int64, bs, n int, write bool, dur time.Duration) (float64, int64, error) {
	flag := os.O_RDONLY | oDirect
	if write {
		flag = os.O_RDWR | oDirect
	}
	f, err := lfs.OpenFile(ctx, name, flag, 0)
	if err != nil {
		return 0, 0, err
	}
	closed := false
	defer func() {
		if !closed {
			f.Close()
		}
	}()
	blocks := size / int64(bs)
	if blocks < 1 {
		return 0, 0, fmt.Errorf("%s: %d bytes hold no %d-byte block", name, size, bs)
	}
	var ops atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, n)
	t0 := time.Now()
	end := t0.Add(dur)
	for g := range n {
		wg.Go(func() {
			buf := alignedBuf(bs)
			fillText(newRand(uint64(g)+41), buf)
			rng := rand.New(rand.NewPCG(uint64(g)+1, uint64(time.Now().UnixNano())))
			for time.Now().Before(end) && ctx.Err() == nil {
				off := rng.Int64N(blocks) * int64(bs)
				var k int
				var err error
				if write {
					k, err = f.WriteAt(buf, off)
				} else {
					k, err = f.ReadAt(buf, off)
				}
				if err == nil && k != bs {
					err = fmt.Errorf("%d of %d bytes at %d", k, bs, off)
				}
				if err != nil {
					errs[g] = err
					return
				}
				ops.Add(1)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	if write {
		closed = true
		if err := f.Close(); err != nil {
			return 0, 0, err
		}
	}
	el := time.Since(t0).Seconds()
	if bs <= 4<<10 {
		return float64(ops.Load()) / el, ops.Load(), nil
	}
	return float64(ops.Load()) * float64(bs) / (1 << 20) / el, ops.Load(), nil
}

// copyTreeIn copies the local tree src to dst on lfs: a directory made
// (Mkdir) before its contents, each file written whole (WriteFile) with its
// permissions.
func copyTreeIn(ctx context.Context, src string, lfs libFS, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := path.Join(dst, filepath.ToSlash(rel))
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			return lfs.Mkdir(ctx, to, fi.Mode().Perm())
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return lfs.WriteFile(ctx, to, data, fi.Mode().Perm())
	})
}

// copyTreeOut copies directory src of lfs to the local dst: ReadDir of
// each directory, ReadFile of each file.
func copyTreeOut(ctx context.Context, lfs libFS, src, dst string) error {
	if err := os.Mkdir(dst, 0o755); err != nil {
		return err
	}
	ents, err := lfs.ReadDir(ctx, src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		from, to := path.Join(src, e.Name()), filepath.Join(dst, e.Name())
		if e.IsDir() {
			if err := copyTreeOut(ctx, lfs, from, to); err != nil {
				return err
			}
			continue
		}
		data, err := lfs.ReadFile(ctx, from)
		if err != nil {
			return err
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		if err := os.WriteFile(to, data, fi.Mode().Perm()); err != nil {
			return err
		}
	}
	return nil
}

// sameTree reports the first difference between two local trees: a name,
// a type or a file's content.
func sameTree(a, b string) error {
	var names []string
	err := filepath.WalkDir(a, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(a, p)
		names = append(names, rel)
		q := filepath.Join(b, rel)
		fi, err := os.Lstat(q)
		if err != nil {
			return err
		}
		if fi.IsDir() != d.IsDir() {
			return fmt.Errorf("%s: a directory on one side only", rel)
		}
		if d.IsDir() {
			return nil
		}
		x, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		y, err := os.ReadFile(q)
		if err != nil {
			return err
		}
		if !bytes.Equal(x, y) {
			return fmt.Errorf("%s: contents differ (%d and %d bytes)", rel, len(x), len(y))
		}
		return nil
	})
	if err != nil {
		return err
	}
	n := 0
	err = filepath.WalkDir(b, func(string, fs.DirEntry, error) error { n++; return nil })
	if err == nil && n != len(names) {
		err = fmt.Errorf("%d names in the copy, %d in the source", n, len(names))
	}
	return err
}

// only keeps the rows p.Only matches (all without it).
func (p LibPlan) only(ws []*libWork) []*libWork {
	if p.Only == nil {
		return ws
	}
	var out []*libWork
	for _, w := range ws {
		if p.Only.MatchString(w.group + "/" + w.name) {
			out = append(out, w)
		}
	}
	return out
}

// LibMatrix runs the library matrix of p and puts it in the report;
// checkpoint, when set, is called after every round.
func (g *Guest) LibMatrix(ctx context.Context, p LibPlan, checkpoint func()) {
	ws := p.only(libWorkloads(p))
	if len(ws) == 0 {
		g.logf("library matrix: no row matches -only")
		return
	}
	g.Report.Note("library matrix plan: %+v", p)
	local := "/bench-libmatrix"
	if err := os.MkdirAll(local, 0o755); err != nil {
		g.fail("library matrix", err)
		return
	}
	if _, err := command(ctx, "mount", "-t", "tmpfs", "-o", "size=512m", "tmpfs", local); err != nil {
		g.fail("library matrix", err)
		return
	}
	defer command(context.Background(), "umount", local)
	// The inputs, laid out at the server so that neither side pays for
	// them.
	g.logf("library matrix: laying out the inputs")
	defer removeLibInputs(g.Export)
	if err := layOutLib(p, g.Export, local); err != nil {
		g.fail("library matrix inputs", err)
		return
	}

	// The kernel's mount, as the workload matrix mounts it.
	kdir := "/mnt/libmatrix-kernel"
	if err := os.MkdirAll(kdir, 0o755); err != nil {
		g.fail("library matrix", err)
		return
	}
	spec := g.Server + ":" + g.Export
	mountK := func(ctx context.Context) error {
		_, err := command(ctx, "mount", "-t", "nfs", "-o", "vers=3,proto=rdma,port=20049", spec, kdir)
		return err
	}
	if err := mountK(ctx); err != nil {
		g.fail("library matrix kernel mount", err)
		return
	}
	defer func() { command(context.Background(), "umount", kdir) }()
	// The library: one Target for the whole run, with the defaults.
	t, err := nfsrdma.Mount(ctx, spec, nil)
	if err != nil {
		g.fail("library matrix nfsrdma.Mount", err)
		return
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := t.Unmount(uctx); err != nil {
			g.fail("library matrix unmount", err)
		}
	}()
	kern := &libSide{name: "kernel mount (os)", key: "lm-kernel", fs: osFS{root: kdir},
		cold: func(ctx context.Context) error {
			if _, err := command(ctx, "umount", kdir); err != nil {
				return err
			}
			if err := mountK(ctx); err != nil {
				return err
			}
			return dropCaches()
		}}
	lib := &libSide{name: "library", key: "lm-lib", fs: targetFS{t: t},
		cold: func(context.Context) error { return dropCaches() }}

	libRounds(ctx, p, ws, kern, lib, local, nfsdCounts, g.logf, g.fail, func(vals [][2][]libSample) {
		g.Report.LibMatrix = libMatrixOf(ws, vals)
		if checkpoint != nil {
			checkpoint()
		}
	})
	m := g.Report.LibMatrix
	g.Report.Note("library matrix: geometric mean of %d ratios %.2fx (target %.1fx), %d rows below %.1fx",
		m.GeoRows, m.GeoMean, m.GeoTarget, len(m.Below()), m.RowTarget)
}

// libKeys are the sides' directories in the export.
var libKeys = []string{"lm-kernel", "lm-lib"}

// layOutLib lays out the inputs of p: in the export's directory exp, each
// side's file of random I/O and round directories, and the directory
// listed; in the local directory, the source tree copied in.
func layOutLib(p LibPlan, exp, local string) error {
	removeLibInputs(exp)
	if _, err := WriteSourceTree(filepath.Join(local, "tree"), p.TreeFiles); err != nil {
		return err
	}
	if err := makeEmptyFiles(filepath.Join(exp, libBigDir), "entry", p.BigDir); err != nil {
		return err
	}
	for _, k := range libKeys {
		for r := range p.Rounds {
			if err := os.MkdirAll(filepath.Join(exp, k, fmt.Sprintf("r%d", r)), 0o777); err != nil {
				return err
			}
		}
		if err := writeFileMiB(filepath.Join(exp, k, "io"), p.IOFileMiB); err != nil {
			return err
		}
	}
	return nil
}

// removeLibInputs removes what layOutLib and the rows made in the export.
func removeLibInputs(exp string) {
	for _, k := range append(slices.Clone(libKeys), libBigDir) {
		os.RemoveAll(filepath.Join(exp, k))
	}
}

// libRounds runs ws on both sides in p.Rounds paired rounds (which side
// goes first alternates), each row on one side right after the other, and
// calls each with the samples after every round: per row, the kernel's
// and the library's per round (a failure is reported to fail and leaves
// a zero sample). counts, when set, reads the server's RPC counters
// before and after each run.
func libRounds(ctx context.Context, p LibPlan, ws []*libWork, kern, lib *libSide, local string, counts func() (RPCCounts, error),
	logf func(string, ...any), fail func(string, error), each func([][2][]libSample)) {
	vals := make([][2][]libSample, len(ws))
	for i := range vals {
		vals[i] = [2][]libSample{make([]libSample, p.Rounds), make([]libSample, p.Rounds)}
	}
	for round := range p.Rounds {
		order := []*libSide{kern, lib}
		if round%2 == 1 {
			order = []*libSide{lib, kern}
		}
		logf("library matrix round %d of %d (%s first)", round+1, p.Rounds, order[0].name)
		for i, w := range ws {
			for _, s := range order {
				v, err := runLib(ctx, p, round, local, w, s, counts)
				if err != nil {
					fail(fmt.Sprintf("library matrix round %d %s %s on %s", round+1, w.group, w.name, s.name), err)
					continue
				}
				logf("  %-18s %-52s %10.2f %s  %s", s.name, w.name, v.value, w.unit, fmtSampleRPCs(v))
				side := 0 // the kernel's
				if s == lib {
					side = 1
				}
				vals[i][side][round] = v
			}
		}
		each(vals)
	}
}

// libMatrixOf builds the report's library matrix from the samples.
func libMatrixOf(ws []*libWork, vals [][2][]libSample) *LibMatrix {
	m := &LibMatrix{}
	for i, w := range ws {
		var fig [2][]float64
		for side := range 2 {
			for _, s := range vals[i][side] {
				fig[side] = append(fig[side], s.value)
			}
		}
		x := newLibRow(w.group, w.name, w.unit, w.note, fig[0], fig[1])
		x.Per = w.per
		for side := range 2 {
			x.RPCs[side], x.RPCTotal[side] = rpcsPerUnit(vals[i][side])
		}
		m.Rows = append(m.Rows, x)
	}
	m.summarize()
	return m
}

// rpcsPerUnit is the calls per unit of work by procedure, and in all, over
// the samples that counted them (nil when none did).
func rpcsPerUnit(ss []libSample) (map[string]float64, float64) {
	sum := map[string]uint64{}
	var units int64
	for _, s := range ss {
		if s.value <= 0 || s.rpcs == nil || s.units <= 0 {
			continue
		}
		for op, n := range s.rpcs {
			sum[op] += n.Calls
		}
		units += s.units
	}
	if units == 0 {
		return nil, 0
	}
	per := map[string]float64{}
	var total float64
	for op, n := range sum {
		per[op] = float64(n) / float64(units)
		total += per[op]
	}
	return per, total
}

// fmtSampleRPCs is a sample's RPCs per unit, for the log.
func fmtSampleRPCs(s libSample) string {
	per, total := rpcsPerUnit([]libSample{s})
	if per == nil {
		return ""
	}
	return fmtRPCsPerUnit(per, total)
}

// runLib runs one row on one side, within p.StepTimeout; counts, when
// set, reads the server's RPC counters before and after.
func runLib(ctx context.Context, p LibPlan, round int, local string, w *libWork, s *libSide, counts func() (RPCCounts, error)) (libSample, error) {
	ctx, cancel := context.WithTimeout(ctx, p.StepTimeout)
	defer cancel()
	if w.cold {
		if err := s.cold(ctx); err != nil {
			return libSample{}, fmt.Errorf("making it cold: %w", err)
		}
	}
	var before RPCCounts
	if counts != nil {
		var err error
		if before, err = counts(); err != nil {
			return libSample{}, fmt.Errorf("the server's RPC counters: %w", err)
		}
	}
	v, n, err := w.run(ctx, &libCtx{p: p, side: s, round: round, local: local})
	if err == nil && v <= 0 {
		err = fmt.Errorf("no figure (%v)", v)
	}
	if err != nil {
		return libSample{}, err
	}
	smp := libSample{value: v, units: n}
	if counts != nil {
		after, err := counts()
		if err != nil {
			return libSample{}, fmt.Errorf("the server's RPC counters: %w", err)
		}
		smp.rpcs = after.Sub(before)
	}
	return smp, nil
}

var _ libFile = (*nfs3.File)(nil)
var _ libFile = (*os.File)(nil)
