package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestNoCgoBuild: a binary built without cgo says so in --version, and a
// proto=rdma mount fails at once naming the fix, before it reaches for the
// server or FUSE.
func TestNoCgoBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the helper without cgo (-short given)")
	}
	bin := filepath.Join(t.TempDir(), "nfsrdma-mount")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, ".")
	build.Env = append(build.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build with CGO_ENABLED=0: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil || !strings.Contains(string(out), "no RDMA: built without cgo") {
		t.Errorf("--version of a build without cgo: %q %v", out, err)
	}
	dir := t.TempDir()
	// An address nothing answers on: a mount that tried the server would
	// take retry= to fail, not return at once.
	mnt := exec.Command(bin, "-o", "proto=rdma,retry=1", "192.0.2.1:/export", dir)
	b, err := mnt.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitMountErr {
		t.Fatalf("proto=rdma mount without cgo: %v, want exit %d\n%s", err, exitMountErr, b)
	}
	for _, want := range []string{"built without RDMA support (no cgo)", "CGO_ENABLED=1", "libibverbs-dev librdmacm-dev", "proto=tcp"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("message lacks %q: %s", want, b)
		}
	}
	// proto=tcp still gets as far as the mount point.
	b, _ = exec.Command(bin, "-o", "proto=tcp,retry=0", "192.0.2.1:/export", filepath.Join(dir, "missing")).CombinedOutput()
	if strings.Contains(string(b), "without RDMA support") || !strings.Contains(string(b), "does not exist") {
		t.Errorf("proto=tcp mount without cgo: %s", b)
	}
}
