// Command benchguest runs the test bed's benchmarks inside the guest (it is
// started by `testbed bench-baseline` and `testbed bench`) and writes a JSON
// report.
//
// By default it measures the bed's ceiling (perftest) and the kernel's
// NFSv3/RDMA client (fio). With -full it runs the kernel baseline, then
// rounds in which nfsrdma itself — its verbs layer over rxe0, its transport
// to knfsd, its NFS client — is measured right after each reference
// (perftest, fio on the kernel client); each ratio is the median of the
// rounds' own ratios. With -nfsrdma-mount, the rounds also run the kernel
// client's fio jobs through that mount helper's FUSE mount; -fuse-only runs
// just those pairs.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/nfsrdma/nfsrdma/integration/bench"
	"github.com/nfsrdma/nfsrdma/verbs/ibv"
)

func main() {
	out := flag.String("out", "results/baseline.json", "report path")
	size := flag.Int("size", 256, "fio file size in MiB of the kernel baseline jobs")
	full := flag.Bool("full", false, "also measure nfsrdma (verbs, transport, NFS client) and the ratios")
	cmpSize := flag.Int("compare-size", 64, "with -full: file size in MiB of the NFS-level comparisons")
	passes := flag.Int("passes", 2, "with -full: times each comparison covers its file")
	rounds := flag.Int("rounds", 5, "with -full: rounds of paired measurements (figures are their medians)")
	mountBin := flag.String("nfsrdma-mount", "", "with -full or -fuse-only: the nfsrdma-mount binary, to measure fio through it beside the kernel client")
	fuseOnly := flag.Bool("fuse-only", false, "measure only fio through nfsrdma-mount beside the kernel client (paired rounds, ratios)")
	flag.Parse()
	if os.Getenv("TESTBED_GUEST") != "1" {
		fmt.Fprintln(os.Stderr, "benchguest runs inside the test-bed guest: use 'testbed bench-baseline' or 'testbed bench'")
		os.Exit(2)
	}
	ctx := context.Background()
	r := &bench.Report{When: time.Now().UTC(), Kernel: bench.KernelVersion()}
	g := &bench.Guest{Server: os.Getenv("TESTBED_SERVER"), Device: os.Getenv("TESTBED_DEVICE"), Export: os.Getenv("TESTBED_EXPORT"),
		Mount: "/mnt/kernel-nfs", FileMiB: *size, Log: os.Stdout, Report: r}
	g.MountBinary = *mountBin
	if *fuseOnly {
		g.Plan = bench.DefaultPlan()
		g.Plan.FileMiB, g.Plan.Passes, g.Plan.Rounds = *cmpSize, *passes, *rounds
		r.Note("plan of the paired rounds: %+v", g.Plan)
		g.CompareFUSE(ctx)
	} else if !*full {
		g.Perftest(ctx)
		g.KernelNFS(ctx)
	} else {
		g.Plan = bench.DefaultPlan()
		g.Plan.FileMiB, g.Plan.Passes, g.Plan.Rounds = *cmpSize, *passes, *rounds
		r.Note("plan of the paired rounds: %+v", g.Plan)
		g.KernelNFS(ctx)
		fab, err := ibv.Open()
		if err != nil {
			r.Errors = append(r.Errors, fmt.Sprintf("verbs/ibv: %v", err))
		} else {
			g.Fabric = fab
			g.Compare(ctx)
			if live := fab.Live(); !live.Zero() {
				r.Errors = append(r.Errors, fmt.Sprintf("verbs resources left after the runs: %+v", live))
			}
		}
	}
	if err := r.WriteJSON(*out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	r.WriteMarkdown(os.Stdout)
	if len(r.Errors) > 0 {
		os.Exit(1)
	}
}
