//go:build integration

package integration

import (
	"bufio"
	"context"
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

	"github.com/nfsrdma/nfsrdma/nlm"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// Locks through nfsrdma-mount (NLM to knfsd's lockd) against locks through
// the kernel's own NFS mount of the same export: the server arbitrates.
// A lock helper (this binary with NFSRDMA_LOCK_HELPER set, see TestMain)
// is a second process: it takes a write lock on the whole file
// (NFSRDMA_LOCK_HELPER=wait: F_SETLKW; try: F_SETLK), says "locked" or
// "denied ERR" on stdout, and holds the lock until its stdin closes.

func lockHelper(mode, path string) int {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	cmd := syscall.F_SETLK
	if mode == "wait" {
		cmd = syscall.F_SETLKW
	}
	lk := syscall.Flock_t{Type: syscall.F_WRLCK}
	for {
		err = syscall.FcntlFlock(f.Fd(), cmd, &lk)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		fmt.Println("denied", err)
	} else {
		fmt.Println("locked")
	}
	bufio.NewReader(os.Stdin).ReadString('\n')
	return 0
}

type helper struct {
	cmd   *exec.Cmd
	stdin interface{ Close() error }
	lines chan string
	done  chan struct{} // closed when the helper has exited, with err set
	err   error
}

func startHelper(t *testing.T, mode, path string) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "NFSRDMA_LOCK_HELPER="+mode, "NFSRDMA_LOCK_FILE="+path)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{cmd: cmd, stdin: in, lines: make(chan string, 4), done: make(chan struct{})}
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			h.lines <- s.Text()
		}
		h.err = cmd.Wait()
		close(h.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		select {
		case <-h.done:
		case <-time.After(20 * time.Second):
			t.Errorf("lock helper %d does not die of SIGKILL", cmd.Process.Pid)
		}
	})
	return h
}

// line waits up to d for the helper's answer ("" when none came).
func (h *helper) line(d time.Duration) string {
	select {
	case l := <-h.lines:
		return l
	case <-time.After(d):
		return ""
	}
}

// lockWait bounds every lock call of the tests: a call that hangs fails
// the test with what the machine's lock state and the mount show.
const lockWait = 90 * time.Second

// diagMount is the nfsrdma-mount of the running lock test, for lockDiag.
var diagMount string

// lockDiag logs the kernel's lock table, the processes in D state and the
// nfsrdma-mount server's log and goroutines.
func lockDiag(t *testing.T, why string) {
	t.Helper()
	locks, _ := os.ReadFile("/proc/locks")
	ps, _ := exec.Command("ps", "-eo", "pid,stat,wchan:32,args").CombinedOutput()
	var d []string
	for _, l := range strings.Split(string(ps), "\n") {
		if f := strings.Fields(l); len(f) > 1 && (strings.HasPrefix(f[1], "D") || strings.Contains(l, "lockd") || strings.Contains(l, "statd")) {
			d = append(d, l)
		}
	}
	t.Errorf("%s\n/proc/locks:\n%s\nprocesses:\n%s", why, locks, strings.Join(d, "\n"))
	if ms := mounted[diagMount]; ms != nil {
		ms.dump(t, why)
	}
}

// within runs f, failing the test with lockDiag when it takes over d.
func within(t *testing.T, d time.Duration, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		lockDiag(t, what+": no answer in "+d.String())
		t.FailNow()
		return nil
	}
}

func setlkRaw(f *os.File, cmd int, typ int16, start, n int64) error {
	lk := syscall.Flock_t{Type: typ, Start: start, Len: n}
	for {
		err := syscall.FcntlFlock(f.Fd(), cmd, &lk)
		if err != syscall.EINTR {
			return err
		}
	}
}

var testT *testing.T // the running lock test, for setlk's bound

func setlk(f *os.File, cmd int, typ int16, start, n int64) error {
	return within(testT, lockWait, fmt.Sprintf("fcntl(%s, cmd %d, type %d, %d+%d)", f.Name(), cmd, typ, start, n),
		func() error { return setlkRaw(f, cmd, typ, start, n) })
}

func flockT(f *os.File, how int) error {
	return within(testT, lockWait, fmt.Sprintf("flock(%s, %d)", f.Name(), how),
		func() error { return syscall.Flock(int(f.Fd()), how) })
}

