package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/nfsrdma/nfsrdma/integration/bench"
	"github.com/nfsrdma/nfsrdma/integration/testbed"
)

// benchBaseline measures the bed's ceiling (perftest) and the kernel's
// NFSv3/RDMA client (fio) in one guest run, and writes results/baseline.json
// and results/baseline.md.
func benchBaseline(ctx context.Context, args []string) (int, error) {
	fs := flag.NewFlagSet("bench-baseline", flag.ContinueOnError)
	out := fs.String("out", "results", "results directory (under the current directory, which is shared with the guest)")
	size := fs.Int("size", 256, "fio file size in MiB")
	timeout := fs.Duration("timeout", 30*time.Minute, "guest timeout")
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
		return 2, fmt.Errorf("bench-baseline: -out %s must be under the current directory (the guest sees only that)", dir)
	}
	if err := os.MkdirAll(filepath.Join(dir, ".bin"), 0o755); err != nil {
		return 1, err
	}
	bin := filepath.Join(dir, ".bin", "benchguest")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/nfsrdma/nfsrdma/integration/cmd/benchguest")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return 1, fmt.Errorf("bench-baseline: building the guest program: %w", err)
	}
	img, err := testbed.Build(ctx, os.Stderr)
	if err != nil {
		return 1, err
	}
	jsonPath := filepath.Join(rel, "baseline.json")
	code, err := testbed.Run(ctx, img, testbed.RunOptions{Share: wd, Timeout: *timeout, MemoryMiB: 6144,
		Args: []string{filepath.Join(rel, ".bin", "benchguest"), "-out", jsonPath, "-size", fmt.Sprint(*size)}})
	if err != nil {
		return code, err
	}
	r, rerr := bench.ReadJSON(filepath.Join(dir, "baseline.json"))
	if rerr != nil {
		return 1, fmt.Errorf("bench-baseline: the guest wrote no report: %w", rerr)
	}
	md, err := os.Create(filepath.Join(dir, "baseline.md"))
	if err != nil {
		return 1, err
	}
	r.WriteMarkdown(md)
	md.Close()
	fmt.Fprintf(os.Stderr, "[testbed] wrote %s and %s\n", filepath.Join(dir, "baseline.json"), filepath.Join(dir, "baseline.md"))
	return code, nil
}
