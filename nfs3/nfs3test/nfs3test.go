// Package nfs3test is a conformance suite for the nfs3 path API: one set of
// scenarios, run by the nfs3 unit tests on an in-process go-nfs server over
// TCP and over RPC-over-RDMA on the simulated fabric, and by the integration
// tests against the Linux NFS server (knfsd) over TCP and RDMA. Each scenario
// works in its own directory of the export and checks what the client sees:
// testing/fstest on the fs.FS view, os-style OpenFile flags, errno mapping,
// path operations, large pipelined transfers, SETATTR times, and every
// NFSv3 procedure through the handle API.
package nfs3test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/nfsrdma/nfsrdma/nfs3"
)

// Server describes what the server under test cannot do, so that the suite
// checks everything else. The zero value is a POSIX server such as knfsd.
type Server struct {
	// NoNameMax: the server accepts names of any length (the client still
	// refuses those over 255 bytes).
	NoNameMax bool
	// NoTimes: SETATTR of times is accepted but not applied.
	NoTimes bool
	// NoModes: SETATTR of the mode is accepted but not applied.
	NoModes bool
	// LaxRmdir: RMDIR removes files and fails on a non-empty directory
	// with some other status than NFS3ERR_NOTEMPTY.
	LaxRmdir bool
	// NoLink: LINK is not supported (or its reply is malformed).
	NoLink bool
	// SmallFiles bounds the scenarios' file sizes (bytes, 0: no bound), for
	// slow beds: fstest reads files one byte per READ.
	SmallFiles int
}

// Run runs every scenario as a subtest on tgt, under directory dir of the
// export (a Target path such as "/conformance"), which it creates and removes.
func Run(t *testing.T, ctx context.Context, tgt *nfs3.Target, dir string, srv Server) {
	t.Helper()
	if _, err := tgt.Mkdir(ctx, dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tgt.RemoveAll(context.Background(), dir); err != nil {
			t.Errorf("RemoveAll %s: %v", dir, err)
		}
	})
	for _, sc := range []struct {
		name string
		fn   func(*testing.T, context.Context, *nfs3.Target, string, Server)
	}{
		{"FS", FS},
		{"OpenFile", OpenFile},
		{"Errors", Errors},
		{"PathOps", PathOps},
		{"LargeFile", LargeFile},
		{"Times", Times},
		{"Procedures", Procedures},
	} {
		t.Run(sc.name, func(t *testing.T) {
			d := path.Join(dir, strings.ToLower(sc.name))
			if _, err := tgt.Mkdir(ctx, d, 0o755); err != nil {
				t.Fatal(err)
			}
			sc.fn(t, ctx, tgt, d, srv)
		})
	}
}

// fsRel turns a Target path into an io/fs name.
func fsRel(p string) string {
	p = strings.Trim(path.Clean("/"+p), "/")
	if p == "" {
		return "."
	}
	return p
}

