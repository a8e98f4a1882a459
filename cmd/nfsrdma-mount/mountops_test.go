package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/fusefs/fusefstest"
	"github.com/nfsrdma/nfsrdma/xprt"
)

// The mount(8) conventions and operability, with real FUSE mounts of an
// in-process NFS server over TCP. The program runs as its own process (the
// test binary as main, see TestMain) where the test is about processes,
// pipes and signals.

// program returns a command running the program with args.
func program(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), asEnv+"=1")
	return cmd
}

// serversOf returns the pids of the program's processes whose command line
// names dir.
func serversOf(dir string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if slicesContains(args, dir) && slicesContains(args, "--ready-fd=3") {
			if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil && strings.Contains(string(st), ") Z ") {
				continue // a zombie: exited
			}
			pids = append(pids, pid)
		}
	}
	return pids
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// waitNoServer waits until no server process names dir.
func waitNoServer(t *testing.T, dir string, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if len(serversOf(dir)) == 0 {
			return
		}
	}
	t.Fatalf("servers of %s still running after %v: %v", dir, d, serversOf(dir))
}

// mountsAt counts the mounts at dir.
func mountsAt(dir string) int {
	n := 0
	for _, e := range mountinfo() {
		if e.Point == dir {
			n++
		}
	}
	return n
}

// unusedPort returns a TCP port on 127.0.0.1 that nothing listens on.
func unusedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// proxy forwards TCP connections on 127.0.0.1:port to target and counts
// the connections and the bytes each carried towards target.
type proxy struct {
	ln    net.Listener
	mu    sync.Mutex
	sent  []*atomic.Int64 // per connection
	wg    sync.WaitGroup
	conns []net.Conn
}

func startProxy(t *testing.T, port int, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln}
	p.wg.Go(func() {
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
			n := new(atomic.Int64)
			p.mu.Lock()
			p.sent = append(p.sent, n)
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			p.wg.Go(func() {
				buf := make([]byte, 64<<10)
				for {
					k, err := c.Read(buf)
					if k > 0 {
						n.Add(int64(k))
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
			p.wg.Go(func() { io.Copy(c, s); c.Close() })
		}
	})
	t.Cleanup(p.close)
	return p
}

func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *proxy) counts() []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int64
	for _, n := range p.sent {
		out = append(out, n.Load())
	}
	return out
}

