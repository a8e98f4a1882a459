package fusefs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma/fusefs/fusefstest"
	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/nlm"
	"github.com/nfsrdma/nfsrdma/nlm/nlmtest"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// mountWithLocks mounts a go-nfs export with a Locker on an in-process
// lock manager.
func mountWithLocks(t *testing.T, localPosix, localFlock bool) (*mounted, *nlmtest.Server) {
	t.Helper()
	m, ls, _ := mountWithLocker(t, localPosix, localFlock, -1)
	return m, ls
}

// mountWithLocker is mountWithLocks with the Locker's monitor checking the
// server every monitor (negative: never), and returns the Locker too.
func mountWithLocker(t *testing.T, localPosix, localFlock bool, monitor time.Duration) (*mounted, *nlmtest.Server, *nlm.Locker) {
	t.Helper()
	o := DefaultOptions()
	o.LocalPosix, o.LocalFlock = localPosix, localFlock
	return mountWithLockerOn(t, startGoNFS(t, backendMem), o, monitor, nil)
}

// mountWithLockerOn mounts srv with o and a Locker on an in-process lock
// manager (see mountWithLocker), the NFS transport wrapped by wrap (nil:
// as it is), which is given the lock manager.
func mountWithLockerOn(t *testing.T, srv *fusefstest.Server, o Options, monitor time.Duration,
	wrap func(*nlmtest.Server, sunrpc.Transport) sunrpc.Transport) (*mounted, *nlmtest.Server, *nlm.Locker) {
	t.Helper()
	requireFUSE(t)
	ls := nlmtest.Serve(t)
	l := testLocker(t, ls, "client", monitor)
	o.Locker = l
	var w func(sunrpc.Transport) sunrpc.Transport
	if wrap != nil {
		w = func(tr sunrpc.Transport) sunrpc.Transport { return wrap(ls, tr) }
	}
	return mountGoNFSVia(t, srv, &o, w), ls, l
}

