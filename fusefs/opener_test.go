package fusefs

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// asUser runs fn on a thread of its own whose credentials are uid and gid
// (no supplementary groups), and returns its error. The thread ends with
// it: its credentials are never given back to the runtime.
func asUser(uid, gid uint32, fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		gs := []uint32{gid}
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETGROUPS, 1, uintptr(unsafe.Pointer(&gs[0])), 0); e != 0 {
			ch <- fmt.Errorf("setgroups: %w", e)
			return
		}
		runtime.KeepAlive(gs)
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
			ch <- fmt.Errorf("setresgid: %w", e)
			return
		}
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
			ch <- fmt.Errorf("setresuid: %w", e)
			return
		}
		ch <- fn()
	}()
	return <-ch
}

// fileCalls are the calls made for an open file.
var fileCalls = []uint32{nfs3.ProcRead, nfs3.ProcWrite, nfs3.ProcCommit, nfs3.ProcSetattr}

// TestOpenerCredential: the calls made for a file opened by root and used
// by another user through root's descriptor (a shell's redirection before
// runuser, a descriptor passed over a unix socket) carry root's
// credential, as the kernel client's carry the open context's: the reads,
// the gathered write sent FILE_SYNC at that user's close, the COMMIT, and
// the SETATTR of its ftruncate. A server that refuses that user (root_squash
// makes root nobody, who may have created the file where the user may not
// write) takes them all.
func TestOpenerCredential(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	check(t, os.Chmod(srv.Dir, 0o777))
	check(t, os.WriteFile(filepath.Join(srv.Dir, "r"), []byte("the server's data"), 0o644))
	// Recorded, and each UNSTABLE WRITE left for a COMMIT.
	us, rec := &unstableServer{}, &recorder{}
	us.setVerfs(1, 1)
	m := mountGoNFSConfig(t, srv, nil, func(tr sunrpc.Transport) sunrpc.Transport {
		us.Transport = tr
		rec.Transport = us
		return rec
	}, MountConfig{AllowOther: true})
	check(t, os.Chmod(filepath.Dir(m.dir), 0o755))
	const user = 1002
	rec.mu.Lock()
	rec.refuse = func(c sentCall) bool {
		a, err := sunrpc.ParseAuthSys(c.cred)
		return err == nil && a.UID == user && c.proc != nfs3.ProcGetattr && c.proc != nfs3.ProcLookup && c.proc != nfs3.ProcAccess
	}
	rec.mu.Unlock()
	from := rec.mark()

	w, err := os.OpenFile(m.path("w"), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	check(t, err)
	defer w.Close()
	r, err := os.Open(m.path("r"))
	check(t, err)
	defer r.Close()
	var got []byte
	err = asUser(user, user, func() error {
		// The user's own descriptor of root's open file: its close is
		// the user's FLUSH.
		fd, err := unix.Dup(int(w.Fd()))
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if _, err := unix.Write(fd, []byte("written by the user, then cut")); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		if err := unix.Ftruncate(fd, 19); err != nil {
			return fmt.Errorf("ftruncate: %w", err)
		}
		if _, err := unix.Write(fd, []byte("!")); err != nil { // at 29: a hole from 19
			return fmt.Errorf("write after ftruncate: %w", err)
		}
		if err := unix.Close(fd); err != nil {
			return fmt.Errorf("close: %w", err)
		}
		buf := make([]byte, 64)
		n, err := unix.Pread(int(r.Fd()), buf, 0)
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		got = buf[:n]
		return nil
	})
	if err != nil {
		t.Errorf("as uid %d through root's descriptors: %v", user, err)
	}
	if string(got) != "the server's data" {
		t.Errorf("read as uid %d through root's descriptor: %q", user, got)
	}
	b, err := os.ReadFile(filepath.Join(srv.Dir, "w"))
	check(t, err)
	want := "written by the user" + string(make([]byte, 10)) + "!"
	if string(b) != want {
		t.Errorf("at the server: %q, want %q", b, want)
	}

	// Root writes a file that the user opens for writing too: the user's
	// close commits root's writes with root's credential.
	c, err := os.OpenFile(m.path("c"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	check(t, err)
	defer c.Close()
	check(t, c.Chmod(0o666))
	data := make([]byte, 4<<20)
	if _, err := c.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := asUser(user, user, func() error {
		f, err := os.OpenFile(m.path("c"), os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		return f.Close()
	}); err != nil {
		t.Errorf("open and close for writing as uid %d after root's writes: %v", user, err)
	}
	check(t, c.Close())
	if len(rec.since(from, nfs3.ProcCommit)) == 0 {
		t.Errorf("no COMMIT of root's UNSTABLE writes")
	}
	if fi, err := os.Stat(filepath.Join(srv.Dir, "c")); err != nil || fi.Size() != int64(len(data)) {
		t.Errorf("at the server: %v, %v; want %d bytes", fi, err, len(data))
	}

	for _, proc := range fileCalls {
		for _, c := range rec.since(from, proc) {
			if a, err := sunrpc.ParseAuthSys(c.cred); err != nil || a.UID != 0 {
				t.Errorf("%s for root's open file carried uid %d (%v), want root's", nfs3.ProcName(proc), a.UID, err)
			}
		}
	}
}

// TestOpenersNotGathered: contiguous writes of two openers of a file (root
// and uid 1001) are not gathered into one WRITE: each carries its own
// opener's credential, as the kernel client coalesces the pages of one
// open context only.
func TestOpenersNotGathered(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	check(t, os.Chmod(srv.Dir, 0o777))
	m, rec := mountRecorded(t, srv, nil, MountConfig{AllowOther: true})
	check(t, os.Chmod(filepath.Dir(m.dir), 0o755))
	f, err := os.OpenFile(m.path("f"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
	check(t, err)
	defer f.Close()
	check(t, f.Chmod(0o666))
	from := rec.mark()
	if _, err := f.WriteAt(make([]byte, 1024), 0); err != nil {
		t.Fatal(err)
	}
	if err := asUser(1001, 1001, func() error {
		g, err := os.OpenFile(m.path("f"), os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		if _, err := g.WriteAt(make([]byte, 1024), 1024); err != nil {
			return err
		}
		return g.Close()
	}); err != nil {
		t.Fatalf("uid 1001's write: %v", err)
	}
	check(t, f.Close())
	uids := map[uint32]int{}
	for _, c := range rec.since(from, nfs3.ProcWrite) {
		a, err := sunrpc.ParseAuthSys(c.cred)
		if err != nil {
			t.Fatal(err)
		}
		uids[a.UID] += c.size
	}
	if uids[0] != 1024 || uids[1001] != 1024 {
		t.Errorf("bytes written by credential: %v, want 1024 by uid 0 and 1024 by uid 1001", uids)
	}
}
