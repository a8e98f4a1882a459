// Package gonfstest is the in-process NFSv3 server of the tests, the one
// go-nfs fixture of the repository: go-nfs (github.com/willscott/go-nfs)
// serving MemFS, an in-memory file system with what go-nfs needs of a POSIX
// one, or DiskFS, a directory of the host. It serves MOUNT and NFS on one TCP
// port (Start, StartFS, Serve) or one RPC message at a time (RPCServer, behind
// the RPC-over-RDMA server of the simulated fabric: xprttest.NewNFSHandler).
// It does not import nfs3, so that nfs3's own tests can use it.
//
// go-nfs v0.0.4's own limits: handles name paths (a rename or remove makes
// the old handle stale), LINK decodes its arguments as SYMLINK's and fails,
// MKNOD creates nothing for a character device, REMOVE and RMDIR answer
// NFS3ERR_IO for a non-empty directory, every WRITE is FILE_SYNC.
package gonfstest

import (
	"io"
	"io/fs"
	"net"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/memfs"
	gonfs "github.com/willscott/go-nfs"
	"github.com/willscott/go-nfs/helpers"
)

// MemFS is a go-billy memfs made fit for go-nfs and for the tests' checks:
//
//   - safe for concurrent use (go-nfs serves calls concurrently; memfs is
//     not safe for that): every operation, on the file system and on its
//     files, holds one lock;
//   - billy.Change: Chmod, Chown and Chtimes are kept (memfs has no owners or
//     times, and reports the time of the call as every file's mtime);
//     a file's mtime otherwise changes when it is written or truncated;
//   - MKNOD, mkfifo, sockets (empty regular files) and LINK (a copy: memfs
//     has no inodes), which is enough to exercise the protocol;
//   - OpenFile ignores O_EXCL without O_CREATE, as POSIX systems do (go-nfs
//     truncates with O_WRONLY|O_EXCL, which memfs would refuse).
type MemFS struct {
	mu   sync.Mutex
	fs   billy.Filesystem
	meta map[string]*meta // by clean path
}

type meta struct {
	perm     *os.FileMode
	uid, gid int
	owned    bool
	mtime    time.Time
}

// NewMemFS returns an empty MemFS. (memfs acknowledges its root only once it
// holds something: NewMemFS creates a directory "/.keep".)
func NewMemFS() *MemFS {
	m := &MemFS{fs: memfs.New(), meta: map[string]*meta{}}
	m.fs.MkdirAll("/.keep", 0o755)
	return m
}

func clean(name string) string { return path.Clean("/" + name) }

// metaLocked returns name's metadata, made on first use.
func (m *MemFS) metaLocked(name string) *meta {
	p := clean(name)
	md := m.meta[p]
	if md == nil {
		md = &meta{mtime: time.Now()}
		m.meta[p] = md
	}
	return md
}

// info is a FileInfo with MemFS's permissions and times.
type info struct {
	os.FileInfo
	mode  os.FileMode
	mtime time.Time
}

func (i info) Mode() os.FileMode  { return i.mode }
func (i info) ModTime() time.Time { return i.mtime }
func (i info) String() string     { return fs.FormatFileInfo(i) }

func (m *MemFS) infoLocked(name string, fi os.FileInfo) os.FileInfo {
	md := m.metaLocked(name)
	mode := fi.Mode()
	if md.perm != nil {
		mode = mode&^os.ModePerm | *md.perm
	}
	return info{FileInfo: fi, mode: mode, mtime: md.mtime}
}

func (m *MemFS) lock() func() {
	m.mu.Lock()
	return m.mu.Unlock
}

func (m *MemFS) file(name string, f billy.File, err error) (billy.File, error) {
	if err != nil {
		return nil, err
	}
	return &memFile{m: m, name: clean(name), f: f}, nil
}

func (m *MemFS) Create(name string) (billy.File, error) {
	defer m.lock()()
	f, err := m.fs.Create(name)
	if err == nil {
		m.metaLocked(name).mtime = time.Now()
	}
	return m.file(name, f, err)
}

func (m *MemFS) Open(name string) (billy.File, error) {
	defer m.lock()()
	f, err := m.fs.Open(name)
	return m.file(name, f, err)
}

