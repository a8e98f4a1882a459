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
