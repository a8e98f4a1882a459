//go:build integration

package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	gonfsclient "github.com/willscott/go-nfs-client/nfs"
	gonfsrpc "github.com/willscott/go-nfs-client/nfs/rpc"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
	"github.com/nfsrdma/nfsrdma/verbs/ibv"
	"github.com/nfsrdma/nfsrdma/xprt"
)

// The NFSv3 client against knfsd in the guest, over RDMA (port 20049) and
// over TCP (port 2049), the export's root handle from MOUNT over TCP. The
// tests check the server's side of every operation straight on the export's
// tmpfs.

// The transports the table-driven tests run over.
const (
	overRDMA = "rdma"
	overTCP  = "tcp"
)

var nfsTransports = []string{overRDMA, overTCP}

// nfsTCP is knfsd's NFS service over TCP.
var nfsTCP = net.JoinHostPort(serverAddr.String(), "2049")

// nfsConn is an NFSv3 client to knfsd over one transport.
type nfsConn struct {
	kind string
	c    *nfs3.Client
	root nfs3.FileHandle
	rdma *xprt.Transport // nil over TCP
}

type nfsDialOpts struct {
	export string // default exportDir
	uid    uint32 // AUTH_SYS uid and gid; 0 is root (nobody on exportDir)
	client nfs3.ClientOptions
	// wrap, when set, wraps the transport the client uses.
	wrap func(sunrpc.Transport) sunrpc.Transport
}

func authSys(t *testing.T, uid uint32) sunrpc.OpaqueAuth {
	t.Helper()
	cred, err := (&sunrpc.AuthSys{MachineName: "nfs3-it", UID: uid, GID: uid}).Credential()
	if err != nil {
		t.Fatal(err)
	}
	return cred
}

// dialNFS3 mounts the export over TCP and returns an NFS client over kind.
// Over RDMA, cleanup logs the transport's counters and checks that Close
// released every verbs resource.
func dialNFS3(t *testing.T, kind string, o nfsDialOpts) *nfsConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cred := authSys(t, o.uid)
	m, err := nfs3.DialMount(ctx, serverAddr.String(), 0, authSys(t, 0), nil)
	if err != nil {
		t.Fatalf("MOUNT over TCP: %v", err)
	}
	export := exportDir
	if o.export != "" {
		export = o.export
	}
	mr, err := m.Mnt(ctx, export)
	m.Close()
	if err != nil {
		t.Fatalf("MNT %s: %v", export, err)
	}
	n := &nfsConn{kind: kind, root: mr.FH}
	var tr sunrpc.Transport
	switch kind {
	case overRDMA:
		fab, err := ibv.Open()
		if err != nil {
			t.Fatal(err)
		}
		n.rdma, err = xprt.Dial(ctx, xprt.Config{Fabric: fab, Addr: nfsRDMA})
		if err != nil {
			t.Fatal(err)
		}
		tr = n.rdma
		t.Cleanup(func() {
			if live := fab.Live(); !live.Zero() {
				t.Errorf("verbs resources left after Close: %+v", live)
			}
		})
	case overTCP:
		tcp, err := sunrpc.DialTCP(ctx, nfsTCP, nil)
		if err != nil {
			t.Fatal(err)
		}
		tr = tcp
	default:
		t.Fatalf("unknown transport %q", kind)
	}
	if o.wrap != nil {
		tr = o.wrap(tr)
	}
	opts := o.client
	opts.Cred = cred
	n.c, err = nfs3.NewClient(tr, &opts)
	if err != nil {
		tr.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if n.rdma != nil {
			t.Logf("xprt counters: %s", n.rdma.Counters())
		}
		n.c.Close()
	})
	return n
}

// exportSubdir makes directory name (mode 0777) in the export, removed at
// the end of the test, and returns its path on the server.
func exportSubdir(t *testing.T, name string) string {
	t.Helper()
	return exportSubdirOf(t, exportDir, name)
}

// exportSubdirOf is exportSubdir in export.
func exportSubdirOf(t *testing.T, export, name string) string {
	t.Helper()
	p := filepath.Join(export, name)
	os.RemoveAll(p)
	if err := os.Mkdir(p, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o777); err != nil { // past the umask
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(p) })
	return p
}

// lookupDir returns the handle of the export's directory name.
func (n *nfsConn) lookupDir(t *testing.T, ctx context.Context, name string) nfs3.FileHandle {
	t.Helper()
	lr, err := n.c.Lookup(ctx, n.root, name)
	if err != nil {
		t.Fatalf("LOOKUP %s: %v", name, err)
	}
	return lr.FH
}

// handleOf returns r's handle, or LOOKUPs name in dir when the reply had none.
func (n *nfsConn) handleOf(t *testing.T, ctx context.Context, r nfs3.CreateResult, dir nfs3.FileHandle, name string) nfs3.FileHandle {
	t.Helper()
	if r.FH != nil {
		return r.FH
	}
	lr, err := n.c.Lookup(ctx, dir, name)
	if err != nil {
		t.Fatalf("LOOKUP %s: %v", name, err)
	}
	return lr.FH
}

func statT(t *testing.T, p string) *syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return &st
}

func forEachTransport(t *testing.T, test func(t *testing.T, kind string)) {
	for _, kind := range nfsTransports {
		t.Run(kind, func(t *testing.T) { test(t, kind) })
	}
}

