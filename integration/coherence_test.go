//go:build integration

package integration

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Cache coherency between two clients of the export, as the Linux client
// keeps it (nfs(5)): locks are cache-coherency points (written back and
// committed before a lock or unlock is sent, cached data and attributes
// dropped once a lock is granted), and direct I/O is never served from a
// cache. Each scenario runs the same program on the kernel's NFS/RDMA mount
// beside a second kernel mount of the export (nosharecache: caches of its
// own) and on nfsrdma-mount beside the kernel's mount, and the outcomes
// must be the same.

// counterHelperEnv names the counter helper's parameters (see init): the
// lock kind, fcntl or flock; the file; "reopen" or "keep"; the increments.
const counterHelperEnv = "NFSRDMA_COUNTER_HELPER"

func init() {
	if spec := os.Getenv(counterHelperEnv); spec != "" {
		// A second process of the counter test (before TestMain: this
		// binary run as the helper).
		os.Exit(counterHelper(strings.Split(spec, ",")))
	}
}

// counterHelper adds 1 to the number in the file n times, each under a
// write lock of the whole file (fcntl or flock), keeping the descriptor
// open or opening the file for each step. A lock held by the other process
// is asked for again after a short random pause (F_SETLK, LOCK_NB), so
// that both processes take turns whatever the lock manager's callbacks
// do. It prints "done" or the error.
func counterHelper(args []string) int {
	if len(args) != 4 {
		fmt.Println("error: want kind,path,keep|reopen,n")
		return 2
	}
	kind, path, reopen := args[0], args[1], args[2] == "reopen"
	n, _ := strconv.Atoi(args[3])
	var f *os.File
	open := func() error {
		var err error
		f, err = os.OpenFile(path, os.O_RDWR, 0)
		return err
	}
	if err := open(); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	lock := func(typ int16) error {
		for {
			var err error
			if kind == "flock" {
				how := syscall.LOCK_EX | syscall.LOCK_NB
				if typ == syscall.F_UNLCK {
					how = syscall.LOCK_UN
				}
				err = syscall.Flock(int(f.Fd()), how)
			} else {
				err = syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &syscall.Flock_t{Type: typ})
			}
			switch err {
			case syscall.EINTR:
			case syscall.EAGAIN, syscall.EACCES: // held by the other
				time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
			default:
				return err
			}
		}
	}
	buf := make([]byte, 32)
	for i := range n {
		if reopen && i > 0 {
			if err := open(); err != nil {
				fmt.Println("error: open:", err)
				return 1
			}
		}
		if err := lock(syscall.F_WRLCK); err != nil {
			fmt.Println("error: lock:", err)
			return 1
		}
		k, err := f.ReadAt(buf, 0)
		if k == 0 {
			fmt.Println("error: read:", err)
			return 1
		}
		v, err := strconv.Atoi(strings.TrimSpace(string(buf[:k])))
		if err != nil {
			fmt.Printf("error: the file holds %q\n", buf[:k])
			return 1
		}
		if _, err := f.WriteAt(fmt.Appendf(nil, "%08d\n", v+1), 0); err != nil {
			fmt.Println("error: write:", err)
			return 1
		}
		if err := lock(syscall.F_UNLCK); err != nil {
			fmt.Println("error: unlock:", err)
			return 1
		}
		if reopen {
			if err := f.Close(); err != nil {
				fmt.Println("error: close:", err)
				return 1
			}
		}
	}
	if !reopen {
		if err := f.Close(); err != nil {
			fmt.Println("error: close:", err)
			return 1
		}
	}
	fmt.Println("done")
	return 0
}

// counterDiag logs who holds the lock on name (F_GETLK through the
// kernel's mount b: a remote holder's svid, negated, as its pid), the
// helpers' states and the nfsrdma-mount's log without its denied locks.
func counterDiag(t *testing.T, name, b string) {
	if f, err := os.Open(filepath.Join(b, name)); err == nil {
		lk := syscall.Flock_t{Type: syscall.F_WRLCK}
		err := syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &lk)
		t.Logf("F_GETLK through %s: %+v, %v", b, lk, err)
		f.Close()
	}
	ps, _ := exec.Command("ps", "-eo", "pid,stat,wchan:32,args").CombinedOutput()
	for _, l := range strings.Split(string(ps), "\n") {
		if strings.Contains(l, "integration.test") {
			t.Log(l)
		}
	}
	if ms := mounted[diagMount]; ms != nil {
		var keep []string
		b, _ := os.ReadFile(ms.log)
		for _, l := range strings.Split(string(b), "\n") {
			if !strings.Contains(l, "NLM4_DENIED") {
				keep = append(keep, l)
			}
		}
		t.Logf("nfsrdma-mount's log, denied locks left out:\n%s", strings.Join(keep[max(0, len(keep)-120):], "\n"))
	}
}

// counterIncrements is how many times each process adds 1.
const counterIncrements = 200

