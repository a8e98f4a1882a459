package fusefs

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma/fusefs/fusefstest"
	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// requireFUSE stops a test that cannot mount: it fails under CI=true (where
// the machine must be able to) and skips elsewhere, naming what is missing.
func requireFUSE(t testing.TB) {
	t.Helper()
	var missing string
	if os.Geteuid() != 0 {
		missing = "root (the tests mount with mount(2), no fusermount)"
	} else if f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0); err != nil {
		missing = fmt.Sprintf("/dev/fuse (%v)", err)
	} else {
		f.Close()
	}
	if missing == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("FUSE mount tests need %s", missing)
	}
	t.Skipf("FUSE mount tests need %s", missing)
}

// mounted is a fusefs mount of a test server.
type mounted struct {
	dir     string
	fsys    *FS
	server  *fuse.Server
	metered *sunrpc.MeteredTransport
}

// mountGoNFS mounts srv's export at a temporary directory with opts (nil:
// DefaultOptions) and unmounts it when the test ends.
func mountGoNFS(t testing.TB, srv *fusefstest.Server, opts *Options) *mounted {
	t.Helper()
	return mountGoNFSVia(t, srv, opts, nil)
}

// mountGoNFSVia is mountGoNFS with the TCP transport wrapped by wrap (nil:
// as it is).
func mountGoNFSVia(t testing.TB, srv *fusefstest.Server, opts *Options, wrap func(sunrpc.Transport) sunrpc.Transport) *mounted {
	t.Helper()
	return mountGoNFSConfig(t, srv, opts, wrap, MountConfig{})
}

// mountGoNFSConfig is mountGoNFSVia with mc's AllowOther.
func mountGoNFSConfig(t testing.TB, srv *fusefstest.Server, opts *Options, wrap func(sunrpc.Transport) sunrpc.Transport, mc MountConfig) *mounted {
	t.Helper()
	return mountGoNFSSetup(t, srv, opts, wrap, mc, nil)
}

// mountGoNFSSetup is mountGoNFSConfig with setup (if not nil) called on the
// FS before it is mounted, while nothing else uses it (to set its clock).
func mountGoNFSSetup(t testing.TB, srv *fusefstest.Server, opts *Options, wrap func(sunrpc.Transport) sunrpc.Transport, mc MountConfig, setup func(*FS)) *mounted {
	t.Helper()
	requireFUSE(t)
	ctx := testCtx(t)
	tcp, err := sunrpc.DialTCP(ctx, net.JoinHostPort(srv.Host, strconv.Itoa(srv.Port)), nil)
	if err != nil {
		t.Fatal(err)
	}
	var tr sunrpc.Transport = tcp
	if wrap != nil {
		tr = wrap(tcp)
	}
	m := &mounted{dir: t.TempDir(), metered: sunrpc.NewMeteredTransport(tr, nfs3.ProgramProcName)}
	tgt, err := nfs3.Mount(ctx, srv.Host, "/", &nfs3.MountOptions{MountPort: srv.Port, Transport: m.metered})
	if err != nil {
		t.Fatal(err)
	}
	m.fsys, err = New(ctx, tgt.Client(), tgt.Root(), opts)
	if err != nil {
		tgt.Close()
		t.Fatal(err)
	}
	if setup != nil {
		setup(m.fsys)
	}
	m.server, err = Mount(m.dir, m.fsys, MountConfig{FsName: "gonfs:/", DirectMountStrict: true, AllowOther: mc.AllowOther, Debug: os.Getenv("FUSEFS_DEBUG") != ""})
	if err != nil {
		m.fsys.Close()
		tgt.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.server.Unmount(); err != nil {
			t.Errorf("unmount %s: %v", m.dir, err)
			// Leave nothing mounted; the server goes when the last file
			// the test left open does.
			syscall.Unmount(m.dir, syscall.MNT_DETACH)
		} else {
			m.server.Wait()
		}
		m.fsys.Close()
		tgt.Close()
	})
	return m
}

func (m *mounted) path(name string) string { return filepath.Join(m.dir, name) }