func writeFile(t *testing.T, ctx context.Context, tgt *nfs3.Target, p string, data []byte, perm fs.FileMode) {
	t.Helper()
	f, err := tgt.OpenFileContext(ctx, p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := f.Write(data); n != len(data) || err != nil {
		t.Fatalf("write %s: %d, %v", p, n, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, ctx context.Context, tgt *nfs3.Target, p string) string {
	t.Helper()
	b, err := tgt.ReadFileContext(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// FS builds a small tree (directories, an empty file, a file of several
// READs, a symbolic link) and runs testing/fstest.TestFS on the fs.FS view of
// it, then fs.WalkDir and fs.ReadFile.
func FS(t *testing.T, ctx context.Context, tgt *nfs3.Target, dir string, srv Server) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 400)
	if srv.SmallFiles > 0 && len(big) > srv.SmallFiles {
		big = big[:srv.SmallFiles]
	}
	for _, d := range []string{"a", "a/b", "z"} {
		if _, err := tgt.Mkdir(ctx, path.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string][]byte{
		"a/b/c.txt": []byte("deep file\n"),
		"a/empty":   nil,
		"hello.txt": []byte("hello, world\n"),
		"big.bin":   big,
	}
	var names []string
	for name, data := range files {
		writeFile(t, ctx, tgt, path.Join(dir, name), data, 0o644)
		names = append(names, name)
	}
	if err := tgt.Symlink(ctx, "hello.txt", path.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	names = append(names, "link")
	sub, err := fs.Sub(tgt, fsRel(dir))
	if err != nil {
		t.Fatal(err)
	}
	if err := fstest.TestFS(sub, names...); err != nil {
		t.Fatal(err)
	}
	var walked []string
	err = fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		walked = append(walked, p)
		return nil
	})
	want := ". a a/b a/b/c.txt a/empty big.bin hello.txt link z"
	if got := strings.Join(walked, " "); err != nil || got != want {
		t.Errorf("WalkDir: %s, %v\n\twant %s", got, err, want)
	}
	if b, err := fs.ReadFile(sub, "big.bin"); err != nil || !bytes.Equal(b, big) {
		t.Errorf("ReadFile big.bin: %d bytes, %v", len(b), err)
	}
	if fi, err := fs.Stat(sub, "link"); err != nil || fi.Mode().Type() != fs.ModeSymlink {
		t.Errorf("Stat of a symlink: %v, %v (links are not followed)", fi, err)
	}
	if m, err := fs.Glob(sub, "*.txt"); err != nil || strings.Join(m, " ") != "hello.txt" {
		t.Errorf("Glob: %v, %v", m, err)
	}
	for _, bad := range []string{"/" + fsRel(dir), fsRel(dir) + "/", "a/../a", "./a"} {
		if _, err := tgt.Open(bad); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("Open(%q): %v, want fs.ErrInvalid", bad, err)
		}
	}
}

// OpenFile checks os.OpenFile's flags: O_CREATE, O_EXCL, O_TRUNC, O_APPEND
// and the access modes.
func OpenFile(t *testing.T, ctx context.Context, tgt *nfs3.Target, dir string, srv Server) {
	p := dir + "/f"
	if _, err := tgt.OpenFileContext(ctx, p, os.O_RDWR, 0); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("open of a missing file without O_CREATE: %v", err)
	}
	f, err := tgt.OpenFileContext(ctx, p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := tgt.Stat(fsRel(p))
	if err != nil || fi.Size() != 10 || (!srv.NoModes && fi.Mode() != 0o640) {
		t.Errorf("after an O_EXCL create: %v, %v; want -rw-r----- of 10 bytes", fi, err)
	}
	if _, err := tgt.OpenFileContext(ctx, p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640); !errors.Is(err, fs.ErrExist) || !errors.Is(err, syscall.EEXIST) {
		t.Errorf("second O_EXCL create: %v", err)
	}
	// O_CREATE without O_EXCL opens the existing file, untouched.
	f, err = tgt.OpenFileContext(ctx, p, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("AB"), 2); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Read(make([]byte, 1)); !errors.Is(err, syscall.EBADF) {
		t.Errorf("Read on O_WRONLY: %v, want EBADF", err)
	}
	f.Close()
	if got := readFile(t, ctx, tgt, p); got != "01AB456789" {
		t.Errorf("after WriteAt: %q", got)
	}
	// O_APPEND writes at the end whatever the offset; WriteAt is refused.
	f, err = tgt.OpenFileContext(ctx, p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"xy", "z"} {
		if n, err := f.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("append: %d, %v", n, err)
		}
	}
	if _, err := f.WriteAt([]byte("q"), 0); err == nil {
		t.Error("WriteAt on O_APPEND succeeded")
	}
	f.Close()
	if got := readFile(t, ctx, tgt, p); got != "01AB456789xyz" {
		t.Errorf("after O_APPEND: %q", got)
	}
	// O_TRUNC empties it when writing; a read-only File refuses writes and
	// is not truncated.
	f, err = tgt.OpenFileContext(ctx, p, os.O_RDWR|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != 0 {
		t.Errorf("after O_TRUNC: %v, %v", fi, err)
	}
	f.Write([]byte("new"))
	f.Close()
	if got := readFile(t, ctx, tgt, p); got != "new" {
		t.Errorf("after O_TRUNC and a write: %q", got)
	}
	f, err = tgt.OpenFileContext(ctx, p, os.O_RDONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("x")); !errors.Is(err, syscall.EBADF) {
		t.Errorf("Write on O_RDONLY: %v, want EBADF", err)
	}
	f.Close()
	if got := readFile(t, ctx, tgt, p); got != "new" {
		t.Errorf("O_RDONLY|O_TRUNC truncated: %q", got)
	}
	// O_CREATE|O_TRUNC of a new file; directories open only read-only and
	// list in name order.
	f, err = tgt.OpenFileContext(ctx, dir+"/g", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := tgt.OpenFileContext(ctx, dir, os.O_RDWR, 0); !errors.Is(err, syscall.EISDIR) {
		t.Errorf("directory opened O_RDWR: %v", err)
	}
	d, err := tgt.OpenContext(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var names []string
	for {
		ents, err := d.ReadDir(1)
		if err == io.EOF {
			break
		}
		if err != nil || len(ents) != 1 {
			t.Fatalf("ReadDir(1): %v, %v", ents, err)
		}
		names = append(names, ents[0].Name())
	}
	if strings.Join(names, " ") != "f g" {
		t.Errorf("ReadDir: %v", names)
	}
}

// Errors checks that NFS errors come back as the kernel client gives them:
// errno values and io/fs sentinels inside *fs.PathError.
func Errors(t *testing.T, ctx context.Context, tgt *nfs3.Target, dir string, srv Server) {
	if _, err := tgt.Mkdir(ctx, dir+"/d", 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, ctx, tgt, dir+"/d/f", []byte("x"), 0o644)
	check := func(what string, err error, want ...error) {
		t.Helper()
		var pe *fs.PathError
		if !errors.As(err, &pe) {
			t.Errorf("%s: %v is not an *fs.PathError", what, err)
		}
		for _, w := range want {
			if !errors.Is(err, w) {
				t.Errorf("%s: %v is not %v", what, err, w)
			}
		}
	}
	_, err := tgt.OpenContext(ctx, dir+"/missing")
	check("open missing", err, fs.ErrNotExist, syscall.ENOENT)
	_, err = tgt.Mkdir(ctx, dir+"/d", 0o755)
	check("mkdir existing", err, fs.ErrExist, syscall.EEXIST)
	_, _, err = tgt.Lookup(ctx, dir+"/d/f/x")
	check("lookup through a file", err, syscall.ENOTDIR)
	if !srv.LaxRmdir {
		check("rmdir non-empty", tgt.RmDir(ctx, dir+"/d"), syscall.ENOTEMPTY)
		check("rmdir of a file", tgt.RmDir(ctx, dir+"/d/f"), syscall.ENOTDIR)
	}
	_, err = tgt.OpenFileContext(ctx, dir+"/d", os.O_WRONLY, 0)
	check("open a directory for writing", err, syscall.EISDIR)
	// Names over 255 bytes: refused by the client before any call, as by
	// the Linux client. The server refuses them too, but not necessarily
	// with NFS3ERR_NAMETOOLONG: knfsd (6.1) answers GARBAGE_ARGS, which
	// would reach a caller as EIO.
	long := strings.Repeat("n", nfs3.MaxNameLen+1)
	_, err = tgt.OpenFileContext(ctx, dir+"/"+long, os.O_RDWR|os.O_CREATE, 0o644)
	check("create a name of 256 bytes", err, syscall.ENAMETOOLONG)
	_, err = tgt.Mkdir(ctx, dir+"/"+long, 0o755)
	check("mkdir a name of 256 bytes", err, syscall.ENAMETOOLONG)
	_, _, err = tgt.Lookup(ctx, dir+"/"+long+"/x")
	check("lookup through a name of 256 bytes", err, syscall.ENAMETOOLONG)
	if !srv.NoNameMax {
		_, dfh, err := tgt.Lookup(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tgt.Client().Mkdir(ctx, dfh, long, nfs3.SetAttr{})
		if err == nil {
			t.Errorf("the server made a directory with a name of 256 bytes")
		}
		t.Logf("the server's answer to a MKDIR of a name of 256 bytes: %v", err)
	}
	_, err = tgt.Stat(fsRel(dir) + "/d/../d")
	check("fs name with ..", err, fs.ErrInvalid)
}

// PathOps checks the go-nfs-client-shaped path API: Mkdir, Create, Lookup,
// Setattr, Symlink, Readlink, Rename, Link, Remove, RmDir, RemoveAll.
func PathOps(t *testing.T, ctx context.Context, tgt *nfs3.Target, dir string, srv Server) {
	a, b := dir+"/a", dir+"/a/b"
	if _, err := tgt.Mkdir(ctx, a, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := tgt.Mkdir(ctx, b, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := tgt.Create(ctx, b+"/f", 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := tgt.Create(ctx, b+"/f", 0o640); !errors.Is(err, fs.ErrExist) {
		t.Errorf("create existing: %v", err)
	}
	fi, fh, err := tgt.Lookup(ctx, b+"/f")
	if err != nil || fh == nil || fi.Name() != "f" || fi.IsDir() || (!srv.NoModes && fi.Mode() != 0o640) {
		t.Fatalf("lookup: %v %v", fi, err)
	}
	di, _, err := tgt.Lookup(ctx, a+"/b/")
	if err != nil || !di.IsDir() || (!srv.NoModes && di.Mode() != fs.ModeDir|0o700) {
		t.Errorf("lookup of a directory: %v, %v", di, err)
	}
	var pe *fs.PathError
	_, _, err = tgt.Lookup(ctx, a+"/missing/x")
	if !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &pe) || pe.Path != a+"/missing/x" {
		t.Errorf("lookup missing: %v", err)
	}
	if err := tgt.Setattr(ctx, b+"/f", nfs3.SetAttr{Mode: new(uint32(0o600))}); err != nil {
		t.Fatal(err)
	}
	if at, err := tgt.Getattr(ctx, b+"/f"); err != nil || (!srv.NoModes && at.Mode&0o777 != 0o600) {
		t.Errorf("getattr after setattr: %o %v", at.Mode, err)
	}
	if err := tgt.Symlink(ctx, "b/f", a+"/link"); err != nil {
		t.Fatal(err)
	}
	if target, err := tgt.Readlink(ctx, a+"/link"); err != nil || target != "b/f" {
		t.Errorf("readlink: %q %v", target, err)
	}
	if fi, _, err := tgt.Lookup(ctx, a+"/link"); err != nil || fi.Mode().Type() != fs.ModeSymlink {
		t.Errorf("symlink's mode: %v %v", fi, err)
	}
	if err := tgt.Rename(ctx, b+"/f", a+"/g"); err != nil {
		t.Fatal(err)
	}
	if !srv.NoLink {
		if err := tgt.Link(ctx, a+"/g", a+"/h"); err != nil {
			t.Fatal(err)
		}
		if fi, _, err := tgt.Lookup(ctx, a+"/h"); err != nil || fi.Attr.Nlink != 2 {
			t.Errorf("after LINK: %v, %v; want 2 links", fi, err)
		}
	}
	if err := tgt.RmDir(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := tgt.Remove(ctx, a+"/g"); err != nil {
		t.Fatal(err)
	}
	if err := tgt.Remove(ctx, a+"/g"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("remove missing: %v", err)
	}
	for _, d := range []string{"/t", "/t/x", "/t/x/y"} {
		if _, err := tgt.Mkdir(ctx, dir+d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"/t/f1", "/t/x/f2", "/t/x/y/f3"} {
		if _, err := tgt.Create(ctx, dir+p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := tgt.RemoveAll(ctx, dir+"/t"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tgt.Lookup(ctx, dir+"/t"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after RemoveAll: %v", err)
	}
	if err := tgt.RemoveAll(ctx, dir+"/t"); err != nil {
		t.Errorf("RemoveAll of a missing path: %v", err)
	}
	if info, err := tgt.FSInfo(ctx); err != nil || info.WtMax == 0 || info.RtMax == 0 {
		t.Errorf("FSINFO: %+v %v", info, err)
	}
	if st, err := tgt.FSStat(ctx); err != nil || st.FreeBytes > st.TotalBytes {
		t.Errorf("FSSTAT: %+v %v", st, err)
	}
}

// LargeFile writes a file of several WRITEs (pipelined, UNSTABLE, then
// COMMIT) and reads it back with pipelined READs, through both the io
// methods and fs.ReadFile.
func LargeFile(t *testing.T, ctx context.Context, tgt *nfs3.Target, dir string, srv Server) {
	_, wsize, err := tgt.Client().IOSizes(ctx, tgt.Root())
	if err != nil {
		t.Fatal(err)
	}
	size := 3*int(wsize) + 12345
	if srv.SmallFiles > 0 {
		size = min(size, 4*srv.SmallFiles)
	}
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*131 + i>>9)
	}
	p := dir + "/big"
	f, err := tgt.OpenFileContext(ctx, p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := f.WriteAt(data, 0); n != size || err != nil {
		t.Fatalf("WriteAt: %d, %v", n, err)
	}
	got := make([]byte, size)
	if n, err := f.ReadAt(got, 0); n != size || (err != nil && err != io.EOF) {
		t.Fatalf("ReadAt: %d, %v", n, err)
	}
	if sha256.Sum256(got) != sha256.Sum256(data) {
		t.Error("read back differs")
	}
	if n, err := f.ReadAt(got[:10], int64(size)); n != 0 || err != io.EOF {
		t.Errorf("ReadAt at the end: %d, %v", n, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := tgt.ReadFile(fsRel(p))
	if err != nil || !bytes.Equal(b, data) {
		t.Errorf("ReadFile: %d bytes, %v", len(b), err)
	}
}

// Times sets modification times outside NFSv3's range and reads back what
// the Linux client would store: clamped, never wrapped.
func Times(t *testing.T, ctx context.Context, tgt *nfs3.Target, dir string, srv Server) {
	p := dir + "/t"
	writeFile(t, ctx, tgt, p, nil, 0o644)
	for _, tc := range []struct {
		set  time.Time
		want nfs3.Time
	}{
		{time.Unix(1_000_000_000, 5), nfs3.Time{Seconds: 1_000_000_000, Nseconds: 5}},
		{time.Unix(1<<32, 0), nfs3.Time{Seconds: math.MaxUint32}},
		{time.Unix(-86400, 0), nfs3.Time{}},
	} {
		st := nfs3.SetTime{How: nfs3.SetToClientTime, Time: nfs3.TimeOf(tc.set)}
		if err := tgt.Setattr(ctx, p, nfs3.SetAttr{Mtime: st}); err != nil {
			t.Fatal(err)
		}
		if srv.NoTimes {
			continue
		}
		a, err := tgt.Getattr(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if a.Mtime != tc.want {
			t.Errorf("mtime set to %v reads back %+v, want %+v", tc.set, a.Mtime, tc.want)
		}
	}
}

// Procedures drives every NFSv3 procedure through the handle API (Client):
// NULL, GETATTR, FSINFO, FSSTAT, PATHCONF, MKDIR, CREATE in each mode,
// LOOKUP, ACCESS, WRITE at each stability, READ, COMMIT, SETATTR, SYMLINK,
// READLINK, MKNOD, LINK, RENAME, READDIR, READDIRPLUS, REMOVE and RMDIR, and
// checks their results with other procedures.
func Procedures(t *testing.T, ctx context.Context, tgt *nfs3.Target, dir string, srv Server) {
	c := tgt.Client()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, top, err := tgt.Lookup(ctx, dir)
	must(err)

	// NULL, GETATTR, FSINFO, FSSTAT, PATHCONF.
	must(c.Null(ctx))
	ta, err := c.Getattr(ctx, top)
	must(err)
	if ta.Type != nfs3.TypeDir {
		t.Fatalf("directory's type %v", ta.Type)
	}
	info, err := c.Fsinfo(ctx, top)
	must(err)
	if info.RtMax == 0 || info.WtMax == 0 {
		t.Errorf("fsinfo %+v", info)
	}
	_, err = c.Fsstat(ctx, top)
	must(err)
	pc, err := c.Pathconf(ctx, top)
	must(err)
	if pc.NameMax == 0 {
		t.Errorf("pathconf %+v", pc)
	}

	// MKDIR, then CREATE in each mode.
	mk, err := c.Mkdir(ctx, top, "d", nfs3.SetAttr{Mode: new(uint32(0o750))})
	must(err)
	if mk.FH == nil || mk.DirWcc.After == nil {
		t.Errorf("mkdir result %+v", mk)
	}
	d := mk.FH
	cr, err := c.Create(ctx, d, "u", nfs3.CreateHow{Mode: nfs3.Unchecked, Attr: nfs3.SetAttr{Mode: new(uint32(0o640))}})
	must(err)
	fh := cr.FH
	if cr.Attr == nil || (!srv.NoModes && cr.Attr.Mode&0o777 != 0o640) || cr.Attr.Type != nfs3.TypeReg {
		t.Errorf("create attr %+v", cr.Attr)
	}
	_, err = c.Create(ctx, d, "u", nfs3.CreateHow{Mode: nfs3.Guarded})
	if !errors.Is(err, nfs3.ErrExist) || !errors.Is(err, fs.ErrExist) {
		t.Errorf("guarded create over existing: %v", err)
	}
	_, err = c.Create(ctx, d, "x", nfs3.CreateHow{Mode: nfs3.Exclusive, Verf: nfs3.CreateVerf{1, 2, 3}})
	if err != nil && !errors.Is(err, nfs3.ErrNotSupp) {
		t.Errorf("exclusive create: %v", err)
	}

	// LOOKUP, ACCESS.
	lr, err := c.Lookup(ctx, d, "u")
	must(err)
	if !bytes.Equal(lr.FH, fh) {
		t.Errorf("lookup fh %x, create fh %x", lr.FH, fh)
	}
	_, err = c.Lookup(ctx, d, "nope")
	if !errors.Is(err, nfs3.ErrNoEnt) || !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, syscall.ENOENT) {
		t.Errorf("lookup missing: %v", err)
	}
	ar, err := c.Access(ctx, fh, nfs3.AccessRead|nfs3.AccessModify)
	must(err)
	if ar.Access&nfs3.AccessRead == 0 {
		t.Errorf("access %#x", ar.Access)
	}

	// WRITE (each stability), READ, COMMIT.
	data := []byte("0123456789abcdef")
	for _, how := range []nfs3.StableHow{nfs3.Unstable, nfs3.DataSync, nfs3.FileSync} {
		wr, err := c.Write(ctx, fh, 0, data, how)
		must(err)
		if wr.Count != uint32(len(data)) {
			t.Errorf("%v: wrote %d", how, wr.Count)
		}
	}
	_, err = c.Commit(ctx, fh, 0, 0)
	must(err)
	buf := make([]byte, 64)
	rr, err := c.Read(ctx, fh, 4, buf)
	must(err)
	if !rr.EOF || rr.Count != len(data)-4 || !bytes.Equal(buf[:rr.Count], data[4:]) {
		t.Errorf("read %+v %q", rr, buf[:rr.Count])
	}
	rr, err = c.Read(ctx, fh, 0, buf[:4])
	must(err)
	if rr.Count != 4 || rr.EOF || string(buf[:4]) != "0123" {
		t.Errorf("partial read %+v %q", rr, buf[:4])
	}

	// SETATTR: size and mode, seen by GETATTR and READ.
	wcc, err := c.Setattr(ctx, fh, nfs3.SetAttr{Size: new(uint64(5)), Mode: new(uint32(0o600))}, nil)
	must(err)
	if wcc.After == nil {
		t.Error("setattr: no post-op attributes")
	}
	got, err := c.Getattr(ctx, fh)
	must(err)
	if got.Size != 5 || (!srv.NoModes && got.Mode&0o777 != 0o600) {
		t.Errorf("after setattr: size %d mode %o", got.Size, got.Mode)
	}
	rr, err = c.Read(ctx, fh, 0, buf)
	must(err)
	if rr.Count != 5 || !rr.EOF || string(buf[:5]) != "01234" {
		t.Errorf("read after setattr of size 5: %+v %q", rr, buf[:rr.Count])
	}

	// SYMLINK, READLINK.
	sl, err := c.Symlink(ctx, d, "ln", nfs3.SetAttr{}, "u")
	must(err)
	lfh := sl.FH
	if lfh == nil {
		l, err := c.Lookup(ctx, d, "ln")
		must(err)
		lfh = l.FH
	}
	rl, err := c.Readlink(ctx, lfh)
	must(err)
	if rl.Target != "u" {
		t.Errorf("readlink %q", rl.Target)
	}

	// MKNOD: a FIFO, and a block device where the caller may make one (a
	// squashed root may not).
	names := []string{"u", "ln", "fifo"}
	_, err = c.Mknod(ctx, d, "fifo", nfs3.MknodData{Type: nfs3.TypeFIFO, Attr: nfs3.SetAttr{Mode: new(uint32(0o600))}})
	must(err)
	_, err = c.Mknod(ctx, d, "blk", nfs3.MknodData{Type: nfs3.TypeBlk, Spec: nfs3.SpecData{Major: 1, Minor: 3}})
	switch {
	case err == nil:
		names = append(names, "blk")
	case !errors.Is(err, fs.ErrPermission):
		t.Errorf("mknod of a block device: %v", err)
	}

	// LINK.
	if !srv.NoLink {
		lk, err := c.Link(ctx, fh, d, "hard")
		must(err)
		if lk.Attr == nil || lk.Attr.Nlink != 2 {
			t.Errorf("link result %+v", lk)
		}
		names = append(names, "hard")
	}

	// RENAME, to another directory.
	_, err = c.Create(ctx, d, "tmp", nfs3.CreateHow{Mode: nfs3.Guarded})
	must(err)
	rn, err := c.Rename(ctx, d, "tmp", top, "moved")
	must(err)
	if rn.FromDirWcc.After == nil || rn.ToDirWcc.After == nil {
		t.Errorf("rename wcc %+v", rn)
	}
	if _, err := c.Lookup(ctx, top, "moved"); err != nil {
		t.Errorf("renamed file: %v", err)
	}
	if _, err := c.Lookup(ctx, d, "tmp"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("rename source still there: %v", err)
	}

	// READDIR and READDIRPLUS.
	ents, err := c.ReadDirAll(ctx, d)
	must(err)
	var listed []string
	for _, e := range ents {
		listed = append(listed, e.Name)
	}
	for _, want := range names {
		if !slices.Contains(listed, want) {
			t.Errorf("readdir %v lacks %q", listed, want)
		}
	}
	plus, err := c.ReadDirPlusAll(ctx, d)
	must(err)
	for _, e := range plus {
		if e.Name == "u" && (e.Attr == nil || e.FH == nil || e.Attr.Size != 5) {
			t.Errorf("readdirplus entry %+v", e)
		}
	}

	// RMDIR of a non-empty directory, REMOVE, RMDIR.
	_, err = c.Rmdir(ctx, top, "d")
	if err == nil || (!srv.LaxRmdir && !errors.Is(err, nfs3.ErrNotEmpty)) {
		t.Errorf("rmdir of a non-empty directory: %v", err)
	}
	for _, n := range append(names, "x") {
		if _, err := c.Remove(ctx, d, n); err != nil && !(n == "x" && errors.Is(err, fs.ErrNotExist)) {
			t.Errorf("remove %s: %v", n, err)
		}
	}
	_, err = c.Rmdir(ctx, top, "d")
	must(err)
	// (Not GETATTR of its handle: knfsd may still answer for an inode it
	// holds.)
	if _, err := c.Lookup(ctx, top, "d"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("lookup of the removed directory: %v", err)
	}
}
