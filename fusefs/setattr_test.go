package fusefs

import (
	"fmt"
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

// deferOpts are the default options with DeferSetattr.
func deferOpts() *Options {
	o := DefaultOptions()
	o.DeferSetattr = true
	return &o
}

// deferMount mounts a go-nfs server whose root is known not to be
// squashed, with DeferSetattr, and keeps the test on one thread (FUSE's
// pid is the thread's) until it ends.
func deferMount(t *testing.T) (*fusefstest.Server, *mounted) {
	t.Helper()
	return deferMountSetup(t, nil)
}

// deferMountSetup is deferMount with setup called on the FS before it is
// mounted (see mountGoNFSSetup).
func deferMountSetup(t *testing.T, setup func(*FS)) (*fusefstest.Server, *mounted) {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	srv := startGoNFS(t, backendDisk)
	m := mountGoNFSSetup(t, srv, deferOpts(), nil, MountConfig{}, setup)
	unsquashed(t, m)
	return srv, m
}

// TestSetattrSentAsMade: by default a file's times, owner and mode set by
// the process writing it (tar -x, cp -a) are three SETATTRs, each sent
// before its call returns, even where the server is known to take them.
func TestSetattrSentAsMade(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	srv := startGoNFS(t, backendDisk)
	m := mountGoNFS(t, srv, nil)
	unsquashed(t, m)
	d := opDeltas(m)
	f := extract(t, m.path("x"), time.Unix(1_000_000_000, 5000))
	if sa := d(nfs3.ProcSetattr); sa != 3 {
		t.Errorf("times, owner and mode set by the writer: %d SETATTR calls before close, want 3", sa)
	}
	check(t, f.Close())
}

// TestSetattrSbitsKept: tar -xp as root sets each file's owner, then its
// mode, through the descriptor it wrote it with. A server clears the
// set-user-ID and set-group-ID bits from a mode that comes in one SETATTR
// with a new owner (knfsd does, as chown(2) would), where the kernel
// client's two calls keep them: by default and with DeferSetattr, no
// SETATTR carries a mode with those bits (or the sticky bit) and a new
// owner, and the mode is sent after the owner, as the application did.
// (go-nfs keeps no such bits at all: the calls are what is checked.)
func TestSetattrSbitsKept(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts *Options
	}{{"default", nil}, {"defersetattr", deferOpts()}} {
		t.Run(tc.name, func(t *testing.T) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			srv := startGoNFS(t, backendDisk)
			m, rec := mountRecorded(t, srv, tc.opts, MountConfig{})
			unsquashed(t, m)
			for _, mode := range []uint32{0o4755, 0o2755, 0o6755, 0o1755} {
				name := fmt.Sprintf("m%o", mode)
				f, err := os.OpenFile(m.path(name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
				check(t, err)
				if _, err := f.Write(make([]byte, 4096)); err != nil {
					t.Fatal(err)
				}
				from := rec.mark()
				ts := unix.NsecToTimespec(1_000_000_000e9)
				check(t, unix.UtimesNanoAt(unix.AT_FDCWD, m.path(name), []unix.Timespec{ts, ts}, 0))
				check(t, f.Chown(1000, 1001))
				check(t, unix.Fchmod(int(f.Fd()), mode))
				check(t, f.Close())
				owner, sent := false, false
				for _, c := range rec.since(from, nfs3.ProcSetattr) {
					if c.mode != nil && *c.mode&0o7000 != 0 && (c.uid != nil || c.gid != nil) {
						t.Errorf("chown 1000:1001, chmod %o: one SETATTR sets mode %o and owner", mode, *c.mode)
					}
					owner = owner || c.uid != nil
					if c.mode != nil && *c.mode == mode {
						sent = true
						if !owner {
							t.Errorf("chown 1000:1001, chmod %o: the mode sent before the owner", mode)
						}
					}
				}
				if !sent {
					t.Errorf("chown 1000:1001, chmod %o: no SETATTR of that mode", mode)
				}
			}
		})
	}
}

// TestSetattrRefused: a chmod the server refuses fails with the server's
// error, by default even from the file's writer, and the mode shown stays
// the server's; the close has nothing to report. With DeferSetattr the
// refusal fails the close instead, and the refused mode is not shown
// after it (not by this mount's cache, nor by the kernel's).
func TestSetattrRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts *Options
	}{{"default", nil}, {"defersetattr", deferOpts()}} {
		t.Run(tc.name, func(t *testing.T) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			srv := startGoNFS(t, backendDisk)
			check(t, os.WriteFile(filepath.Join(srv.Dir, "x"), []byte("data"), 0o644))
			check(t, os.Chmod(filepath.Join(srv.Dir, "x"), 0o644))
			m, rec := mountRecorded(t, srv, tc.opts, MountConfig{})
			unsquashed(t, m)
			f, err := os.OpenFile(m.path("x"), os.O_WRONLY, 0)
			check(t, err)
			defer f.Close()
			rec.mu.Lock()
			rec.refuse = func(c sentCall) bool { return c.proc == nfs3.ProcSetattr }
			rec.mu.Unlock()
			chmodErr := f.Chmod(0o600)
			closeErr := f.Close()
			if tc.opts == nil {
				if !errorIs(chmodErr, syscall.EACCES) || closeErr != nil {
					t.Errorf("chmod refused by the server: chmod %v, close %v; want EACCES and nil", chmodErr, closeErr)
				}
			} else if chmodErr != nil || closeErr == nil {
				t.Errorf("deferred chmod refused by the server: chmod %v, close %v; want nil and an error", chmodErr, closeErr)
			}
			var st unix.Stat_t
			check(t, unix.Stat(m.path("x"), &st))
			if st.Mode&0o7777 != 0o644 {
				t.Errorf("after the refused chmod 600, the mount shows mode %o, want the server's 644", st.Mode&0o7777)
			}
		})
	}
}

// TestDeferredSetattr: with DeferSetattr, a file's times, owner and mode
// set by the process writing it (tar -x, cp -a) cost one SETATTR, sent at
// its close, and the writer sees them at once; the server has them when
// close returns. Not while root may be squashed.
func TestDeferredSetattr(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	srv := startGoNFS(t, backendDisk)
	m := mountGoNFS(t, srv, deferOpts())
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
// deferred one is sent by its timer, set for deferFlushAfter, while its
// writer keeps the file open.
func TestDeferredSetattrOrder(t *testing.T) {
	var timers manualTimers
	srv, m := deferMountSetup(t, func(f *FS) { f.afterFunc = timers.afterFunc })
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
	check(t, unix.Stat(filepath.Join(srv.Dir, "x"), &st))
	if st.Mode&0o7777 == 0o600 {
		t.Errorf("a chmod by its writer, which keeps the file open, was sent at once; want it deferred")
	}
	if timers.fire(deferFlushAfter) == 0 {
		t.Errorf("a deferred chmod set no timer of %v", deferFlushAfter)
	}
	check(t, unix.Stat(filepath.Join(srv.Dir, "x"), &st))
	if st.Mode&0o7777 != 0o600 {
		t.Errorf("%v after a chmod by its writer, which keeps it open: mode %o at the server, want 600", deferFlushAfter, st.Mode&0o7777)
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