// TestNFS3Procedures calls each of the 22 NFSv3 procedures (RFC 1813 §3.3)
// and checks its effect on the server's file system. It runs as root on the
// no_root_squash export: MKNOD of a character device needs root there.
func TestNFS3Procedures(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		n := dialNFS3(t, kind, nfsDialOpts{export: insecureExportDir})
		ctx := ctxT(t, 180*time.Second)
		name := "procs-" + kind
		host := exportSubdirOf(t, insecureExportDir, name)
		c := n.c
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}

		// NULL (0), LOOKUP (3), GETATTR (1).
		must(c.Null(ctx))
		lr, err := c.Lookup(ctx, n.root, name)
		must(err)
		dir := lr.FH
		if lr.Attr == nil || lr.Attr.Type != nfs3.TypeDir || lr.DirAttr == nil {
			t.Errorf("LOOKUP result %+v", lr)
		}
		a, err := c.Getattr(ctx, dir)
		must(err)
		if st := statT(t, host); a.Type != nfs3.TypeDir || a.Mode&0o7777 != 0o777 || a.FileID != st.Ino || a.UID != st.Uid {
			t.Errorf("GETATTR %+v; server: ino %d mode %o uid %d", a, st.Ino, st.Mode, st.Uid)
		}

		// FSSTAT (18), FSINFO (19), PATHCONF (20).
		fss, err := c.Fsstat(ctx, n.root)
		must(err)
		if fss.TotalBytes == 0 || fss.FreeBytes > fss.TotalBytes || fss.TotalFiles == 0 {
			t.Errorf("FSSTAT %+v", fss)
		}
		info, err := c.Fsinfo(ctx, n.root)
		must(err)
		if info.RtMax == 0 || info.WtMax == 0 || info.RtPref == 0 || info.MaxFileSize == 0 ||
			info.Properties&(nfs3.FSFLink|nfs3.FSFSymlink) != nfs3.FSFLink|nfs3.FSFSymlink {
			t.Errorf("FSINFO %+v", info)
		}
		t.Logf("FSINFO: rtmax %d rtpref %d wtmax %d wtpref %d dtpref %d", info.RtMax, info.RtPref, info.WtMax, info.WtPref, info.DtPref)
		pc, err := c.Pathconf(ctx, dir)
		must(err)
		// (knfsd reports no_trunc false whatever the file system.)
		if pc.NameMax != 255 || pc.LinkMax == 0 || !pc.ChownRestricted || !pc.CasePreserving || pc.CaseInsensitive {
			t.Errorf("PATHCONF %+v", pc)
		}

		// MKDIR (9).
		mk, err := c.Mkdir(ctx, dir, "sub", nfs3.SetAttr{Mode: new(uint32(0o750))})
		must(err)
		sub := n.handleOf(t, ctx, mk, dir, "sub")
		if fi, err := os.Stat(filepath.Join(host, "sub")); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o750 {
			t.Errorf("MKDIR on the server: %v %v", fi, err)
		}

		// CREATE (8) in each mode.
		cr, err := c.Create(ctx, dir, "u", nfs3.CreateHow{Mode: nfs3.Unchecked, Attr: nfs3.SetAttr{Mode: new(uint32(0o640))}})
		must(err)
		fh := n.handleOf(t, ctx, cr, dir, "u")
		if fi, err := os.Stat(filepath.Join(host, "u")); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o640 {
			t.Errorf("CREATE on the server: %v %v", fi, err)
		}
		if _, err := c.Create(ctx, dir, "u", nfs3.CreateHow{Mode: nfs3.Guarded}); !errors.Is(err, nfs3.ErrExist) {
			t.Errorf("guarded CREATE of an existing name: %v", err)
		}
		verf := nfs3.CreateVerf{1, 2, 3, 4, 5, 6, 7, 8}
		ex, err := c.Create(ctx, dir, "x", nfs3.CreateHow{Mode: nfs3.Exclusive, Verf: verf})
		must(err)
		// The same verifier again is a retransmission: it succeeds, on the
		// same file; another verifier is a different create.
		ex2, err := c.Create(ctx, dir, "x", nfs3.CreateHow{Mode: nfs3.Exclusive, Verf: verf})
		must(err)
		if !bytes.Equal(n.handleOf(t, ctx, ex, dir, "x"), n.handleOf(t, ctx, ex2, dir, "x")) {
			t.Error("EXCLUSIVE CREATE retransmission returned another file")
		}
		if _, err := c.Create(ctx, dir, "x", nfs3.CreateHow{Mode: nfs3.Exclusive, Verf: nfs3.CreateVerf{9}}); !errors.Is(err, fs.ErrExist) {
			t.Errorf("EXCLUSIVE CREATE with another verifier: %v", err)
		}

		// ACCESS (4).
		ar, err := c.Access(ctx, fh, nfs3.AccessRead|nfs3.AccessModify|nfs3.AccessExtend|nfs3.AccessExecute)
		must(err)
		if want := uint32(nfs3.AccessRead | nfs3.AccessModify | nfs3.AccessExtend); ar.Access != want {
			t.Errorf("ACCESS granted %#x of a 0640 file to root, want %#x", ar.Access, want)
		}

		// WRITE (7) at each stability, READ (6), COMMIT (21).
		var unstable nfs3.WriteVerf
		for i, how := range []nfs3.StableHow{nfs3.Unstable, nfs3.DataSync, nfs3.FileSync} {
			wr, err := c.Write(ctx, fh, uint64(i*10), []byte(fmt.Sprintf("%-10s", how.String()[:4])), how)
			must(err)
			if wr.Count != 10 || wr.Committed < how || wr.Wcc.After == nil {
				t.Errorf("WRITE %v: %+v", how, wr)
			}
			if how == nfs3.Unstable {
				unstable = wr.Verf
			}
		}
		cm, err := c.Commit(ctx, fh, 0, 0)
		must(err)
		if cm.Verf != unstable {
			t.Errorf("COMMIT verifier %x, WRITE's %x (no restart happened)", cm.Verf, unstable)
		}
		want := "UNST      DATA      FILE      "
		if got, _ := os.ReadFile(filepath.Join(host, "u")); string(got) != want {
			t.Errorf("the server's file: %q", got)
		}
		buf := make([]byte, 100)
		rr, err := c.Read(ctx, fh, 10, buf)
		must(err)
		if rr.Count != 20 || !rr.EOF || string(buf[:rr.Count]) != want[10:] || rr.Attr == nil {
			t.Errorf("READ %+v %q", rr, buf[:rr.Count])
		}

		// SETATTR (2): size, mode, mtime; then guarded by ctime.
		mtime := nfs3.Time{Seconds: 1_000_000_000, Nseconds: 5}
		wcc, err := c.Setattr(ctx, fh, nfs3.SetAttr{Size: new(uint64(5)), Mode: new(uint32(0o600)),
			Mtime: nfs3.SetTime{How: nfs3.SetToClientTime, Time: mtime}}, nil)
		must(err)
		if wcc.After == nil || wcc.After.Size != 5 || wcc.After.Mode&0o7777 != 0o600 || wcc.After.Mtime != mtime {
			t.Errorf("SETATTR post-op attributes %+v", wcc.After)
		}
		if fi, err := os.Stat(filepath.Join(host, "u")); err != nil || fi.Size() != 5 || fi.Mode().Perm() != 0o600 || fi.ModTime().Unix() != 1_000_000_000 {
			t.Errorf("SETATTR on the server: %v %v", fi, err)
		}
		cur, err := c.Getattr(ctx, fh)
		must(err)
		if _, err := c.Setattr(ctx, fh, nfs3.SetAttr{Mode: new(uint32(0o644))}, &cur.Ctime); err != nil {
			t.Errorf("SETATTR guarded by the current ctime: %v", err)
		}
		if _, err := c.Setattr(ctx, fh, nfs3.SetAttr{Mode: new(uint32(0o600))}, &nfs3.Time{Seconds: 1}); !errors.Is(err, nfs3.ErrNotSync) {
			t.Errorf("SETATTR guarded by a stale ctime: %v", err)
		}

		// SYMLINK (10), READLINK (5).
		sl, err := c.Symlink(ctx, dir, "ln", nfs3.SetAttr{}, "sub/../u")
		must(err)
		rl, err := c.Readlink(ctx, n.handleOf(t, ctx, sl, dir, "ln"))
		must(err)
		if rl.Target != "sub/../u" {
			t.Errorf("READLINK %q", rl.Target)
		}
		if got, err := os.Readlink(filepath.Join(host, "ln")); err != nil || got != "sub/../u" {
			t.Errorf("the server's link: %q %v", got, err)
		}

		// MKNOD (11): a FIFO, a character device, a socket.
		fifo, err := c.Mknod(ctx, dir, "fifo", nfs3.MknodData{Type: nfs3.TypeFIFO, Attr: nfs3.SetAttr{Mode: new(uint32(0o600))}})
		must(err)
		if fifo.Attr == nil || fifo.Attr.Type != nfs3.TypeFIFO {
			t.Errorf("MKNOD FIFO attributes %+v", fifo.Attr)
		}
		if fi, err := os.Lstat(filepath.Join(host, "fifo")); err != nil || fi.Mode()&fs.ModeNamedPipe == 0 || fi.Mode().Perm() != 0o600 {
			t.Errorf("MKNOD FIFO on the server: %v %v", fi, err)
		}
		_, err = c.Mknod(ctx, dir, "null", nfs3.MknodData{Type: nfs3.TypeChr, Attr: nfs3.SetAttr{Mode: new(uint32(0o666))},
			Spec: nfs3.SpecData{Major: 1, Minor: 3}})
		must(err)
		if st := statT(t, filepath.Join(host, "null")); st.Mode&syscall.S_IFMT != syscall.S_IFCHR || st.Rdev != 1<<8|3 {
			t.Errorf("MKNOD CHR on the server: mode %o rdev %#x", st.Mode, st.Rdev)
		}
		_, err = c.Mknod(ctx, dir, "sock", nfs3.MknodData{Type: nfs3.TypeSock})
		must(err)
		if fi, err := os.Lstat(filepath.Join(host, "sock")); err != nil || fi.Mode()&fs.ModeSocket == 0 {
			t.Errorf("MKNOD SOCK on the server: %v %v", fi, err)
		}

		// LINK (15).
		lk, err := c.Link(ctx, fh, dir, "hard")
		must(err)
		if lk.Attr == nil || lk.Attr.Nlink != 2 || lk.DirWcc.After == nil {
			t.Errorf("LINK result %+v", lk)
		}
		if st := statT(t, filepath.Join(host, "hard")); st.Nlink != 2 || st.Ino != statT(t, filepath.Join(host, "u")).Ino {
			t.Errorf("LINK on the server: nlink %d", st.Nlink)
		}

		// READDIR (16), READDIRPLUS (17).
		wantNames := []string{".", "..", "fifo", "hard", "ln", "null", "sock", "sub", "u", "x"}
		var names []string
		for e, err := range c.DirEntries(ctx, dir) {
			must(err)
			names = append(names, e.Name)
		}
		if slices.Sort(names); !slices.Equal(names, wantNames) {
			t.Errorf("READDIR %v", names)
		}
		names = names[:0]
		for e, err := range c.DirEntriesPlus(ctx, dir) {
			must(err)
			names = append(names, e.Name)
			if e.Name == "u" && (e.Attr == nil || e.Attr.Size != 5 || !bytes.Equal(e.FH, fh)) {
				t.Errorf("READDIRPLUS entry %+v", e)
			}
		}
		if slices.Sort(names); !slices.Equal(names, wantNames) {
			t.Errorf("READDIRPLUS %v", names)
		}

		// RENAME (14).
		rn, err := c.Rename(ctx, dir, "x", sub, "moved")
		must(err)
		if rn.FromDirWcc.After == nil || rn.ToDirWcc.After == nil {
			t.Errorf("RENAME result %+v", rn)
		}
		if _, err := os.Stat(filepath.Join(host, "sub", "moved")); err != nil {
			t.Errorf("RENAME on the server: %v", err)
		}

		// REMOVE (12), RMDIR (13).
		for _, name := range []string{"u", "hard", "ln", "fifo", "null", "sock"} {
			if _, err := c.Remove(ctx, dir, name); err != nil {
				t.Errorf("REMOVE %s: %v", name, err)
			}
		}
		_, err = c.Remove(ctx, sub, "moved")
		must(err)
		rm, err := c.Rmdir(ctx, dir, "sub")
		must(err)
		if rm.After == nil {
			t.Error("RMDIR without post-op attributes")
		}
		if ents, err := os.ReadDir(host); err != nil || len(ents) != 0 {
			t.Errorf("the server's directory after REMOVE and RMDIR: %v %v", ents, err)
		}
	})
}