// counterRun makes the file name through a, runs one counter helper
// through a and one through b at once, and returns the number the server
// holds once both are done.
func counterRun(t *testing.T, name, a, b, kind string, reopen bool) int {
	t.Helper()
	if err := os.WriteFile(filepath.Join(a, name), []byte("00000000\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(filepath.Join(exportDir, name)) })
	mode := "keep"
	if reopen {
		mode = "reopen"
	}
	type result struct {
		out string
		err error
	}
	done := make(chan result, 2)
	var cmds []*exec.Cmd
	for _, dir := range []string{a, b} {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), counterHelperEnv+"="+strings.Join([]string{kind, filepath.Join(dir, name), mode, strconv.Itoa(counterIncrements)}, ","))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
		go func() {
			err := cmd.Wait()
			done <- result{strings.TrimSpace(out.String()), err}
		}()
	}
	timeout := time.After(3 * time.Minute)
	for range cmds {
		select {
		case r := <-done:
			if r.err != nil || r.out != "done" {
				t.Errorf("%s: a counter helper: %v: %s", name, r.err, r.out)
			}
		case <-timeout:
			counterDiag(t, name, b)
			lockDiag(t, name+": the counter helpers did not finish in 3 minutes")
			for _, c := range cmds {
				c.Process.Kill()
			}
			t.FailNow()
		}
	}
	got, err := os.ReadFile(filepath.Join(exportDir, name))
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(got)))
	if err != nil {
		t.Fatalf("%s: the server's file holds %q", name, got)
	}
	return v
}

// TestCoherenceLockCounter: two processes, one on each of two clients, each
// add 1 to a number in a file 200 times under a write lock (fcntl, then
// flock), keeping the descriptor open or reopening the file for each step.
// With locks as cache-coherency points no update is lost: 400 on the
// kernel's mounts and on nfsrdma-mount alike.
func TestCoherenceLockCounter(t *testing.T) {
	ours := lockTest(t)
	kern := mountKernel(t)
	kern2 := mountKernelOpts(t, "") // nosharecache
	for _, kind := range []string{"fcntl", "flock"} {
		for _, reopen := range []bool{false, true} {
			name := fmt.Sprintf("counter-%s-%v", kind, map[bool]string{false: "keep", true: "reopen"}[reopen])
			t.Run(name, func(t *testing.T) {
				start := time.Now()
				k := counterRun(t, name+"-kernel", kern, kern2, kind, reopen)
				kt := time.Since(start)
				start = time.Now()
				o := counterRun(t, name+"-ours", ours, kern, kind, reopen)
				ot := time.Since(start)
				t.Logf("kernel mounts: %d in %.1f s; nfsrdma-mount with the kernel's: %d in %.1f s", k, kt.Seconds(), o, ot.Seconds())
				if k != 2*counterIncrements {
					t.Errorf("the kernel's mounts ended at %d, want %d (the bed itself loses updates)", k, 2*counterIncrements)
				}
				if o != k {
					t.Errorf("nfsrdma-mount beside the kernel's mount ended at %d; the kernel's mounts at %d", o, k)
				}
			})
		}
	}
}

// directBufT returns n bytes of anonymous memory, aligned for O_DIRECT.
func directBufT(t *testing.T, n int) []byte {
	t.Helper()
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(b) })
	return b
}

// directRun reads the file name through a with O_DIRECT, sequentially
// (an nfsrdma-mount with read-ahead for direct I/O would have its window
// open), has the other client (b) rewrite it, reads on and from the start
// again with O_DIRECT, and returns how many of the bytes read after the
// rewrite were old. Then a direct write through a must be what b reads.
func directRun(t *testing.T, name, a, b string) (stale int) {
	t.Helper()
	const size, step = 8 << 20, 256 << 10
	p := filepath.Join(a, name)
	if err := os.WriteFile(filepath.Join(b, name), bytes.Repeat([]byte("a"), size), 0o666); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(filepath.Join(exportDir, name)) })
	f, err := os.OpenFile(p, os.O_RDWR|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := directBufT(t, step)
	const first = 2 << 20
	for off := int64(0); off < first; off += step {
		if _, err := f.ReadAt(buf, off); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(500 * time.Millisecond) // what is read ahead arrives
	// The other client rewrites the whole file.
	if err := os.WriteFile(filepath.Join(b, name), bytes.Repeat([]byte("b"), size), 0o666); err != nil {
		t.Fatal(err)
	}
	for off := int64(first); off < size; off += step {
		n, err := f.ReadAt(buf, off)
		if err != nil {
			t.Fatal(err)
		}
		stale += n - bytes.Count(buf[:n], []byte("b"))
	}
	n, err := f.ReadAt(buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	stale += n - bytes.Count(buf[:n], []byte("b"))
	// A direct write is on the server when it returns.
	copy(buf, bytes.Repeat([]byte("c"), len(buf)))
	if _, err := f.WriteAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(b, name))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != size || !bytes.Equal(got[:step], buf) {
		t.Errorf("%s: the other client reads %d bytes, %q... after a direct write of %d bytes of 'c' returned", name, len(got), got[:min(len(got), 4)], step)
	}
	return stale
}

// TestCoherenceDirectRead: a direct read always reads the server: after
// another client rewrote the file, the kernel's mount and nfsrdma-mount
// alike read the new bytes, whatever was read before.
func TestCoherenceDirectRead(t *testing.T) {
	bin := mountBinary(t)
	ours := mountNFSRDMA(t, bin)
	kern := mountKernel(t)
	kern2 := mountKernelOpts(t, "") // nosharecache
	k := directRun(t, "direct-kernel", kern, kern2)
	o := directRun(t, "direct-ours", ours, kern)
	t.Logf("old bytes read directly after the other client's rewrite: kernel mounts %d, nfsrdma-mount %d", k, o)
	if k != 0 {
		t.Errorf("the kernel's mount read %d old bytes directly (the bed itself caches)", k)
	}
	if o != k {
		t.Errorf("nfsrdma-mount read %d old bytes directly after another client's rewrite; the kernel's mount %d", o, k)
	}
}
