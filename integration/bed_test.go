//go:build integration

package integration

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestBedRDMADevice: rxe0 exists and its port is active.
func TestBedRDMADevice(t *testing.T) {
	out := run(t, "ibv_devinfo", "-d", "rxe0")
	if !strings.Contains(out, "PORT_ACTIVE") {
		t.Fatalf("rxe0 port not active:\n%s", out)
	}
	if !strings.Contains(out, "active_mtu:\t\t4096") && !strings.Contains(out, "4096 (5)") {
		t.Errorf("rxe0 active MTU is not 4096 (dummy0 MTU 9000 expected):\n%s", out)
	}
}

// TestBedKnfsdListensOnRDMA: knfsd's portlist has rdma 20049 and tcp 2049.
func TestBedKnfsdListensOnRDMA(t *testing.T) {
	data, err := os.ReadFile("/proc/fs/nfsd/portlist")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"rdma 20049", "tcp 2049"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("portlist lacks %q:\n%s", want, data)
		}
	}
}

// TestBedKernelClientRoundTrip: the kernel's own NFSv3/RDMA client mounts
// the export and a 16 MiB file written through it reads back byte for byte.
func TestBedKernelClientRoundTrip(t *testing.T) {
	mnt := t.TempDir()
	run(t, "mount", "-t", "nfs", "-o", "vers=3,proto=rdma,port=20049", serverAddr.String()+":"+exportDir, mnt)
	mounted := true
	defer func() {
		if mounted {
			exec.Command("umount", mnt).Run()
		}
	}()
	if out := run(t, "grep", mnt, "/proc/mounts"); !strings.Contains(out, "proto=rdma") {
		t.Fatalf("mount is not over RDMA: %s", out)
	}
	data := make([]byte, 16<<20)
	rand.Read(data)
	name := filepath.Join(mnt, "bed-16MiB")
	if err := os.WriteFile(name, data, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, "umount", mnt)
	mounted = false
	// The server's copy.
	srv, err := os.ReadFile(filepath.Join(exportDir, "bed-16MiB"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(srv, data) {
		t.Fatalf("server copy differs: sha256 %x vs %x", sha256.Sum256(srv), sha256.Sum256(data))
	}
	// Read back through a fresh mount (no client cache).
	run(t, "mount", "-t", "nfs", "-o", "vers=3,proto=rdma,port=20049", serverAddr.String()+":"+exportDir, mnt)
	mounted = true
	got, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("read back differs: sha256 %x vs %x", sha256.Sum256(got), sha256.Sum256(data))
	}
	os.Remove(name)
}
