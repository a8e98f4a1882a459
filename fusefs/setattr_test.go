package fusefs

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma/fusefs/fusefstest"
	"github.com/nfsrdma/nfsrdma/nfs3"
)

// extract writes a file as tar -x does as root: create, write, then set its
// times, owner and mode through the descriptor; it returns the open file.
// The caller keeps its goroutine on one thread (FUSE's pid is the
// thread's).
func extract(t *testing.T, path string, mtime time.Time) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	check(t, err)
	if _, err := f.Write(make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	ts := unix.NsecToTimespec(mtime.UnixNano())
	check(t, unix.UtimesNanoAt(unix.AT_FDCWD, path, []unix.Timespec{ts, ts}, 0))
	check(t, f.Chown(1000, 1001))
	check(t, f.Chmod(0o640))
	return f
}

// unsquashed records what the server shows when a file root made is its
// own (go-nfs's CREATE replies bring no attributes to show it): root is
// not squashed on m's file system.
func unsquashed(t *testing.T, m *mounted) {
	t.Helper()
	r := m.fsys.root
	r.mu.Lock()
	fsid := r.attrs.attr.FSID
	r.mu.Unlock()
	now := m.fsys.now()
	m.fsys.squash.notSquashed(fsid, now, now.Add(time.Hour))
}

// deferMount mounts a go-nfs server whose root is known not to be
// squashed, and keeps the test on one thread (FUSE's pid is the thread's)
// until it ends.
func deferMount(t *testing.T) (*fusefstest.Server, *mounted) {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	srv := startGoNFS(t, backendDisk)
	m := mountGoNFS(t, srv, nil)
	unsquashed(t, m)
	return srv, m
}

// TestDeferredSetattr: a file's times, owner and mode set by the process
// writing it (tar -x, cp -a) cost one SETATTR, sent at its close, and the
// writer sees them at once; the server has them when close returns. Not
// while root may be squashed.
func TestDeferredSetattr(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	srv := startGoNFS(t, backendDisk)
	m := mountGoNFS(t, srv, nil)
	mtime := time.Unix(1_000_000_000, 5000)
	d := opDeltas(m)
	f := extract(t, m.path("squash-unknown"), mtime)
	if sa := d(nfs3.ProcSetattr); sa != 3 {
		t.Errorf("root, squashing unknown: %d SETATTR calls before close, want 3", sa)
	}
	check(t, f.Close())

	unsquashed(t, m)
	d = opDeltas(m)
	f = extract(t, m.path("x"), mtime)
	if sa := d(nfs3.ProcSetattr); sa != 0 {
		t.Errorf("before close: %d SETATTR calls, want them deferred", sa)
	}
	var st unix.Stat_t
	check(t, unix.Fstat(int(f.Fd()), &st))
	if st.Mode&0o7777 != 0o640 || st.Uid != 1000 || st.Gid != 1001 || st.Mtim.Nano() != mtime.UnixNano() {
		t.Errorf("fstat before close: mode %o uid %d gid %d mtime %v; want 640 1000 1001 %v", st.Mode&0o7777, st.Uid, st.Gid, time.Unix(0, st.Mtim.Nano()), mtime)
	}
	check(t, f.Close())
	if sa, w := d(nfs3.ProcSetattr), d(nfs3.ProcWrite); sa != 1 || w != 1 {
		t.Errorf("after close: %d SETATTR and %d WRITE calls, want 1 and 1", sa, w)
	}
	check(t, unix.Stat(filepath.Join(srv.Dir, "x"), &st))
	if st.Mode&0o7777 != 0o640 || st.Uid != 1000 || st.Gid != 1001 || st.Mtim.Nano() != mtime.UnixNano() || st.Size != 4096 {
		t.Errorf("at the server after close: mode %o uid %d gid %d mtime %v size %d; want 640 1000 1001 %v 4096", st.Mode&0o7777, st.Uid, st.Gid, time.Unix(0, st.Mtim.Nano()), st.Size, mtime)
	}
}

// TestDeferredSetattrOrder: a write after a deferred utimes is sent after
// it (the write moves the mtime at the server, as it would have); a chmod
// by a process without the file open for writing is sent at once; a
// deferred one is sent within deferFlushAfter while its writer keeps the
// file open.
func TestDeferredSetattrOrder(t *testing.T) {
	srv, m := deferMount(t)
	old := time.Unix(1_000_000_000, 0)
	f := extract(t, m.path("x"), old)
	if _, err := f.WriteAt([]byte("more"), 4096); err != nil {
		t.Fatal(err)
	}
	check(t, f.Close())
	var st unix.Stat_t
	check(t, unix.Stat(filepath.Join(srv.Dir, "x"), &st))
	if st.Mtim.Nano() == old.UnixNano() || st.Size != 4100 {
		t.Errorf("a write after utimes: at the server mtime %v size %d; want the write's mtime and 4100", time.Unix(0, st.Mtim.Nano()), st.Size)
	}

	g, err := os.OpenFile(m.path("x"), os.O_WRONLY, 0)
	check(t, err)
	defer g.Close()
	d := opDeltas(m)
	if out, err := exec.Command("chmod", "604", m.path("x")).CombinedOutput(); err != nil {
		t.Fatalf("chmod: %v: %s", err, out)
	}
	if sa := d(nfs3.ProcSetattr); sa != 1 {
		t.Errorf("chmod by a process that does not write the file: %d SETATTR calls, want 1 at once", sa)
	}

	g, err = os.OpenFile(m.path("x"), os.O_WRONLY, 0)
	check(t, err)
	defer g.Close()
	check(t, g.Chmod(0o600))
	time.Sleep(deferFlushAfter + 500*time.Millisecond)
	check(t, unix.Stat(filepath.Join(srv.Dir, "x"), &st))
	if st.Mode&0o7777 != 0o600 {
		t.Errorf("%v after a chmod by its writer, which keeps it open: mode %o at the server, want 600", deferFlushAfter+500*time.Millisecond, st.Mode&0o7777)
	}
}

// TestDeferredSetattrError: a deferred SETATTR the server refuses fails
// the writer's close.
func TestDeferredSetattrError(t *testing.T) {
	srv, m := deferMount(t)
	f, err := os.OpenFile(m.path("x"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	check(t, err)
	check(t, f.Chmod(0o640))
	check(t, os.Remove(filepath.Join(srv.Dir, "x"))) // gone from under it
	err = f.Close()
	if err == nil {
		t.Fatalf("close after a deferred chmod of a file removed at the server: no error")
	}
	if !errorIs(err, syscall.ESTALE) && !errorIs(err, syscall.ENOENT) && !errorIs(err, syscall.EIO) {
		t.Logf("close: %v", err)
	}
}

func errorIs(err error, errno syscall.Errno) bool {
	pe, ok := err.(*os.PathError)
	return ok && pe.Err == errno
}
