// Command benchguest runs the test bed's benchmarks inside the guest (it is
// started by `testbed bench-baseline` and `testbed bench`) and writes a JSON
// report.
//
// By default it measures the bed's ceiling (perftest) and the kernel's
// NFSv3/RDMA client (fio). With -matrix (and -nfsrdma-mount) it runs the
// workload matrix: fio and small-file work on the kernel's NFSv3/RDMA mount
// and on nfsrdma-mount side by side in -rounds rounds (-quick: one round of
// smaller sizes). With -full it runs rounds in which nfsrdma itself — its
// verbs layer over rxe0, its transport to knfsd, its NFS client — is
// measured right after each reference (perftest, fio on the kernel
// client); each ratio is the median of the rounds' own ratios. -full alone
// runs the kernel baseline first and fio through -nfsrdma-mount in its
// rounds; with -matrix it runs neither (the matrix covers both).
// With -libmatrix (after the matrix) it runs the library matrix: the same
// Go code with the library and with os on the kernel's mount, in -rounds
// paired rounds. -fuse-only runs just the fio pairs of the kernel client and
// nfsrdma-mount. The matrix also runs each workload on its FUSE floor, a
// go-fuse loopback of the export's directory that this program serves
// when started as "benchguest -fuse-floor DIR MOUNTPOINT".
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"runtime/pprof"
	"time"

	"github.com/nfsrdma/nfsrdma/integration/bench"
	"github.com/nfsrdma/nfsrdma/verbs/ibv"
)

func main() {
	// The matrix's FUSE floor: this program again, as the loopback's
	// server (bench.ServeFloor), started by the matrix itself.
	if len(os.Args) == 4 && os.Args[1] == bench.FloorFlag {
		if err := bench.ServeFloor(os.Args[2], os.Args[3]); err != nil {
			fmt.Fprintln(os.Stderr, "benchguest:", err)
			os.Exit(1)
		}
		return
	}
	out := flag.String("out", "results/baseline.json", "report path")
	size := flag.Int("size", 256, "fio file size in MiB of the kernel baseline jobs")
	full := flag.Bool("full", false, "measure nfsrdma (verbs, transport, NFS client) beside perftest and the kernel client, and the ratios")
	cmpSize := flag.Int("compare-size", 64, "with -full: file size in MiB of the NFS-level comparisons")
	passes := flag.Int("passes", 2, "with -full: times each comparison covers its file")
	rounds := flag.Int("rounds", 5, "with -full: rounds of paired measurements (figures are their medians)")
	mountBin := flag.String("nfsrdma-mount", "", "with -full or -fuse-only: the nfsrdma-mount binary, to measure fio through it beside the kernel client")
	fuseOnly := flag.Bool("fuse-only", false, "measure only fio through nfsrdma-mount beside the kernel client (paired rounds, ratios)")
	matrix := flag.Bool("matrix", false, "run the workload matrix: the kernel's mount against -nfsrdma-mount")
	quick := flag.Bool("quick", false, "with -matrix: one round of smaller sizes (-rounds is ignored), for development")
	only := flag.String("only", "", "with -matrix or -libmatrix: only the workloads whose \"group/name\" this regular expression matches")
	libmatrix := flag.Bool("libmatrix", false, "run the library matrix: a Go program with the library against the same with os on the kernel's mount (after -matrix, before -full)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof), e.g. of -libmatrix with -only")
	flag.Parse()
	if os.Getenv("TESTBED_GUEST") != "1" {
		fmt.Fprintln(os.Stderr, "benchguest runs inside the test-bed guest: use 'testbed bench-baseline' or 'testbed bench'")
		os.Exit(2)
	}
	stopProfile := func() {}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "-cpuprofile:", err)
			os.Exit(2)
		}
		stopProfile = func() { pprof.StopCPUProfile(); f.Close() }
	}
	ctx := context.Background()
	r := &bench.Report{When: time.Now().UTC(), Kernel: bench.KernelVersion()}
	// The benchmarks lay their inputs out as root on the server and run
	// as root on both mounts: the export that does not squash root (the
	// main one does, as exports(5) defaults), so both clients own what
	// they create. Speed does not depend on it.
	export := os.Getenv("TESTBED_INSECURE_EXPORT")
	if export == "" {
		export = os.Getenv("TESTBED_EXPORT")
	}
	g := &bench.Guest{Server: os.Getenv("TESTBED_SERVER"), Device: os.Getenv("TESTBED_DEVICE"), Export: export,
		Mount: "/mnt/kernel-nfs", FileMiB: *size, Log: os.Stdout, Report: r}
	g.MountBinary = *mountBin
	switch {
	case *fuseOnly:
		g.Plan = bench.DefaultPlan()
		g.Plan.FileMiB, g.Plan.Passes, g.Plan.Rounds = *cmpSize, *passes, *rounds
		r.Note("plan of the paired rounds: %+v", g.Plan)
		g.CompareFUSE(ctx)
	case *matrix || *full || *libmatrix:
		var onlyRE *regexp.Regexp
		if *only != "" {
			re, err := regexp.Compile(*only)
			if err != nil {
				fmt.Fprintln(os.Stderr, "-only:", err)
				os.Exit(2)
			}
			onlyRE = re
		}
		if *matrix {
			p := bench.DefaultMatrixPlan()
			p.Rounds = *rounds
			if *quick {
				p = bench.QuickMatrixPlan()
			}
			p.Only = onlyRE
			// Each round's figures are saved as they come: a guest that
			// runs out of time still leaves them.
			g.Matrix(ctx, p, func() {
				if err := r.WriteJSON(*out); err != nil {
					fmt.Fprintln(os.Stderr, err)
				}
			})
			g.NoFUSECompare = true
		}
		if *libmatrix {
			p := bench.DefaultLibPlan()
			p.Rounds = *rounds
			if *quick {
				p = bench.QuickLibPlan()
			}
			p.Only = onlyRE
			g.LibMatrix(ctx, p, func() {
				if err := r.WriteJSON(*out); err != nil {
					fmt.Fprintln(os.Stderr, err)
				}
			})
		}
		if *full {
			g.Plan = bench.DefaultPlan()
			g.Plan.FileMiB, g.Plan.Passes, g.Plan.Rounds = *cmpSize, *passes, *rounds
			if *quick {
				g.Plan.FileMiB, g.Plan.Passes, g.Plan.Rounds = 16, 1, 1
			}
			r.Note("plan of the paired rounds: %+v", g.Plan)
			if !*matrix {
				g.KernelNFS(ctx)
			}
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
	default:
		g.Perftest(ctx)
		g.KernelNFS(ctx)
	}
	stopProfile()
	if err := r.WriteJSON(*out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	r.WriteMarkdown(os.Stdout)
	if len(r.Errors) > 0 {
		os.Exit(1)
	}
}