// calls returns how many calls of NFS procedure proc the mount made.
func (m *mounted) calls(proc uint32) uint64 {
	for _, s := range m.metered.Stats() {
		if s.Prog == nfs3.Program && s.Proc == proc {
			return s.Calls
		}
	}
	return 0
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestFileOps drives the common file operations through the kernel mount on
// both backends.
func TestFileOps(t *testing.T) {
	for _, backend := range []string{backendMem, backendDisk} {
		t.Run(backend, func(t *testing.T) {
			srv := startGoNFS(t, backend)
			m := mountGoNFS(t, srv, nil)

			// Write and read back, small and larger than wsize.
			small := []byte("hello, nfs over fuse\n")
			check(t, os.WriteFile(m.path("small"), small, 0o644))
			got, err := os.ReadFile(m.path("small"))
			check(t, err)
			if !bytes.Equal(got, small) {
				t.Fatalf("small: read %q, want %q", got, small)
			}
			big := make([]byte, 3<<20+12345)
			rand.Read(big)
			check(t, os.WriteFile(m.path("big"), big, 0o600))
			got, err = os.ReadFile(m.path("big"))
			check(t, err)
			if !bytes.Equal(got, big) {
				t.Fatalf("big: read back %d bytes, differs", len(got))
			}
			if fi, err := os.Stat(m.path("big")); err != nil || fi.Size() != int64(len(big)) || fi.Mode().Perm() != 0o600 {
				t.Fatalf("stat big: %v, %v", fi, err)
			}
			// The server has the data (the test reads its file system).
			if b, err := readServer(srv, "big"); err != nil || !bytes.Equal(b, big) {
				t.Fatalf("server copy of big: %d bytes, %v", len(b), err)
			}

			// Directories, rename, readdir.
			check(t, os.MkdirAll(m.path("a/b/c"), 0o755))
			check(t, os.WriteFile(m.path("a/b/c/f"), []byte("x"), 0o644))
			check(t, os.Rename(m.path("small"), m.path("a/b/moved")))
			if _, err := os.Stat(m.path("small")); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("after rename, stat old name: %v", err)
			}
			got, err = os.ReadFile(m.path("a/b/moved"))
			check(t, err)
			if !bytes.Equal(got, small) {
				t.Fatalf("moved: read %q", got)
			}
			ents, err := os.ReadDir(m.path("a/b"))
			check(t, err)
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			if !slices.Equal(names, []string{"c", "moved"}) {
				t.Fatalf("readdir a/b: %v", names)
			}
			if !ents[0].IsDir() || ents[1].Type() != 0 {
				t.Fatalf("readdir types: %v %v", ents[0].Type(), ents[1].Type())
			}

			// Symlinks.
			check(t, os.Symlink("b/moved", m.path("a/link")))
			if target, err := os.Readlink(m.path("a/link")); err != nil || target != "b/moved" {
				t.Fatalf("readlink: %q, %v", target, err)
			}
			got, err = os.ReadFile(m.path("a/link"))
			check(t, err)
			if !bytes.Equal(got, small) {
				t.Fatalf("read through symlink: %q", got)
			}
			if fi, err := os.Lstat(m.path("a/link")); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
				t.Fatalf("lstat link: %v, %v", fi, err)
			}

			// Truncate, chmod.
			check(t, os.Truncate(m.path("big"), 1000))
			if fi, err := os.Stat(m.path("big")); err != nil || fi.Size() != 1000 {
				t.Fatalf("after truncate: %v, %v", fi, err)
			}
			got, err = os.ReadFile(m.path("big"))
			check(t, err)
			if !bytes.Equal(got, big[:1000]) {
				t.Fatal("after truncate: content differs")
			}
			check(t, os.Chmod(m.path("a/b/c/f"), 0o600))
			if fi, err := os.Stat(m.path("a/b/c/f")); err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("after chmod: %v, %v", fi, err)
			}

			// Errors map to errnos.
			// (go-nfs answers NFS3ERR_IO, not NOTEMPTY, for a non-empty
			// directory: only the failure is checked.)
			if err := syscall.Rmdir(m.path("a")); err == nil {
				t.Fatal("rmdir of a non-empty directory succeeded")
			}
			if _, err := os.Stat(m.path("nope")); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("stat missing: %v", err)
			}
			if err := os.Mkdir(m.path("a"), 0o755); !errors.Is(err, fs.ErrExist) {
				t.Fatalf("mkdir existing: %v", err)
			}

			// Remove everything.
			check(t, os.RemoveAll(m.path("a")))
			check(t, os.Remove(m.path("big")))
			ents, err = os.ReadDir(m.dir)
			check(t, err)
			for _, e := range ents {
				if e.Name() != ".keep" {
					t.Errorf("left after removal: %s", e.Name())
				}
			}

			// statfs answers.
			var st syscall.Statfs_t
			check(t, syscall.Statfs(m.dir, &st))
			if st.Bsize != 4096 {
				t.Errorf("statfs bsize %d", st.Bsize)
			}
			// Every NFS call was counted and timed.
			// (go-nfs writes FILE_SYNC whatever it is asked: no COMMIT.)
			for _, proc := range []uint32{nfs3.ProcLookup, nfs3.ProcWrite, nfs3.ProcRead, nfs3.ProcReaddirplus, nfs3.ProcFsstat} {
				if m.calls(proc) == 0 {
					t.Errorf("no %s calls counted", nfs3.ProcName(proc))
				}
			}
			var sb strings.Builder
			check(t, sunrpc.WriteStats(&sb, m.metered.Stats()))
			t.Logf("per-operation statistics:\n%s", sb.String())
		})
	}
}

