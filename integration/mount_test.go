//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The mount helper in the guest: cmd/nfsrdma-mount, built on the host (the
// guest has no Go toolchain) and named by NFSRDMA_MOUNT.

var exportSpec = serverAddr.String() + ":" + exportDir

// mountBinary returns the nfsrdma-mount binary, after loading FUSE.
func mountBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("NFSRDMA_MOUNT")
	if bin == "" {
		t.Fatal("NFSRDMA_MOUNT is unset: it must name the nfsrdma-mount binary built on the host (make builds _build/nfsrdma-mount)")
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(abs); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("NFSRDMA_MOUNT=%s: not an executable (%v)", bin, err)
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		if out, err := exec.Command("modprobe", "fuse").CombinedOutput(); err != nil {
			t.Fatalf("modprobe fuse: %v\n%s", err, out)
		}
	}
	return abs
}

// runCmd runs a command and returns its exit code and combined output.
func runCmd(t *testing.T, name string, args ...string) (int, string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return 0, string(out)
}

// mountType returns the type /proc/mounts gives dir, "" when not mounted.
func mountType(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/mounts")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[1] == dir {
			return f[2]
		}
	}
	return ""
}

// serverPids lists the running processes of binary bin.
func serverPids(bin string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && exe == bin {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitNoServer waits until no process of bin runs and nothing of type
// fuse.nfsrdma is mounted.
func waitNoServer(t *testing.T, bin string) {
	t.Helper()
	var pids []int
	var mounts string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		pids = serverPids(bin)
		b, _ := os.ReadFile("/proc/mounts")
		mounts = ""
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "fuse.nfsrdma") {
				mounts += line + "\n"
			}
		}
		if len(pids) == 0 && mounts == "" {
			return
		}
	}
	t.Fatalf("left behind: processes %v, mounts:\n%s", pids, mounts)
}

// mountNFSRDMA mounts the export over RDMA with nfsrdma-mount at a new
// directory and unmounts it when the test ends. The server runs as this
// test's child (the same -f --ready-fd path the daemon takes) with -v and
// its log in a file, so that a test that hangs on the mount fails with the
// server's goroutines and log instead of stalling the guest: see
// watchMount. The daemon path itself is tested by TestMountCycles.
func mountNFSRDMA(t *testing.T, bin string, opts ...string) string {
	t.Helper()
	return mountNFSRDMASpec(t, bin, exportSpec, opts...)
}

// mountNFSRDMASpec is mountNFSRDMA of the export spec (host:path).
func mountNFSRDMASpec(t *testing.T, bin, spec string, opts ...string) string {
	t.Helper()
	dir := t.TempDir()
	o := append([]string{"vers=3", "proto=rdma", "port=20049"}, opts...)
	logf, err := os.Create(filepath.Join(t.TempDir(), "nfsrdma-mount.log"))
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-f", "-v", "--ready-fd=3", "-o", strings.Join(o, ","), spec, dir)
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{w}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	line, _ := bufio.NewReader(r).ReadString('\n')
	r.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if strings.TrimSpace(line) != "ready" {
		<-exited
		t.Fatalf("nfsrdma-mount: %s\n%s", strings.TrimSpace(line), readLog(logf.Name()))
	}
	ms := &mountedServer{dir: dir, cmd: cmd, log: logf.Name(), exited: exited}
	t.Cleanup(func() {
		defer logf.Close()
		if mountType(t, dir) != "" {
			if code, out := runCmd(t, bin, "-u", dir); code != 0 {
				t.Errorf("nfsrdma-mount -u %s: exit %d: %s", dir, code, out)
				exec.Command("umount", "-l", dir).Run()
			}
		}
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("nfsrdma-mount server: %v\n%s", err, readLog(ms.log))
			}
		case <-time.After(30 * time.Second):
			ms.dump(t, "still running 30 s after its unmount")
			cmd.Process.Kill()
			<-exited
		}
	})
	if typ := mountType(t, dir); typ != "fuse.nfsrdma" {
		t.Fatalf("%s is mounted as %q, want fuse.nfsrdma", dir, typ)
	}
	mounted[dir] = ms
	t.Cleanup(func() { delete(mounted, dir) })
	t.Cleanup(watchMount(t, dir, 15*time.Minute))
	return dir
}

// mountedServer is an nfsrdma-mount server run by mountNFSRDMA.
type mountedServer struct {
	dir    string
	cmd    *exec.Cmd
	log    string
	exited chan error
}

