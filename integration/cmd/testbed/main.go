// Command testbed builds and boots the nfsrdma test bed: a Debian guest with
// Soft-RoCE (rxe0) and the Linux NFS server, under qemu TCG emulation.
//
//	testbed demo                       mount knfsd's export over RDMA with nfsrdma-mount and use it
//	testbed build                      build the guest image (or reuse the cached one)
//	testbed run [flags] -- CMD [ARGS]  boot the guest, run CMD in /share, exit with its code
//	testbed shell [flags]              boot the guest with an interactive shell
//	testbed host-deps                  install the host packages (qemu, debootstrap, rdma-core headers)
//	testbed bench-baseline [flags]     perftest and fio on the kernel NFS/RDMA client, as JSON and Markdown
//	testbed bench [flags]              the workload matrix (kernel mount vs nfsrdma-mount), then nfsrdma's own figures and their ratios
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nfsrdma/nfsrdma/integration/testbed"
)

func usage() {
	fmt.Fprint(os.Stderr, `usage:
  testbed demo                       the main job: mount knfsd's export over RDMA with nfsrdma-mount in the bed and use it
  testbed build                      build the guest image, or reuse the cached one
  testbed run [flags] -- CMD [ARGS]  boot the guest, run CMD in /share, exit with its exit code
  testbed shell [flags]              boot the guest with an interactive shell
  testbed host-deps                  install the host packages the bed and the cgo build need
  testbed bench-baseline [flags]     perftest and fio on the kernel NFS/RDMA client -> results/baseline.*
  testbed bench [flags]              the workload matrix (kernel mount vs nfsrdma-mount; -quick, -rounds N),
                                     then nfsrdma (verbs, transport, NFS client) and ratios -> results/bench.{md,json,png}
  testbed bench-report [-json F]     render a saved report (results/bench.json) again as .md and .png

run and shell flags:
  -share DIR      host directory mounted at /share in the guest (default: current directory)
  -timeout D      kill the guest after D (default 30m)
  -mem MiB        guest memory (default 6144)
  -env K=V        extra environment for the command (repeatable)
  -kernel-args A  added to the guest kernel's command line (after the bed's own,
                  clocksource=tsc tsc=reliable: a later clocksource= overrides it)
`)
}

type envList []string

func (e *envList) String() string     { return fmt.Sprint(*e) }
func (e *envList) Set(s string) error { *e = append(*e, s); return nil }

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, os.Args[1], os.Args[2:])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func run(ctx context.Context, sub string, args []string) (int, error) {
	switch sub {
	case "build":
		_, err := testbed.Build(ctx, os.Stderr)
		return 0, err
	case "host-deps":
		return 0, testbed.EnsureHostPackages(ctx, os.Stderr)
	case "run", "shell":
		fs := flag.NewFlagSet(sub, flag.ContinueOnError)
		share := fs.String("share", "", "host directory mounted at /share")
		timeout := fs.Duration("timeout", 30*time.Minute, "guest timeout")
		mem := fs.Int("mem", 6144, "guest memory in MiB (knfsd sizes its largest READ and WRITE from it: 6 GiB gives 1 MiB)")
		kargs := fs.String("kernel-args", "", "added to the guest kernel's command line")
		var env envList
		fs.Var(&env, "env", "K=V for the command")
		fs.Usage = usage
		if err := fs.Parse(args); err != nil {
			return 2, nil
		}
		if sub == "run" && fs.NArg() == 0 {
			usage()
			return 2, errors.New("testbed run: no command given")
		}
		img, err := testbed.Build(ctx, os.Stderr)
		if err != nil {
			return 1, err
		}
		return testbed.Run(ctx, img, testbed.RunOptions{
			Share: *share, Args: fs.Args(), Env: env, Shell: sub == "shell",
			MemoryMiB: *mem, Timeout: *timeout, KernelArgs: *kargs,
		})
	case "bench-baseline":
		return benchBaseline(ctx, args)
	case "demo":
		return demo(ctx, args)
	case "bench":
		return benchFull(ctx, args)
	case "bench-report":
		return benchReport(ctx, args)
	case "-h", "--help", "help":
		usage()
		return 0, nil
	}
	usage()
	return 2, fmt.Errorf("testbed: unknown command %q", sub)
}