// readServer reads a file of the server's file system directly.
func readServer(srv *fusefstest.Server, name string) ([]byte, error) {
	f, err := srv.FS.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(f)
	return buf.Bytes(), err
}

// TestCloseToOpen: a change made on the server behind the mount's back is
// seen by the next open, though the attribute cache would still trust the
// old attributes.
func TestCloseToOpen(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	o := DefaultOptions()
	o.AcRegMin, o.AcRegMax = time.Hour, time.Hour
	m := mountGoNFS(t, srv, &o)
	check(t, os.WriteFile(m.path("f"), []byte("version one"), 0o644))
	got, err := os.ReadFile(m.path("f"))
	check(t, err)
	if string(got) != "version one" {
		t.Fatalf("read %q", got)
	}
	// Another client changes the file (a longer content, a later mtime).
	real := filepath.Join(srv.Dir, "f")
	check(t, os.WriteFile(real, []byte("version two, longer"), 0o644))
	later := time.Now().Add(time.Minute)
	check(t, os.Chtimes(real, later, later))
	got, err = os.ReadFile(m.path("f"))
	check(t, err)
	if string(got) != "version two, longer" {
		t.Fatalf("after a change on the server, read %q", got)
	}
}

// TestAttributeCache: within acregmin a stat is answered from the cache; with
// noac every stat asks the server.
func TestAttributeCache(t *testing.T) {
	for _, tc := range []struct {
		name  string
		noac  bool
		fresh bool // repeated stats served from cache
	}{
		{"ac", false, true},
		{"noac", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startGoNFS(t, backendDisk)
			o := DefaultOptions()
			if tc.noac {
				o.NoAC()
			}
			m := mountGoNFS(t, srv, &o)
			check(t, os.WriteFile(m.path("f"), []byte("x"), 0o644))
			_, err := os.Stat(m.path("f"))
			check(t, err)
			before := m.calls(nfs3.ProcGetattr) + m.calls(nfs3.ProcLookup)
			for range 5 {
				_, err := os.Stat(m.path("f"))
				check(t, err)
			}
			after := m.calls(nfs3.ProcGetattr) + m.calls(nfs3.ProcLookup)
			if tc.fresh && after != before {
				t.Errorf("5 stats within acregmin made %d GETATTR/LOOKUP calls", after-before)
			}
			if !tc.fresh && after-before < 5 {
				t.Errorf("5 stats with noac made %d GETATTR/LOOKUP calls", after-before)
			}
		})
	}
}

