package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/fusefs/fusefstest"
)

// After logrotate moved the log file away, reopen (what SIGHUP calls)
// writes on in a new file at the path; the moved one keeps what came
// before.
func TestLogFileReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "server.log")
	h, f, warning := backgroundLog(path, slog.LevelWarn)
	if warning != "" {
		t.Fatal(warning)
	}
	log := slog.New(h).With("mountpoint", "/mnt/x")
	log.Warn("before")
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	log.Warn("moved") // still the moved file: nothing reopened yet
	if err := f.reopen(); err != nil {
		t.Fatal(err)
	}
	log.Warn("after")
	log.Info("not at warn level")
	old, _ := os.ReadFile(path + ".1")
	cur, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no new log file after reopen: %v", err)
	}
	if !strings.Contains(string(old), "msg=before") || !strings.Contains(string(old), "msg=moved") || strings.Contains(string(old), "msg=after") {
		t.Errorf("moved file:\n%s", old)
	}
	if !strings.Contains(string(cur), "msg=after mountpoint=/mnt/x") || strings.Contains(string(cur), "before") || strings.Contains(string(cur), "not at warn") {
		t.Errorf("new file:\n%s", cur)
	}
	// The path unusable: the log goes on where it went.
	os.Remove(path)
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := f.reopen(); err == nil {
		t.Errorf("reopen of a directory succeeded")
	}
	log.Warn("kept")
	if cur, _ := os.ReadFile(path + ".1"); strings.Contains(string(cur), "kept") {
		t.Errorf("a record went to the moved file after a reopen")
	}
}

// End to end: SIGHUP to a background server with logfile= reopens it, and
// every record names the mount point.
func TestLogFileSIGHUP(t *testing.T) {
	requireFUSE(t)
	srv := fusefstest.Start(t, fusefstest.Mem)
	dir := t.TempDir()
	logf := filepath.Join(t.TempDir(), "server.log")
	if code, _, errs := cli("nfsrdma-mount", "-v", "-o", tcpOpts(srv, "logfile="+logf), "127.0.0.1:/", dir); code != 0 {
		t.Fatalf("mount: %s", errs)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	pid := serverPid(t, dir)
	if err := os.Rename(logf, logf+".1"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// The signal is handled asynchronously: wait for the new file.
	waitFor(t, func() bool { _, err := os.Stat(logf); return err == nil }, "the log file reopened after SIGHUP")
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the server died of SIGHUP: %v", err)
	}
	if code, _, errs := cli("nfsrdma-mount", "-u", dir); code != 0 {
		t.Fatalf("unmount: %s", errs)
	}
	old, _ := os.ReadFile(logf + ".1")
	cur, _ := os.ReadFile(logf)
	t.Logf("moved:\n%s\nnew:\n%s", old, cur)
	if !strings.Contains(string(old), "msg=mounted") || !strings.Contains(string(cur), "msg=unmounted") {
		t.Errorf("want mounted in the moved file, unmounted in the new one:\n%s\n--\n%s", old, cur)
	}
	for _, l := range strings.Split(string(old)+string(cur), "\n") {
		if strings.HasPrefix(l, "time=") && !strings.Contains(l, "mountpoint="+dir) {
			t.Errorf("a record without its mount point: %s", l)
		}
	}
}

// waitFor waits up to 10 s for cond.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}
