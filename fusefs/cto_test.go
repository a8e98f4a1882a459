package fusefs

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// lsl lists dir and stats every entry, as ls -l does.
func lsl(t *testing.T, dir string) {
	t.Helper()
	es, err := os.ReadDir(dir)
	check(t, err)
	for _, e := range es {
		_, err := os.Lstat(filepath.Join(dir, e.Name()))
		check(t, err)
	}
}

// TestOpenAfterListingRevalidates: an open right after ls -l (whose
// READDIRPLUS brought the file's attributes) still asks the server, as the
// kernel client's open of a dentry it already had does: another client's
// rewrite after the listing (same size, longer, renamed over) is read,
// not the cached bytes, and the open file's attributes are the server's.
func TestOpenAfterListingRevalidates(t *testing.T) {
	for _, tc := range []struct {
		name     string
		readLast bool // the file was read before the listing
		rewrite  func(t *testing.T, real string)
		want     string
	}{
		{"same-size", true, func(t *testing.T, real string) {
			check(t, os.WriteFile(real, []byte("version two"), 0o644))
		}, "version two"},
		{"longer", true, func(t *testing.T, real string) {
			check(t, os.WriteFile(real, []byte("version two, longer"), 0o644))
		}, "version two, longer"},
		{"longer/not-read-before", false, func(t *testing.T, real string) {
			check(t, os.WriteFile(real, []byte("version two, longer"), 0o644))
		}, "version two, longer"},
		{"renamed-over", true, func(t *testing.T, real string) {
			check(t, os.WriteFile(real+".new", []byte("version two"), 0o600))
			check(t, os.Rename(real+".new", real))
		}, "version two"},
		{"renamed-over/not-read-before", false, func(t *testing.T, real string) {
			check(t, os.WriteFile(real+".new", []byte("version two"), 0o600))
			check(t, os.Rename(real+".new", real))
		}, "version two"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startGoNFS(t, backendDisk)
			check(t, os.Mkdir(filepath.Join(srv.Dir, "d"), 0o755))
			real := filepath.Join(srv.Dir, "d", "f")
			check(t, os.WriteFile(real, []byte("version one"), 0o644))
			old := time.Now().Add(-time.Hour)
			check(t, os.Chtimes(real, old, old))
			o := DefaultOptions()
			m := mountGoNFS(t, srv, &o)
			if tc.readLast {
				if b, err := os.ReadFile(m.path("d/f")); err != nil || string(b) != "version one" {
					t.Fatalf("read: %q, %v", b, err)
				}
			}
			lsl(t, m.path("d"))
			tc.rewrite(t, real)
			f, err := os.Open(m.path("d/f"))
			check(t, err)
			defer f.Close()
			b := make([]byte, 64)
			k, err := f.Read(b)
			if err != nil || string(b[:k]) != tc.want {
				t.Errorf("open right after ls -l, then read: %q, %v; want %q", b[:k], err, tc.want)
			}
			fi, err := f.Stat()
			check(t, err)
			sfi, err := os.Stat(real)
			check(t, err)
			if fi.Size() != sfi.Size() || !fi.ModTime().Equal(sfi.ModTime()) || fi.Mode() != sfi.Mode() {
				t.Errorf("fstat of the open file: size %d mtime %v mode %v; the server's: %d %v %v",
					fi.Size(), fi.ModTime(), fi.Mode(), sfi.Size(), sfi.ModTime(), sfi.Mode())
			}
		})
	}
}

