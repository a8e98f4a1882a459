package nfs3

import (
	"context"
	"io"
	"io/fs"
	"net"
	"os"
	"path"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/memfs"
	gonfs "github.com/willscott/go-nfs"
	"github.com/willscott/go-nfs/helpers"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

func TestMain(m *testing.M) {
	gonfs.Log.SetLevel(gonfs.PanicLevel) // the server's own logging is noise here
	os.Exit(m.Run())
}

// unixFS is a go-billy memfs with the ownership, time, special-file and
// hard-link operations go-nfs needs for SETATTR, MKNOD and LINK. memfs has no
// inodes: a "hard link" is a copy and special files are empty regular files,
// which is enough to exercise the protocol.
type unixFS struct {
	billy.Filesystem
	mu    sync.Mutex
	owner map[string][2]int
	modes map[string]os.FileMode // chmod'ed permissions, by clean path
	times map[string]sizeTime    // stable mtimes, by clean path
}

func (u *unixFS) Chmod(name string, mode os.FileMode) error {
	if _, err := u.Filesystem.Lstat(name); err != nil {
		return err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.modes == nil {
		u.modes = map[string]os.FileMode{}
	}
	u.modes[path.Clean("/"+name)] = mode.Perm()
	return nil
}

// modeInfo overrides a FileInfo's permissions and modification time.
type modeInfo struct {
	os.FileInfo
	perm  os.FileMode
	mtime time.Time
}

func (m modeInfo) Mode() os.FileMode   { return m.FileInfo.Mode()&^os.ModePerm | m.perm }
func (m modeInfo) ModTime() time.Time  { return m.mtime }
func (m modeInfo) Unwrap() os.FileInfo { return m.FileInfo }
func (m modeInfo) String() string      { return fs.FormatFileInfo(m) }

// sizeTime is when a file was first seen at its current size: memfs reports
// the time of the call as every file's mtime, which no client could cache or
// compare.
type sizeTime struct {
	size  int64
	mtime time.Time
}

func (u *unixFS) withMode(name string, fi os.FileInfo) os.FileInfo {
	u.mu.Lock()
	defer u.mu.Unlock()
	p := path.Clean("/" + name)
	if u.times == nil {
		u.times = map[string]sizeTime{}
	}
	st, ok := u.times[p]
	if !ok || st.size != fi.Size() {
		st = sizeTime{fi.Size(), time.Now()}
		u.times[p] = st
	}
	perm, ok := u.modes[p]
	if !ok {
		perm = fi.Mode().Perm()
	}
	return modeInfo{fi, perm, st.mtime}
}

func (u *unixFS) Stat(name string) (os.FileInfo, error) {
	fi, err := u.Filesystem.Stat(name)
	if err != nil {
		return nil, err
	}
	return u.withMode(name, fi), nil
}

func (u *unixFS) Lstat(name string) (os.FileInfo, error) {
	fi, err := u.Filesystem.Lstat(name)
	if err != nil {
		return nil, err
	}
	return u.withMode(name, fi), nil
}

func (u *unixFS) ReadDir(dir string) ([]os.FileInfo, error) {
	fis, err := u.Filesystem.ReadDir(dir)
	for i, fi := range fis {
		fis[i] = u.withMode(path.Join(dir, fi.Name()), fi)
	}
	return fis, err
}

// OpenFile ignores O_EXCL without O_CREATE, as POSIX systems do (go-nfs opens
// with O_WRONLY|O_EXCL to truncate; memfs would refuse).
func (u *unixFS) OpenFile(name string, flag int, perm os.FileMode) (billy.File, error) {
	if flag&os.O_CREATE == 0 {
		flag &^= os.O_EXCL
	}
	return u.Filesystem.OpenFile(name, flag, perm)
}

func (u *unixFS) Remove(name string) error {
	u.mu.Lock()
	delete(u.modes, path.Clean("/"+name))
	delete(u.times, path.Clean("/"+name))
	u.mu.Unlock()
	return u.Filesystem.Remove(name)
}

func (u *unixFS) Lchown(name string, uid, gid int) error { return u.Chown(name, uid, gid) }

func (u *unixFS) Chown(name string, uid, gid int) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.owner == nil {
		u.owner = map[string][2]int{}
	}
	u.owner[name] = [2]int{uid, gid}
	return nil
}

func (u *unixFS) Chtimes(string, time.Time, time.Time) error { return nil }

func (u *unixFS) touch(name string, mode uint32) error {
	f, err := u.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, os.FileMode(mode&0o777))
	if err != nil {
		return err
	}
	return f.Close()
}

func (u *unixFS) Mknod(name string, mode, _, _ uint32) error { return u.touch(name, mode) }
func (u *unixFS) Mkfifo(name string, mode uint32) error      { return u.touch(name, mode) }
func (u *unixFS) Socket(name string) error                   { return u.touch(name, 0o600) }

func (u *unixFS) Link(target, link string) error {
	src, err := u.Open(target)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := u.OpenFile(link, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

type goNFSServer struct {
	fs   *unixFS
	host string
	port int
}

// startGoNFS serves an empty in-memory file system with go-nfs (MOUNT and NFS
// on one port) on 127.0.0.1.
func startGoNFS(t testing.TB) *goNFSServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fsys := &unixFS{Filesystem: memfs.New()}
	// memfs only acknowledges its root once it holds something.
	if err := fsys.MkdirAll("/.keep", 0o755); err != nil {
		t.Fatal(err)
	}
	handler := helpers.NewCachingHandler(&unixHandler{helpers.NewNullAuthHandler(fsys), fsys}, 1<<16)
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
	p, _ := strconv.Atoi(port)
	return &goNFSServer{fs: fsys, host: host, port: p}
}

// unixHandler hands go-nfs the unixFS as its billy.Change.
type unixHandler struct {
	gonfs.Handler
	fs *unixFS
}

func (h *unixHandler) Change(billy.Filesystem) billy.Change { return h.fs }

func (s *goNFSServer) mount(t testing.TB, opts *MountOptions) *Target {
	t.Helper()
	var o MountOptions
	if opts != nil {
		o = *opts
	}
	o.MountPort, o.NFSPort = s.port, s.port
	if o.Cred == nil {
		o.Cred = &sunrpc.AuthNone
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tgt, err := Mount(ctx, s.host, "/", &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tgt.Close() })
	return tgt
}

func (s *goNFSServer) addr() string { return net.JoinHostPort(s.host, strconv.Itoa(s.port)) }

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestGoNFSSmoke(t *testing.T) {
	s := startGoNFS(t)
	tgt := s.mount(t, nil)
	ctx := testCtx(t)
	if err := tgt.Client().Null(ctx); err != nil {
		t.Fatal(err)
	}
	f, err := tgt.OpenFileContext(ctx, "/hello.txt", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("hello world")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f, err = tgt.OpenContext(ctx, "hello.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(f)
	if err != nil || string(b) != "hello world" {
		t.Fatalf("read %q, %v", b, err)
	}
	f.Close()
}