// TestNFS3LargeFile writes a 64 MiB file with pipelined UNSTABLE WRITEs and a
// COMMIT (Client.WriteAt) and reads it back with pipelined READs
// (Client.ReadAt), comparing SHA-256 checksums, the server's copy too.
func TestNFS3LargeFile(t *testing.T) {
	const size = 64 << 20
	data := make([]byte, size)
	rand.Read(data)
	want := sha256.Sum256(data)
	forEachTransport(t, func(t *testing.T, kind string) {
		n := dialNFS3(t, kind, nfsDialOpts{})
		ctx := ctxT(t, 10*time.Minute)
		name := "big64-" + kind
		t.Cleanup(func() { os.Remove(filepath.Join(exportDir, name)) })
		cr, err := n.c.Create(ctx, n.root, name, nfs3.CreateHow{Mode: nfs3.Guarded, Attr: nfs3.SetAttr{Mode: new(uint32(0o644))}})
		if err != nil {
			t.Fatal(err)
		}
		fh := n.handleOf(t, ctx, cr, n.root, name)
		rsize, wsize, err := n.c.IOSizes(ctx, fh)
		if err != nil {
			t.Fatal(err)
		}

		start := time.Now()
		if k, err := n.c.WriteAt(ctx, fh, data, 0); k != size || err != nil {
			t.Fatalf("WriteAt: %d, %v", k, err)
		}
		wdur := time.Since(start)
		f, err := os.Open(filepath.Join(exportDir, name))
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil || !bytes.Equal(h.Sum(nil), want[:]) {
			t.Fatalf("the server's copy differs (%v)", err)
		}

		got := make([]byte, size)
		start = time.Now()
		if k, err := n.c.ReadAt(ctx, fh, got, 0); k != size || err != nil {
			t.Fatalf("ReadAt: %d, %v", k, err)
		}
		rdur := time.Since(start)
		if sha256.Sum256(got) != want {
			t.Fatal("checksum mismatch reading back")
		}
		// One more byte than the file: io.EOF, the rest intact.
		tail := make([]byte, 4097)
		if k, err := n.c.ReadAt(ctx, fh, tail, size-4096); k != 4096 || err != io.EOF || !bytes.Equal(tail[:k], data[size-4096:]) {
			t.Errorf("ReadAt across the end: %d, %v", k, err)
		}
		mibps := func(d time.Duration) float64 { return float64(size) / (1 << 20) / d.Seconds() }
		t.Logf("%s: rsize %d wsize %d; 64 MiB written in %v (%.1f MiB/s), read in %v (%.1f MiB/s)",
			kind, rsize, wsize, wdur.Round(time.Millisecond), mibps(wdur), rdur.Round(time.Millisecond), mibps(rdur))
		if n.rdma != nil {
			ctr := n.rdma.Counters()
			if ctr.ReadChunks < uint64(size/int(wsize)) || ctr.WriteChunks < uint64(size/int(rsize)) {
				t.Errorf("WRITE data not in Read chunks or READ data not through Write chunks: %s", ctr)
			}
			if ctr.MaxOutstanding < 2 {
				t.Errorf("I/O was not pipelined: %s", ctr)
			}
		}
	})
}