// TestOpendirRevalidates: a listing right after another, within the
// attribute and listing-copy timeouts, sees another client's create and
// unlink in the directory: the open of the directory revalidates it with
// a GETATTR, as the kernel client's does, and a changed mtime drops the
// copies of the listing.
func TestOpendirRevalidates(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	dir := filepath.Join(srv.Dir, "d")
	check(t, os.Mkdir(dir, 0o755))
	check(t, os.WriteFile(filepath.Join(dir, "a"), []byte("a"), 0o644))
	old := time.Now().Add(-time.Hour)
	check(t, os.Chtimes(dir, old, old))
	o := DefaultOptions()
	o.AcDirMin, o.AcDirMax = time.Hour, time.Hour
	m := mountGoNFS(t, srv, &o)
	if got := listNames(t, m.path("d")); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("listing: %v", got)
	}
	check(t, os.WriteFile(filepath.Join(dir, "b"), []byte("b"), 0o644))
	if got := listNames(t, m.path("d")); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("after another client's create: %v, want [a b]", got)
	}
	if _, err := os.Stat(m.path("d/b")); err != nil {
		t.Errorf("stat of the name another client made, after the listing: %v", err)
	}
	check(t, os.Remove(filepath.Join(dir, "a")))
	if got := listNames(t, m.path("d")); !slices.Equal(got, []string{"b"}) {
		t.Errorf("after another client's unlink: %v, want [b]", got)
	}
	if _, err := os.ReadFile(m.path("d/a")); !os.IsNotExist(err) {
		t.Errorf("read of the name another client removed: %v, want ENOENT", err)
	}
}

// unlinkedOnce rewrites the next GETATTR reply, once armed, to say the
// object has no link left (nlink 0): what a server answers for a file
// renamed over or removed by another client that something there still
// holds (knfsd's open-file cache).
type unlinkedOnce struct {
	sunrpc.Transport
	armed atomic.Bool
}

func (u *unlinkedOnce) RoundTrip(ctx context.Context, req *sunrpc.Request) (*sunrpc.Reply, error) {
	prog, proc, _ := callProc(req.Head)
	rep, err := u.Transport.RoundTrip(ctx, req)
	if err != nil || prog != nfs3.Program || proc != nfs3.ProcGetattr || !u.armed.Load() {
		return rep, err
	}
	d := sunrpc.NewBulkDecoder(rep.Inline, rep.Bulk)
	if _, err := sunrpc.DecodeReply(d); err != nil || d.Uint32() != uint32(nfs3.StatusOK) {
		return rep, nil
	}
	off := d.Offset() + 8 // type, mode
	if off+4 <= len(rep.Inline) && u.armed.CompareAndSwap(true, false) {
		binary.BigEndian.PutUint32(rep.Inline[off:], 0)
	}
	return rep, nil
}

// TestOpenOfUnlinkedLooksUpAgain: an open whose GETATTR finds the file with
// no link left (another client renamed a new file over its name, or
// removed it) looks the name up again, and opens what the name has now, as
// the kernel client's open does (its revalidation of the name finds the
// new file), instead of opening the old object, whose READs the server
// then refuses (ESTALE).
func TestOpenOfUnlinkedLooksUpAgain(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	check(t, os.WriteFile(filepath.Join(srv.Dir, "f"), []byte("hello"), 0o644))
	o := DefaultOptions()
	o.CallerIdentity = false
	var u *unlinkedOnce
	m := mountGoNFSVia(t, srv, &o, func(tr sunrpc.Transport) sunrpc.Transport {
		u = &unlinkedOnce{Transport: tr}
		return u
	})
	if b, err := os.ReadFile(m.path("f")); err != nil || string(b) != "hello" {
		t.Fatalf("read: %q, %v", b, err)
	}
	d := opDeltas(m)
	u.armed.Store(true)
	b, err := openRead(m.path("f"))
	if err != nil || string(b) != "hello" {
		t.Errorf("open of a file found unlinked, then read: %q, %v; want the name's file", b, err)
	}
	// The retried open's revalidation may be its ACCESS (access.go).
	if l, g := d(nfs3.ProcLookup), d(nfs3.ProcGetattr)+d(nfs3.ProcAccess); l < 1 || g < 2 {
		t.Errorf("open of a file found unlinked: %d LOOKUP, %d GETATTR or ACCESS; want the name looked up again and the open retried", l, g)
	}
}
