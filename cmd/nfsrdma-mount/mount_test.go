package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/fusefs/fusefstest"
)

// The tests run the command as the real program: daemonize re-executes
// os.Executable(), the test binary, which TestMain turns into the command
// when asEnv is set.
const asEnv = "NFSRDMA_MOUNT_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asEnv) == "1" {
		os.Exit(run(os.Args[0], os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Setenv(asEnv, "1") // for the servers the tests start
	os.Exit(m.Run())
}

// requireFUSE stops a test that cannot mount: it fails under CI=true and
// skips elsewhere, naming what is missing.
func requireFUSE(t *testing.T) {
	t.Helper()
	var missing string
	if os.Geteuid() != 0 {
		missing = "root"
	} else if f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0); err != nil {
		missing = fmt.Sprintf("/dev/fuse (%v)", err)
	} else {
		f.Close()
	}
	if missing == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("mount tests need %s", missing)
	}
	t.Skipf("mount tests need %s", missing)
}

// cli runs the command in this process and returns its exit code and output.
func cli(argv0 string, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(argv0, args, &out, &errb)
	return code, out.String(), errb.String()
}

// tcpOpts are the options that reach a go-nfs test server.
func tcpOpts(srv *fusefstest.Server, more ...string) string {
	return strings.Join(append([]string{"proto=tcp", "port=" + strconv.Itoa(srv.Port), "mountport=" + strconv.Itoa(srv.Port)}, more...), ",")
}

// mountType returns dir's file system type in /proc/self/mounts, "" when
// it is not a mount point.
func mountType(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && f[1] == dir {
			return f[2]
		}
	}
	return ""
}