// TestNFS3DirectoryPaging lists a directory of 10,000 entries completely
// through cookie paging, with READDIR and with READDIRPLUS.
func TestNFS3DirectoryPaging(t *testing.T) {
	const entries = 10000
	host := exportSubdir(t, "dir10000")
	want := make([]string, 0, entries)
	for i := range entries {
		name := fmt.Sprintf("entry-%05d", i)
		want = append(want, name)
		if err := os.WriteFile(filepath.Join(host, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	forEachTransport(t, func(t *testing.T, kind string) {
		n := dialNFS3(t, kind, nfsDialOpts{})
		ctx := ctxT(t, 5*time.Minute)
		dir := n.lookupDir(t, ctx, "dir10000")

		// READDIR page by page: every cookie new, every name once.
		var names []string
		cookies := map[nfs3.Cookie]bool{}
		pages := 0
		var cookie nfs3.Cookie
		var verf nfs3.CookieVerf
		for {
			r, err := n.c.Readdir(ctx, dir, cookie, verf, 0)
			if err != nil {
				t.Fatalf("READDIR page %d (cookie %d): %v", pages, cookie, err)
			}
			pages++
			for _, e := range r.Entries {
				if cookies[e.Cookie] {
					t.Fatalf("cookie %d repeated", e.Cookie)
				}
				cookies[e.Cookie] = true
				if e.Name != "." && e.Name != ".." {
					names = append(names, e.Name)
				}
			}
			if r.EOF {
				break
			}
			if len(r.Entries) == 0 {
				t.Fatal("empty READDIR page without eof")
			}
			cookie, verf = r.Entries[len(r.Entries)-1].Cookie, r.Verf
		}
		slices.Sort(names)
		if !slices.Equal(names, want) {
			t.Errorf("READDIR listed %d names, want %d", len(names), entries)
		}

		plus, err := n.c.ReadDirPlusAll(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		names = names[:0]
		for _, e := range plus {
			if e.Name == "." || e.Name == ".." {
				continue
			}
			names = append(names, e.Name)
			if e.Attr == nil || e.FH == nil || e.Attr.Type != nfs3.TypeReg || e.Attr.Size != 0 {
				t.Fatalf("READDIRPLUS entry %s: %+v", e.Name, e)
			}
		}
		slices.Sort(names)
		if !slices.Equal(names, want) {
			t.Errorf("READDIRPLUS listed %d names, want %d", len(names), entries)
		}
		t.Logf("%s: READDIR took %d pages", kind, pages)
		if pages < 5 {
			t.Errorf("only %d READDIR pages for %d entries", pages, entries)
		}
		if n.rdma != nil {
			if ctr := n.rdma.Counters(); ctr.ReplyChunks < uint64(pages) {
				t.Errorf("directory pages not in Reply chunks: %s", ctr)
			}
		}
	})
}

// TestNFS3LinkRenameSymlink checks the semantics of LINK, RENAME, SYMLINK and
// READLINK through the path API.
func TestNFS3LinkRenameSymlink(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		n := dialNFS3(t, kind, nfsDialOpts{})
		ctx := ctxT(t, 120*time.Second)
		name := "sem-" + kind
		host := exportSubdir(t, name)
		tgt := nfs3.NewTarget(n.c, n.root, 0)
		p := func(s string) string { return "/" + name + "/" + s }
		write := func(path, content string) {
			t.Helper()
			f, err := tgt.OpenFileContext(ctx, path, os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.WriteString(f, content); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		}
		read := func(path string) string {
			t.Helper()
			f, err := tgt.OpenContext(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			b, err := io.ReadAll(f)
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}

		// LINK: two names, one file, link count 2.
		write(p("a"), "content of a")
		if err := tgt.Link(ctx, p("a"), p("a2")); err != nil {
			t.Fatal(err)
		}
		a1, err := tgt.Getattr(ctx, p("a"))
		if err != nil {
			t.Fatal(err)
		}
		a2, err := tgt.Getattr(ctx, p("a2"))
		if err != nil {
			t.Fatal(err)
		}
		if a1.Nlink != 2 || a2.Nlink != 2 || a1.FileID != a2.FileID {
			t.Errorf("after LINK: nlink %d/%d, fileid %d/%d", a1.Nlink, a2.Nlink, a1.FileID, a2.FileID)
		}
		if st := statT(t, filepath.Join(host, "a2")); st.Nlink != 2 {
			t.Errorf("server nlink %d", st.Nlink)
		}
		write(p("a2"), "CONTENT")
		if got := read(p("a")); got != "CONTENT of a" {
			t.Errorf("a write through one link, read through the other: %q", got)
		}
		if err := tgt.Link(ctx, p("a"), p("a2")); !errors.Is(err, fs.ErrExist) {
			t.Errorf("LINK onto an existing name: %v", err)
		}
		if err := tgt.Remove(ctx, p("a")); err != nil {
			t.Fatal(err)
		}
		if a, err := tgt.Getattr(ctx, p("a2")); err != nil || a.Nlink != 1 {
			t.Errorf("after REMOVE of one link: nlink %d, %v", a.Nlink, err)
		}

		// RENAME over an existing file replaces it.
		write(p("x"), "from x")
		write(p("y"), "from y, longer")
		_, yfh, err := tgt.Lookup(ctx, p("y"))
		if err != nil {
			t.Fatal(err)
		}
		if err := tgt.Rename(ctx, p("x"), p("y")); err != nil {
			t.Fatal(err)
		}
		if _, _, err := tgt.Lookup(ctx, p("x")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the source after RENAME: %v", err)
		}
		if got := read(p("y")); got != "from x" {
			t.Errorf("the target after RENAME over it: %q", got)
		}
		if got, _ := os.ReadFile(filepath.Join(host, "y")); string(got) != "from x" {
			t.Errorf("the server's target after RENAME: %q", got)
		}
		// The replaced file is gone: its handle is stale, or, while knfsd
		// still holds it open in its file cache, it has no links left.
		if a, err := n.c.Getattr(ctx, yfh); !errors.Is(err, syscall.ESTALE) && (err != nil || a.Nlink != 0) {
			t.Errorf("GETATTR of the replaced file's handle: nlink %d, %v", a.Nlink, err)
		}
		// RENAME of a directory onto a non-empty one, and of a file onto a
		// directory, fail.
		for _, d := range []string{"d1", "d2", "d2/inner"} {
			if _, err := tgt.Mkdir(ctx, p(d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := tgt.Rename(ctx, p("d1"), p("d2")); !errors.Is(err, syscall.ENOTEMPTY) {
			t.Errorf("RENAME onto a non-empty directory: %v", err)
		}
		if err := tgt.Rename(ctx, p("y"), p("d1")); !errors.Is(err, syscall.EISDIR) {
			t.Errorf("RENAME of a file onto a directory: %v", err)
		}
		// RENAME onto an empty directory replaces it.
		if err := tgt.Rename(ctx, p("d1"), p("d2/inner")); err != nil {
			t.Errorf("RENAME onto an empty directory: %v", err)
		}

		// SYMLINK and READLINK: the target exactly, whatever it holds; a
		// long one travels over RDMA in a Read chunk.
		long := strings.Repeat("0123456789abcdef/", 235) + "end" // 3,998 bytes
		for i, target := range []string{
			"plain",
			"../up/and down/with spaces",
			"/absolute/path/",
			"ünïcödé → ☃",
			"dots/./../..//double//slash",
			long,
		} {
			link := fmt.Sprintf("l%d", i)
			var before xprt.Counters
			if n.rdma != nil {
				before = n.rdma.Counters()
			}
			if err := tgt.Symlink(ctx, target, p(link)); err != nil {
				t.Fatalf("SYMLINK of %d bytes: %v", len(target), err)
			}
			if n.rdma != nil && target == long && n.rdma.Counters().ReadChunks == before.ReadChunks {
				t.Errorf("the SYMLINK of %d bytes did not carry its path in a Read chunk", len(target))
			}
			if got, err := os.Readlink(filepath.Join(host, link)); err != nil || got != target {
				t.Errorf("the server's link %s: %q %v", link, got, err)
			}
			if n.rdma != nil {
				before = n.rdma.Counters()
			}
			got, err := tgt.Readlink(ctx, p(link))
			if err != nil || got != target {
				t.Errorf("READLINK %s: %q %v, want %q", link, got, err, target)
			}
			if n.rdma != nil && n.rdma.Counters().WriteChunks == before.WriteChunks {
				t.Errorf("READLINK %s offered no Write chunk", link)
			}
			fi, _, err := tgt.Lookup(ctx, p(link))
			if err != nil || fi.Attr.Type != nfs3.TypeLnk || fi.Size() != int64(len(target)) {
				t.Errorf("link %s: %+v %v", link, fi, err)
			}
		}
		if err := tgt.Symlink(ctx, "again", p("l0")); !errors.Is(err, fs.ErrExist) {
			t.Errorf("SYMLINK onto an existing name: %v", err)
		}
	})
}

// TestNFS3ErrorMapping checks knfsd's errors as Status values matching io/fs
// and syscall errors.
func TestNFS3ErrorMapping(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		n := dialNFS3(t, kind, nfsDialOpts{})
		user := dialNFS3(t, kind, nfsDialOpts{uid: 1000})
		ctx := ctxT(t, 120*time.Second)
		name := "errs-" + kind
		host := exportSubdir(t, name)
		// Owned by root: a directory only root may enter, a file only root
		// may read, a non-empty directory.
		if err := os.Mkdir(filepath.Join(host, "private"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(host, "private", "f"), []byte("secret"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(host, "secret"), []byte("secret"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(host, "full", "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		dir := n.lookupDir(t, ctx, name)
		lookup := func(dir nfs3.FileHandle, name string) nfs3.FileHandle {
			t.Helper()
			lr, err := n.c.Lookup(ctx, dir, name)
			if err != nil {
				t.Fatal(err)
			}
			return lr.FH
		}
		private, secret := lookup(dir, "private"), lookup(dir, "secret")

		type check struct {
			name    string
			err     error
			targets []error
		}
		var checks []check
		add := func(name string, err error, targets ...error) {
			checks = append(checks, check{name, err, targets})
		}
		_, err := n.c.Lookup(ctx, dir, "missing")
		add("LOOKUP of a missing name", err, fs.ErrNotExist, syscall.ENOENT, nfs3.ErrNoEnt)
		_, err = n.c.Remove(ctx, dir, "missing")
		add("REMOVE of a missing name", err, fs.ErrNotExist, syscall.ENOENT)
		_, err = n.c.Create(ctx, dir, "secret", nfs3.CreateHow{Mode: nfs3.Guarded})
		add("guarded CREATE of an existing file", err, fs.ErrExist, syscall.EEXIST, nfs3.ErrExist)
		_, err = n.c.Mkdir(ctx, dir, "full", nfs3.SetAttr{})
		add("MKDIR of an existing directory", err, fs.ErrExist, syscall.EEXIST)
		_, err = n.c.Rmdir(ctx, dir, "full")
		add("RMDIR of a non-empty directory", err, syscall.ENOTEMPTY, nfs3.ErrNotEmpty)
		_, err = n.c.Rmdir(ctx, dir, "secret")
		add("RMDIR of a file", err, syscall.ENOTDIR)
		_, err = n.c.Lookup(ctx, secret, "x")
		add("LOOKUP in a file", err, syscall.ENOTDIR)
		_, err = n.c.Read(ctx, dir, 0, make([]byte, 10))
		add("READ of a directory", err, syscall.EISDIR)
		_, err = n.c.Symlink(ctx, dir, "too-long", nfs3.SetAttr{}, strings.Repeat("t", 4096))
		add("SYMLINK of a 4096-byte target", err, syscall.ENAMETOOLONG)
		_, err = user.c.Lookup(ctx, private, "f")
		add("LOOKUP in a 0700 root directory as uid 1000", err, fs.ErrPermission, syscall.EACCES, nfs3.ErrAcces)
		_, err = user.c.Create(ctx, private, "new", nfs3.CreateHow{Mode: nfs3.Guarded})
		add("CREATE in a 0700 root directory as uid 1000", err, fs.ErrPermission, syscall.EACCES)
		_, err = user.c.Read(ctx, secret, 0, make([]byte, 10))
		add("READ of a 0600 root file as uid 1000", err, fs.ErrPermission, syscall.EACCES)
		_, err = user.c.Setattr(ctx, secret, nfs3.SetAttr{Mode: new(uint32(0o666))}, nil)
		add("SETATTR of a root file as uid 1000", err, fs.ErrPermission, syscall.EPERM)
		// A file removed on the server: its handle is stale.
		if err := os.WriteFile(filepath.Join(host, "gone"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		gone := lookup(dir, "gone")
		os.Remove(filepath.Join(host, "gone"))
		_, err = n.c.Getattr(ctx, gone)
		add("GETATTR of a removed file", err, syscall.ESTALE, nfs3.ErrStale)

		for _, ck := range checks {
			if ck.err == nil {
				t.Errorf("%s: no error", ck.name)
				continue
			}
			if _, ok := errors.AsType[nfs3.Status](ck.err); !ok {
				t.Errorf("%s: %v is not a Status", ck.name, ck.err)
			}
			for _, target := range ck.targets {
				if !errors.Is(ck.err, target) {
					t.Errorf("%s: %v is not %v", ck.name, ck.err, target)
				}
			}
		}
		// ACCESS tells uid 1000 the same without failing.
		ar, err := user.c.Access(ctx, private, nfs3.AccessRead|nfs3.AccessLookup|nfs3.AccessModify)
		if err != nil || ar.Access != 0 {
			t.Errorf("ACCESS of a 0700 root directory as uid 1000: %#x, %v", ar.Access, err)
		}
		if _, err := os.Stat(filepath.Join(host, "private", "new")); !os.IsNotExist(err) {
			t.Errorf("the refused CREATE created a file: %v", err)
		}
	})
}

// commitHook is a transport that runs before, once, ahead of the first NFS
// COMMIT it carries: the place to restart the server between the UNSTABLE
// WRITEs and their COMMIT.
type commitHook struct {
	sunrpc.Transport
	once   sync.Once
	before func()
}

func (h *commitHook) RoundTrip(ctx context.Context, req *sunrpc.Request) (*sunrpc.Reply, error) {
	if ch, err := sunrpc.DecodeCall(sunrpc.NewDecoder(req.Head)); err == nil && ch.Prog == nfs3.Program && ch.Proc == nfs3.ProcCommit {
		h.once.Do(h.before)
	}
	return h.Transport.RoundTrip(ctx, req)
}

// logRecorder is a slog.Handler that keeps the messages.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.msgs = append(r.msgs, rec.Message)
	r.mu.Unlock()
	return nil
}

func (r *logRecorder) contains(s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.msgs, func(m string) bool { return strings.Contains(m, s) })
}

// restartNFSD restarts knfsd (testbed-nfsd-restart): its write verifier
// changes and every connection drops.
func restartNFSD(t *testing.T) {
	t.Helper()
	start := time.Now()
	run(t, "testbed-nfsd-restart")
	t.Logf("knfsd restarted in %v", time.Since(start).Round(time.Millisecond))
}

// TestNFS3RestartBetweenWriteAndCommit restarts knfsd after UNSTABLE WRITEs
// and before their COMMIT: the verifier changes and the client sends the data
// again. The restart on tmpfs loses nothing, so the test also truncates the
// file on the server at that moment, as if the server had lost the writes:
// the file is right at the end only if the data was resent.
func TestNFS3RestartBetweenWriteAndCommit(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		t.Run("verifier", func(t *testing.T) {
			n := dialNFS3(t, kind, nfsDialOpts{})
			ctx := ctxT(t, 5*time.Minute)
			name := "restart-verf-" + kind
			t.Cleanup(func() { os.Remove(filepath.Join(exportDir, name)) })
			cr, err := n.c.Create(ctx, n.root, name, nfs3.CreateHow{Mode: nfs3.Unchecked})
			if err != nil {
				t.Fatal(err)
			}
			fh := n.handleOf(t, ctx, cr, n.root, name)
			wr, err := n.c.Write(ctx, fh, 0, make([]byte, 64<<10), nfs3.Unstable)
			if err != nil {
				t.Fatal(err)
			}
			if wr.Committed != nfs3.Unstable {
				t.Skipf("knfsd answered the UNSTABLE WRITE %v", wr.Committed)
			}
			restartNFSD(t)
			cm, err := n.c.Commit(ctx, fh, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if cm.Verf == wr.Verf {
				t.Errorf("the write verifier %x did not change across the restart", cm.Verf)
			}
		})

		data := make([]byte, 8<<20+12345)
		rand.Read(data)
		for _, api := range []string{"WriteAt", "File"} {
			t.Run(api, func(t *testing.T) {
				name := fmt.Sprintf("restart-%s-%s", api, kind)
				serverPath := filepath.Join(exportDir, name)
				t.Cleanup(func() { os.Remove(serverPath) })
				logs := &logRecorder{}
				var restarted atomic.Bool
				n := dialNFS3(t, kind, nfsDialOpts{
					client: nfs3.ClientOptions{Logger: slog.New(logs)},
					wrap: func(tr sunrpc.Transport) sunrpc.Transport {
						return &commitHook{Transport: tr, before: func() {
							restartNFSD(t)
							// As if the restart had lost the unstable data.
							if err := os.Truncate(serverPath, 0); err != nil {
								t.Error(err)
							}
							restarted.Store(true)
						}}
					},
				})
				ctx := ctxT(t, 5*time.Minute)
				cr, err := n.c.Create(ctx, n.root, name, nfs3.CreateHow{Mode: nfs3.Guarded, Attr: nfs3.SetAttr{Mode: new(uint32(0o644))}})
				if err != nil {
					t.Fatal(err)
				}
				fh := n.handleOf(t, ctx, cr, n.root, name)
				switch api {
				case "WriteAt": // pipelined UNSTABLE WRITEs, COMMIT, resend
					if k, err := n.c.WriteAt(ctx, fh, data, 0); k != len(data) || err != nil {
						t.Fatalf("WriteAt: %d, %v", k, err)
					}
				case "File": // small writes kept until Close commits them
					tgt := nfs3.NewTarget(n.c, n.root, 64<<20)
					f, err := tgt.OpenFileContext(ctx, name, os.O_RDWR, 0)
					if err != nil {
						t.Fatal(err)
					}
					for off := 0; off < len(data); off += 60_000 {
						if _, err := f.Write(data[off:min(off+60_000, len(data))]); err != nil {
							t.Fatal(err)
						}
					}
					if err := f.Close(); err != nil {
						t.Fatalf("Close: %v", err)
					}
				}
				if !restarted.Load() {
					t.Fatal("no COMMIT was sent")
				}
				if !logs.contains("write verifier changed") {
					t.Error("the client did not log the verifier change")
				}
				got, err := os.ReadFile(serverPath)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, data) {
					t.Fatalf("the server's file differs: %d bytes, sha256 %x, want %x", len(got), sha256.Sum256(got), sha256.Sum256(data))
				}
				back := make([]byte, len(data))
				if k, err := n.c.ReadAt(ctx, fh, back, 0); k != len(data) || err != nil || !bytes.Equal(back, data) {
					t.Fatalf("reading back: %d, %v", k, err)
				}
				if n.rdma != nil {
					if ctr := n.rdma.Counters(); ctr.Reconnects == 0 {
						t.Errorf("no reconnect after the restart: %s", ctr)
					}
				}
			})
		}
	})
}

// TestNFS3Interop: on the same export, what nfs3 writes over RDMA
// go-nfs-client reads back over TCP, and the other way round.
func TestNFS3Interop(t *testing.T) {
	ctx := ctxT(t, 5*time.Minute)
	host := exportSubdir(t, "interop")

	// nfs3's path API over RDMA: MOUNT over TCP, NFS over RDMA.
	fab, err := ibv.Open()
	if err != nil {
		t.Fatal(err)
	}
	tr, err := xprt.Dial(ctx, xprt.Config{Fabric: fab, Addr: nfsRDMA})
	if err != nil {
		t.Fatal(err)
	}
	tgt, err := nfs3.Mount(ctx, serverAddr.String(), exportDir, &nfs3.MountOptions{Transport: tr})
	if err != nil {
		tr.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		t.Logf("xprt counters: %s", tr.Counters())
		if err := tgt.Unmount(context.Background()); err != nil {
			t.Errorf("Unmount: %v", err)
		}
		if live := fab.Live(); !live.Zero() {
			t.Errorf("verbs resources left after Close: %+v", live)
		}
	})

	// go-nfs-client over TCP.
	mnt, err := gonfsclient.DialMount(serverAddr.String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer mnt.Close()
	v, err := mnt.Mount(exportDir, gonfsrpc.NewAuthUnix("interop", 0, 0).Auth())
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()

	// RDMA -> TCP.
	data := make([]byte, 6<<20+4321)
	rand.Read(data)
	f, err := tgt.OpenFileContext(ctx, "/interop/from-rdma.bin", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if k, err := f.WriteAt(data, 0); k != len(data) || err != nil {
		t.Fatalf("WriteAt: %d, %v", k, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	g, err := v.Open("interop/from-rdma.bin")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(g)
	g.Close()
	if err != nil || sha256.Sum256(got) != sha256.Sum256(data) {
		t.Fatalf("go-nfs-client read %d bytes (%v) of what nfs3 wrote over RDMA; checksums differ", len(got), err)
	}

	// TCP -> RDMA.
	data2 := make([]byte, 3<<20+77)
	rand.Read(data2)
	w, err := v.OpenFile("interop/from-tcp.bin", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if k, err := w.Write(data2); k != len(data2) || err != nil {
		t.Fatalf("go-nfs-client Write: %d, %v", k, err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := tgt.OpenContext(ctx, "/interop/from-tcp.bin")
	if err != nil {
		t.Fatal(err)
	}
	got = make([]byte, len(data2)+1)
	k, err := r.ReadAt(got, 0)
	r.Close()
	if k != len(data2) || err != io.EOF || !bytes.Equal(got[:k], data2) {
		t.Fatalf("nfs3 over RDMA read %d bytes (%v) of what go-nfs-client wrote over TCP", k, err)
	}

	// Metadata both ways: a directory and a symbolic link made by one, seen
	// by the other; a removal by one seen by the other.
	if _, err := v.Mkdir("interop/dir-by-tcp", 0o755); err != nil {
		t.Fatal(err)
	}
	if fi, _, err := tgt.Lookup(ctx, "/interop/dir-by-tcp"); err != nil || !fi.IsDir() {
		t.Errorf("nfs3 LOOKUP of go-nfs-client's directory: %v %v", fi, err)
	}
	if err := tgt.Symlink(ctx, "from-rdma.bin", "/interop/link-by-rdma"); err != nil {
		t.Fatal(err)
	}
	ents, err := v.ReadDirPlus("interop")
	if err != nil {
		t.Fatal(err)
	}
	sizes := map[string]int64{}
	for _, e := range ents {
		sizes[e.Name()] = e.Size()
	}
	if sizes["from-rdma.bin"] != int64(len(data)) || sizes["from-tcp.bin"] != int64(len(data2)) ||
		sizes["link-by-rdma"] != int64(len("from-rdma.bin")) {
		t.Errorf("go-nfs-client lists %v", sizes)
	}
	if err := v.Remove("interop/from-rdma.bin"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tgt.Lookup(ctx, "/interop/from-rdma.bin"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("nfs3 LOOKUP of the file go-nfs-client removed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(host, "from-tcp.bin")); err != nil {
		t.Error(err)
	}
}

// TestNFS3Mount exercises MOUNT (RFC 1813 Appendix I) against rpc.mountd:
// the procedures, and the refusals as typed MountStatus errors.
func TestNFS3Mount(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	mc, err := nfs3.DialMount(ctx, serverAddr.String(), 0, authSys(t, 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	if err := mc.Null(ctx); err != nil {
		t.Fatal(err)
	}
	exports, err := mc.Export(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(exports, func(e nfs3.Export) bool { return e.Dir == exportDir }) {
		t.Errorf("EXPORT lists %+v", exports)
	}
	res, err := mc.Mnt(ctx, exportDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.FH) == 0 || len(res.FH) > nfs3.FHSize || !slices.Contains(res.AuthFlavors, sunrpc.AuthFlavorSys) {
		t.Errorf("MNT %+v", res)
	}
	dump, err := mc.Dump(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("DUMP: %+v", dump)
	if err := mc.Umnt(ctx, exportDir); err != nil {
		t.Fatal(err)
	}
	if err := mc.UmntAll(ctx); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		path   string
		want   nfs3.MountStatus // 0: any refusal
		target error
	}{
		// Not under any export: mountd refuses it (MNT3ERR_ACCES) before
		// looking at the file system.
		{"/nonexistent", 0, nil},
		{"/etc", nfs3.MountErrAcces, fs.ErrPermission},
		// Under the export but missing.
		{exportDir + "/nonexistent", nfs3.MountErrNoEnt, fs.ErrNotExist},
		{"/" + strings.Repeat("x", nfs3.MaxPathLen), nfs3.MountErrNameTooLong, syscall.ENAMETOOLONG},
	} {
		_, err := mc.Mnt(ctx, tc.path)
		st, ok := errors.AsType[nfs3.MountStatus](err)
		switch {
		case !ok || st == nfs3.MountOK:
			t.Errorf("MNT %.40s: %v, want a MountStatus", tc.path, err)
		case tc.want != 0 && st != tc.want:
			t.Errorf("MNT %.40s: %v, want %v", tc.path, st, tc.want)
		case tc.target != nil && !errors.Is(err, tc.target):
			t.Errorf("MNT %.40s: %v is not %v", tc.path, err, tc.target)
		default:
			t.Logf("MNT %.40s: %v", tc.path, err)
		}
	}

	// Through nfs3.Mount: the refusal comes back typed, wrapped.
	_, err = nfs3.Mount(ctx, serverAddr.String(), "/nonexistent", nil)
	if _, ok := errors.AsType[nfs3.MountStatus](err); !ok {
		t.Errorf("Mount of /nonexistent: %v", err)
	} else {
		t.Logf("Mount of /nonexistent: %v", err)
	}
}

// TestNFS3BadInput: handles the client must refuse or the server rejects,
// as typed errors; no panic, no hang.
func TestNFS3BadInput(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		n := dialNFS3(t, kind, nfsDialOpts{})
		ctx := ctxT(t, 60*time.Second)

		// A handle longer than NFS3_FHSIZE never leaves the client.
		var calls uint64
		if n.rdma != nil {
			calls = n.rdma.Counters().Calls
		}
		long := make(nfs3.FileHandle, nfs3.FHSize+1)
		var hl *nfs3.HandleTooLongError
		if _, err := n.c.Getattr(ctx, long); !errors.As(err, &hl) || hl.Len != nfs3.FHSize+1 {
			t.Errorf("GETATTR of a %d-byte handle: %v", len(long), err)
		}
		if _, err := n.c.Rename(ctx, n.root, "a", long, "b"); !errors.As(err, &hl) {
			t.Errorf("RENAME into a %d-byte handle: %v", len(long), err)
		}
		if _, err := n.c.WriteAt(ctx, long, []byte("x"), 0); !errors.As(err, &hl) {
			t.Errorf("WriteAt to a %d-byte handle: %v", len(long), err)
		}
		if n.rdma != nil {
			if got := n.rdma.Counters().Calls; got != calls {
				t.Errorf("%d calls sent with over-long handles", got-calls)
			}
		}

		// Handles knfsd never issued: typed errors from the server.
		random := make(nfs3.FileHandle, nfs3.FHSize)
		rand.Read(random)
		mangled := append(nfs3.FileHandle(nil), n.root...)
		mangled[len(mangled)-1] ^= 0xff
		for _, tc := range []struct {
			name string
			fh   nfs3.FileHandle
			want []error
		}{
			{"random 64-byte handle", random, []error{nfs3.ErrBadHandle, nfs3.ErrStale}},
			{"root handle with its last byte flipped", mangled, []error{nfs3.ErrBadHandle, nfs3.ErrStale}},
			{"3-byte handle", nfs3.FileHandle{1, 2, 3}, []error{nfs3.ErrBadHandle}},
			// knfsd does not decode an empty nfs_fh3.
			{"empty handle", nfs3.FileHandle{}, []error{sunrpc.ErrGarbageArgs, nfs3.ErrBadHandle}},
		} {
			_, err := n.c.Getattr(ctx, tc.fh)
			if !slices.ContainsFunc(tc.want, func(target error) bool { return errors.Is(err, target) }) {
				t.Errorf("GETATTR of a %s: %v, want one of %v", tc.name, err, tc.want)
			} else {
				t.Logf("GETATTR of a %s: %v", tc.name, err)
			}
		}
		// Names knfsd will not decode (RFC 1813 filename3: at most 255
		// bytes, no slash): GARBAGE_ARGS.
		for _, name := range []string{strings.Repeat("n", 256), "a/b"} {
			if _, err := n.c.Lookup(ctx, n.root, name); !errors.Is(err, sunrpc.ErrGarbageArgs) {
				t.Errorf("LOOKUP of %.20q (%d bytes): %v", name, len(name), err)
			}
		}
		// The connection still works.
		if _, err := n.c.Getattr(ctx, n.root); err != nil {
			t.Fatal(err)
		}
	})
}
