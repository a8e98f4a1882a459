package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/fusefs/fusefstest"
	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/xprt"
	"github.com/nfsrdma/nfsrdma/xprt/memlock"
)

// A memlock error is the mount's own refusal: not retried.
func TestMemlockErrorNotRetried(t *testing.T) {
	_, err := memlock.Size(64<<10, 1, 1<<20, false, 0)
	if err == nil {
		t.Fatal("a 64 KiB limit fits")
	}
	if retryable(&MountError{Err: err}) {
		t.Error("a memlock error is retried")
	}
}

// TestLocalRDMAError: a refusal by this machine (registration refused, the
// device not opened) is explained and not retried; a server that does not
// answer is retried.
func TestLocalRDMAError(t *testing.T) {
	wrap := func(verb string, errno syscall.Errno) error {
		return &xprt.ConnectError{Addr: "10.0.0.1:20049", Err: fmt.Errorf("frwr: registering I/O buffer 3: %w", &verbs.OpError{Verb: verb, Err: errno})}
	}
	memErr := localRDMAError(wrap("ibv_reg_mr", syscall.ENOMEM), 1, 1<<20)
	var me *memlock.Error
	if !errors.As(memErr, &me) || !strings.Contains(memErr.Error(), "LimitMEMLOCK") || !strings.Contains(memErr.Error(), "ENOMEM") {
		t.Errorf("ENOMEM from ibv_reg_mr: %v", memErr)
	}
	devErr := localRDMAError(wrap("rdma_create_event_channel", syscall.EACCES), 1, 1<<20)
	if devErr == nil || !strings.Contains(devErr.Error(), "/dev/infiniband") {
		t.Errorf("EACCES: %v", devErr)
	}
	for _, err := range []error{memErr, devErr} {
		if err != nil && retryable(err) {
			t.Errorf("retried: %v", err)
		}
	}
	if err := localRDMAError(wrap("rdma_connect", syscall.ECONNREFUSED), 1, 1<<20); err != nil {
		t.Errorf("a refused connection is local: %v", err)
	}
	if !retryable(wrap("rdma_connect", syscall.ECONNREFUSED)) {
		t.Error("a refused connection is not retried")
	}
}

// TestExplainMountPort: MNT3ERR_ACCES from an ordinary port says why the
// port was ordinary and what to do.
func TestExplainMountPort(t *testing.T) {
	acces := fmt.Errorf("MNT: %w", nfs3.MountErrAcces)
	err := explainMount("/export", acces, 40123, false)
	for _, want := range []string{"denied access to /export", "ordinary source port 40123", "cap_net_bind_service", "secure", "insecure"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	if !errors.Is(err, nfs3.MountErrAcces) {
		t.Error("the status is not wrapped")
	}
	if err := explainMount("/export", acces, 40123, true); !strings.Contains(err.Error(), "noresvport") {
		t.Errorf("with noresvport: %v", err)
	}
	if err := explainMount("/export", acces, 871, false); strings.Contains(err.Error(), "source port") {
		t.Errorf("from a reserved port: %v", err)
	}
}

func TestSdNotify(t *testing.T) {
	for _, abstract := range []bool{false, true} {
		name := filepath.Join(t.TempDir(), "notify")
		if abstract {
			name = fmt.Sprintf("@nfsrdma-test-%d", os.Getpid())
		}
		ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv("NOTIFY_SOCKET", name)
		if err := sdNotify("READY=1"); err != nil {
			t.Fatal(err)
		}
		ln.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 256)
		n, err := ln.Read(buf)
		if err != nil || string(buf[:n]) != "READY=1" {
			t.Errorf("%s got %q %v", name, buf[:n], err)
		}
		ln.Close()
	}
	t.Setenv("NOTIFY_SOCKET", "")
	if err := sdNotify("READY=1"); err != nil {
		t.Errorf("without NOTIFY_SOCKET: %v", err)
	}
}

// TestForegroundNotify: nfsrdma-mount -f under a service manager says
// READY=1 once the mount is up, and STOPPING=1 at unmount.
func TestForegroundNotify(t *testing.T) {
	requireFUSE(t)
	srv := fusefstest.Start(t, fusefstest.Mem)
	dir := t.TempDir()
	sock := filepath.Join(t.TempDir(), "notify")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-f", "-o", tcpOpts(srv), "127.0.0.1:/", dir)
	cmd.Env = append(os.Environ(), asEnv+"=1", "NOTIFY_SOCKET="+sock)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		syscall.Unmount(dir, syscall.MNT_DETACH)
		cmd.Process.Kill()
	})
	read := func() string {
		ln.SetReadDeadline(time.Now().Add(30 * time.Second))
		buf := make([]byte, 512)
		n, err := ln.Read(buf)
		if err != nil {
			t.Fatalf("no notification: %v; stderr: %s", err, stderr.String())
		}
		return string(buf[:n])
	}
	msg := read()
	if !strings.HasPrefix(msg, "READY=1\n") {
		t.Fatalf("first notification %q", msg)
	}
	if typ := mountType(t, dir); typ != "fuse.nfsrdma" {
		t.Fatalf("READY=1 before the mount is up: type %q", typ)
	}
	if code, _, errs := cli("nfsrdma-mount", "-u", dir); code != 0 {
		t.Fatalf("unmount: %s", errs)
	}
	if msg := read(); msg != "STOPPING=1" {
		t.Errorf("at unmount: %q", msg)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the foreground server exited with %v: %s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the foreground server did not exit after the unmount")
	}
}