func setlk(f *os.File, cmd int, typ int16, start, n int64) error {
	lk := syscall.Flock_t{Type: typ, Whence: 0, Start: start, Len: n}
	for {
		err := syscall.FcntlFlock(f.Fd(), cmd, &lk)
		if err != syscall.EINTR {
			return err
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestLocksPosixOnServer(t *testing.T) {
	m, ls := mountWithLocks(t, false, false)
	f, err := os.Create(m.path("f"))
	check(t, err)
	defer f.Close()
	check(t, setlk(f, syscall.F_SETLK, syscall.F_WRLCK, 0, 10))
	check(t, setlk(f, syscall.F_SETLK, syscall.F_RDLCK, 100, 0))
	locks := ls.Locks()
	if len(locks) != 2 {
		t.Fatalf("server holds %v, want 2 locks", locks)
	}
	for _, l := range locks {
		if !(l.Start == 0 && l.End == 9 && l.Exclusive) && !(l.Start == 100 && l.End == nlm.ToEOF && !l.Exclusive) {
			t.Fatalf("server holds %v", l)
		}
	}
	// Another client's lock: F_SETLK is refused, F_GETLK names it (no
	// local pid), F_SETLKW waits for it.
	other := nlmtest.Owner{Caller: "other", Svid: 3}
	ls.SetLock(nlmtest.HeldLock{FH: locks[0].FH, Owner: other, Start: 20, End: 29, Exclusive: true})
	if err := setlk(f, syscall.F_SETLK, syscall.F_RDLCK, 25, 1); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("lock over another client's: %v, want EAGAIN", err)
	}
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Start: 15, Len: 10}
	check(t, syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &lk))
	if lk.Type != syscall.F_WRLCK || lk.Start != 20 || lk.Len != 10 || lk.Pid != 0 {
		t.Fatalf("F_GETLK: %+v", lk)
	}
	done := make(chan error, 1)
	go func() { done <- setlk(f, syscall.F_SETLKW, syscall.F_WRLCK, 20, 5) }()
	waitFor(t, "the blocked LOCK at the server", func() bool { return ls.Blocked() > 0 })
	select {
	case err := <-done:
		t.Fatalf("F_SETLKW returned while the other client holds the lock: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	ls.ClearLocks(other)
	select {
	case err := <-done:
		check(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("F_SETLKW not granted after the other client unlocked")
	}
	// Closing any descriptor of the file gives back the process's locks.
	g, err := os.Open(m.path("f"))
	check(t, err)
	check(t, g.Close())
	waitFor(t, "the locks given back at close", func() bool { return len(ls.Locks()) == 0 })
}

func TestLocksFlockOnServer(t *testing.T) {
	m, ls := mountWithLocks(t, false, false)
	f, err := os.Create(m.path("f"))
	check(t, err)
	defer f.Close()
	check(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX))
	locks := ls.Locks()
	if len(locks) != 1 || locks[0].Start != 0 || locks[0].End != nlm.ToEOF || !locks[0].Exclusive {
		t.Fatalf("server holds %v, want one whole-file write lock", locks)
	}
	// Another open file is another flock owner, even in this process.
	g, err := os.Open(m.path("f"))
	check(t, err)
	if err := syscall.Flock(int(g.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("second flock: %v, want EWOULDBLOCK", err)
	}
	// A close of the other descriptor leaves the flock; its release of
	// the first gives it back.
	check(t, g.Close())
	if len(ls.Locks()) != 1 {
		t.Fatalf("flock gone at the close of another open file: %v", ls.Locks())
	}
	check(t, f.Close())
	waitFor(t, "the flock given back at release", func() bool { return len(ls.Locks()) == 0 })
}

func TestLocksLocal(t *testing.T) {
	m, ls := mountWithLocks(t, true, true)
	f, err := os.Create(m.path("f"))
	check(t, err)
	defer f.Close()
	check(t, setlk(f, syscall.F_SETLK, syscall.F_WRLCK, 0, 0))
	check(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX))
	if n := ls.Calls(nlm.ProcLock); n != 0 || len(ls.Locks()) != 0 {
		t.Fatalf("local_lock=all sent %d LOCKs", n)
	}
}

func TestLocksLocalFlockOnly(t *testing.T) {
	m, ls := mountWithLocks(t, false, true)
	f, err := os.Create(m.path("f"))
	check(t, err)
	defer f.Close()
	check(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX))
	if n := ls.Calls(nlm.ProcLock); n != 0 {
		t.Fatalf("local_lock=flock sent %d LOCKs for a flock", n)
	}
	check(t, setlk(f, syscall.F_SETLK, syscall.F_WRLCK, 0, 0))
	if n := ls.Calls(nlm.ProcLock); n != 1 {
		t.Fatalf("local_lock=flock: %d LOCKs for a POSIX lock, want 1", n)
	}
}

// TestLockLostEIO: a lock the server lost in a restart and whose reclaim
// it refuses (another client took the range in between) makes read, write
// and fsync of the open file that held it fail with EIO, cached pages
// included, until it is closed; another open file of the same file, and
// a new open, work.
func TestLockLostEIO(t *testing.T) {
	m, ls, l := mountWithLocker(t, false, false, 50*time.Millisecond)
	p := m.path("locked")
	check(t, os.WriteFile(p, []byte("0123456789"), 0o644))
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	check(t, err)
	defer f.Close()
	other, err := os.Open(p)
	check(t, err)
	defer other.Close()
	check(t, setlk(f, syscall.F_SETLK, syscall.F_WRLCK, 0, 5))
	buf := make([]byte, 10)
	if _, err := f.ReadAt(buf, 0); err != nil { // now in the page cache
		t.Fatal(err)
	}
	held := ls.Locks()
	if len(held) != 1 {
		t.Fatalf("server holds %v", held)
	}
	// The server restarts; another client takes the range in its grace
	// period (as a lock manager that lost the reclaim's race would grant).
	ls.Restart()
	ls.SetLock(nlmtest.HeldLock{FH: held[0].FH, Owner: nlmtest.Owner{Caller: "other", Svid: 7}, Start: 0, End: 4, Exclusive: true})
	waitFor(t, "the reclaim round", func() bool { return l.Reclaims() >= 1 })
	if l.Lost() != 1 {
		t.Fatalf("%d locks lost, want 1", l.Lost())
	}
	if _, err := f.ReadAt(buf, 0); !errors.Is(err, syscall.EIO) {
		t.Errorf("read through the file whose lock was lost: %v, want EIO", err)
	}
	if _, err := f.WriteAt([]byte("x"), 0); !errors.Is(err, syscall.EIO) {
		// A buffered write lands in the page cache; it is the fsync
		// that must fail then.
		if err := f.Sync(); !errors.Is(err, syscall.EIO) {
			t.Errorf("write, then fsync, through the file whose lock was lost: %v, want EIO", err)
		}
	}
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Errorf("fsync through the file whose lock was lost: %v, want EIO", err)
	}
	// The other open file never locked: unaffected.
	if _, err := other.ReadAt(buf, 0); err != nil {
		t.Errorf("read through another open file: %v", err)
	}
	f.Close()
	g, err := os.OpenFile(p, os.O_RDWR, 0)
	check(t, err)
	defer g.Close()
	if _, err := g.ReadAt(buf, 0); err != nil {
		t.Errorf("read after reopening: %v", err)
	}
	if _, err := g.WriteAt([]byte("y"), 9); err != nil {
		t.Errorf("write after reopening: %v", err)
	}
	check(t, g.Sync())
}

