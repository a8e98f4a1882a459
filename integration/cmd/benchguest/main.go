// Command benchguest runs the test bed's benchmarks inside the guest (it is
// started by `testbed bench-baseline`) and writes a JSON report.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/nfsrdma/nfsrdma/integration/bench"
)

func main() {
	out := flag.String("out", "results/baseline.json", "report path")
	size := flag.Int("size", 256, "fio file size in MiB")
	flag.Parse()
	if os.Getenv("TESTBED_GUEST") != "1" {
		fmt.Fprintln(os.Stderr, "benchguest runs inside the test-bed guest: use 'testbed bench-baseline'")
		os.Exit(2)
	}
	ctx := context.Background()
	r := &bench.Report{When: time.Now().UTC(), Kernel: bench.KernelVersion()}
	g := &bench.Guest{Server: os.Getenv("TESTBED_SERVER"), Device: os.Getenv("TESTBED_DEVICE"), Export: os.Getenv("TESTBED_EXPORT"),
		Mount: "/mnt/kernel-nfs", FileMiB: *size, Log: os.Stdout, Report: r}
	g.Perftest(ctx)
	g.KernelNFS(ctx)
	if err := r.WriteJSON(*out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	r.WriteMarkdown(os.Stdout)
	if len(r.Errors) > 0 {
		os.Exit(1)
	}
}
