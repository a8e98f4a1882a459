package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/nfsrdma/nfsrdma/integration/bench"
	"github.com/nfsrdma/nfsrdma/integration/testbed"
)

// benchBaseline measures the bed's ceiling (perftest) and the kernel's
// NFSv3/RDMA client (fio) in one guest run, and writes results/baseline.json
// and results/baseline.md.
func benchBaseline(ctx context.Context, args []string) (int, error) {
	return runBench(ctx, "bench-baseline", "baseline", false, args)
}

// benchFull runs, in one guest run, the workload matrix (everyday work on
// the kernel's NFSv3/RDMA mount and on nfsrdma-mount, side by side), then
// nfsrdma's library and transport beside perftest and the kernel client,
// and writes results/bench.json, results/bench.md and the chart of the
// matrix's ratios, results/bench.png.
func benchFull(ctx context.Context, args []string) (int, error) {
	return runBench(ctx, "bench", "bench", true, args)
}

func runBench(ctx context.Context, cmd, report string, full bool, args []string) (int, error) {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	out := fs.String("out", "results", "results directory (under the current directory, which is shared with the guest)")
	size := fs.Int("size", 256, "fio file size in MiB of the kernel baseline jobs")
	defTimeout := 30 * time.Minute
	if full {
		defTimeout = 125 * time.Minute // the matrix's three rounds (with the FUSE floor) take about 50-60, the library matrix 10-15, the library figures 20
	}
	timeout := fs.Duration("timeout", defTimeout, "guest timeout")
	var cmpSize, passes, rounds *int
	var quick, library, matrix, libmatrix *bool
	var only *string
	if full {
		cmpSize = fs.Int("compare-size", 64, "file size in MiB of the transport and NFS-level comparisons (ours and the kernel's)")
		passes = fs.Int("passes", 2, "times each comparison covers its file")
		rounds = fs.Int("rounds", 3, "rounds of paired measurements, each ratio the median of its rounds' ratios")
		quick = fs.Bool("quick", false, "one round of smaller sizes, for development")
		library = fs.Bool("library", true, "after the matrix, measure the library and transport beside perftest and the kernel client")
		only = fs.String("only", "", "run only the matrix workloads (both matrices') whose \"group/name\" this regular expression matches (with -out elsewhere, for development)")
		matrix = fs.Bool("matrix", true, "run the workload matrix (the kernel's mount against nfsrdma-mount)")
		libmatrix = fs.Bool("libmatrix", true, "after the workload matrix, run the library matrix (a Go program with the library against the same with os on the kernel's mount)")
	}
	if err := fs.Parse(args); err != nil {
		return 2, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return 1, err
	}
	dir, err := filepath.Abs(*out)
	if err != nil {
		return 1, err
	}
	rel, err := filepath.Rel(wd, dir)
	if err != nil || filepath.IsAbs(rel) || rel == ".." || len(rel) > 2 && rel[:3] == "../" {
		return 2, fmt.Errorf("%s: -out %s must be under the current directory (the guest sees only that)", cmd, dir)
	}
	if err := os.MkdirAll(filepath.Join(dir, ".bin"), 0o755); err != nil {
		return 1, err
	}
	bin := filepath.Join(dir, ".bin", "benchguest")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/nfsrdma/nfsrdma/integration/cmd/benchguest")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return 1, fmt.Errorf("%s: building the guest program: %w", cmd, err)
	}
	if full {
		// The mount helper, for fio through nfsrdma-mount beside the
		// kernel client.
		build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, ".bin", "nfsrdma-mount"), "github.com/nfsrdma/nfsrdma/cmd/nfsrdma-mount")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return 1, fmt.Errorf("%s: building nfsrdma-mount: %w", cmd, err)
		}
	}
	img, err := testbed.Build(ctx, os.Stderr)
	if err != nil {
		return 1, err
	}
	jsonPath := filepath.Join(dir, report+".json")
	os.Remove(jsonPath) // never mistake an old report for this run's
	gargs := []string{filepath.Join(rel, ".bin", "benchguest"), "-out", filepath.Join(rel, report+".json"), "-size", fmt.Sprint(*size)}
	if full {
		if *matrix {
			gargs = append(gargs, "-matrix")
		}
		if *libmatrix {
			gargs = append(gargs, "-libmatrix")
		}
		gargs = append(gargs, "-compare-size", fmt.Sprint(*cmpSize), "-passes", fmt.Sprint(*passes), "-rounds", fmt.Sprint(*rounds),
			"-nfsrdma-mount", filepath.Join(rel, ".bin", "nfsrdma-mount"))
		if *library {
			gargs = append(gargs, "-full")
		}
		if *quick {
			gargs = append(gargs, "-quick")
		}
		if *only != "" {
			gargs = append(gargs, "-only", *only)
		}
	}
	// The guest's vCPUs are host threads: a busy host skews every figure,
	// so the report says how busy it was.
	loadBefore := hostLoad()
	accel := testbed.ProbeAccel(ctx, img, os.Stderr)
	code, runErr := testbed.Run(ctx, img, testbed.RunOptions{Share: wd, Timeout: *timeout, MemoryMiB: 6144, Args: gargs, Accel: &accel})
	r, rerr := bench.ReadJSON(jsonPath)
	if rerr != nil {
		if runErr != nil {
			return code, runErr
		}
		return 1, fmt.Errorf("%s: the guest wrote no report: %w", cmd, rerr)
	}
	if runErr != nil {
		// The matrix saves each round as it ends: report what there is.
		r.Errors = append(r.Errors, fmt.Sprintf("the guest run failed (the report is partial): %v", runErr))
		code = max(code, 1)
	}
	r.Accel = accel.String()
	r.Note("host load average (1/5/15 min) before the guest: %s; after: %s; host CPUs: %d", loadBefore, hostLoad(), runtime.NumCPU())
	if err := writeReports(cmd, jsonPath, r); err != nil {
		return 1, err
	}
	return code, nil
}