// testLocker returns a Locker of the client named caller on ls, closed
// when the test ends (after the unmount: cleanups run last first).
func testLocker(t *testing.T, ls *nlmtest.Server, caller string, monitor time.Duration) *nlm.Locker {
	t.Helper()
	c, err := nlm.NewClient(nlm.Config{Server: "127.0.0.1", Portmapper: ls.Portmapper(), CallerName: caller,
		TCP: sunrpc.TCPOptions{NoResvPort: true}, CallTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l := nlm.NewLocker(c, nlm.LockerConfig{RetryInterval: 50 * time.Millisecond, MonitorInterval: monitor, LocalStatd: ls.Portmapper(),
		RpcbindSocket: ls.RpcbindSocket()})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l.Close(ctx)
		c.Close()
	})
	return l
}

// lockWatch records the WRITE and COMMIT calls that reach the server
// while its lock manager holds no lock (once armed): data sent after the
// lock that protected it was given back.
type lockWatch struct {
	sunrpc.Transport
	ls       *nlmtest.Server
	armed    atomic.Bool
	unlocked atomic.Int64
}

func (w *lockWatch) RoundTrip(ctx context.Context, req *sunrpc.Request) (*sunrpc.Reply, error) {
	if _, proc, _ := callProc(req.Head); w.armed.Load() && (proc == nfs3.ProcWrite || proc == nfs3.ProcCommit) && len(w.ls.Locks()) == 0 {
		w.unlocked.Add(1)
	}
	return w.Transport.RoundTrip(ctx, req)
}

// lockedWritesMount mounts a disk export with locks, wsize 16 KiB, the
// server made to answer WRITEs UNSTABLE (unstableServer) and watched by a
// lockWatch.
func lockedWritesMount(t *testing.T) (*mounted, *fusefstest.Server, *unstableServer, *lockWatch) {
	t.Helper()
	srv := startGoNFS(t, backendDisk)
	var us *unstableServer
	var lw *lockWatch
	o := DefaultOptions()
	o.Wsize = 16 << 10
	m, _, _ := mountWithLockerOn(t, srv, o, -1, func(ls *nlmtest.Server, tr sunrpc.Transport) sunrpc.Transport {
		us = &unstableServer{Transport: tr}
		us.setVerfs(1, 1)
		lw = &lockWatch{Transport: us, ls: ls}
		return lw
	})
	return m, srv, us, lw
}

// TestLockUnlockWritesBack: an unlock (fcntl F_UNLCK, flock LOCK_UN) is
// sent only once what was written under the lock is on the server and
// committed, as the Linux client writes back and commits before it sends
// an unlock (do_unlk): the next holder of the lock, on any client, reads
// it. A small write would otherwise wait up to a second in the gathered
// writes, a larger one unCOMMITted until close.
func TestLockUnlockWritesBack(t *testing.T) {
	for _, kind := range []string{"fcntl", "flock"} {
		t.Run(kind, func(t *testing.T) {
			m, srv, us, lw := lockedWritesMount(t)
			check(t, os.WriteFile(filepath.Join(srv.Dir, "counter"), []byte("00000000\n"), 0o644))
			f, err := os.OpenFile(m.path("counter"), os.O_RDWR, 0)
			check(t, err)
			defer f.Close()
			lock := func(typ int16) {
				t.Helper()
				if kind == "fcntl" {
					check(t, setlk(f, syscall.F_SETLKW, typ, 0, 0))
					return
				}
				how := syscall.LOCK_EX
				if typ == syscall.F_UNLCK {
					how = syscall.LOCK_UN
				}
				check(t, syscall.Flock(int(f.Fd()), how))
			}
			lock(syscall.F_WRLCK)
			lw.armed.Store(true)
			big := bytes.Repeat([]byte("b"), 40<<10) // written behind UNSTABLE: needs a COMMIT
			_, err = f.WriteAt(big, 4096)
			check(t, err)
			_, err = f.WriteAt([]byte("00000001"), 0) // gathered
			check(t, err)
			commits := us.commits.Load()
			lock(syscall.F_UNLCK)
			got, err := os.ReadFile(filepath.Join(srv.Dir, "counter"))
			check(t, err)
			if len(got) < 8 || string(got[:8]) != "00000001" {
				t.Errorf("the server has %q at the unlock's return, want the write made under the lock", got[:min(len(got), 8)])
			}
			if len(got) != 4096+len(big) || !bytes.Equal(got[4096:], big) {
				t.Errorf("the server has %d bytes at the unlock's return, want %d", len(got), 4096+len(big))
			}
			if us.commits.Load() == commits {
				t.Errorf("no COMMIT before the unlock returned")
			}
			if n := lw.unlocked.Load(); n != 0 {
				t.Errorf("%d WRITE or COMMIT calls reached the server after the lock was given back", n)
			}
		})
	}
}

