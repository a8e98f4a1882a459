package fusefs

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma/nfs3"
)

// TestDirectReadSeesGrowth: a direct (O_DIRECT) read past the size the
// kernel has cached goes to the server, as the kernel NFS client's direct
// reads do, and returns what another client appended meanwhile; through
// the page cache's path FUSE would cut it at the cached size (0 bytes)
// until the attributes time out.
func TestDirectReadSeesGrowth(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	first := make([]byte, 8192)
	rand.Read(first)
	check(t, os.WriteFile(filepath.Join(srv.Dir, "f"), first, 0o644))
	o := DefaultOptions()
	o.AcRegMin, o.AcRegMax = time.Minute, time.Minute
	m := mountGoNFS(t, srv, &o)
	f, err := os.OpenFile(m.path("f"), os.O_RDONLY|syscall.O_DIRECT, 0)
	check(t, err)
	defer f.Close()
	if st, err := f.Stat(); err != nil || st.Size() != int64(len(first)) {
		t.Fatalf("stat: %v, %v", st, err)
	}
	more := make([]byte, 8192)
	rand.Read(more)
	g, err := os.OpenFile(filepath.Join(srv.Dir, "f"), os.O_WRONLY|os.O_APPEND, 0)
	check(t, err)
	_, err = g.Write(more)
	check(t, err)
	check(t, g.Close())
	p := directBuf(8192)
	n, err := f.ReadAt(p, int64(len(first)))
	if n != len(more) || !bytes.Equal(p[:n], more) {
		t.Errorf("direct read past the cached size: %d bytes (%v), want the %d appended", n, err, len(more))
	}
}

// TestDirectSharedMmap: a shared mmap(2) of a file opened O_DIRECT is
// allowed where the kernel allows it for direct-I/O opens
// (DIRECT_IO_ALLOW_MMAP, Linux 6.6), else it fails with ENODEV (the price
// of directIOFlags, stated in nfsrdma-mount(8)); a private one always
// maps. The mappings are not touched: a page fault on a file this process
// serves itself can be interrupted for ever by the Go runtime's
// preemption signals.
func TestDirectSharedMmap(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	check(t, os.WriteFile(filepath.Join(srv.Dir, "f"), make([]byte, 8192), 0o644))
	m := mountGoNFS(t, srv, nil)
	f, err := os.OpenFile(m.path("f"), os.O_RDWR|syscall.O_DIRECT, 0)
	check(t, err)
	defer f.Close()
	allowed := m.server.KernelSettings().Flags64()&fuse.CAP_DIRECT_IO_ALLOW_MMAP != 0
	b, err := syscall.Mmap(int(f.Fd()), 0, 8192, syscall.PROT_READ, syscall.MAP_SHARED)
	switch {
	case allowed && err != nil:
		t.Errorf("shared mmap of a direct open, with DIRECT_IO_ALLOW_MMAP: %v", err)
	case !allowed && err != syscall.ENODEV:
		t.Errorf("shared mmap of a direct open, without DIRECT_IO_ALLOW_MMAP: %v, want ENODEV", err)
	}
	if err == nil {
		check(t, syscall.Munmap(b))
	}
	b, err = syscall.Mmap(int(f.Fd()), 0, 8192, syscall.PROT_READ, syscall.MAP_PRIVATE)
	check(t, err)
	check(t, syscall.Munmap(b))
}

// TestDirectWriteThenBufferedRead: what a direct open writes, a buffered
// open of the same file on the same mount reads at once, though it had
// the old bytes in the page cache: the write's new change time makes the
// kernel drop them (auto_inval_data), as the kernel client drops a
// file's pages on its own direct write.
func TestDirectWriteThenBufferedRead(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	old := bytes.Repeat([]byte("o"), 8192)
	check(t, os.WriteFile(filepath.Join(srv.Dir, "f"), old, 0o644))
	m := mountGoNFS(t, srv, nil)
	r, err := os.Open(m.path("f"))
	check(t, err)
	defer r.Close()
	p := make([]byte, len(old))
	if _, err := r.ReadAt(p, 0); err != nil || !bytes.Equal(p, old) {
		t.Fatalf("buffered read: %v", err)
	}
	// Change times at the server have the precision of its clock: one
	// write within the same tick as the file's making would not show.
	time.Sleep(20 * time.Millisecond)
	w, err := os.OpenFile(m.path("f"), os.O_WRONLY|syscall.O_DIRECT, 0)
	check(t, err)
	nb := directBuf(4096)
	copy(nb, bytes.Repeat([]byte("n"), 4096))
	_, err = w.WriteAt(nb, 4096)
	check(t, err)
	check(t, w.Close())
	want := append(bytes.Clone(old[:4096]), nb...)
	if _, err := r.ReadAt(p, 0); err != nil || !bytes.Equal(p, want) {
		t.Errorf("buffered read after a direct write on the same mount: %q..., want the new bytes from 4096", p[4090:4100])
	}
	if got := m.calls(nfs3.ProcWrite); got != 1 {
		t.Errorf("%d WRITE calls, want 1", got)
	}
}

