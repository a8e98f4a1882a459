package fusefs

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

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
	requireFUSE(t)
	ls := nlmtest.Serve(t)
	c, err := nlm.NewClient(nlm.Config{Server: "127.0.0.1", Portmapper: ls.Portmapper(), CallerName: "client",
		TCP: sunrpc.TCPOptions{NoResvPort: true}, CallTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l := nlm.NewLocker(c, nlm.LockerConfig{RetryInterval: 50 * time.Millisecond, MonitorInterval: monitor, LocalStatd: ls.Portmapper(),
		RpcbindSocket: ls.RpcbindSocket()})
	t.Cleanup(func() {
		// After the unmount (cleanups run last first).
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l.Close(ctx)
		c.Close()
	})
	o := DefaultOptions()
	o.Locker, o.LocalPosix, o.LocalFlock = l, localPosix, localFlock
	return mountGoNFS(t, startGoNFS(t, backendMem), &o), ls, l
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