// TestLockCloseWritesBeforeUnlock: close(2) gives the process's POSIX
// locks back only after the file's writes are on the server and
// committed, as the Linux client's close flushes before its unlock.
func TestLockCloseWritesBeforeUnlock(t *testing.T) {
	m, srv, _, lw := lockedWritesMount(t)
	check(t, os.WriteFile(filepath.Join(srv.Dir, "f"), []byte("00000000\n"), 0o644))
	f, err := os.OpenFile(m.path("f"), os.O_RDWR, 0)
	check(t, err)
	check(t, setlk(f, syscall.F_SETLKW, syscall.F_WRLCK, 0, 0))
	lw.armed.Store(true)
	_, err = f.WriteAt([]byte("00000001"), 0)
	check(t, err)
	_, err = f.WriteAt(bytes.Repeat([]byte("b"), 40<<10), 4096)
	check(t, err)
	check(t, f.Close())
	if n := lw.unlocked.Load(); n != 0 {
		t.Errorf("%d WRITE or COMMIT calls reached the server after close gave the lock back", n)
	}
}

// TestLockGrantDropsCaches: a granted lock is a cache-coherency point, as
// with the Linux client (do_setlk: nfs_zap_caches): what another client
// wrote before it is what the lock holder reads and stats, whatever the
// kernel had in its page cache, this mount in its read-ahead segments or
// either in its attributes (trusted for a minute here).
func TestLockGrantDropsCaches(t *testing.T) {
	for _, kind := range []string{"fcntl", "flock"} {
		t.Run(kind, func(t *testing.T) {
			srv := startGoNFS(t, backendDisk)
			const size = 4 << 20
			check(t, os.WriteFile(filepath.Join(srv.Dir, "f"), bytes.Repeat([]byte("a"), size), 0o644))
			o := DefaultOptions()
			o.AcRegMin, o.AcRegMax = time.Minute, time.Minute
			m, _, _ := mountWithLockerOn(t, srv, o, -1, nil)
			// As mounted noatime: a stat after a read is answered from
			// the attributes while they are trusted.
			m.fsys.noAtime.Store(true)
			f, err := os.OpenFile(m.path("f"), os.O_RDWR, 0)
			check(t, err)
			defer f.Close()
			// No read-ahead of the kernel's: each read is one READ of
			// what it asks, and this mount's read-ahead opens its window.
			check(t, unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_RANDOM))
			const step = 64 << 10
			p := make([]byte, step)
			for off := int64(0); off < 4*step; off += step {
				_, err := f.ReadAt(p, off)
				check(t, err)
			}
			time.Sleep(100 * time.Millisecond) // the segments ahead arrive
			// Another client rewrites the file, longer.
			check(t, os.WriteFile(filepath.Join(srv.Dir, "f"), bytes.Repeat([]byte("b"), size+4096), 0o644))
			if kind == "fcntl" {
				check(t, setlk(f, syscall.F_SETLKW, syscall.F_RDLCK, 0, 0))
			} else {
				check(t, syscall.Flock(int(f.Fd()), syscall.LOCK_SH))
			}
			// Where the sequential reader goes on: a segment read ahead.
			if _, err := f.ReadAt(p, 4*step); err != nil || p[0] != 'b' || p[step-1] != 'b' {
				t.Errorf("read on after the lock: %q...%q (%v), want the other client's bytes", p[0], p[step-1], err)
			}
			if st, err := f.Stat(); err != nil || st.Size() != size+4096 {
				t.Errorf("size after the lock: %v (%v), want %d", st.Size(), err, size+4096)
			}
			if _, err := f.ReadAt(p, 0); err != nil || p[0] != 'b' || p[step-1] != 'b' {
				t.Errorf("read of cached pages after the lock: %q...%q (%v), want the other client's bytes", p[0], p[step-1], err)
			}
		})
	}
}

