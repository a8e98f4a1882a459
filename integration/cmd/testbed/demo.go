package main

import (
	"context"
	_ "embed"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/nfsrdma/nfsrdma/integration/testbed"
)

//go:embed demo.sh
var demoScript []byte

// demo is the main job: boot the bed, mount knfsd's export over RDMA with
// nfsrdma-mount, copy a tree in and out, check it, print the stats. It
// builds nfsrdma-mount into the cache and shares only that directory with
// the guest.
func demo(ctx context.Context, args []string) (int, error) {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 20*time.Minute, "guest timeout")
	if err := fs.Parse(args); err != nil {
		return 2, nil
	}
	img, err := testbed.Build(ctx, os.Stderr)
	if err != nil {
		return 1, err
	}
	dir := filepath.Join(filepath.Dir(img.Dir), "demo")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 1, err
	}
	fmt.Fprintln(os.Stderr, "[testbed] building nfsrdma-mount")
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, "nfsrdma-mount"), "github.com/nfsrdma/nfsrdma/cmd/nfsrdma-mount")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return 1, fmt.Errorf("testbed demo: building nfsrdma-mount (needs cgo and the rdma-core headers: testbed host-deps installs them): %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "demo.sh"), demoScript, 0o755); err != nil {
		return 1, err
	}
	return testbed.Run(ctx, img, testbed.RunOptions{Share: dir, Args: []string{"bash", "demo.sh"}, Timeout: *timeout})
}
