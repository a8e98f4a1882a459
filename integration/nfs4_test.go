//go:build integration

package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/nfsrdma/nfsrdma"
	"github.com/nfsrdma/nfsrdma/nfs4"
	"github.com/nfsrdma/nfsrdma/sunrpc"
	"github.com/nfsrdma/nfsrdma/verbs/ibv"
	"github.com/nfsrdma/nfsrdma/xprt"
)

// The NFSv4.1 client (package nfs4) against knfsd in the guest, over TCP
// (2049) and RDMA (20049). knfsd has no fsid=0 export here: its v4
// pseudo-root shows the exports at their paths, so "/export" is looked up
// from PUTROOTFH. The server's side of each operation is checked straight on
// the export's tmpfs.

type nfs4Conn struct {
	kind string
	tg   *nfs4.Target
	rdma *xprt.Transport // nil over TCP
}

// mountNFS4 mounts exportDir with NFSv4.1 over kind, with AUTH_SYS uid 0
// (root_squash: nobody on the server). Cleanup closes it and checks that
// Close destroyed the session and client ID without error.
func mountNFS4(t testing.TB, kind string) *nfs4Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n := &nfs4Conn{kind: kind}
	cred, err := (&sunrpc.AuthSys{MachineName: "nfs4-it"}).Credential()
	if err != nil {
		t.Fatal(err)
	}
	o := &nfs4.MountOptions{Client: nfs4.ClientOptions{Cred: cred}}
	if kind == overRDMA {
		fab, err := ibv.Open()
		if err != nil {
			t.Fatal(err)
		}
		o.Dial = func(ctx context.Context, addr netip.Addr) (sunrpc.Transport, error) {
			tr, err := xprt.Dial(ctx, xprt.Config{Fabric: fab, Addr: nfsRDMA})
			n.rdma = tr
			return tr, err
		}
		t.Cleanup(func() {
			if live := fab.Live(); !live.Zero() {
				t.Errorf("verbs resources left after Close: %+v", live)
			}
		})
	}
	tg, err := nfs4.Mount(ctx, serverAddr.String(), exportDir, o)
	if err != nil {
		t.Fatalf("NFSv4.1 mount over %s: %v", kind, err)
	}
	n.tg = tg
	t.Cleanup(func() {
		if n.rdma != nil {
			t.Logf("xprt counters: %s", n.rdma.Counters())
		}
		if err := tg.Close(); err != nil {
			t.Errorf("Close (DESTROY_SESSION, DESTROY_CLIENTID): %v", err)
		}
	})
	return n
}