// setDirect turns O_DIRECT on for f (fcntl F_SETFL): its reads and writes
// take the kernel's direct-I/O path though it was opened buffered.
func setDirect(t *testing.T, f *os.File) {
	t.Helper()
	fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	check(t, err)
	_, err = unix.FcntlInt(f.Fd(), unix.F_SETFL, fl|syscall.O_DIRECT)
	check(t, err)
}

// TestDirectReadNotCached: a direct read always goes to the server, as the
// kernel client's do: after another client rewrote the file, a direct
// reader that was reading it sequentially (this mount's read-ahead would
// have its window open) reads the new bytes, on a file opened O_DIRECT
// and on one that turned O_DIRECT on with fcntl.
func TestDirectReadNotCached(t *testing.T) {
	for _, how := range []string{"open", "fcntl"} {
		t.Run(how, func(t *testing.T) {
			srv := startGoNFS(t, backendDisk)
			const size, step = 8 << 20, 256 << 10
			check(t, os.WriteFile(filepath.Join(srv.Dir, "f"), bytes.Repeat([]byte("a"), size), 0o644))
			m := mountGoNFS(t, srv, nil)
			flags := os.O_RDONLY
			if how == "open" {
				flags |= syscall.O_DIRECT
			}
			f, err := os.OpenFile(m.path("f"), flags, 0)
			check(t, err)
			defer f.Close()
			p := directBuf(step)
			if how == "fcntl" {
				// Buffered first, without the kernel's read-ahead: this
				// mount's opens its window.
				check(t, unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_RANDOM))
				for off := int64(0); off < 4*step; off += step {
					_, err := f.ReadAt(p, off)
					check(t, err)
				}
				setDirect(t, f)
			}
			for off := int64(len(p)) * 4; off < 8*step; off += step {
				_, err := f.ReadAt(p, off)
				check(t, err)
			}
			time.Sleep(100 * time.Millisecond) // what is read ahead arrives
			check(t, os.WriteFile(filepath.Join(srv.Dir, "f"), bytes.Repeat([]byte("b"), size), 0o644))
			stale := 0
			for off := int64(8 * step); off < size; off += step {
				n, err := f.ReadAt(p, off)
				check(t, err)
				stale += n - bytes.Count(p[:n], []byte("b"))
			}
			if _, err := f.ReadAt(p, 0); err != nil || bytes.Count(p, []byte("b")) != len(p) {
				stale += len(p) - bytes.Count(p, []byte("b"))
			}
			if stale > 0 {
				t.Errorf("%d of %d bytes read directly after another client's rewrite were the old ones", stale, size-7*step)
			}
		})
	}
}

// TestDirectWriteDurable: a direct write has reached the server and is
// durable when it returns, as the kernel client's (which COMMITs an
// UNSTABLE direct write before it completes): another client reads it,
// and the server has been asked to commit it; on a file opened O_DIRECT
// and on one that turned O_DIRECT on with fcntl.
func TestDirectWriteDurable(t *testing.T) {
	for _, how := range []string{"open", "fcntl"} {
		t.Run(how, func(t *testing.T) {
			m := mountUnstable(t) // wsize 16 KiB
			flags := os.O_RDWR | os.O_CREATE
			if how == "open" {
				flags |= syscall.O_DIRECT
			}
			f, err := os.OpenFile(filepath.Join(m.dir, "f"), flags, 0o644)
			check(t, err)
			defer f.Close()
			if how == "fcntl" {
				setDirect(t, f)
			}
			small := directBuf(4096)
			copy(small, bytes.Repeat([]byte("s"), len(small)))
			_, err = f.WriteAt(small, 0)
			check(t, err)
			if got, err := os.ReadFile(filepath.Join(m.srv.Dir, "f")); err != nil || !bytes.Equal(got, small) {
				t.Errorf("the server has %d bytes after a direct write of %d returned (%v)", len(got), len(small), err)
			}
			big := directBuf(64 << 10) // four WRITEs
			copy(big, bytes.Repeat([]byte("B"), len(big)))
			commits := m.us.commits.Load()
			_, err = f.WriteAt(big, 4096)
			check(t, err)
			if m.us.commits.Load() == commits {
				t.Error("no COMMIT before a direct write of four UNSTABLE WRITEs returned")
			}
			if got, err := os.ReadFile(filepath.Join(m.srv.Dir, "f")); err != nil || len(got) != 4096+len(big) || !bytes.Equal(got[4096:], big) {
				t.Errorf("the server has %d bytes after a direct write returned (%v), want %d", len(got), err, 4096+len(big))
			}
		})
	}
}