// serverPid reads the server's pid from its stats.
func serverPid(t *testing.T, dir string) int {
	t.Helper()
	code, out, errs := cli("nfsrdma-mount", "stats", dir)
	if code != 0 {
		t.Fatalf("stats: %d %s", code, errs)
	}
	m := regexp.MustCompile(`pid:\s+(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no pid in stats:\n%s", out)
	}
	pid, _ := strconv.Atoi(m[1])
	return pid
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, syscall.WNOHANG, nil) // reap if it is our child
		if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
			return
		}
	}
	t.Fatalf("server %d still running", pid)
}

func TestMountStatsUnmount(t *testing.T) {
	requireFUSE(t)
	srv := fusefstest.Start(t, fusefstest.Disk)
	dir := t.TempDir()
	code, _, errs := cli("nfsrdma-mount", "-o", tcpOpts(srv, "actimeo=1"), "127.0.0.1:/", dir)
	if code != 0 {
		t.Fatalf("mount: exit %d: %s", code, errs)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	if typ := mountType(t, dir); typ != "fuse.nfsrdma" {
		t.Fatalf("mount type %q", typ)
	}
	if err := os.WriteFile(filepath.Join(dir, "hello"), []byte("over the mount"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(srv.Dir, "hello")); err != nil || string(b) != "over the mount" {
		t.Fatalf("server copy: %q %v", b, err)
	}
	code, out, errs := cli("nfsrdma-mount", "stats", dir)
	if code != 0 {
		t.Fatalf("stats: %d %s", code, errs)
	}
	for _, want := range []string{"device 127.0.0.1:/ mounted on " + dir, "opts:\tvers=3,proto=tcp", "xprt:\ttcp", "connects 1", "WRITE: calls 1", "LOOKUP: calls"} {
		if !strings.Contains(out, want) {
			t.Errorf("stats lacks %q:\n%s", want, out)
		}
	}
	// A second mount on the same point is refused while it is served.
	if code, _, errs := cli("nfsrdma-mount", "-o", tcpOpts(srv), "127.0.0.1:/", dir); code == 0 || !strings.Contains(errs, "already serves") {
		t.Errorf("second mount: %d %s", code, errs)
	}
	pid := serverPid(t, dir)
	if code, _, errs := cli("nfsrdma-mount", "-u", dir); code != 0 {
		t.Fatalf("unmount: %d %s", code, errs)
	}
	if typ := mountType(t, dir); typ != "" {
		t.Fatalf("still mounted: %s", typ)
	}
	waitGone(t, pid)
	if code, _, errs := cli("nfsrdma-mount", "-u", dir); code == 0 || !strings.Contains(errs, "not mounted") {
		t.Errorf("unmount again: %d %s", code, errs)
	}
	if code, _, errs := cli("nfsrdma-mount", "stats", dir); code == 0 || !strings.Contains(errs, "no running nfsrdma-mount serves") {
		t.Errorf("stats after unmount: %d %s", code, errs)
	}
}

// TestHelperAndSignal: mount(8)'s helper syntax, and SIGTERM unmounting.
func TestHelperAndSignal(t *testing.T) {
	requireFUSE(t)
	srv := fusefstest.Start(t, fusefstest.Mem)
	dir := t.TempDir()
	code, _, errs := cli("/sbin/mount.nfsrdma", "127.0.0.1:/", dir, "-o", "rw,_netdev,x-systemd.automount,"+tcpOpts(srv))
	if code != 0 {
		t.Fatalf("mount.nfsrdma: exit %d: %s", code, errs)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	if typ := mountType(t, dir); typ != "fuse.nfsrdma" {
		t.Fatalf("mount type %q", typ)
	}
	if _, err := os.ReadDir(dir); err != nil {
		t.Fatal(err)
	}
	pid := serverPid(t, dir)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
	if typ := mountType(t, dir); typ != "" {
		t.Fatalf("still mounted after SIGTERM: %s", typ)
	}
	// -f of the helper is mount(8)'s "fake": nothing is mounted.
	if code, _, errs := cli("mount.nfsrdma", "127.0.0.1:/", dir, "-f", "-o", tcpOpts(srv)); code != 0 || mountType(t, dir) != "" {
		t.Fatalf("fake mount: %d %s", code, errs)
	}
}

// TestBadInput: each mistake fails with a clear message, a non-zero exit,
// and nothing mounted.
func TestBadInput(t *testing.T) {
	requireFUSE(t)
	srv := fusefstest.Start(t, fusefstest.Mem)
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	// A server that takes connections and never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	_, silent, _ := net.SplitHostPort(ln.Addr().String())
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"unknown option", []string{"-o", "proto=tcp,frobnicate", "127.0.0.1:/", dir}, exitUsage, `"frobnicate": unknown option`},
		{"vers=4", []string{"-o", "vers=4", "127.0.0.1:/", dir}, exitUsage, "only NFS version 3"},
		{"missing mount point", []string{"-o", tcpOpts(srv), "127.0.0.1:/", filepath.Join(dir, "nope")}, exitMountErr, "does not exist"},
		{"not a directory", []string{"-o", tcpOpts(srv), "127.0.0.1:/", file}, exitMountErr, "is not a directory"},
		{"server not answering", []string{"-o", "proto=tcp,port=1,mountport=1,retry=0", "127.0.0.1:/", dir}, exitMountErr, "connection refused"},
		{"server silent", []string{"-o", "proto=tcp,port=" + silent + ",mountport=" + silent + ",retry=0,timeo=10", "127.0.0.1:/", dir}, exitMountErr, "the server does not answer"},
		{"bad spec", []string{"server-without-export", dir}, exitUsage, "want server:/export"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := cli("nfsrdma-mount", tc.args...)
			if code != tc.code || !strings.Contains(errs, tc.msg) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, errs, tc.code, tc.msg)
			}
			if typ := mountType(t, dir); typ != "" {
				t.Errorf("left mounted: %s", typ)
			}
		})
	}
	// Over RDMA without an RDMA device the message says how to make one.
	code, _, errs := cli("nfsrdma-mount", "-o", "proto=rdma,mountport="+strconv.Itoa(srv.Port)+",retry=0", "127.0.0.1:/", dir)
	if code == 0 {
		t.Fatal("an RDMA mount of a go-nfs server succeeded")
	}
	if strings.Contains(errs, "no RDMA device") && !strings.Contains(errs, "rdma link add rxe0 type rxe netdev IFACE") {
		t.Errorf("no-device message: %s", errs)
	}
	t.Logf("proto=rdma on this host: %s", strings.TrimSpace(errs))
	if typ := mountType(t, dir); typ != "" {
		t.Errorf("left mounted: %s", typ)
	}
}

// TestExternalUmount: umount(8) (umount2 on the mount point) stops the
// server.
func TestExternalUmount(t *testing.T) {
	requireFUSE(t)
	srv := fusefstest.Start(t, fusefstest.Disk)
	dir := t.TempDir()
	if code, _, errs := cli("nfsrdma-mount", "-o", tcpOpts(srv), "127.0.0.1:/", dir); code != 0 {
		t.Fatalf("mount: exit %d: %s", code, errs)
	}
	pid := serverPid(t, dir)
	if err := syscall.Unmount(dir, 0); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
	path, _ := socketPath(dir)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("control socket left: %v", err)
	}
}