// mounted maps the mount points of running servers to them (tests that
// mount run one at a time).
var mounted = map[string]*mountedServer{}

// dump asks the server for its goroutines (SIGQUIT makes the Go runtime
// print them and exit) and logs them with the server's log.
func (ms *mountedServer) dump(t *testing.T, why string) {
	ms.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-ms.exited:
	case <-time.After(10 * time.Second):
	}
	t.Errorf("nfsrdma-mount on %s: %s; its log and goroutines:\n%s", ms.dir, why, readLog(ms.log))
}

// watchMount fails t, with the server's goroutines and log, if the
// returned stop is not called within d; it then aborts the FUSE
// connection, so that whatever is blocked on the mount returns ENOTCONN
// and the suite goes on.
func watchMount(t *testing.T, dir string, d time.Duration) (stop func()) {
	ms := mounted[dir]
	done := make(chan struct{})
	fired := make(chan struct{})
	go func() {
		defer close(fired)
		select {
		case <-done:
			return
		case <-time.After(d):
		}
		if ms == nil {
			return
		}
		if _, err := os.Stat("/sys/fs/fuse/connections"); err == nil {
			exec.Command("mount", "-t", "fusectl", "fusectl", "/sys/fs/fuse/connections").Run() // mounted already: fails, harmless
		}
		conn := fuseConnection(dir) // before the dump: the server's exit unmounts nothing
		ms.dump(t, fmt.Sprintf("%s did not finish within %v", t.Name(), d))
		if conn != "" {
			os.WriteFile(filepath.Join("/sys/fs/fuse/connections", conn, "abort"), []byte("1"), 0)
		}
	}()
	return func() {
		close(done)
		<-fired
	}
}

// fuseConnection returns the name of dir's FUSE connection under
// /sys/fs/fuse/connections (its device's minor number), read from
// mountinfo: a stat of a hung mount would hang too.
func fuseConnection(dir string) string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == dir {
			if _, minor, ok := strings.Cut(f[2], ":"); ok {
				return minor
			}
		}
	}
	return ""
}

// readLog returns the tail of a server log.
func readLog(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	const max = 256 << 10
	if len(b) > max {
		b = append([]byte("...\n"), b[len(b)-max:]...)
	}
	return string(b)
}

// mountKernel mounts the export with the kernel's own NFS/RDMA client.
func mountKernel(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	run(t, "mount", "-t", "nfs", "-o", "vers=3,proto=rdma,port=20049", exportSpec, dir)
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	return dir
}