func randomBytes(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestNFS4(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		n := mountNFS4(t, kind)
		c := n.tg.Client()
		dirName := "nfs4-" + kind
		dir := exportSubdir(t, dirName)
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()

		t.Run("session", func(t *testing.T) {
			_, fore := c.Session()
			if fore.MaxRequests < 1 || fore.MaxRequests > nfs4.DefaultSlots {
				t.Errorf("fore channel of %d slots, want 1..%d", fore.MaxRequests, nfs4.DefaultSlots)
			}
			if n.rdma != nil {
				if cr := n.rdma.Credits(); cr < 1 || int(fore.MaxRequests) > cr {
					t.Errorf("session has %d slots over an RDMA connection granting %d credits", fore.MaxRequests, cr)
				}
			}
			if c.MinorVersion() != 2 {
				t.Errorf("minor version %d with knfsd, which serves 4.2", c.MinorVersion())
			}
			if c.Lease() != 10*time.Second {
				t.Errorf("lease %v, the bed sets nfsv4leasetime 10 s", c.Lease())
			}
			rsize, wsize := c.IOSizes()
			if rsize < 64<<10 || wsize < 64<<10 {
				t.Errorf("I/O sizes %d/%d, want at least 64 KiB", rsize, wsize)
			}
		})

		t.Run("large-io", func(t *testing.T) {
			// 3 MiB and a tail: several 1 MiB WRITEs and READs, which over
			// RDMA travel in Read and Write chunks (the DDP-eligible items).
			data := randomBytes(t, 3<<20+12345)
			name := dirName + "/big"
			before := counters(n)
			f, err := n.tg.OpenFileContext(ctx, name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
			if err != nil {
				t.Fatal(err)
			}
			if nw, err := f.WriteAtContext(ctx, data, 0); err != nil || nw != len(data) {
				t.Fatalf("WriteAt: %d, %v", nw, err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			srv, err := os.ReadFile(filepath.Join(dir, "big"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(srv, data) {
				t.Fatalf("the server holds %d bytes that differ from the %d written", len(srv), len(data))
			}
			if st := statT(t, filepath.Join(dir, "big")); st.Mode&0o777 != 0o640 {
				t.Errorf("created with mode %o, want 640", st.Mode&0o777)
			}
			got, err := n.tg.ReadFileContext(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("read back %d bytes that differ from the %d written", len(got), len(data))
			}
			if n.rdma != nil {
				after := n.rdma.Counters()
				if after.ReadChunks <= before.ReadChunks || after.WriteChunks <= before.WriteChunks {
					t.Errorf("1 MiB WRITEs and READs used no Read/Write chunks: read_chunks %d→%d, write_chunks %d→%d",
						before.ReadChunks, after.ReadChunks, before.WriteChunks, after.WriteChunks)
				}
			}
		})

		t.Run("namespace", func(t *testing.T) {
			// Created through the client, so that nobody (root squashed)
			// owns it and may chmod it.
			af, err := n.tg.OpenFileContext(ctx, dirName+"/a", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o666)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := af.Write([]byte("hello")); err != nil {
				t.Fatal(err)
			}
			if err := af.Close(); err != nil {
				t.Fatal(err)
			}
			if st := statT(t, filepath.Join(dir, "a")); st.Uid != 65534 || st.Mode&0o777 != 0o666 {
				t.Errorf("created as uid %d mode %o, want nobody (root squashed) and 666", st.Uid, st.Mode&0o777)
			}
			if _, err := n.tg.Mkdir(ctx, dirName+"/sub", 0o750); err != nil {
				t.Fatal(err)
			}
			if st := statT(t, filepath.Join(dir, "sub")); st.Mode&syscall.S_IFMT != syscall.S_IFDIR || st.Mode&0o777 != 0o750 {
				t.Errorf("mkdir made mode %o", st.Mode)
			}
			if err := n.tg.Symlink(ctx, "a-target/x", dirName+"/ln"); err != nil {
				t.Fatal(err)
			}
			if s, err := os.Readlink(filepath.Join(dir, "ln")); err != nil || s != "a-target/x" {
				t.Errorf("server readlink: %q, %v", s, err)
			}
			if s, err := n.tg.Readlink(ctx, dirName+"/ln"); err != nil || s != "a-target/x" {
				t.Errorf("READLINK: %q, %v", s, err)
			}
			if err := n.tg.Rename(ctx, dirName+"/a", dirName+"/sub/b"); err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(filepath.Join(dir, "sub", "b")); err != nil || string(b) != "hello" {
				t.Errorf("after RENAME the server has %q, %v", b, err)
			}
			root := n.tg.Root()
			sub, _, err := c.LookupPath(ctx, root, dirName, "sub")
			if err != nil {
				t.Fatal(err)
			}
			b, battr, err := c.Lookup(ctx, sub, "b")
			if err != nil {
				t.Fatal(err)
			}
			if battr.Type != nfs4.TypeReg || battr.Size != 5 || !battr.Has(nfs4.AttrChange) || !battr.Has(nfs4.AttrFileID) {
				t.Errorf("attributes of b: %+v", battr)
			}
			if uid, ok := battr.UID(); !ok || uid != uint32(statT(t, filepath.Join(dir, "sub", "b")).Uid) {
				t.Errorf("owner %q, the server's file has uid %d", battr.Owner, statT(t, filepath.Join(dir, "sub", "b")).Uid)
			}
			if p, _, err := c.LookupParent(ctx, sub); err != nil || !bytes.Equal(p, mustLookup(t, ctx, c, root, dirName)) {
				t.Errorf("LOOKUPP: %x, %v", p, err)
			}
			if err := c.Link(ctx, b, sub, "b2"); err != nil {
				t.Fatal(err)
			}
			if st := statT(t, filepath.Join(dir, "sub", "b")); st.Nlink != 2 {
				t.Errorf("after LINK nlink %d, want 2", st.Nlink)
			}
			acc, err := c.Access(ctx, b, nfs4.AccessRead|nfs4.AccessModify)
			if err != nil || acc.Access&nfs4.AccessRead == 0 || acc.Access&nfs4.AccessModify == 0 {
				t.Errorf("ACCESS of a 0666 file: %+v, %v", acc, err)
			}
			if err := n.tg.Setattr(ctx, "/"+dirName+"/sub/b", nfs4.SetAttr{Mode: nfs4.Ptr(uint32(0o600))}); err != nil {
				t.Fatal(err)
			}
			if st := statT(t, filepath.Join(dir, "sub", "b")); st.Mode&0o777 != 0o600 {
				t.Errorf("after SETATTR mode %o, want 600", st.Mode&0o777)
			}
			mt := time.Date(2001, 2, 3, 4, 5, 6, 789, time.UTC)
			ba, err := c.Setattr(ctx, b, nfs4.AnonymousStateID, nfs4.SetAttr{MTime: &nfs4.SetTime{Time: nfs4.TimeOf(mt)}, ATime: &nfs4.SetTime{ServerTime: true}})
			if err != nil {
				t.Fatal(err)
			}
			st := statT(t, filepath.Join(dir, "sub", "b"))
			if got := time.Unix(st.Mtim.Unix()); !got.Equal(mt) || !ba.MTime.Time().Equal(mt) {
				t.Errorf("SETATTR mtime: the server has %v, GETATTR %v; want %v", got, ba.MTime.Time(), mt)
			}
			if at := time.Unix(st.Atim.Unix()); time.Since(at) > time.Minute {
				t.Errorf("SETATTR atime to the server's time: %v", at)
			}
			es, err := n.tg.ReadDirContext(ctx, dirName+"/sub")
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range es {
				names = append(names, e.Name())
			}
			if !slices.Equal(names, []string{"b", "b2"}) {
				t.Errorf("READDIR of sub: %q", names)
			}
			if err := n.tg.Remove(ctx, dirName+"/sub/b2"); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(filepath.Join(dir, "sub", "b2")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("after REMOVE: %v", err)
			}
			if _, err := n.tg.OpenFileContext(ctx, dirName+"/sub/b", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); !errors.Is(err, fs.ErrExist) {
				t.Errorf("exclusive create of an existing file: %v, want fs.ErrExist", err)
			}
			if _, err := n.tg.StatContext(ctx, dirName+"/none"); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("stat of a missing file: %v, want fs.ErrNotExist", err)
			}
			if err := n.tg.Remove(ctx, dirName+"/sub"); !errors.Is(err, syscall.ENOTEMPTY) {
				t.Errorf("REMOVE of a non-empty directory: %v, want ENOTEMPTY", err)
			}
			if _, err := n.tg.Create(ctx, dirName+"/sub/c", 0o640); err != nil {
				t.Fatal(err)
			}
			if _, err := n.tg.Create(ctx, dirName+"/sub/c", 0o640); !errors.Is(err, fs.ErrExist) {
				t.Errorf("Create of an existing file: %v, want fs.ErrExist", err)
			}
			if err := n.tg.Link(ctx, dirName+"/sub/c", dirName+"/c-link"); err != nil {
				t.Fatal(err)
			}
			tf, err := n.tg.OpenFileContext(ctx, dirName+"/sub/c", os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := tf.TruncateContext(ctx, 12345); err != nil {
				t.Error(err)
			}
			tf.Close()
			if st := statT(t, filepath.Join(dir, "c-link")); st.Size != 12345 || st.Nlink != 2 || st.Mode&0o777 != 0o640 {
				t.Errorf("after Create, Link, Truncate: size %d nlink %d mode %o", st.Size, st.Nlink, st.Mode&0o777)
			}
			if err := n.tg.RmDir(ctx, dirName+"/c-link"); !errors.Is(err, syscall.ENOTDIR) {
				t.Errorf("RmDir of a file: %v, want ENOTDIR", err)
			}
			if err := n.tg.RemoveAll(ctx, dirName+"/sub"); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(filepath.Join(dir, "sub")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("after RemoveAll: %v", err)
			}
		})

		t.Run("share-and-create-modes", func(t *testing.T) {
			dh, _, err := c.LookupPath(ctx, n.tg.Root(), dirName)
			if err != nil {
				t.Fatal(err)
			}
			g := &nfs4.OpenHow{Create: true, Mode: nfs4.Guarded, Attr: nfs4.SetAttr{Mode: nfs4.Ptr(uint32(0o644))}}
			o, err := c.Open(ctx, dh, "shared", nfs4.ShareAccessRead, nfs4.ShareDenyWrite, g)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Open(ctx, dh, "shared", nfs4.ShareAccessRead, nfs4.ShareDenyNone, g); !errors.Is(err, nfs4.ErrExist) {
				t.Errorf("GUARDED create of an existing file: %v, want NFS4ERR_EXIST", err)
			}
			if _, err := c.Open(ctx, dh, "shared", nfs4.ShareAccessWrite, nfs4.ShareDenyNone, nil); !errors.Is(err, nfs4.ErrShareDenied) {
				t.Errorf("open for writing against a deny-write share: %v, want NFS4ERR_SHARE_DENIED", err)
			}
			r, err := c.Open(ctx, dh, "shared", nfs4.ShareAccessRead, nfs4.ShareDenyNone, nil)
			if err != nil {
				t.Fatalf("a second reader: %v", err)
			}
			if r.StateID().Other == o.StateID().Other {
				t.Error("two opens under different open owners share a stateid")
			}
			for _, x := range []*nfs4.OpenFile{o, r} {
				if err := c.CloseFile(ctx, x.FH, x.StateID()); err != nil {
					t.Error(err)
				}
			}
			if err := c.CloseFile(ctx, o.FH, o.StateID()); !errors.Is(err, nfs4.ErrBadStateID) && !errors.Is(err, nfs4.ErrOldStateID) {
				t.Errorf("CLOSE of a closed open: %v, want a stateid error", err)
			}
		})

		t.Run("readdir-pages", func(t *testing.T) {
			// Enough entries for several READDIR replies of 32 KiB.
			p := filepath.Join(dir, "many")
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
			var want []string
			for i := range 400 {
				name := fmt.Sprintf("entry-with-a-long-name-to-fill-pages-%04d", i)
				want = append(want, name)
				if err := os.WriteFile(filepath.Join(p, name), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			dh, _, err := c.LookupPath(ctx, n.tg.Root(), dirName, "many")
			if err != nil {
				t.Fatal(err)
			}
			first, err := c.Readdir(ctx, dh, 0, nfs4.Verifier{}, nfs4.StatAttrs)
			if err != nil || first.EOF || len(first.Entries) == 0 {
				t.Fatalf("first page: %d entries, eof %v, %v; want a partial page", len(first.Entries), first.EOF, err)
			}
			es, err := n.tg.ReadDirContext(ctx, dirName+"/many")
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range es {
				got = append(got, e.Name())
			}
			if !slices.Equal(got, want) {
				t.Errorf("listed %d entries, want the server's %d (first page held %d)", len(got), len(want), len(first.Entries))
			}
		})

		t.Run("per-call-credential", func(t *testing.T) {
			// A context's credential replaces the client's for file
			// operations (not for the session's, which stay the client's).
			uctx := sunrpc.WithCredential(ctx, authSys(t, 1234))
			f, err := n.tg.OpenFileContext(uctx, dirName+"/mine", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAtContext(uctx, []byte("x"), 0); err != nil {
				t.Error(err)
			}
			if err := f.CloseContext(uctx); err != nil {
				t.Error(err)
			}
			if st := statT(t, filepath.Join(dir, "mine")); st.Uid != 1234 || st.Gid != 1234 {
				t.Errorf("created as %d:%d, want 1234:1234", st.Uid, st.Gid)
			}
			a, err := n.tg.Getattr(ctx, dirName+"/mine")
			if uid, ok := a.UID(); err != nil || !ok || uid != 1234 || a.OwnerGroup != "1234" {
				t.Errorf("owner %q group %q, %v", a.Owner, a.OwnerGroup, err)
			}
			// As nobody (the client's root, squashed), the 0600 file is closed.
			if _, err := n.tg.ReadFileContext(ctx, dirName+"/mine"); !errors.Is(err, fs.ErrPermission) {
				t.Errorf("reading another user's 0600 file: %v, want fs.ErrPermission", err)
			}
		})

		t.Run("locks", func(t *testing.T) {
			f, err := n.tg.OpenFileContext(ctx, dirName+"/locked", os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			o := f.Open()
			a, b := c.NewLockOwner(o), c.NewLockOwner(o)
			if err := c.Lock(ctx, f.Handle(), a, nfs4.WriteLT, 0, 100); err != nil {
				t.Fatal(err)
			}
			if d, err := c.TestLock(ctx, f.Handle(), b, nfs4.ReadLT, 50, 10); err != nil || d == nil || d.Type != nfs4.WriteLT || d.Offset != 0 || d.Length != 100 {
				t.Errorf("LOCKT against a write lock: %+v, %v", d, err)
			}
			var de *nfs4.LockDeniedError
			if err := c.Lock(ctx, f.Handle(), b, nfs4.WriteLT, 99, 1); !errors.As(err, &de) || !errors.Is(err, syscall.EAGAIN) {
				t.Errorf("conflicting LOCK: %v, want a LockDeniedError (EAGAIN)", err)
			}
			if err := c.Lock(ctx, f.Handle(), b, nfs4.WriteLT, 100, 50); err != nil {
				t.Errorf("LOCK of the adjacent range: %v", err)
			}
			if err := c.Unlock(ctx, f.Handle(), a, nfs4.WriteLT, 0, 100); err != nil {
				t.Fatal(err)
			}
			if d, err := c.TestLock(ctx, f.Handle(), b, nfs4.WriteLT, 0, 100); err != nil || d != nil {
				t.Errorf("LOCKT after LOCKU: %+v, %v", d, err)
			}
			for _, l := range []*nfs4.LockOwner{b} {
				if err := c.Unlock(ctx, f.Handle(), l, nfs4.WriteLT, 100, 50); err != nil {
					t.Error(err)
				}
			}
		})

		t.Run("v4.2", func(t *testing.T) {
			// A sparse file: a hole, 64 KiB of data at 1 MiB, a hole to 4 MiB.
			p := filepath.Join(dir, "sparse")
			data := randomBytes(t, 64<<10)
			sf, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sf.WriteAt(data, 1<<20); err != nil {
				t.Fatal(err)
			}
			if err := sf.Truncate(4 << 20); err != nil {
				t.Fatal(err)
			}
			sf.Close()
			os.Chmod(p, 0o666)
			f, err := n.tg.OpenFileContext(ctx, dirName+"/sparse", os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			sid := f.Open().StateID()
			r, err := c.Seek(ctx, f.Handle(), sid, 0, nfs4.SeekData)
			if err != nil || r.Offset != 1<<20 {
				t.Errorf("SEEK data from 0: %+v, %v; want offset %d", r, err, 1<<20)
			}
			r, err = c.Seek(ctx, f.Handle(), sid, 1<<20, nfs4.SeekHole)
			if err != nil || r.Offset != 1<<20+64<<10 {
				t.Errorf("SEEK hole from 1 MiB: %+v, %v; want offset %d", r, err, 1<<20+64<<10)
			}
			if err := c.Deallocate(ctx, f.Handle(), sid, 1<<20, 4096); err != nil {
				t.Fatal(err)
			}
			srv, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(srv[1<<20:1<<20+4096], make([]byte, 4096)) || !bytes.Equal(srv[1<<20+4096:1<<20+64<<10], data[4096:]) {
				t.Error("DEALLOCATE did not zero exactly [1 MiB, +4 KiB)")
			}
			if err := c.Allocate(ctx, f.Handle(), sid, 8<<20, 4096); err != nil {
				t.Fatal(err)
			}
			if st := statT(t, p); st.Size != 8<<20+4096 {
				t.Errorf("after ALLOCATE to 8 MiB+4 KiB the size is %d", st.Size)
			}
			dst, err := n.tg.OpenFileContext(ctx, dirName+"/copy", os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer dst.Close()
			cr, err := c.Copy(ctx, f.Handle(), sid, 1<<20, dst.Handle(), dst.Open().StateID(), 0, 64<<10)
			if err != nil || cr.Count != 64<<10 {
				t.Fatalf("COPY: %+v, %v", cr, err)
			}
			want := append(make([]byte, 4096), data[4096:]...)
			if got, err := os.ReadFile(filepath.Join(dir, "copy")); err != nil || !bytes.Equal(got, want) {
				t.Errorf("COPY left %d bytes, want the %d copied", len(got), len(want))
			}
		})

		t.Run("fstest", func(t *testing.T) {
			tree := filepath.Join(dir, "tree")
			files := map[string]string{"x": "x\n", "d/y": "why", "d/e/z": "zed", "empty": ""}
			for name, body := range files {
				p := filepath.Join(tree, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			sub, err := fs.Sub(n.tg, dirName+"/tree")
			if err != nil {
				t.Fatal(err)
			}
			if err := fstest.TestFS(sub, "x", "d/y", "d/e/z", "empty"); err != nil {
				t.Fatal(err)
			}
		})

		t.Run("o_trunc-append", func(t *testing.T) {
			p := filepath.Join(dir, "log")
			if err := os.WriteFile(p, []byte("0123456789"), 0o666); err != nil {
				t.Fatal(err)
			}
			os.Chmod(p, 0o666)
			f, err := n.tg.OpenFileContext(ctx, dirName+"/log", os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write([]byte("ab")); err != nil {
				t.Fatal(err)
			}
			f.Close()
			if b, _ := os.ReadFile(p); string(b) != "0123456789ab" {
				t.Errorf("O_APPEND: the server has %q", b)
			}
			f, err = n.tg.OpenFileContext(ctx, dirName+"/log", os.O_RDWR|os.O_TRUNC, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
			if st := statT(t, p); st.Size != 0 {
				t.Errorf("O_TRUNC left %d bytes", st.Size)
			}
			rf, err := n.tg.OpenFileContext(ctx, dirName+"/log", os.O_RDONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := rf.Write([]byte("x")); !errors.Is(err, syscall.EBADF) {
				t.Errorf("write to a read-only open: %v, want EBADF", err)
			}
			var buf [1]byte
			if _, err := rf.Read(buf[:]); err != io.EOF {
				t.Errorf("read of an empty file: %v, want io.EOF", err)
			}
			rf.Close()
		})
	})
}

// TestNFS4LeaseRenewal leaves a client idle past half the lease (the bed's
// is 10 s) and checks that the renewer sent SEQUENCE alone and that the
// session still works after more than a lease of idleness.
func TestNFS4LeaseRenewal(t *testing.T) {
	n := mountNFS4(t, overRDMA)
	c := n.tg.Client()
	time.Sleep(c.Lease() + c.Lease()/5)
	if got := c.Renewals(); got < 2 {
		t.Errorf("%d renewals in 1.2 leases of idleness, want at least 2", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := n.tg.StatContext(ctx, "."); err != nil {
		t.Errorf("after idling, the session fails: %v", err)
	}
	if c.Recoveries() != 0 {
		t.Errorf("%d session recoveries: the lease lapsed", c.Recoveries())
	}
}

func counters(n *nfs4Conn) xprt.Counters {
	if n.rdma == nil {
		return xprt.Counters{}
	}
	return n.rdma.Counters()
}

func mustLookup(t *testing.T, ctx context.Context, c *nfs4.Client, dir nfs4.FileHandle, name string) nfs4.FileHandle {
	t.Helper()
	fh, _, err := c.Lookup(ctx, dir, name)
	if err != nil {
		t.Fatal(err)
	}
	return fh
}

// TestNFS4MountV4 mounts through the module's front door, nfsrdma.MountV4,
// over RDMA and TCP, and reads a file the server wrote.
func TestNFS4MountV4(t *testing.T) {
	dir := exportSubdir(t, "nfs4-front")
	want := randomBytes(t, 200<<10)
	if err := os.WriteFile(filepath.Join(dir, "f"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tcp := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		tg, err := nfsrdma.MountV4(ctx, serverAddr.String()+":"+exportDir, &nfsrdma.OptionsV4{
			TCP: tcp, MountOptions: nfs4.MountOptions{Client: nfs4.ClientOptions{Cred: authSys(t, 0)}}})
		if err != nil {
			cancel()
			t.Fatalf("MountV4 (tcp %v): %v", tcp, err)
		}
		got, err := tg.ReadFileContext(ctx, "nfs4-front/f")
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("tcp %v: read %d bytes (%v), want the server's %d", tcp, len(got), err, len(want))
		}
		// A file left open: Close ends its open first, or knfsd would
		// refuse DESTROY_CLIENTID (NFS4ERR_CLIENTID_BUSY).
		if _, err := tg.OpenFileContext(ctx, "nfs4-front/f", os.O_RDONLY, 0); err != nil {
			t.Fatal(err)
		}
		if err := tg.Close(); err != nil {
			t.Errorf("tcp %v: Close: %v", tcp, err)
		}
		cancel()
	}
}

// TestNFS4ServerRestart restarts knfsd under two mounted clients (RDMA and
// TCP): the server forgets their sessions and client IDs, and each client's
// next call gets BADSESSION, then STALE_CLIENTID from CREATE_SESSION, and
// establishes a new client ID and session; OPEN then waits out the grace
// period (NFS4ERR_GRACE, retried) and succeeds.
func TestNFS4ServerRestart(t *testing.T) {
	conns := []*nfs4Conn{mountNFS4(t, overRDMA), mountNFS4(t, overTCP)}
	dir := exportSubdir(t, "nfs4-restart")
	before := make([]uint64, len(conns))
	for i, n := range conns {
		before[i] = n.tg.Client().ClientID()
	}
	restartNFSD(t)
	for i, n := range conns {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		start := time.Now()
		f, err := n.tg.OpenFileContext(ctx, "nfs4-restart/"+n.kind, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			cancel()
			t.Fatalf("%s: create after the restart: %v", n.kind, err)
		}
		if _, err := f.WriteAtContext(ctx, []byte(n.kind), 0); err != nil {
			t.Errorf("%s: write: %v", n.kind, err)
		}
		if err := f.CloseContext(ctx); err != nil {
			t.Errorf("%s: close: %v", n.kind, err)
		}
		cancel()
		t.Logf("%s: first create after the restart took %v", n.kind, time.Since(start).Round(time.Millisecond))
		c := n.tg.Client()
		if c.Recoveries() < 1 || c.ClientID() == before[i] {
			t.Errorf("%s: %d recoveries, client ID %#x (was %#x): the restart went unnoticed", n.kind, c.Recoveries(), c.ClientID(), before[i])
		}
		if b, err := os.ReadFile(filepath.Join(dir, n.kind)); err != nil || string(b) != n.kind {
			t.Errorf("%s: the server has %q, %v", n.kind, b, err)
		}
	}
}

// BenchmarkNFS4Throughput measures 1 MiB READs and WRITEs of a 64 MiB file
// through nfs4.Client's ReadAt and WriteAt (a window of 8) over RDMA and
// TCP. It is not part of make test: run it in the guest with
// -test.run '^$' -test.bench NFS4Throughput.
func BenchmarkNFS4Throughput(b *testing.B) {
	const size = 64 << 20
	for _, kind := range nfsTransports {
		for _, op := range []string{"write", "read"} {
			b.Run(kind+"/"+op, func(b *testing.B) {
				n := mountNFS4(b, kind)
				name := "nfs4-bench-" + kind
				p := filepath.Join(exportDir, name)
				data := randomBytes(b, size)
				if err := os.WriteFile(p, data, 0o666); err != nil {
					b.Fatal(err)
				}
				os.Chmod(p, 0o666)
				b.Cleanup(func() { os.Remove(p) })
				ctx := context.Background()
				f, err := n.tg.OpenFileContext(ctx, name, os.O_RDWR, 0)
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				buf := make([]byte, size)
				b.SetBytes(size)
				b.ResetTimer()
				for range b.N {
					if op == "write" {
						_, err = f.WriteAtContext(ctx, data, 0)
					} else {
						_, err = f.ReadAtContext(ctx, buf, 0)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				if op == "read" && !bytes.Equal(buf, data) {
					b.Fatal("read data differs from the file's")
				}
			})
		}
	}
}