// TestDetachedServerLeavesPipes: "nfsrdma-mount -v ... | cat" returns: the
// background server holds neither the caller's stdout nor its stderr once
// the mount is live, says so when its log has nowhere to go, and survives
// the readers going away (no SIGPIPE).
func TestDetachedServerLeavesPipes(t *testing.T) {
	requireFUSE(t)
	srv := fusefstest.Start(t, fusefstest.Disk)
	dir := t.TempDir()
	cmd := program(t, "-v", "-o", tcpOpts(srv), "127.0.0.1:/", dir)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	done := make(chan error, 1)
	// Run returns only when every holder of the pipes' write ends closed
	// them.
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("mount: %v\n%s", err, errb.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		syscall.Unmount(dir, syscall.MNT_DETACH)
		t.Fatalf("nfsrdma-mount -v did not return with its output piped: %s", errb.String())
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	if typ := mountType(t, dir); typ != fsType {
		t.Fatalf("mount type %q", typ)
	}
	t.Logf("stderr of -v:\n%s", errb.String())
	// -v logs the mount's progress, debug included, while it waits.
	if !strings.Contains(errb.String(), "level=") {
		t.Errorf("-v printed no log lines")
	}
	if _, err := os.Stat("/dev/log"); err != nil && !strings.Contains(errb.String(), "no system log") {
		t.Errorf("no /dev/log here, and no warning that the server's log is lost:\n%s", errb.String())
	}
	// The readers are gone; the server logs on (debug, every request) and
	// serves.
	for i := range 20 {
		name := filepath.Join(dir, "f"+strconv.Itoa(i))
		if err := os.WriteFile(name, []byte("still serving"), 0o644); err != nil {
			t.Fatalf("after the caller's pipes closed: %v", err)
		}
	}
	if len(serversOf(dir)) != 1 {
		t.Fatalf("servers of %s: %v", dir, serversOf(dir))
	}
	if code, _, errs := cli("nfsrdma-mount", "-u", dir); code != 0 {
		t.Fatalf("unmount: %s", errs)
	}
	waitNoServer(t, dir, 10*time.Second)
}

// TestLogFile: logfile= receives the background server's log.
func TestLogFile(t *testing.T) {
	requireFUSE(t)
	srv := fusefstest.Start(t, fusefstest.Mem)
	dir := t.TempDir()
	logf := filepath.Join(t.TempDir(), "server.log")
	if code, _, errs := cli("nfsrdma-mount", "-v", "-o", tcpOpts(srv, "logfile="+logf), "127.0.0.1:/", dir); code != 0 {
		t.Fatalf("mount: %s", errs)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	if code, _, errs := cli("nfsrdma-mount", "-u", dir); code != 0 {
		t.Fatalf("unmount: %s", errs)
	}
	b, err := os.ReadFile(logf)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`msg=mounted`, `msg=unmounted`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("log file lacks %q:\n%s", want, b)
		}
	}
	// The server's own output (here the goroutines SIGQUIT makes the Go
	// runtime print) goes to the log file too.
	if code, _, errs := cli("nfsrdma-mount", "-o", tcpOpts(srv, "logfile="+logf), "127.0.0.1:/", dir); code != 0 {
		t.Fatalf("mount: %s", errs)
	}
	pid := serverPid(t, dir)
	syscall.Kill(pid, syscall.SIGQUIT)
	waitGone(t, pid)
	if code, _, errs := cli("nfsrdma-mount", "-u", dir); code != 0 {
		t.Errorf("-u after the server died: %s", errs)
	}
	if b, _ := os.ReadFile(logf); !strings.Contains(string(b), "goroutine ") {
		t.Errorf("no goroutine dump in the log file:\n%.2000s", b)
	}
}

// TestCancelledMount: SIGTERM or SIGKILL of the mount command while the
// server retries stops the server: nothing gets mounted later.
func TestCancelledMount(t *testing.T) {
	requireFUSE(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			port := strconv.Itoa(unusedPort(t))
			cmd := program(t, "-o", "proto=tcp,port="+port+",mountport="+port+",retry=5", "127.0.0.1:/", dir)
			var errb bytes.Buffer
			cmd.Stderr = &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Wait for the server to be retrying.
			for deadline := time.Now().Add(10 * time.Second); len(serversOf(dir)) == 0; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("no server started")
				}
			}
			time.Sleep(500 * time.Millisecond)
			start := time.Now()
			cmd.Process.Signal(sig)
			err := cmd.Wait()
			if err == nil {
				t.Fatalf("the cancelled mount command exited 0: %s", errb.String())
			}
			if sig != syscall.SIGKILL && !strings.Contains(errb.String(), "mount cancelled") {
				t.Errorf("message: %q", errb.String())
			}
			waitNoServer(t, dir, 10*time.Second)
			t.Logf("%v: command and server gone %v after the signal: %s", sig, time.Since(start).Round(time.Millisecond), strings.TrimSpace(errb.String()))
			if typ := mountType(t, dir); typ != "" {
				t.Fatalf("mounted: %s", typ)
			}
		})
	}
}

