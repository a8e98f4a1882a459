package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// GroupFUSE is fio through nfsrdma-mount: the export as a file system,
// over nfsrdma's RDMA transport, through FUSE.
const GroupFUSE = "nfsrdma-mount"

// fuseFileName is the fio file in the FUSE mount (beside the kernel
// client's fio-compare on the same export).
const fuseFileName = "fio-compare-fuse"

// fuseJob is the kernel client's paired job (Plan.kernelJob) run through
// nfsrdma-mount: same block size, queue depth, direct I/O, file size and
// passes.
func (p Plan) fuseJob(write bool) FioJob { return p.kernelJob(write) }

// mountFUSE mounts the export with g.MountBinary (nfsrdma-mount over
// RDMA, defaults) at g.FUSEMount, lays out its fio file of p.FileMiB so
// that the write jobs overwrite (as on the kernel's mount) and the read
// jobs read data, and returns the file and the unmount.
func (g *Guest) mountFUSE(ctx context.Context, p Plan) (file string, unmount func(), err error) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		if _, err := command(ctx, "modprobe", "fuse"); err != nil {
			return "", nil, err
		}
	}
	dir := g.FUSEMount
	if dir == "" {
		dir = g.Mount + "-fuse"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	if _, err := command(ctx, g.MountBinary, "-o", "vers=3,proto=rdma,port=20049", g.Server+":"+g.Export, dir); err != nil {
		return "", nil, err
	}
	unmount = func() {
		if _, err := command(context.Background(), g.MountBinary, "-u", dir); err != nil {
			g.logf("unmounting %s: %v", dir, err)
			command(context.Background(), "umount", "-l", dir)
		}
	}
	file = filepath.Join(dir, fuseFileName)
	g.logf("nfsrdma-mount: laying out a %d MiB file", p.FileMiB)
	if err := fioLayout(ctx, file, p.FileMiB); err != nil {
		unmount()
		return "", nil, fmt.Errorf("layout: %w", err)
	}
	return file, unmount, nil
}

// fuseRound runs the paired job through nfsrdma-mount, right after the
// kernel client's.
func (g *Guest) fuseRound(ctx context.Context, p Plan, write bool, file string) {
	j := p.fuseJob(write)
	g.logf("nfsrdma-mount: fio %s", j.Name)
	m, err := g.fioJob(ctx, file, j)
	if err != nil {
		g.fail("nfsrdma-mount fio "+j.Name, err)
		return
	}
	g.record(GroupFUSE, j.Name, m.Unit, "direct, libaio, through FUSE", m.Value)
}

// kernelRound runs the paired job on the kernel client.
func (g *Guest) kernelRound(ctx context.Context, p Plan, write bool, file string) {
	j := p.kernelJob(write)
	g.logf("kernel: fio %s", j.Name)
	if m, err := g.fioJob(ctx, file, j); err != nil {
		g.fail("kernel fio "+j.Name, err)
	} else {
		g.record(GroupKernel, j.Name, m.Unit, "direct, libaio", m.Value)
	}
}

// CompareFUSE measures only fio through nfsrdma-mount beside the same fio
// on the kernel's NFSv3/RDMA mount, in Plan.Rounds paired rounds (as
// Compare does with its NFS-level figures), and adds their ratios.
func (g *Guest) CompareFUSE(ctx context.Context) {
	p := g.Plan.withDefaults()
	if g.MountBinary == "" {
		g.fail("nfsrdma-mount", fmt.Errorf("no nfsrdma-mount binary"))
		return
	}
	unmountK, err := g.mountKernel(ctx)
	if err != nil {
		g.fail("kernel mount", err)
		return
	}
	defer unmountK()
	kernelFile := filepath.Join(g.Mount, "fio-compare")
	defer command(context.WithoutCancel(ctx), "rm", "-f", kernelFile)
	fuseFile, unmountF, err := g.mountFUSE(ctx, p)
	if err != nil {
		g.fail("nfsrdma-mount", err)
		return
	}
	defer unmountF()
	defer os.Remove(fuseFile)
	for round := range p.Rounds {
		g.logf("round %d of %d", round+1, p.Rounds)
		for _, write := range []bool{true, false} {
			g.kernelRound(ctx, p, write, kernelFile)
			g.fuseRound(ctx, p, write, fuseFile)
		}
	}
	g.noteMountStats(ctx)
	g.flushSeries()
	g.fuseRatios()
}

// noteMountStats notes nfsrdma-mount's transport counters and per-op
// figures.
func (g *Guest) noteMountStats(ctx context.Context) {
	dir := g.FUSEMount
	if dir == "" {
		dir = g.Mount + "-fuse"
	}
	if out, err := command(ctx, g.MountBinary, "stats", dir); err == nil {
		g.Report.Note("nfsrdma-mount stats: %s", strings.Join(strings.Fields(out), " "))
	}
}

// fuseRatios records fio through nfsrdma-mount against the kernel client.
func (g *Guest) fuseRatios() {
	p := g.Plan.withDefaults()
	for _, write := range []bool{false, true} {
		what := "read"
		if write {
			what = "write"
		}
		g.Report.AddRatio(fmt.Sprintf("nfsrdma-mount seq %s (fio through FUSE / kernel fio)", what),
			[2]string{GroupFUSE, p.fuseJob(write).Name}, [2]string{GroupKernel, p.kernelJob(write).Name}, "higher", 0.8)
	}
}