// TestUnlinkOpenFile: a file removed while open stays readable through the
// open descriptor (silly rename) and is gone after the last close.
func TestUnlinkOpenFile(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	m := mountGoNFS(t, srv, nil)
	check(t, os.WriteFile(m.path("tmp"), []byte("still here"), 0o644))
	f, err := os.Open(m.path("tmp"))
	check(t, err)
	check(t, os.Remove(m.path("tmp")))
	if _, err := os.Stat(m.path("tmp")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stat after unlink: %v", err)
	}
	buf := make([]byte, 64)
	n, err := f.ReadAt(buf, 0)
	if string(buf[:n]) != "still here" {
		t.Fatalf("read after unlink: %q, %v", buf[:n], err)
	}
	var st syscall.Stat_t
	check(t, syscall.Fstat(int(f.Fd()), &st))
	if st.Nlink != 0 {
		t.Errorf("nlink after unlink: %d", st.Nlink)
	}
	check(t, f.Close())
	// The kernel releases the file after close(2) returns: the .nfs file
	// goes shortly after.
	deadline := time.Now().Add(5 * time.Second)
	for {
		ents, err := os.ReadDir(srv.Dir)
		check(t, err)
		if len(ents) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server directory after last close: %v", ents)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// mountReadAhead mounts a fresh server's export with READs of 64 KiB and
// a read-ahead window of window bytes.
func mountReadAhead(t *testing.T, window int) (*fusefstest.Server, *mounted) {
	t.Helper()
	srv := startGoNFS(t, backendDisk)
	o := DefaultOptions()
	o.Rsize, o.Wsize = 64<<10, 64<<10
	o.ReadAhead = window
	return srv, mountGoNFS(t, srv, &o)
}

// TestReadAhead: a sequential reader is served by pipelined READs of rsize
// ahead of it; the data is right whatever the kernel's request sizes.
func TestReadAhead(t *testing.T) {
	srv, m := mountReadAhead(t, 1<<20)
	data := make([]byte, 5<<20+777)
	rand.Read(data)
	check(t, os.WriteFile(filepath.Join(srv.Dir, "seq"), data, 0o644))
	f, err := os.Open(m.path("seq"))
	check(t, err)
	defer f.Close()
	var got bytes.Buffer
	buf := make([]byte, 100_000) // not a multiple of anything
	for {
		n, err := f.Read(buf)
		got.Write(buf[:n])
		if err != nil || n == 0 {
			break
		}
	}
	if !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("sequential read: %d bytes, differs", got.Len())
	}
	// Random reads after it still see the right bytes.
	for _, off := range []int64{4 << 20, 17, 3<<20 + 5, int64(len(data)) - 10} {
		p := make([]byte, 4096)
		n, _ := f.ReadAt(p, off)
		if !bytes.Equal(p[:n], data[off:min(off+4096, int64(len(data)))]) {
			t.Fatalf("ReadAt %d: differs", off)
		}
	}
	reads := m.calls(nfs3.ProcRead)
	if want := uint64(len(data) / (64 << 10)); reads < want {
		t.Errorf("%d READs for %d bytes in 64 KiB READs", reads, len(data))
	}
}

// TestReadAheadReusesSegments: read-ahead segments' memory is reused from
// segment to segment and from file to file, and no reader ever sees bytes
// of another segment or file in it: several files read sequentially at
// once, one after the other, each with its own contents, some with a
// random read mid-stream (which drops the window while its READs may still
// be in flight).
func TestReadAheadReusesSegments(t *testing.T) {
	srv, m := mountReadAhead(t, 512<<10)
	const readers, passes, size = 4, 3, 3<<20 + 4321
	want := make(map[string][]byte)
	for i := range readers {
		for pass := range passes {
			name := fmt.Sprintf("r%d-%d", i, pass)
			want[name] = make([]byte, size)
			rand.Read(want[name])
			check(t, os.WriteFile(filepath.Join(srv.Dir, name), want[name], 0o644))
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, readers*passes)
	for i := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pass := range passes {
				// A file of its own each pass: the page cache answers
				// none of it.
				name := fmt.Sprintf("r%d-%d", i, pass)
				w := want[name]
				f, err := os.Open(m.path(name))
				if err != nil {
					errs <- err
					return
				}
				buf := make([]byte, 96<<10+pass*1000)
				var off int64
				for off < size {
					if pass == 1 && off > size/2 {
						p := make([]byte, 4096)
						n, _ := f.ReadAt(p, 17)
						if !bytes.Equal(p[:n], w[17:17+4096]) {
							errs <- fmt.Errorf("%s: random read differs", name)
						}
					}
					n, err := f.ReadAt(buf, off)
					if !bytes.Equal(buf[:n], w[off:off+int64(n)]) {
						errs <- fmt.Errorf("%s: %d bytes at %d differ", name, n, off)
						f.Close()
						return
					}
					off += int64(n)
					if err != nil || n == 0 {
						break
					}
				}
				f.Close()
				if off != size {
					errs <- fmt.Errorf("%s: read %d of %d bytes", name, off, size)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Every segment READ: 12 files of 49 segments, each made anew without
	// reuse. With it, what the readers hold at once (each its window of 8
	// segments ahead, as many behind, and the ones being read), and again
	// whenever every window happened to be closed at once (the memory kept
	// then shrinks to one window's worth).
	made, reads := m.fsys.segBufs.Made(), m.calls(nfs3.ProcRead)
	t.Logf("segment buffers made %d, READs %d", made, reads)
	if reads < readers*passes*(size>>16) {
		t.Fatalf("%d READs: the files were not read through the mount", reads)
	}
	if made == 0 {
		t.Fatalf("no segment made: the files were not read ahead")
	}
	if made >= reads/2 {
		t.Errorf("%d segment buffers made for %d READs: not reused", made, reads)
	}
}

// TestReadAheadOneReaderKeepsOneWindow: a program reading files one after
// the other (cp, tar, a backup) reads them all through one window's worth
// of segment memory, made once.
func TestReadAheadOneReaderKeepsOneWindow(t *testing.T) {
	srv, m := mountReadAhead(t, 512<<10)
	const files, size = 6, 2<<20 + 999
	for i := range files {
		data := make([]byte, size)
		rand.Read(data)
		name := fmt.Sprintf("s%d", i)
		check(t, os.WriteFile(filepath.Join(srv.Dir, name), data, 0o644))
		got, err := os.ReadFile(m.path(name))
		check(t, err)
		if !bytes.Equal(got, data) {
			t.Fatalf("%s: %d bytes read, differs", name, len(got))
		}
	}
	made, reads := m.fsys.segBufs.Made(), m.calls(nfs3.ProcRead)
	t.Logf("segment buffers made %d, READs %d", made, reads)
	if reads < files*(size>>16) {
		t.Fatalf("%d READs: the files were not read through the mount", reads)
	}
	// One window: 8 segments ahead, as many behind, one being read, and
	// one whose READ the next file's window starts before the last
	// file's RELEASE (asynchronous) gives its memory back.
	if most := uint64(2*8 + 2); made == 0 || made > most {
		t.Errorf("%d segment buffers made for %d READs of %d files (one window holds at most %d)", made, reads, files, most)
	}
}

// TestWriteThenReadSameHandle: read-ahead never serves data older than the
// reader's own writes.
func TestWriteThenReadSameHandle(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	o := DefaultOptions()
	o.Rsize, o.Wsize = 16<<10, 16<<10
	m := mountGoNFS(t, srv, &o)
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<14) // 256 KiB
	check(t, os.WriteFile(m.path("rw"), data, 0o644))
	f, err := os.OpenFile(m.path("rw"), os.O_RDWR|syscall.O_DIRECT, 0)
	if err != nil {
		t.Skipf("O_DIRECT: %v", err)
	}
	defer f.Close()
	p := make([]byte, 4096)
	for off := int64(0); off < 64<<10; off += 4096 {
		_, err := f.ReadAt(p, off)
		check(t, err)
	}
	patch := bytes.Repeat([]byte{'Z'}, 4096)
	_, err = f.WriteAt(patch, 64<<10)
	check(t, err)
	_, err = f.ReadAt(p, 64<<10)
	check(t, err)
	if !bytes.Equal(p, patch) {
		t.Fatalf("read after write: %q...", p[:16])
	}
}

// TestReadOnly: a read-only mount refuses changes with EROFS.
func TestReadOnly(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	check(t, os.WriteFile(filepath.Join(srv.Dir, "f"), []byte("ro"), 0o644))
	o := DefaultOptions()
	o.ReadOnly = true
	m := mountGoNFS(t, srv, &o)
	if got, err := os.ReadFile(m.path("f")); err != nil || string(got) != "ro" {
		t.Fatalf("read: %q, %v", got, err)
	}
	for what, err := range map[string]error{
		"create": os.WriteFile(m.path("g"), nil, 0o644),
		"write":  os.WriteFile(m.path("f"), []byte("x"), 0o644),
		"mkdir":  os.Mkdir(m.path("d"), 0o755),
		"remove": os.Remove(m.path("f")),
		"chmod":  os.Chmod(m.path("f"), 0o600),
	} {
		if !errors.Is(err, syscall.EROFS) {
			t.Errorf("%s on a read-only mount: %v, want EROFS", what, err)
		}
	}
}

// TestSpecialFiles: mknod of a FIFO and a block device (go-nfs v0.0.4
// creates nothing for a character device: its NF3CHR case is empty).
func TestSpecialFiles(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	m := mountGoNFS(t, srv, nil)
	check(t, syscall.Mkfifo(m.path("fifo"), 0o644))
	if fi, err := os.Lstat(m.path("fifo")); err != nil || fi.Mode()&fs.ModeNamedPipe == 0 {
		t.Fatalf("fifo: %v, %v", fi, err)
	}
	dev := int(unix.Mkdev(7, 200)) // a loop device number
	check(t, syscall.Mknod(m.path("blk"), syscall.S_IFBLK|0o600, dev))
	var st syscall.Stat_t
	check(t, syscall.Lstat(m.path("blk"), &st))
	if st.Mode&syscall.S_IFMT != syscall.S_IFBLK || st.Rdev != uint64(dev) {
		t.Fatalf("blk: mode %o rdev %#x", st.Mode, st.Rdev)
	}
}