// TestBackground: with bg the command returns 0 at the first failure, and
// the server mounts once the NFS server is there.
func TestBackground(t *testing.T) {
	requireFUSE(t)
	srv := fusefstest.Start(t, fusefstest.Mem)
	dir := t.TempDir()
	port := unusedPort(t)
	start := time.Now()
	code, _, errs := cli("nfsrdma-mount", "-o", "bg,proto=tcp,port="+strconv.Itoa(port)+",mountport="+strconv.Itoa(port), "127.0.0.1:/", dir)
	if code != 0 {
		t.Fatalf("bg mount: exit %d: %s", code, errs)
	}
	t.Cleanup(func() {
		syscall.Unmount(dir, syscall.MNT_DETACH)
		for _, pid := range serversOf(dir) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	took := time.Since(start)
	if took > 10*time.Second || !strings.Contains(errs, "backgrounding") {
		t.Fatalf("bg: returned after %v with %q", took, errs)
	}
	t.Logf("bg returned after %v: %s", took.Round(time.Millisecond), strings.TrimSpace(errs))
	if len(serversOf(dir)) != 1 {
		t.Fatalf("no server retrying in the background")
	}
	if typ := mountType(t, dir); typ != "" {
		t.Fatalf("mounted before the server is up: %s", typ)
	}
	startProxy(t, port, net.JoinHostPort(srv.Host, strconv.Itoa(srv.Port)))
	// Live once its server answers (the kernel lists the mount a moment
	// before go-fuse is done with it).
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if code, _, _ := cli("nfsrdma-mount", "stats", dir); code == 0 && mountType(t, dir) == fsType {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the background server did not mount once the NFS server was up")
		}
	}
	if _, err := os.ReadDir(dir); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := cli("nfsrdma-mount", "-u", dir); code != 0 {
		t.Fatalf("unmount: %s", errs)
	}
	waitNoServer(t, dir, 10*time.Second)
}

// TestDeadMount: the server killed with a file open: the application gets
// ENOTCONN, -u removes the dead mount, and a new mount on the same point
// works with exactly one mount there; a mount over a dead one clears it
// first instead of stacking.
func TestDeadMount(t *testing.T) {
	requireFUSE(t)
	srv := fusefstest.Start(t, fusefstest.Disk)
	dir := t.TempDir()
	mount := func() int {
		t.Helper()
		if code, _, errs := cli("nfsrdma-mount", "-o", tcpOpts(srv), "127.0.0.1:/", dir); code != 0 {
			t.Fatalf("mount: %s", errs)
		}
		return serverPid(t, dir)
	}
	t.Cleanup(func() {
		for mountsAt(dir) > 0 {
			if syscall.Unmount(dir, syscall.MNT_DETACH) != nil {
				break
			}
		}
	})
	kill := func(pid int) *os.File {
		t.Helper()
		f, err := os.Create(filepath.Join(dir, "open"))
		if err != nil {
			t.Fatal(err)
		}
		syscall.Kill(pid, syscall.SIGKILL)
		waitGone(t, pid)
		if _, err := f.Write([]byte("x")); !errors.Is(err, syscall.ENOTCONN) {
			t.Errorf("write to a file of the dead mount: %v, want ENOTCONN", err)
		}
		if _, err := os.ReadDir(dir); !errors.Is(err, syscall.ENOTCONN) {
			t.Errorf("readdir of the dead mount: %v, want ENOTCONN", err)
		}
		return f
	}
	f := kill(mount())
	if code, _, errs := cli("nfsrdma-mount", "stats", dir); code == 0 || !strings.Contains(errs, "dead mount") {
		t.Errorf("stats of a dead mount: %d %q", code, errs)
	}
	if code, _, errs := cli("nfsrdma-mount", "-u", dir); code != 0 {
		t.Fatalf("-u of a dead mount with a file open: %s", errs)
	}
	if n := mountsAt(dir); n != 0 {
		t.Fatalf("%d mounts left at %s", n, dir)
	}
	f.Close()
	// Mounting over a dead mount clears it first.
	f = kill(mount())
	defer f.Close()
	pid := mount()
	if n := mountsAt(dir); n != 1 {
		t.Fatalf("%d mounts at %s, want 1", n, dir)
	}
	if err := os.WriteFile(filepath.Join(dir, "again"), []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := cli("nfsrdma-mount", "-u", dir); code != 0 {
		t.Fatalf("unmount: %s", errs)
	}
	waitGone(t, pid)
	if n := mountsAt(dir); n != 0 {
		t.Fatalf("%d mounts left", n)
	}
}

// TestRemountAndFlags: VFS flags reach the mount (noexec, noatime; user
// implies noexec, nosuid, nodev), and mount(8)'s remount through the
// fuse.nfsrdma helper name changes them.
func TestRemountAndFlags(t *testing.T) {
	requireFUSE(t)
	srv := fusefstest.Start(t, fusefstest.Disk)
	dir := t.TempDir()
	if code, _, errs := cli("nfsrdma-mount", "-o", tcpOpts(srv, "noatime,user"), "127.0.0.1:/", dir); code != 0 {
		t.Fatalf("mount: %s", errs)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	opts := func() string {
		top := topMount(dir)
		if top == nil {
			t.Fatal("not mounted")
		}
		return "," + top.MountOpts + ","
	}
	for _, want := range []string{",nosuid,", ",nodev,", ",noexec,", ",noatime,", ",rw,"} {
		if !strings.Contains(opts(), want) {
			t.Errorf("mount options %s lack %s", opts(), want)
		}
	}
	name := filepath.Join(dir, "file")
	if err := os.WriteFile(name, []byte("rw"), 0o644); err != nil {
		t.Fatal(err)
	}
	// As mount(8) calls its helper: every flag in effect, computed from
	// the mount's and those given ("remount,ro,exec" here).
	code, _, errs := cli("/sbin/mount.fuse.nfsrdma", "127.0.0.1:/", dir, "-o", "ro,nosuid,nodev,noatime,remount,user_id=0,group_id=0,default_permissions,allow_other", "-t", "fuse.nfsrdma")
	if code != 0 {
		t.Fatalf("remount ro: %s", errs)
	}
	if o := opts(); !strings.Contains(o, ",ro,") || strings.Contains(o, ",noexec,") || !strings.Contains(o, ",noatime,") || !strings.Contains(o, ",nosuid,") {
		t.Errorf("after remount,ro,exec: %s", o)
	}
	if err := os.WriteFile(name, []byte("ro"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write after remount ro: %v, want EROFS", err)
	}
	// nfsrdma-mount's own remount changes the flags given; the mount
	// point alone names the mount, as for mount -o remount.
	if code, _, errs := cli("nfsrdma-mount", "-o", "remount,rw,noexec", dir); code != 0 {
		t.Fatalf("remount rw: %s", errs)
	}
	if o := opts(); !strings.Contains(o, ",rw,") || !strings.Contains(o, ",noexec,") || !strings.Contains(o, ",noatime,") || !strings.Contains(o, ",nosuid,") {
		t.Errorf("after remount,rw,noexec: %s", o)
	}
	if err := os.WriteFile(name, []byte("rw again"), 0o644); err != nil {
		t.Errorf("write after remount rw: %v", err)
	}
	if code, _, _ := cli("mount.nfsrdma", "127.0.0.1:/", t.TempDir(), "-o", "remount,ro"); code == 0 {
		t.Error("remount of a directory that is no nfsrdma mount succeeded")
	}
	if code, _, errs := cli("nfsrdma-mount", "-u", dir); code != 0 {
		t.Fatalf("unmount: %s", errs)
	}
}

// TestNConnect: nconnect=3 opens three connections to the server and
// spreads the calls across them.
func TestNConnect(t *testing.T) {
	requireFUSE(t)
	srv := fusefstest.Start(t, fusefstest.Disk)
	port := unusedPort(t)
	p := startProxy(t, port, net.JoinHostPort(srv.Host, strconv.Itoa(srv.Port)))
	dir := t.TempDir()
	opts := "proto=tcp,nconnect=3,port=" + strconv.Itoa(port) + ",mountport=" + strconv.Itoa(srv.Port)
	if code, _, errs := cli("nfsrdma-mount", "-o", opts, "127.0.0.1:/", dir); code != 0 {
		t.Fatalf("mount: %s", errs)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	for i := range 30 {
		if err := os.WriteFile(filepath.Join(dir, "f"+strconv.Itoa(i)), bytes.Repeat([]byte{'x'}, 10000), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	counts := p.counts()
	t.Logf("bytes sent on each connection: %v", counts)
	if len(counts) != 3 {
		t.Fatalf("%d connections, want 3", len(counts))
	}
	for i, n := range counts {
		if n < 20000 {
			t.Errorf("connection %d carried %d bytes: calls are not spread", i, n)
		}
	}
	s := statsJSON(t, dir)
	if len(s.Transports) != 3 || !slicesContains(s.Options, "nconnect=3") {
		t.Errorf("stats: %d transports, options %v", len(s.Transports), s.Options)
	}
	if code, _, errs := cli("nfsrdma-mount", "-u", dir); code != 0 {
		t.Fatalf("unmount: %s", errs)
	}
}

func statsJSON(t *testing.T, dir string) *snapshot {
	t.Helper()
	code, out, errs := cli("nfsrdma-mount", "stats", "-json", dir)
	if code != 0 {
		t.Fatalf("stats -json: %s", errs)
	}
	s := new(snapshot)
	if err := json.Unmarshal([]byte(out), s); err != nil {
		t.Fatalf("stats -json: %v\n%s", err, out)
	}
	return s
}

// TestStatsCommand: stats in the mountstats format (checked as the
// nfs-common tools parse it), -json, -i, and the listing of every mount.
func TestStatsCommand(t *testing.T) {
	requireFUSE(t)
	srv := fusefstest.Start(t, fusefstest.Disk)
	var dirs []string
	for range 2 {
		dir := t.TempDir()
		if code, _, errs := cli("nfsrdma-mount", "-o", tcpOpts(srv), "127.0.0.1:/", dir); code != 0 {
			t.Fatalf("mount: %s", errs)
		}
		t.Cleanup(func() { cli("nfsrdma-mount", "-u", dir) })
		dirs = append(dirs, dir)
		if err := os.WriteFile(filepath.Join(dir, "f"+filepath.Base(dir)), bytes.Repeat([]byte{'y'}, 100000), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errs := cli("nfsrdma-mount", "stats", dirs[0])
	if code != 0 {
		t.Fatalf("stats: %s", errs)
	}
	ms := parseMountstats(t, out)
	if len(ms) != 1 || ms[0].point != dirs[0] {
		t.Fatalf("stats of one mount: %+v\n%s", ms, out)
	}
	if w := ms[0].ops["WRITE"]; w[0] == 0 || w[3] < 100000 {
		t.Errorf("WRITE: %v", w)
	}
	if ms[0].bytes[5] < 100000 {
		t.Errorf("bytes: %v", ms[0].bytes)
	}
	// Every mount, without a mount point.
	code, out, errs = cli("nfsrdma-mount", "stats")
	if code != 0 {
		t.Fatalf("stats of all: %s", errs)
	}
	seen := map[string]bool{}
	for _, m := range parseMountstats(t, out) {
		seen[m.point] = true
	}
	if !seen[dirs[0]] || !seen[dirs[1]] {
		t.Errorf("stats of all lists %v, want %v", seen, dirs)
	}
	s := statsJSON(t, dirs[1])
	if s.MountPoint != dirs[1] || s.Type != fsType || len(s.Transports) != 1 || s.Transports[0].TCP == nil || s.PID == 0 {
		t.Errorf("stats -json: %+v", s)
	}
	var writes uint64
	for _, o := range s.Ops {
		if o.Name == "WRITE" {
			writes = o.Calls
		}
	}
	if writes == 0 {
		t.Errorf("stats -json: no WRITE calls: %+v", s.Ops)
	}
	// Interval mode: two reports, the second the rates of its interval.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			os.WriteFile(filepath.Join(dirs[0], "busy"), []byte(strconv.Itoa(i)), 0o644)
			if i > 40 {
				return
			}
		}
	}()
	code, out, errs = cli("nfsrdma-mount", "stats", "-i", "0.5", "-c", "2", dirs[0])
	<-done
	if code != 0 {
		t.Fatalf("stats -i: %s", errs)
	}
	t.Logf("stats -i 0.5 -c 2:\n%s", out)
	if n := strings.Count(out, "mounted on "+dirs[0]+":"); n != 2 {
		t.Errorf("%d reports, want 2", n)
	}
	if !regexp.MustCompile(`(?m)^write:\s+\d+\.\d+`).MatchString(out) {
		t.Errorf("no write rate in the interval report")
	}
}

// mountstatsEntry is one device of the mountstats format, parsed as
// mountstats(8) and nfsiostat(8) parse it (nfs-common 2.6).
type mountstatsEntry struct {
	point  string
	age    int
	events []int
	bytes  []int
	xprts  [][]string
	ops    map[string][]int
}

func parseMountstats(t *testing.T, text string) []mountstatsEntry {
	t.Helper()
	var out []mountstatsEntry
	var cur *mountstatsEntry
	inRPC := false
	atoi := func(ws []string) []int {
		var n []int
		for _, w := range ws {
			v, err := strconv.Atoi(w)
			if err != nil {
				t.Fatalf("not an integer: %q in %q", w, ws)
			}
			n = append(n, v)
		}
		return n
	}
	for _, line := range strings.Split(text, "\n") {
		w := strings.Fields(line)
		if len(w) == 0 {
			continue
		}
		if w[0] == "device" {
			if len(w) < 9 || w[2] != "mounted" || w[3] != "on" || w[5] != "with" || w[6] != "fstype" || w[7] != "nfs" || w[8] != "statvers=1.1" {
				t.Fatalf("device line %q", line)
			}
			out = append(out, mountstatsEntry{point: w[4], ops: map[string][]int{}})
			cur, inRPC = &out[len(out)-1], false
			continue
		}
		if slicesContains(w, "nfs") || slicesContains(w, "nfs4") {
			t.Fatalf("a line the tools would take for a device line: %q", line)
		}
		if cur == nil {
			t.Fatalf("line before any device: %q", line)
		}
		if !inRPC && w[0] != "RPC" {
			switch w[0] {
			case "age:":
				cur.age = atoi(w[1:2])[0]
			case "events:":
				cur.events = atoi(w[1:])
			case "bytes:":
				cur.bytes = atoi(w[1:])
			case "sec:":
				if !strings.HasPrefix(w[1], "flavor=1,") {
					t.Errorf("sec: %q", line)
				}
			}
			continue
		}
		inRPC = true
		switch w[0] {
		case "RPC":
			if line != "\tRPC iostats version: 1.1  p/v: 100003/3 (nfs)" {
				t.Errorf("RPC line %q", line)
			}
		case "xprt:":
			atoi(w[2:])
			cur.xprts = append(cur.xprts, w[1:])
		case "per-op":
		default:
			cur.ops[strings.TrimSuffix(w[0], ":")] = atoi(w[1:])
		}
	}
	for _, e := range out {
		if len(e.events) != 27 || len(e.bytes) != 8 || len(e.ops) != 22 || len(e.xprts) == 0 {
			t.Errorf("%s: %d events, %d bytes, %d ops, %d xprts", e.point, len(e.events), len(e.bytes), len(e.ops), len(e.xprts))
		}
		for _, x := range e.xprts {
			// mountstats reads 13 fields after "tcp", 27 after "rdma".
			if want := map[string]int{"tcp": 14, "rdma": 28}[x[0]]; len(x) != want {
				t.Errorf("xprt %s: %d fields, want %d", x[0], len(x), want)
			}
		}
		for name, v := range e.ops {
			if len(v) != 9 {
				t.Errorf("op %s: %d fields", name, len(v))
			}
		}
	}
	return out
}

// TestMountstatsRDMALine: the rdma transport line has the 27 fields the
// tools read.
func TestMountstatsRDMALine(t *testing.T) {
	s := &snapshot{Device: "10.0.0.1:/e", MountPoint: "/mnt/x", Type: fsType, Server: "10.0.0.1", Port: 20049,
		Options: []string{"vers=3", "proto=rdma"}, AgeSeconds: 5,
		Transports: []xprtSnapshot{{Proto: "rdma", RDMA: &xprt.Counters{Calls: 10, Sends: 12, Receives: 10}}, {Proto: "rdma", RDMA: &xprt.Counters{}}},
		Ops:        []opSnapshot{{Name: "READ", Prog: 100003, Proc: 6, Calls: 3, BytesRecv: 300, RTTTotalUS: 3000, RTTHist: make([]uint64, 24)}},
		FUSE:       []fuseOpSnapshot{{Name: "LOOKUP", Requests: 4, TimeUS: 100}, {Name: "READ", Requests: 3, TimeUS: 3300}}}
	var b bytes.Buffer
	writeMountstats(&b, s)
	if !strings.Contains(b.String(), "\tnfsrdma-fuse:\tLOOKUP 4 25 READ 3 1100\n") {
		t.Errorf("no FUSE request line (name, requests, mean us):\n%s", b.String())
	}
	ms := parseMountstats(t, b.String())
	if len(ms) != 1 || len(ms[0].xprts) != 2 || ms[0].ops["READ"][0] != 3 || ms[0].ops["READ"][6] != 3 || ms[0].age != 5 {
		t.Fatalf("%+v\n%s", ms, b.String())
	}
	if !strings.Contains(b.String(), "opts:\tvers=3,proto=rdma,addr=10.0.0.1\n") {
		t.Errorf("opts:\n%s", b.String())
	}
}

// TestGoSnapshotCountsAllocations: the runtime counters stats reports grow
// by at least the allocations made between two readings (other tests'
// goroutines may add theirs), to within the span the allocating P holds (a
// span's objects counted early or late: 8 KiB of 112-byte objects, 73),
// and the text
// form carries them on its "nfsrdma-go:" line.
func TestGoSnapshotCountsAllocations(t *testing.T) {
	before := readGoSnapshot()
	var keep [][]byte
	for range 10000 {
		keep = append(keep, make([]byte, 100))
	}
	after := readGoSnapshot()
	if got := after.HeapAllocObjects - before.HeapAllocObjects; got < 10000-2*73 || len(keep) != 10000 {
		t.Errorf("%d heap allocations counted across 10000", got)
	}
	if got := after.HeapAllocBytes - before.HeapAllocBytes; got < 9800*100 {
		t.Errorf("%d bytes counted across 10000 allocations of 100", got)
	}
	var b bytes.Buffer
	writeMountstats(&b, &snapshot{Go: goSnapshot{HeapAllocObjects: 7, HeapAllocBytes: 900, GCCycles: 2}})
	if !strings.Contains(b.String(), "\tnfsrdma-go:\theap_alloc_objects 7 heap_alloc_bytes 900 gc_cycles 2\n") {
		t.Errorf("no Go runtime line:\n%s", b.String())
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := cli("nfsrdma-mount", "--version")
	if code != 0 || !regexp.MustCompile(`^nfsrdma-mount \S+.* \(go1\.\d+`).MatchString(out) {
		t.Errorf("--version: %d %q", code, out)
	}
	old := version
	version = "v1.2.3"
	defer func() { version = old }()
	if _, out, _ := cli("nfsrdma-mount", "-V"); !strings.HasPrefix(out, "nfsrdma-mount v1.2.3 (go") || !strings.Contains(out, "; "+rdmaBuild+")") {
		t.Errorf("-V with a version set: %q", out)
	}
}

// TestLookPathWithoutPATH: helpers are found in the standard directories
// when mount(8) gives no PATH.
func TestLookPathWithoutPATH(t *testing.T) {
	t.Setenv("PATH", "")
	p, err := lookPath("sh")
	if err != nil || !strings.HasSuffix(p, "/sh") {
		t.Fatalf("lookPath(sh) without PATH: %q %v", p, err)
	}
	if _, err := lookPath("no-such-helper-anywhere"); err == nil {
		t.Error("found a helper that does not exist")
	}
}

func TestParseMountinfo(t *testing.T) {
	in := "36 35 98:0 /mnt1 /mnt/with\\040space rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n" +
		"600 30 0:77 / /tmp/m rw,nosuid,nodev,noexec,relatime shared:300 - fuse.nfsrdma 10.99.0.1:/export rw,user_id=1001,group_id=1001,default_permissions\n" +
		"garbage\n"
	es := parseMountinfo(strings.NewReader(in))
	if len(es) != 2 {
		t.Fatalf("%d entries: %+v", len(es), es)
	}
	if es[0].Point != "/mnt/with space" || es[0].Type != "ext3" || es[0].OwnerUID() != -1 {
		t.Errorf("%+v", es[0])
	}
	if es[1].Point != "/tmp/m" || es[1].Type != fsType || es[1].Source != "10.99.0.1:/export" || es[1].OwnerUID() != 1001 || es[1].MountOpts != "rw,nosuid,nodev,noexec,relatime" {
		t.Errorf("%+v", es[1])
	}
}

func TestFlagOptions(t *testing.T) {
	for _, tc := range []struct {
		flags      uintptr
		fusermount bool
		want       string
	}{
		{syscall.MS_NOSUID | syscall.MS_NODEV, false, "nosuid,nodev,exec"},
		{0, false, "suid,dev,exec"},
		{syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC | syscall.MS_NOATIME, true, "nosuid,nodev,noexec,noatime"},
		{syscall.MS_NOEXEC, true, "noexec"},
	} {
		if got := strings.Join(flagOptions(tc.flags, tc.fusermount), ","); got != tc.want {
			t.Errorf("flagOptions(%#x, %v) = %s, want %s", tc.flags, tc.fusermount, got, tc.want)
		}
	}
}

// TestControlDirs: a user's server may have put its socket in its runtime
// directory or in /tmp (mount(8) runs it without $XDG_RUNTIME_DIR): the
// client looks in every one, root in the mount owner's too.
func TestControlDirs(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/4242")
	if d := controlDirs(0); len(d) != 1 || d[0] != "/run/nfsrdma" {
		t.Errorf("root: %v", d)
	}
	d := controlDirs(4242)
	if d[len(d)-1] != filepath.Join(os.TempDir(), "nfsrdma-4242") {
		t.Errorf("uid 4242: %v", d)
	}
	if os.Geteuid() == 4242 && d[0] != "/run/user/4242/nfsrdma" {
		t.Errorf("own uid: %v", d)
	}
	if os.Geteuid() == 0 {
		c := socketCandidates("/mnt/x", 4242)
		a, _ := socketPath("/mnt/x")
		if c[0] != a || len(c) < 2 || filepath.Base(c[len(c)-1]) != filepath.Base(a) || !strings.Contains(c[len(c)-1], "nfsrdma-4242") {
			t.Errorf("root's candidates for a mount of uid 4242: %v", c)
		}
	}
}

// TestLookupCacheNone: with lookupcache=none a name removed on the server
// is gone at the next lookup; with the default it stays cached.
func TestLookupCacheNone(t *testing.T) {
	requireFUSE(t)
	srv := fusefstest.Start(t, fusefstest.Disk)
	for _, tc := range []struct {
		opts   string
		cached bool
	}{{"lookupcache=none", false}, {"lookupcache=all", true}} {
		dir := t.TempDir()
		if code, _, errs := cli("nfsrdma-mount", "-o", tcpOpts(srv, tc.opts), "127.0.0.1:/", dir); code != 0 {
			t.Fatalf("mount: %s", errs)
		}
		name := "lc-" + filepath.Base(dir)
		if err := os.WriteFile(filepath.Join(srv.Dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Fatalf("%s: %v", tc.opts, err)
		}
		os.Remove(filepath.Join(srv.Dir, name))
		_, err := os.Stat(filepath.Join(dir, name))
		if cached := err == nil; cached != tc.cached {
			t.Errorf("%s: stat of a name removed on the server: %v", tc.opts, err)
		}
		if code, _, errs := cli("nfsrdma-mount", "-u", dir); code != 0 {
			t.Fatalf("unmount: %s", errs)
		}
	}
}