func (m *MemFS) OpenFile(name string, flag int, perm os.FileMode) (billy.File, error) {
	if flag&os.O_CREATE == 0 {
		flag &^= os.O_EXCL
	}
	defer m.lock()()
	_, statErr := m.fs.Lstat(name)
	f, err := m.fs.OpenFile(name, flag, perm)
	if err == nil && (statErr != nil || flag&os.O_TRUNC != 0) {
		md := m.metaLocked(name)
		md.mtime = time.Now()
		if statErr != nil {
			md.perm = nil
		}
	}
	return m.file(name, f, err)
}

func (m *MemFS) TempFile(dir, prefix string) (billy.File, error) {
	defer m.lock()()
	f, err := m.fs.TempFile(dir, prefix)
	if err != nil {
		return nil, err
	}
	return m.file(f.Name(), f, nil)
}

func (m *MemFS) Stat(name string) (os.FileInfo, error) {
	defer m.lock()()
	fi, err := m.fs.Stat(name)
	if err != nil {
		return nil, err
	}
	return m.infoLocked(name, fi), nil
}

func (m *MemFS) Lstat(name string) (os.FileInfo, error) {
	defer m.lock()()
	fi, err := m.fs.Lstat(name)
	if err != nil {
		return nil, err
	}
	return m.infoLocked(name, fi), nil
}

func (m *MemFS) ReadDir(dir string) ([]os.FileInfo, error) {
	defer m.lock()()
	fis, err := m.fs.ReadDir(dir)
	for i, fi := range fis {
		fis[i] = m.infoLocked(path.Join(dir, fi.Name()), fi)
	}
	return fis, err
}

func (m *MemFS) Readlink(name string) (string, error) {
	defer m.lock()()
	return m.fs.Readlink(name)
}

// Rename moves name's metadata (and that of everything below it) along.
func (m *MemFS) Rename(from, to string) error {
	defer m.lock()()
	if err := m.fs.Rename(from, to); err != nil {
		return err
	}
	f, t := clean(from), clean(to)
	for p, md := range m.meta {
		if p == f || strings.HasPrefix(p, f+"/") {
			delete(m.meta, p)
			m.meta[t+strings.TrimPrefix(p, f)] = md
		}
	}
	return nil
}

func (m *MemFS) Remove(name string) error {
	defer m.lock()()
	if err := m.fs.Remove(name); err != nil {
		return err
	}
	delete(m.meta, clean(name))
	return nil
}

func (m *MemFS) MkdirAll(name string, perm os.FileMode) error {
	defer m.lock()()
	_, statErr := m.fs.Lstat(name)
	err := m.fs.MkdirAll(name, perm)
	if err == nil && statErr != nil {
		md := m.metaLocked(name)
		md.perm, md.mtime = nil, time.Now()
	}
	return err
}

func (m *MemFS) Symlink(target, link string) error {
	defer m.lock()()
	err := m.fs.Symlink(target, link)
	if err == nil {
		md := m.metaLocked(link)
		md.perm, md.mtime = nil, time.Now()
	}
	return err
}

func (m *MemFS) Join(elem ...string) string { return m.fs.Join(elem...) }
func (m *MemFS) Root() string               { return m.fs.Root() }

// Chroot is not supported.
func (m *MemFS) Chroot(string) (billy.Filesystem, error) { return nil, billy.ErrNotSupported }

func (m *MemFS) Chmod(name string, mode os.FileMode) error {
	defer m.lock()()
	if _, err := m.fs.Lstat(name); err != nil {
		return err
	}
	perm := mode.Perm()
	m.metaLocked(name).perm = &perm
	return nil
}

func (m *MemFS) Lchown(name string, uid, gid int) error { return m.Chown(name, uid, gid) }

func (m *MemFS) Chown(name string, uid, gid int) error {
	defer m.lock()()
	if _, err := m.fs.Lstat(name); err != nil {
		return err
	}
	md := m.metaLocked(name)
	md.uid, md.gid, md.owned = uid, gid, true
	return nil
}