// lockTest mounts nfsrdma-mount with opts for a lock test.
func lockTest(t *testing.T, opts ...string) string {
	testT = t
	dir := mountNFSRDMA(t, mountBinary(t), opts...)
	diagMount = dir
	return dir
}

func getlk(t *testing.T, f *os.File, typ int16, start, n int64) syscall.Flock_t {
	t.Helper()
	lk := syscall.Flock_t{Type: typ, Start: start, Len: n}
	if err := within(t, lockWait, "F_GETLK on "+f.Name(), func() error { return syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &lk) }); err != nil {
		t.Fatalf("F_GETLK: %v", err)
	}
	return lk
}

// lockFile creates name on the export through dir and opens it read-write
// through each of dirs.
func lockFile(t *testing.T, name string, dirs ...string) []*os.File {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dirs[0], name), []byte("locks\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(filepath.Join(exportDir, name)) })
	var fs []*os.File
	for _, d := range dirs {
		f, err := os.OpenFile(filepath.Join(d, name), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		fs = append(fs, f)
	}
	return fs
}

// eventually retries f for up to d.
func eventually(d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestLockPosixAgainstKernelMount: a POSIX lock held through nfsrdma-mount
// excludes the kernel mount's, and the other way round; F_GETLK on each
// side reports the other's.
func TestLockPosixAgainstKernelMount(t *testing.T) {
	ours := lockTest(t)
	kern := mountKernel(t)
	fs := lockFile(t, "lock-posix", ours, kern)
	fo, fk := fs[0], fs[1]

	if err := setlk(fo, syscall.F_SETLK, syscall.F_WRLCK, 0, 100); err != nil {
		t.Fatalf("lock through nfsrdma-mount: %v", err)
	}
	if err := setlk(fk, syscall.F_SETLK, syscall.F_RDLCK, 50, 1); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("kernel mount's lock over ours: %v, want EAGAIN", err)
	}
	if lk := getlk(t, fk, syscall.F_WRLCK, 0, 0); lk.Type != syscall.F_WRLCK || lk.Start != 0 || lk.Len != 100 {
		t.Fatalf("kernel mount's F_GETLK: %+v, want our write lock 0-99", lk)
	}
	if err := setlk(fk, syscall.F_SETLK, syscall.F_WRLCK, 100, 0); err != nil {
		t.Fatalf("kernel mount's lock beside ours: %v", err)
	}
	// The other way round.
	if err := setlk(fo, syscall.F_SETLK, syscall.F_RDLCK, 1000, 1); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("our lock over the kernel mount's: %v, want EAGAIN", err)
	}
	lk := getlk(t, fo, syscall.F_RDLCK, 0, 0)
	if lk.Type != syscall.F_WRLCK || lk.Start != 100 || lk.Len != 0 || lk.Pid != 0 {
		t.Fatalf("our F_GETLK: %+v, want the kernel mount's write lock from 100 on, no local pid", lk)
	}
	if err := setlk(fk, syscall.F_SETLK, syscall.F_UNLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := setlk(fo, syscall.F_SETLK, syscall.F_WRLCK, 1000, 1); err != nil {
		t.Fatalf("our lock after the kernel mount's unlock: %v", err)
	}
	// Our unlock frees the range for the kernel mount.
	if err := setlk(fo, syscall.F_SETLK, syscall.F_UNLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := setlk(fk, syscall.F_SETLK, syscall.F_WRLCK, 0, 0); err != nil {
		t.Fatalf("kernel mount's lock after our unlock: %v", err)
	}
}

// TestLockFlockAgainstKernelMount: flock through nfsrdma-mount is a
// whole-file lock on the server, as the kernel client sends it.
func TestLockFlockAgainstKernelMount(t *testing.T) {
	ours := lockTest(t)
	kern := mountKernel(t)
	fs := lockFile(t, "lock-flock", ours, kern)
	fo, fk := fs[0], fs[1]
	if err := flockT(fo, syscall.LOCK_EX); err != nil {
		t.Fatalf("flock through nfsrdma-mount: %v", err)
	}
	if err := flockT(fk, syscall.LOCK_SH|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("kernel mount's flock over ours: %v, want EWOULDBLOCK", err)
	}
	// Closing the file gives it back.
	fo.Close()
	if err := eventually(5*time.Second, func() error { return flockT(fk, syscall.LOCK_EX|syscall.LOCK_NB) }); err != nil {
		t.Fatalf("kernel mount's flock after our close: %v", err)
	}
	fo2, err := os.Open(filepath.Join(ours, "lock-flock"))
	if err != nil {
		t.Fatal(err)
	}
	defer fo2.Close()
	if err := flockT(fo2, syscall.LOCK_SH|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("our flock over the kernel mount's: %v, want EWOULDBLOCK", err)
	}
	if err := flockT(fk, syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if err := flockT(fo2, syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		t.Fatalf("our flock after the kernel mount's unlock: %v", err)
	}
}

// lockdPort returns the port of the server's NLM v4 over TCP.
func lockdPort(t *testing.T) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := sunrpc.LookupPort(ctx, serverAddr.String(), nlm.Program, nlm.Version, &sunrpc.TCPOptions{NoResvPort: true})
	if err != nil {
		t.Logf("lockd's port: %v", err)
		return 0
	}
	return p
}

// TestLockReclaimedAfterServerRestart: a lock held through nfsrdma-mount
// across a knfsd restart is reclaimed in the grace period: after it, the
// kernel mount's lock is still refused.
func TestLockReclaimedAfterServerRestart(t *testing.T) {
	ours := lockTest(t)
	fs := lockFile(t, "lock-reclaim", ours)
	fo := fs[0]
	if err := setlk(fo, syscall.F_SETLK, syscall.F_WRLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	// lockd's own grace (50 s by default) as short as knfsd's.
	const graceFile = "/proc/sys/fs/nfs/nlm_grace_period"
	if old, err := os.ReadFile(graceFile); err == nil {
		t.Logf("%s was %s (0: lockd's grace is 5 × nlm_timeout, 50 s)", graceFile, strings.TrimSpace(string(old)))
		os.WriteFile(graceFile, []byte("10"), 0)
		t.Cleanup(func() { os.WriteFile(graceFile, old, 0) })
	} else {
		t.Logf("%s: %v", graceFile, err)
	}
	before := lockdPort(t)
	restartNFSD(t)
	after := lockdPort(t)
	t.Logf("lockd's port: %d before the restart, %d after", before, after)

	kern := mountKernel(t)
	fk, err := os.OpenFile(filepath.Join(kern, "lock-reclaim"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fk.Close()
	start := time.Now()
	err = setlk(fk, syscall.F_SETLK, syscall.F_WRLCK, 0, 0)
	t.Logf("kernel mount's F_SETLK after the restart answered in %v: %v", time.Since(start).Round(time.Millisecond), err)
	if !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("kernel mount's lock after the restart: %v, want EAGAIN (our lock reclaimed)", err)
	}
	var notes []string
	for _, line := range strings.Split(readLog(mounted[ours].log), "\n") {
		if strings.Contains(line, "reclaim") || strings.Contains(line, "lockd") || strings.Contains(line, "restarted") {
			notes = append(notes, line)
		}
	}
	t.Logf("nfsrdma-mount's log on locks:\n%s", strings.Join(notes, "\n"))
	if before != after && !strings.Contains(strings.Join(notes, "\n"), "locks reclaimed") {
		t.Fatalf("lockd restarted (port %d to %d) but the mount did not reclaim", before, after)
	}
}

// TestLockNolockStaysLocal: with nolock, locks exclude processes of this
// machine on the same mount only.
func TestLockNolockStaysLocal(t *testing.T) {
	ours := lockTest(t, "nolock")
	kern := mountKernel(t)
	fs := lockFile(t, "lock-nolock", ours, kern)
	fo, fk := fs[0], fs[1]
	if err := setlk(fo, syscall.F_SETLK, syscall.F_WRLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := setlk(fk, syscall.F_SETLK, syscall.F_WRLCK, 0, 0); err != nil {
		t.Fatalf("kernel mount's lock with nolock on ours: %v, want it granted (our locks stay local)", err)
	}
	h := startHelper(t, "try", filepath.Join(ours, "lock-nolock"))
	if l := h.line(10 * time.Second); !strings.HasPrefix(l, "denied") {
		t.Fatalf("another process on the same nolock mount: %q, want denied", l)
	}
}

// TestLockBlockedGrantedAndKilled: a process blocked in F_SETLKW on
// nfsrdma-mount gets the lock when the kernel mount's holder unlocks; a
// blocked one dies of SIGKILL, and leaves nothing locked.
func TestLockBlockedGrantedAndKilled(t *testing.T) {
	ours := lockTest(t)
	kern := mountKernel(t)
	fs := lockFile(t, "lock-wait", ours, kern)
	fk := fs[1]
	path := filepath.Join(ours, "lock-wait")

	if err := setlk(fk, syscall.F_SETLK, syscall.F_WRLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	h := startHelper(t, "wait", path)
	if l := h.line(2 * time.Second); l != "" {
		t.Fatalf("helper while the kernel mount holds the lock: %q", l)
	}
	if err := setlk(fk, syscall.F_SETLK, syscall.F_UNLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if l := h.line(15 * time.Second); l != "locked" {
		t.Fatalf("blocked F_SETLKW after the unlock: %q", l)
	}
	t.Logf("blocked F_SETLKW granted %v after the other client's unlock", time.Since(start).Round(time.Millisecond))
	if err := setlk(fk, syscall.F_SETLK, syscall.F_RDLCK, 0, 1); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("kernel mount's lock while the helper holds it: %v", err)
	}
	h.stdin.Close()
	select {
	case <-h.done:
		if h.err != nil {
			t.Fatalf("helper: %v", h.err)
		}
	case <-time.After(30 * time.Second):
		lockDiag(t, "the helper does not exit after its unlock")
		t.FailNow()
	}
	if err := eventually(5*time.Second, func() error { return setlk(fk, syscall.F_SETLK, syscall.F_WRLCK, 0, 0) }); err != nil {
		t.Fatalf("kernel mount's lock after the helper exited: %v", err)
	}

	// A blocked F_SETLKW dies of SIGKILL.
	h2 := startHelper(t, "wait", path)
	if l := h2.line(2 * time.Second); l != "" {
		t.Fatalf("second helper: %q", l)
	}
	h2.cmd.Process.Kill()
	select {
	case <-h2.done:
	case <-time.After(15 * time.Second):
		lockDiag(t, "a process blocked in F_SETLKW survives SIGKILL")
		t.FailNow()
	}
	if err := setlk(fk, syscall.F_SETLK, syscall.F_UNLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if lk := getlk(t, fk, syscall.F_WRLCK, 0, 0); lk.Type != syscall.F_UNLCK {
		t.Fatalf("a lock is left after the killed waiter: %+v", lk)
	}
}

// notifyRegistration returns the NLM version the nfsrdma-mount's Locker
// registered with rpcbind for statd's callback (UDP, a version above 2^30
// that the kernel's lockd does not use), or 0.
func notifyRegistration(ctx context.Context) (uint32, error) {
	pt, err := sunrpc.DialTCP(ctx, "127.0.0.1:111", &sunrpc.TCPOptions{NoResvPort: true})
	if err != nil {
		return 0, err
	}
	defer pt.Close()
	ms, err := sunrpc.NewPortmapper(pt, nil).Dump(ctx)
	if err != nil {
		return 0, err
	}
	for _, m := range ms {
		if m.Prog == nlm.Program && m.Vers >= 1<<30 && m.Prot == sunrpc.IPProtoUDP {
			return m.Vers, nil
		}
	}
	return 0, nil
}

// sendSMNotify sends this host's statd an SM_NOTIFY as the server's statd
// sends it after a reboot: from the server's address, with its name and
// new NSM state.
func sendSMNotify(t *testing.T, monName string, state int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pt, err := sunrpc.DialTCP(ctx, "127.0.0.1:111", &sunrpc.TCPOptions{NoResvPort: true})
	if err != nil {
		t.Fatal(err)
	}
	port, err := sunrpc.NewPortmapper(pt, nil).GetPort(ctx, nlm.NSMProgram, nlm.NSMVersion, sunrpc.IPProtoUDP)
	pt.Close()
	if err != nil {
		t.Fatalf("statd's UDP port: %v", err)
	}
	ip := net.IP(serverAddr.AsSlice())
	c, err := net.DialUDP("udp4", &net.UDPAddr{IP: ip}, &net.UDPAddr{IP: ip, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const xid = 0x6e6f7469
	msg := sunrpc.AppendCall(nil, &sunrpc.CallHeader{XID: xid, Prog: nlm.NSMProgram, Vers: nlm.NSMVersion, Proc: nlm.NSMProcNotify})
	msg = sunrpc.AppendString(msg, monName)
	msg = sunrpc.AppendInt32(msg, state)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("statd's reply to SM_NOTIFY: %v", err)
	}
	h, err := sunrpc.DecodeReply(sunrpc.NewDecoder(buf[:n]))
	if err != nil || h.XID != xid || h.Err() != nil {
		t.Fatalf("statd's reply to SM_NOTIFY: %+v %v", h, err)
	}
}

// TestLockRebootNotification: while a lock is held through nfsrdma-mount,
// this host's rpc.statd monitors the server for the mount (its callback
// registered with rpcbind); an SM_NOTIFY sent to statd as the server's
// statd sends it after a reboot makes the mount start its reclaim at once,
// before its 2 s poll (which sees nothing here anyway: no lockd restart,
// the same NSM state). On this bed the server is this host: knfsd's
// lockd, told by the same statd that its client 10.99.0.1 rebooted,
// drops that client's locks and, out of any grace period, refuses the
// reclaim. So the lock is lost: read and write through the open file that
// held it fail with EIO until it is closed, and the kernel mount can take
// the lock.
func TestLockRebootNotification(t *testing.T) {
	ours := lockTest(t)
	kern := mountKernel(t)
	fs := lockFile(t, "lock-notify", ours, kern)
	fo, fk := fs[0], fs[1]
	if err := setlk(fo, syscall.F_SETLK, syscall.F_WRLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	var vers uint32
	if err := eventually(10*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		v, err := notifyRegistration(ctx)
		if err == nil && v == 0 {
			err = errors.New("no callback of nfsrdma-mount registered with rpcbind")
		}
		// The callback is registered before statd is asked to monitor
		// (SM_MON): a notification statd takes before that has no one
		// to call (as for the kernel's lockd).
		if err == nil && !strings.Contains(readLog(mounted[ours].log), "statd monitors the server") {
			err = errors.New("statd does not monitor the server for nfsrdma-mount yet")
		}
		vers = v
		return err
	}); err != nil {
		t.Fatalf("%v\nnfsrdma-mount's log:\n%s", err, readLog(mounted[ours].log))
	}
	t.Logf("statd's callback for nfsrdma-mount: NLM version %d", vers)
	const notified = "SM_NOTIFY through this host's statd"
	start := time.Now()
	sendSMNotify(t, serverAddr.String(), int32(time.Now().Unix()|1))
	var took time.Duration
	if err := eventually(10*time.Second, func() error {
		if !strings.Contains(readLog(mounted[ours].log), notified) {
			return errors.New("no reclaim on the notification")
		}
		took = time.Since(start)
		return nil
	}); err != nil {
		t.Fatalf("%v\nnfsrdma-mount's log:\n%s", err, readLog(mounted[ours].log))
	}
	t.Logf("reclaim started %v after the SM_NOTIFY", took.Round(time.Millisecond))
	if took >= 2*time.Second {
		t.Errorf("the reclaim started %v after the SM_NOTIFY, not before the 2 s poll", took)
	}
	// The server dropped the lock and refused its reclaim: lost.
	buf := make([]byte, 6)
	if err := eventually(10*time.Second, func() error {
		if _, err := fo.ReadAt(buf, 0); !errors.Is(err, syscall.EIO) {
			return fmt.Errorf("read through the file whose lock was lost: %v, want EIO", err)
		}
		return nil
	}); err != nil {
		t.Fatalf("%v\nnfsrdma-mount's log:\n%s", err, readLog(mounted[ours].log))
	}
	if _, err := fo.WriteAt([]byte("x"), 0); !errors.Is(err, syscall.EIO) {
		t.Errorf("write through the file whose lock was lost: %v, want EIO", err)
	}
	if err := eventually(10*time.Second, func() error { return setlk(fk, syscall.F_SETLK, syscall.F_WRLCK, 0, 0) }); err != nil {
		t.Errorf("kernel mount's lock after ours was lost: %v", err)
	}
	fo.Close()
	f, err := os.Open(filepath.Join(ours, "lock-notify"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(buf, 0); err != nil {
		t.Errorf("read after reopening: %v", err)
	}
	var notes []string
	for _, line := range strings.Split(readLog(mounted[ours].log), "\n") {
		if strings.Contains(line, "reclaim") || strings.Contains(line, "lost") || strings.Contains(line, "statd") || strings.Contains(line, "EIO") {
			notes = append(notes, line)
		}
	}
	t.Logf("nfsrdma-mount's log on locks:\n%s", strings.Join(notes, "\n"))
}
