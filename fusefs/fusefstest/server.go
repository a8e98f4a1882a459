// Package fusefstest serves NFSv3 exports in-process for tests: go-nfs
// (github.com/willscott/go-nfs) over one of two go-billy file systems.
//   - Mem: go-billy's memfs. It has no inodes (go-nfs makes the fileid a hash
//     of the path), no hard links, no ownership, and reports time.Now() as
//     every file's mtime.
//   - Disk: go-billy's osfs over a temporary directory of the host, which
//     brings real inode numbers, link counts, ownership, times and special
//     files.
//
// go-nfs v0.0.4's own limits: handles name paths (a rename or remove makes
// the old handle stale), LINK decodes its arguments as SYMLINK's and fails,
// MKNOD creates nothing for a character device, REMOVE and RMDIR answer
// NFS3ERR_IO for a non-empty directory, every WRITE is FILE_SYNC.
package fusefstest

import (
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/memfs"
	"github.com/go-git/go-billy/v5/osfs"
	gonfs "github.com/willscott/go-nfs"
	"github.com/willscott/go-nfs/helpers"
	"golang.org/x/sys/unix"
)

// Backends.
const (
	Mem  = "memfs"
	Disk = "disk"
)

var quietOnce sync.Once

// memFS is memfs with the ownership, time and special-file operations go-nfs
// needs for SETATTR and MKNOD (a special file is an empty regular file; a
// hard link is a copy). memfs is not safe for concurrent use and go-nfs
// serves each connection on its own goroutine: one lock serialises every
// call, and the files it opens.
type memFS struct {
	billy.Filesystem
	lk    sync.Mutex // memfs
	mu    sync.Mutex // owner
	owner map[string][2]int
}

func (m *memFS) locked() func() {
	m.lk.Lock()
	return m.lk.Unlock
}

func (m *memFS) Create(name string) (billy.File, error) {
	return m.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o666)
}

func (m *memFS) Open(name string) (billy.File, error) { return m.OpenFile(name, os.O_RDONLY, 0) }

// OpenFile ignores O_EXCL without O_CREATE, as POSIX systems do (go-nfs
// opens with O_WRONLY|O_EXCL to truncate; memfs would refuse).
func (m *memFS) OpenFile(name string, flag int, perm os.FileMode) (billy.File, error) {
	if flag&os.O_CREATE == 0 {
		flag &^= os.O_EXCL
	}
	defer m.locked()()
	f, err := m.Filesystem.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &lockedFile{File: f, m: m}, nil
}

func (m *memFS) Stat(name string) (os.FileInfo, error) {
	defer m.locked()()
	return m.Filesystem.Stat(name)
}

func (m *memFS) Lstat(name string) (os.FileInfo, error) {
	defer m.locked()()
	return m.Filesystem.Lstat(name)
}

func (m *memFS) Rename(from, to string) error {
	defer m.locked()()
	return m.Filesystem.Rename(from, to)
}

func (m *memFS) Remove(name string) error {
	defer m.locked()()
	return m.Filesystem.Remove(name)
}

func (m *memFS) ReadDir(name string) ([]os.FileInfo, error) {
	defer m.locked()()
	return m.Filesystem.ReadDir(name)
}

func (m *memFS) MkdirAll(name string, perm os.FileMode) error {
	defer m.locked()()
	return m.Filesystem.MkdirAll(name, perm)
}

func (m *memFS) Symlink(target, link string) error {
	defer m.locked()()
	return m.Filesystem.Symlink(target, link)
}

func (m *memFS) Readlink(name string) (string, error) {
	defer m.locked()()
	return m.Filesystem.Readlink(name)
}

func (m *memFS) TempFile(dir, prefix string) (billy.File, error) {
	defer m.locked()()
	f, err := m.Filesystem.TempFile(dir, prefix)
	if err != nil {
		return nil, err
	}
	return &lockedFile{File: f, m: m}, nil
}

func (m *memFS) Chmod(name string, mode os.FileMode) error {
	defer m.locked()()
	return m.Filesystem.(billy.Chmod).Chmod(name, mode)
}

// lockedFile is an open memfs file under its memFS's lock.
type lockedFile struct {
	billy.File
	m *memFS
}

func (f *lockedFile) Read(p []byte) (int, error) {
	defer f.m.locked()()
	return f.File.Read(p)
}

func (f *lockedFile) ReadAt(p []byte, off int64) (int, error) {
	defer f.m.locked()()
	return f.File.ReadAt(p, off)
}

func (f *lockedFile) Write(p []byte) (int, error) {
	defer f.m.locked()()
	return f.File.Write(p)
}

func (f *lockedFile) Seek(off int64, whence int) (int64, error) {
	defer f.m.locked()()
	return f.File.Seek(off, whence)
}

func (f *lockedFile) Truncate(size int64) error {
	defer f.m.locked()()
	return f.File.Truncate(size)
}

func (f *lockedFile) Close() error {
	defer f.m.locked()()
	return f.File.Close()
}