// Owner returns name's owner as set by Chown (ok false if never set).
func (m *MemFS) Owner(name string) (uid, gid int, ok bool) {
	defer m.lock()()
	md := m.meta[clean(name)]
	if md == nil || !md.owned {
		return 0, 0, false
	}
	return md.uid, md.gid, true
}

// Chtimes keeps mtime (memfs has no atime either; it is dropped).
func (m *MemFS) Chtimes(name string, _, mtime time.Time) error {
	defer m.lock()()
	if _, err := m.fs.Lstat(name); err != nil {
		return err
	}
	m.metaLocked(name).mtime = mtime
	return nil
}

func (m *MemFS) touch(name string, mode uint32) error {
	f, err := m.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, os.FileMode(mode&0o777))
	if err != nil {
		return err
	}
	return f.Close()
}

// Mknod, Mkfifo and Socket make an empty regular file.
func (m *MemFS) Mknod(name string, mode, _, _ uint32) error { return m.touch(name, mode) }
func (m *MemFS) Mkfifo(name string, mode uint32) error      { return m.touch(name, mode) }
func (m *MemFS) Socket(name string) error                   { return m.touch(name, 0o600) }

// Link copies target to link.
func (m *MemFS) Link(target, link string) error {
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

// memFile is a file of a MemFS.
type memFile struct {
	m    *MemFS
	name string
	f    billy.File
}

func (f *memFile) Name() string { return f.f.Name() }

func (f *memFile) touched() { f.m.metaLocked(f.name).mtime = time.Now() }

func (f *memFile) Write(p []byte) (int, error) {
	defer f.m.lock()()
	f.touched()
	return f.f.Write(p)
}

func (f *memFile) Read(p []byte) (int, error) {
	defer f.m.lock()()
	return f.f.Read(p)
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	defer f.m.lock()()
	return f.f.ReadAt(p, off)
}

func (f *memFile) Seek(off int64, whence int) (int64, error) {
	defer f.m.lock()()
	return f.f.Seek(off, whence)
}

func (f *memFile) Close() error {
	defer f.m.lock()()
	return f.f.Close()
}

func (f *memFile) Lock() error {
	defer f.m.lock()()
	return f.f.Lock()
}

func (f *memFile) Unlock() error {
	defer f.m.lock()()
	return f.f.Unlock()
}

func (f *memFile) Truncate(size int64) error {
	defer f.m.lock()()
	f.touched()
	return f.f.Truncate(size)
}

// handleCache is how many file handles the handler remembers: more than any
// test makes.
const handleCache = 1 << 20

// Handler returns go-nfs's handler for fsys: any credential accepted
// (helpers.NewNullAuthHandler), handles cached. SETATTR, MKNOD and LINK
// work when fsys is a billy.Change (and a UnixChange), as MemFS and DiskFS
// are.
func Handler(fsys billy.Filesystem) gonfs.Handler {
	return helpers.NewCachingHandler(helpers.NewNullAuthHandler(fsys), handleCache)
}

// Serve serves MOUNT and NFS for fsys on ln until stop, which closes ln and
// waits for the server to end.
func Serve(ln net.Listener, fsys billy.Filesystem) (stop func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gonfs.Serve(ln, Handler(fsys))
	}()
	return func() {
		ln.Close()
		<-done
	}
}

// Server is a go-nfs server on 127.0.0.1.
type Server struct {
	FS   *MemFS // what Start serves; nil after StartFS
	Host string
	Port int // MOUNT and NFS
}

// Addr returns host:port.
func (s *Server) Addr() string { return net.JoinHostPort(s.Host, strconv.Itoa(s.Port)) }

// Start serves a new MemFS on a free port of 127.0.0.1 until the test ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	fsys := NewMemFS()
	s := StartFS(tb, fsys)
	s.FS = fsys
	return s
}

// StartFS serves fsys on a free port of 127.0.0.1 until the test ends.
func StartFS(tb testing.TB, fsys billy.Filesystem) *Server {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(Serve(ln, fsys))
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	p, _ := strconv.Atoi(port)
	return &Server{Host: host, Port: p}
}

// Quiet silences go-nfs's package-level logger (call it from TestMain).
func Quiet() { gonfs.Log.SetLevel(gonfs.PanicLevel) }
