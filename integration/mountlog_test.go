//go:build integration

package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMountLogServerOK: on a hard RDMA mount, whose transport retransmits
// by itself, a knfsd that stops answering is logged "server not
// responding, still trying" after timeo, and "server OK" at the first
// reply once it is back, each with the mount point; the write waiting
// meanwhile completes.
func TestMountLogServerOK(t *testing.T) {
	bin := mountBinary(t)
	dir := mountNFSRDMA(t, bin, "timeo=20") // 2 s, hard
	ms := mounted[dir]
	if err := os.WriteFile(filepath.Join(dir, "before"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	logged := func(s string) bool { return strings.Contains(readLog(ms.log), s) }
	if logged("server OK") || logged("not responding") {
		t.Fatalf("an outage logged before any:\n%s", readLog(ms.log))
	}
	if err := stopNFSD(); err != nil {
		t.Fatal(err)
	}
	started := false
	t.Cleanup(func() {
		if !started {
			if err := startNFSD(); err != nil {
				t.Errorf("restarting knfsd: %v", err)
			}
		}
	})
	done := make(chan error, 1)
	go func() { done <- os.WriteFile(filepath.Join(dir, "during"), []byte("y"), 0o644) }()
	notResponding := `msg="server not responding, still trying" mountpoint=` + dir
	waitLogged(t, ms, notResponding, time.Minute)
	if logged("server OK") {
		t.Fatalf("server OK while knfsd is stopped:\n%s", readLog(ms.log))
	}
	if err := startNFSD(); err != nil {
		t.Fatal(err)
	}
	started = true
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the write across the outage: %v", err)
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("the write across the outage still waits 3 minutes after knfsd's restart:\n%s", readLog(ms.log))
	}
	waitLogged(t, ms, `msg="server OK" mountpoint=`+dir, time.Minute)
	log := readLog(ms.log)
	if strings.Count(log, "server not responding") != 1 || strings.Count(log, "server OK") != 1 ||
		strings.Index(log, "server OK") < strings.Index(log, notResponding) {
		t.Errorf("want one \"not responding\", then one \"server OK\":\n%s", log)
	}
}

// waitLogged waits up to d for s in the mount server's log.
func waitLogged(t *testing.T, ms *mountedServer, s string, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if strings.Contains(readLog(ms.log), s) {
			return
		}
	}
	t.Fatalf("%q not in the server's log within %v:\n%s", s, d, readLog(ms.log))
}