// makeTree writes n small files of random sizes (0 to 8 KiB) in
// subdirectories of 100, with a few symbolic links.
func makeTree(t *testing.T, root string, n int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range n {
		dir := filepath.Join(root, fmt.Sprintf("d%02d", i/100))
		if i%100 == 0 {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		data := make([]byte, rng.IntN(8<<10+1))
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d", i)), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if i%250 == 0 {
			if err := os.Symlink(fmt.Sprintf("f%04d", i), filepath.Join(dir, fmt.Sprintf("l%04d", i))); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestMountTreeCopy: 2,000 small files copied into the nfsrdma mount read
// back identical through the kernel's own NFS/RDMA mount and through ours.
func TestMountTreeCopy(t *testing.T) {
	bin := mountBinary(t)
	src := t.TempDir()
	makeTree(t, src, 2000)
	ours := mountNFSRDMA(t, bin)
	kernel := mountKernel(t)
	name := fmt.Sprintf("tree-%d", os.Getpid())
	start := time.Now()
	run(t, "cp", "-r", src, filepath.Join(ours, name))
	t.Logf("cp -r of 2000 files: %v", time.Since(start))
	defer os.RemoveAll(filepath.Join(exportDir, name))
	if code, out := runCmd(t, "diff", "-r", src, filepath.Join(kernel, name)); code != 0 {
		t.Fatalf("diff -r against the kernel's mount: exit %d\n%.4000s", code, out)
	}
	if code, out := runCmd(t, "diff", "-r", src, filepath.Join(ours, name)); code != 0 {
		t.Fatalf("diff -r against our own mount: exit %d\n%.4000s", code, out)
	}
	run(t, "rm", "-r", filepath.Join(ours, name))
	if _, err := os.Stat(filepath.Join(exportDir, name)); !os.IsNotExist(err) {
		t.Fatalf("rm -r through the mount left %s: %v", name, err)
	}
}

// fioResult is the part of fio's JSON output the test reads.
type fioResult struct {
	Jobs []struct {
		Jobname string `json:"jobname"`
		Error   int    `json:"error"`
		Read    struct {
			IOBytes int64   `json:"io_bytes"`
			BW      float64 `json:"bw"`
		} `json:"read"`
		Write struct {
			IOBytes int64   `json:"io_bytes"`
			BW      float64 `json:"bw"`
		} `json:"write"`
	} `json:"jobs"`
}

// runFio runs one fio job and fails on any error (a verify error included).
func runFio(t *testing.T, args ...string) fioResult {
	t.Helper()
	cmd := exec.Command("fio", append(args, "--output-format=json")...)
	cmd.Dir = t.TempDir() // fio leaves verify state files in its working directory
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var res fioResult
	if jerr := json.Unmarshal(stdout.Bytes(), &res); jerr != nil && err == nil {
		err = jerr
	}
	if err != nil {
		t.Fatalf("fio %s: %v\n%s\n%.4000s", strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	for _, j := range res.Jobs {
		if j.Error != 0 {
			t.Fatalf("fio job %s: error %d\n%s", j.Jobname, j.Error, stderr.String())
		}
		t.Logf("fio %s: read %d bytes (%.0f KiB/s), wrote %d bytes (%.0f KiB/s)", j.Jobname, j.Read.IOBytes, j.Read.BW, j.Write.IOBytes, j.Write.BW)
	}
	if strings.Contains(stderr.String(), "verify") {
		t.Fatalf("fio reported verify problems:\n%s", stderr.String())
	}
	return res
}

// TestMountFio: fio with crc32c verification through the mount: 64 MiB
// written sequentially and read back (twice: at the end of the write job and
// in a read-only verify pass), 4 MiB of 4 KiB random writes read back.
func TestMountFio(t *testing.T) {
	bin := mountBinary(t)
	dir := mountNFSRDMA(t, bin)
	common := []string{"--directory=" + dir, "--ioengine=psync", "--fallocate=none", "--verify=crc32c", "--verify_fatal=1", "--do_verify=1"}
	seq := append([]string{"--name=seq", "--rw=write", "--bs=1m", "--size=64m"}, common...)
	runFio(t, seq...)
	runFio(t, append(seq, "--verify_only=1")...)
	rnd := append([]string{"--name=rand", "--rw=randwrite", "--bs=4k", "--size=4m", "--randrepeat=1"}, common...)
	runFio(t, rnd...)
	runFio(t, append(rnd, "--verify_only=1")...)
	for _, name := range []string{"seq.0.0", "rand.0.0"} {
		os.Remove(filepath.Join(dir, name))
	}
}

// TestMountCycles: 20 mounts and unmounts leave no server process and no
// FUSE mount behind.
func TestMountCycles(t *testing.T) {
	bin := mountBinary(t)
	waitNoServer(t, bin)
	dir := t.TempDir()
	for i := range 20 {
		if code, out := runCmd(t, bin, "-o", "vers=3,proto=rdma,port=20049", exportSpec, dir); code != 0 {
			t.Fatalf("cycle %d: mount: exit %d: %s", i, code, out)
		}
		if typ := mountType(t, dir); typ != "fuse.nfsrdma" {
			t.Fatalf("cycle %d: mounted as %q", i, typ)
		}
		if _, err := os.ReadDir(dir); err != nil {
			t.Fatalf("cycle %d: readdir: %v", i, err)
		}
		if code, out := runCmd(t, bin, "-u", dir); code != 0 {
			t.Fatalf("cycle %d: unmount: exit %d: %s", i, code, out)
		}
		if typ := mountType(t, dir); typ != "" {
			t.Fatalf("cycle %d: still mounted as %q", i, typ)
		}
	}
	waitNoServer(t, bin)
}

// TestMountHelperAndFstab: the binary as mount(8)'s helper, by "mount -t
// nfsrdma" and by an /etc/fstab line; umount(8) stops the server.
func TestMountHelperAndFstab(t *testing.T) {
	bin := mountBinary(t)
	const helper = "/sbin/mount.nfsrdma"
	os.Remove(helper)
	if err := os.Symlink(bin, helper); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(helper)

	dir := t.TempDir()
	if code, out := runCmd(t, "mount", "-t", "nfsrdma", "-o", "proto=rdma,port=20049", exportSpec, dir); code != 0 {
		t.Fatalf("mount -t nfsrdma: exit %d: %s", code, out)
	}
	if typ := mountType(t, dir); typ != "fuse.nfsrdma" {
		exec.Command("umount", "-l", dir).Run()
		t.Fatalf("mount -t nfsrdma: mounted as %q", typ)
	}
	name := filepath.Join(dir, fmt.Sprintf("helper-%d", os.Getpid()))
	if err := os.WriteFile(name, []byte("via mount(8)"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(exportDir, filepath.Base(name))); err != nil || string(b) != "via mount(8)" {
		t.Fatalf("server copy: %q %v", b, err)
	}
	os.Remove(name)
	run(t, "umount", dir)
	waitNoServer(t, bin)

	fstab, err := os.ReadFile("/etc/fstab")
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	defer os.WriteFile("/etc/fstab", fstab, 0o644)
	line := fmt.Sprintf("%s %s nfsrdma vers=3,proto=rdma,_netdev,noauto,x-systemd.automount,nofail 0 0\n", exportSpec, dir)
	if err := os.WriteFile("/etc/fstab", append(bytes.Clone(fstab), line...), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := runCmd(t, "mount", dir); code != 0 {
		t.Fatalf("mount %s (fstab): exit %d: %s", dir, code, out)
	}
	if typ := mountType(t, dir); typ != "fuse.nfsrdma" {
		exec.Command("umount", "-l", dir).Run()
		t.Fatalf("fstab mount: mounted as %q", typ)
	}
	if _, err := os.ReadDir(dir); err != nil {
		t.Fatal(err)
	}
	run(t, "umount", dir)
	waitNoServer(t, bin)
}

// TestMountBadInput: mistakes fail with a clear message and a non-zero exit,
// and leave nothing mounted or running.
func TestMountBadInput(t *testing.T) {
	bin := mountBinary(t)
	dir := t.TempDir()
	// A server (on loopback) that takes connections and never answers.
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
		want []string // any of these in the output
	}{
		{"unknown option", []string{"-o", "proto=rdma,frobnicate", exportSpec, dir}, []string{`"frobnicate": unknown option`}},
		{"vers=4", []string{"-o", "vers=4", exportSpec, dir}, []string{"only NFS version 3"}},
		{"missing mount point", []string{exportSpec, filepath.Join(dir, "missing")}, []string{"does not exist"}},
		{"export missing", []string{"-o", "retry=0", serverAddr.String() + ":/no/such/export", dir}, []string{"has no export", "denied access"}},
		{"server not answering", []string{"-o", "proto=tcp,port=" + silent + ",mountport=" + silent + ",retry=0,timeo=50", "127.0.0.1:/export", dir}, []string{"the server does not answer"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			code, out := runCmd(t, bin, tc.args...)
			if code == 0 {
				t.Fatalf("exit 0: %s", out)
			}
			found := false
			for _, w := range tc.want {
				found = found || strings.Contains(out, w)
			}
			if !found {
				t.Errorf("exit %d, message %q lacks any of %q", code, strings.TrimSpace(out), tc.want)
			}
			t.Logf("%v: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(out))
			if typ := mountType(t, dir); typ != "" {
				t.Fatalf("left mounted: %s", typ)
			}
		})
	}
	waitNoServer(t, bin)
}

// TestMountStats: "nfsrdma-mount stats" prints the RDMA transport's counters
// (sends > 0) and per-operation counts and round-trip times.
func TestMountStats(t *testing.T) {
	bin := mountBinary(t)
	dir := mountNFSRDMA(t, bin)
	name := filepath.Join(dir, fmt.Sprintf("stats-%d", os.Getpid()))
	if err := os.WriteFile(name, bytes.Repeat([]byte("x"), 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(name)
	code, out := runCmd(t, bin, "stats", dir)
	if code != 0 {
		t.Fatalf("stats: exit %d: %s", code, out)
	}
	t.Logf("stats:\n%s", out)
	m := regexp.MustCompile(`xprt:\s+rdma .*\bsends (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no rdma xprt line with sends")
	}
	if n, _ := strconv.Atoi(m[1]); n == 0 {
		t.Errorf("sends %d", n)
	}
	for _, op := range []string{"WRITE: calls", "LOOKUP: calls", "rtt_mean"} {
		if !strings.Contains(out, op) {
			t.Errorf("stats lacks %q", op)
		}
	}
}