func (m *memFS) Lchown(name string, uid, gid int) error { return m.Chown(name, uid, gid) }

func (m *memFS) Chown(name string, uid, gid int) error {
	if _, err := m.Lstat(name); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.owner[path.Clean("/"+name)] = [2]int{uid, gid}
	return nil
}

func (m *memFS) Chtimes(name string, _, _ time.Time) error {
	_, err := m.Lstat(name)
	return err
}

func (m *memFS) touch(name string, mode uint32) error {
	f, err := m.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, os.FileMode(mode&0o777))
	if err != nil {
		return err
	}
	return f.Close()
}

func (m *memFS) Mknod(name string, mode, _, _ uint32) error { return m.touch(name, mode) }
func (m *memFS) Mkfifo(name string, mode uint32) error      { return m.touch(name, mode) }
func (m *memFS) Socket(name string) error                   { return m.touch(name, 0o600) }

func (m *memFS) Link(target, link string) error {
	src, err := m.Open(target)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := m.OpenFile(link, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// diskFS is osfs rooted at dir with the operations osfs lacks done on the
// real files.
type diskFS struct {
	billy.Filesystem
	dir string
}

func (d *diskFS) real(name string) string { return filepath.Join(d.dir, filepath.Clean("/"+name)) }

func (d *diskFS) Chmod(name string, mode os.FileMode) error { return os.Chmod(d.real(name), mode) }

func (d *diskFS) Lchown(name string, uid, gid int) error { return os.Lchown(d.real(name), uid, gid) }
func (d *diskFS) Chown(name string, uid, gid int) error  { return os.Chown(d.real(name), uid, gid) }

func (d *diskFS) Chtimes(name string, atime, mtime time.Time) error {
	ts := []unix.Timespec{unix.NsecToTimespec(atime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	return unix.UtimesNanoAt(unix.AT_FDCWD, d.real(name), ts, unix.AT_SYMLINK_NOFOLLOW)
}

// Mknod makes a block device: go-nfs v0.0.4 calls it only for NF3BLK, with
// the permission bits alone.
func (d *diskFS) Mknod(name string, mode, major, minor uint32) error {
	if mode&syscall.S_IFMT == 0 {
		mode |= syscall.S_IFBLK
	}
	return unix.Mknod(d.real(name), mode, int(unix.Mkdev(major, minor)))
}

// Remove, Rename, Lstat and Readlink work on the names themselves: osfs's
// bound mode resolves symbolic links in them, which fails for a dangling
// link. (And rename(2), not os.Rename, which refuses to replace an empty
// directory.)
func (d *diskFS) Remove(name string) error { return os.Remove(d.real(name)) }

func (d *diskFS) Rename(from, to string) error { return unix.Rename(d.real(from), d.real(to)) }

func (d *diskFS) Lstat(name string) (os.FileInfo, error) { return os.Lstat(d.real(name)) }

func (d *diskFS) Readlink(name string) (string, error) { return os.Readlink(d.real(name)) }

func (d *diskFS) Mkfifo(name string, mode uint32) error { return unix.Mkfifo(d.real(name), mode) }

func (d *diskFS) Socket(name string) error {
	return unix.Mknod(d.real(name), syscall.S_IFSOCK|0o600, 0)
}

func (d *diskFS) Link(target, link string) error { return os.Link(d.real(target), d.real(link)) }

// Server is an in-process NFSv3 server (go-nfs; MOUNT and NFS on one TCP
// port of 127.0.0.1).
type Server struct {
	Host string
	Port int
	FS   billy.Filesystem // what it serves
	Dir  string           // the Disk backend's directory
}

// Start serves an empty file system of the given backend until the test
// ends.
func Start(t testing.TB, backend string) *Server {
	t.Helper()
	quietOnce.Do(func() { gonfs.Log.SetLevel(gonfs.PanicLevel) }) // the server's own logging is noise here
	srv := &Server{}
	var change billy.Change
	switch backend {
	case Mem:
		m := &memFS{Filesystem: memfs.New(), owner: map[string][2]int{}}
		// memfs only acknowledges its root once it holds something.
		if err := m.MkdirAll("/.keep", 0o755); err != nil {
			t.Fatal(err)
		}
		srv.FS, change = m, m
	case Disk:
		srv.Dir = t.TempDir()
		d := &diskFS{Filesystem: osfs.New(srv.Dir, osfs.WithBoundOS()), dir: srv.Dir}
		srv.FS, change = d, d
	default:
		t.Fatalf("unknown backend %q", backend)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	handler := helpers.NewCachingHandler(&changeHandler{helpers.NewNullAuthHandler(srv.FS), change}, 1<<20)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gonfs.Serve(ln, handler)
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	srv.Host = host
	srv.Port, _ = strconv.Atoi(port)
	return srv
}

// changeHandler hands go-nfs the backend as its billy.Change (and
// UnixChange, for MKNOD and LINK).
type changeHandler struct {
	gonfs.Handler
	change billy.Change
}

func (h *changeHandler) Change(billy.Filesystem) billy.Change { return h.change }
