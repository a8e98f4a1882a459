package main

import (
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// holdProxy forwards TCP connections on a port of its own to target,
// holding the calls (client to server) back while hold is set.
type holdProxy struct {
	ln   net.Listener
	hold atomic.Bool
}

func startHoldProxy(t *testing.T, target string) *holdProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{ln: ln}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			wg.Go(func() {
				buf := make([]byte, 64<<10)
				for {
					k, err := c.Read(buf)
					for p.hold.Load() {
						time.Sleep(5 * time.Millisecond)
					}
					if k > 0 {
						if _, err := s.Write(buf[:k]); err != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				s.Close()
			})
			wg.Go(func() { io.Copy(c, s); c.Close() })
		}
	})
	t.Cleanup(func() {
		p.hold.Store(false)
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return p
}

// End to end over TCP: a server that stops answering is logged "not
// responding", and "server OK" once it answers again, with the mount point.
func TestServerOKLogged(t *testing.T) {
	requireFUSE(t)
	srv := fusefstest.Start(t, fusefstest.Mem)
	px := startHoldProxy(t, "127.0.0.1:"+strconv.Itoa(srv.Port))
	dir := t.TempDir()
	logf := filepath.Join(t.TempDir(), "server.log")
	opts := "proto=tcp,port=" + strconv.Itoa(px.ln.Addr().(*net.TCPAddr).Port) + ",mountport=" + strconv.Itoa(srv.Port) +
		",timeo=2,hard,logfile=" + logf
	if code, _, errs := cli("nfsrdma-mount", "-o", opts, "127.0.0.1:/", dir); code != 0 {
		t.Fatalf("mount: %s", errs)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	logged := func(s string) func() bool {
		return func() bool { b, _ := os.ReadFile(logf); return strings.Contains(string(b), s) }
	}
	px.hold.Store(true)
	done := make(chan error, 1)
	go func() { done <- os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644) }()
	waitFor(t, logged("server not responding"), `"server not responding" in the log`)
	if logged("server OK")() {
		t.Fatalf("server OK while the server does not answer")
	}
	px.hold.Store(false)
	if err := <-done; err != nil {
		t.Fatalf("write after the server answered again: %v", err)
	}
	waitFor(t, logged(`msg="server OK" mountpoint=`+dir+" server=127.0.0.1"), `"server OK" in the log`)
	if code, _, errs := cli("nfsrdma-mount", "-u", dir); code != 0 {
		t.Fatalf("unmount: %s", errs)
	}
	b, _ := os.ReadFile(logf)
	t.Logf("log:\n%s", b)
	if strings.Count(string(b), "server OK") != 1 {
		t.Errorf("want one server OK")
	}
}