// TestLockFlockOwnerReused: a flock is the open file's, even when the
// kernel names a new open file's flocks with the owner of a closed one (it
// takes the owner from the address of the kernel's file, which a new open
// may reuse) and the closed one's release, which the kernel sends
// asynchronously, comes after the new one locked: that release leaves the
// new one's lock on the server, and the new one's unlock gives it back
// (else the server would keep a lock nobody holds, and every other lock
// on the file would wait for ever).
func TestLockFlockOwnerReused(t *testing.T) {
	m, ls := mountWithLocks(t, false, false)
	check(t, os.WriteFile(m.path("f"), []byte("flock\n"), 0o644))
	in := m.fsys.root.GetChild("f")
	if in == nil {
		t.Fatal("no node for f")
	}
	n := in.Operations().(*node)
	ctx := context.Background()
	a := n.newOpenFile(ctx, syscall.O_RDWR, 0)
	b := n.newOpenFile(ctx, syscall.O_RDWR, 0)
	defer b.Release(ctx)
	const owner = 0x1234
	lock := func(f *openFile, typ uint32) {
		t.Helper()
		if errno := f.setlk(ctx, owner, &fuse.FileLock{Start: 0, End: nlm.ToEOF, Typ: typ}, fuse.FUSE_LK_FLOCK, false); errno != 0 {
			t.Fatalf("flock type %d: %v", typ, errno)
		}
	}
	lock(a, syscall.F_WRLCK)
	lock(a, syscall.F_UNLCK)
	lock(b, syscall.F_WRLCK) // the kernel reused a's owner
	a.Release(ctx)           // a's release, late
	if got := ls.Locks(); len(got) != 1 {
		t.Fatalf("after the closed file's release the server holds %v, want the new open file's flock", got)
	}
	lock(b, syscall.F_UNLCK)
	if got := ls.Locks(); len(got) != 0 {
		t.Fatalf("after the new open file's unlock the server holds %v, want none", got)
	}
}

// counterSteps adds 1 to the number in path n times, each under a write
// lock of the whole file (fcntl or flock; asked for again after a short
// pause while the other client holds it), keeping the descriptor open or
// opening the file for each step.
func counterSteps(path, kind string, reopen bool, n int) error {
	var f *os.File
	open := func() (err error) {
		f, err = os.OpenFile(path, os.O_RDWR, 0)
		return err
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
			case syscall.EAGAIN, syscall.EACCES:
				time.Sleep(time.Millisecond)
			default:
				return err
			}
		}
	}
	if err := open(); err != nil {
		return err
	}
	buf := make([]byte, 32)
	for i := range n {
		if reopen && i > 0 {
			if err := open(); err != nil {
				return err
			}
		}
		if err := lock(syscall.F_WRLCK); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		k, _ := f.ReadAt(buf, 0)
		v, err := strconv.Atoi(strings.TrimSpace(string(buf[:k])))
		if err != nil {
			return fmt.Errorf("the file holds %q", buf[:k])
		}
		if _, err := f.WriteAt(fmt.Appendf(nil, "%08d\n", v+1), 0); err != nil {
			return err
		}
		if err := lock(syscall.F_UNLCK); err != nil {
			return fmt.Errorf("unlock: %w", err)
		}
		if reopen {
			if err := f.Close(); err != nil {
				return err
			}
		}
	}
	if !reopen {
		return f.Close()
	}
	return nil
}

// TestLockCounterTwoClients: two clients of one export (two mounts, each
// with a Locker of its own, on one lock manager) each add 1 to a number in
// a file 100 times under flock locks, opening the file for each step (the
// fcntl variants need a process per client: the guest's coherence
// scenario runs them). No update is lost, and no lock is left behind.
func TestLockCounterTwoClients(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	m1, ls, _ := mountWithLockerOn(t, srv, DefaultOptions(), -1, nil)
	o := DefaultOptions()
	o.Locker = testLocker(t, ls, "client2", -1)
	m2 := mountGoNFS(t, srv, &o)
	for _, reopen := range []bool{false, true} {
		name := fmt.Sprintf("counter-%v", reopen)
		check(t, os.WriteFile(filepath.Join(srv.Dir, name), []byte("00000000\n"), 0o666))
		const n = 100
		errs := make(chan error, 2)
		for _, m := range []*mounted{m1, m2} {
			go func() { errs <- counterSteps(m.path(name), "flock", reopen, n) }()
		}
		for range 2 {
			select {
			case err := <-errs:
				check(t, err)
			case <-time.After(time.Minute):
				t.Fatalf("%s: no end after a minute; the server holds %v", name, ls.Locks())
			}
		}
		got, err := os.ReadFile(filepath.Join(srv.Dir, name))
		check(t, err)
		if v, _ := strconv.Atoi(strings.TrimSpace(string(got))); v != 2*n {
			t.Errorf("%s: the file holds %q, want %d", name, got, 2*n)
		}
	}
}