// writeReports writes r as JSON at jsonPath and, beside it, as Markdown
// (.md) and, when it has a matrix, the chart of its ratios (.png).
func writeReports(cmd, jsonPath string, r *bench.Report) error {
	if err := r.WriteJSON(jsonPath); err != nil {
		return err
	}
	base := strings.TrimSuffix(jsonPath, ".json")
	mdPath := base + ".md"
	md, err := os.Create(mdPath)
	if err != nil {
		return err
	}
	r.WriteMarkdown(md)
	if err := md.Close(); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "[testbed] wrote %s and %s\n", jsonPath, mdPath)
	if len(r.Matrix) > 0 {
		png := base + ".png"
		title := fmt.Sprintf("nfsrdma-mount against the kernel's NFSv3/RDMA mount, %s", r.When.Format("2006-01-02 15:04 UTC"))
		if err := bench.WriteChart(r.Matrix, title, png); err != nil {
			return fmt.Errorf("%s: chart: %w", cmd, err)
		}
		fmt.Fprintf(os.Stderr, "[testbed] wrote %s\n", png)
		// The matrix, for the terminal.
		r.WriteMatrix(os.Stdout)
	}
	r.WriteLibMatrix(os.Stdout)
	return nil
}

// benchReport renders a saved report again (results/bench.json by
// default): its Markdown and chart, e.g. after a guest run that was cut
// short, or one run by hand with `testbed run ... benchguest -matrix`.
func benchReport(ctx context.Context, args []string) (int, error) {
	fs := flag.NewFlagSet("bench-report", flag.ContinueOnError)
	in := fs.String("json", "results/bench.json", "the report to render")
	if err := fs.Parse(args); err != nil {
		return 2, nil
	}
	r, err := bench.ReadJSON(*in)
	if err != nil {
		return 1, err
	}
	if err := writeReports("bench-report", *in, r); err != nil {
		return 1, err
	}
	return 0, nil
}

// hostLoad is the host's load averages from /proc/loadavg.
func hostLoad() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
