package fusefs

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// staleServer answers NFS3ERR_STALE, as the Linux server does for a file
// removed on the server, to every call that names one of its handles.
// (go-nfs's handles follow paths: a file replaced on its disk keeps the
// handle, so the server side of the replacement is played here.)
type staleServer struct {
	sunrpc.Transport
	mu    sync.Mutex
	stale [][]byte
	hits  int
}

func (s *staleServer) makeStale(fh nfs3.FileHandle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stale = append(s.stale, bytes.Clone(fh))
}

func (s *staleServer) RoundTrip(ctx context.Context, req *sunrpc.Request) (*sunrpc.Reply, error) {
	prog, _, ok := callProc(req.Head)
	s.mu.Lock()
	for _, fh := range s.stale {
		if ok && prog == nfs3.Program && bytes.Contains(req.Head, fh) {
			s.hits++
			s.mu.Unlock()
			// Accepted, SUCCESS, status NFS3ERR_STALE, no attributes.
			var b []byte
			for _, w := range []uint32{req.XID, 1, 0, 0, 0, 0, uint32(nfs3.ErrStale), 0, 0, 0} {
				b = binary.BigEndian.AppendUint32(b, w)
			}
			return sunrpc.NewReply(b, nil, nil), nil
		}
	}
	s.mu.Unlock()
	return s.Transport.RoundTrip(ctx, req)
}

func (s *staleServer) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits
}

// TestStaleHandleOfOpenFile: the server calls an open file's handle stale
// (another client removed or replaced the file). As on the Linux client,
// fstat and read of the open descriptor answer from the caches while the
// attributes are trusted (and no READ since the last stat moved the atime),
// and give ESTALE once they time out (at once with actimeo=0) — not the old
// attributes with no link, nor the old bytes.
func TestStaleHandleOfOpenFile(t *testing.T) {
	for _, tc := range []struct {
		name  string
		acreg time.Duration
	}{{"actimeo=0", 0}, {"actimeo=1", time.Second}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startGoNFS(t, backendDisk)
			var ss *staleServer
			opts := DefaultOptions()
			opts.AcRegMin, opts.AcRegMax, opts.AcDirMin, opts.AcDirMax = tc.acreg, tc.acreg, tc.acreg, tc.acreg
			m := mountGoNFSVia(t, srv, &opts, func(tr sunrpc.Transport) sunrpc.Transport {
				ss = &staleServer{Transport: tr}
				return ss
			})
			data := bytes.Repeat([]byte("old file "), 1000)
			check(t, os.WriteFile(m.path("f"), data, 0o644))
			f, err := os.Open(m.path("f"))
			check(t, err)
			defer f.Close()
			buf := make([]byte, len(data))
			if n, err := f.ReadAt(buf, 0); n != len(data) || !bytes.Equal(buf, data) {
				t.Fatalf("read before: %d, %v", n, err)
			}
			// A stat after the read: the atime a READ moved is asked
			// for now (see TestStatAfterRead), not after the replacement.
			_, err = f.Stat()
			check(t, err)
			in := m.fsys.root.GetChild("f")
			if in == nil {
				t.Fatal("no node for f")
			}
			ss.makeStale(in.Operations().(*node).handle())
			start := time.Now()
			if tc.acreg > 0 {
				// Within the attribute timeout: the caches answer.
				// (Unless a slow machine let them time out already.)
				if _, err := f.Stat(); err != nil && time.Since(start) < tc.acreg/2 {
					t.Errorf("fstat within the attribute timeout: %v", err)
				}
				time.Sleep(tc.acreg + 100*time.Millisecond)
			}
			var st syscall.Stat_t
			if err := syscall.Fstat(int(f.Fd()), &st); !errors.Is(err, syscall.ESTALE) {
				t.Errorf("fstat of the stale file: %v (nlink %d), want ESTALE", err, st.Nlink)
			}
			if n, err := f.ReadAt(buf, 0); !errors.Is(err, syscall.ESTALE) {
				t.Errorf("read of the stale file: %d bytes, %v, want ESTALE", n, err)
			}
			if ss.calls() == 0 {
				t.Error("the stale handle was never sent")
			}
			// It stays stale, without asking the server again.
			before := ss.calls()
			if err := syscall.Fstat(int(f.Fd()), &st); !errors.Is(err, syscall.ESTALE) {
				t.Errorf("fstat again: %v", err)
			}
			if ss.calls() != before {
				t.Errorf("a known stale handle was sent again (%d calls)", ss.calls()-before)
			}
			if err := f.Close(); err != nil {
				t.Errorf("close of the stale file: %v", err)
			}
		})
	}
}

// TestStatAfterRead: a READ moves the server's atime, so a stat after one
// asks the server (one GETATTR) even while the attributes are trusted, as
// the Linux client's does; a second stat, and a stat after no read, ask
// nothing.
func TestStatAfterRead(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	m := mountGoNFS(t, srv, nil)
	data := bytes.Repeat([]byte("atime "), 2000)
	check(t, os.WriteFile(srv.Dir+"/f", data, 0o644))
	f, err := os.Open(m.path("f"))
	check(t, err)
	defer f.Close()
	var st syscall.Stat_t
	check(t, syscall.Fstat(int(f.Fd()), &st))
	getattrs := func() uint64 { return m.calls(nfs3.ProcGetattr) }
	g0 := getattrs()
	check(t, syscall.Fstat(int(f.Fd()), &st))
	if d := getattrs() - g0; d != 0 {
		t.Errorf("fstat with no read in between: %d GETATTR, want 0", d)
	}
	buf := make([]byte, len(data))
	if n, err := f.ReadAt(buf, 0); n != len(data) {
		t.Fatalf("read: %d, %v", n, err)
	}
	g1 := getattrs()
	check(t, syscall.Fstat(int(f.Fd()), &st))
	check(t, syscall.Fstat(int(f.Fd()), &st))
	if d := getattrs() - g1; d != 1 {
		t.Errorf("two fstats after a read: %d GETATTR, want 1", d)
	}
}

// TestStaleHandleNotMoved: another client replaces an open file (REMOVE,
// then CREATE of the same name), and the new file gets the old one's
// inode number, as ext4 and xfs give it at once. The old handle is stale;
// as on the Linux client, it stays so: the write through the old
// descriptor fails with ESTALE (at its close, the write itself being
// gathered), and never lands in the new file, which a path walk reaches.
func TestStaleHandleNotMoved(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	m := mountGoNFS(t, srv, nil)
	ctx := testCtx(t)
	tcp, err := sunrpc.DialTCP(ctx, net.JoinHostPort(srv.Host, strconv.Itoa(srv.Port)), nil)
	check(t, err)
	other, err := nfs3.Mount(ctx, srv.Host, "/", &nfs3.MountOptions{MountPort: srv.Port, Transport: tcp})
	check(t, err)
	defer other.Close()
	oc := other.Client()

	check(t, os.WriteFile(m.path("f"), []byte("the old file"), 0o644))
	f, err := os.OpenFile(m.path("f"), os.O_RDWR, 0)
	check(t, err)
	defer f.Close()
	var st syscall.Stat_t
	check(t, syscall.Fstat(int(f.Fd()), &st))
	oldIno := st.Ino
	// The other client replaces it (go-nfs makes the old handle stale at
	// the REMOVE), until the new file has the old inode number.
	newData := []byte("the new file, another client's")
	reused := false
	for try := 0; try < 20 && !reused; try++ {
		if _, err := oc.Remove(ctx, other.Root(), "f"); err != nil {
			t.Fatalf("the other client's REMOVE: %v", err)
		}
		r, err := oc.Create(ctx, other.Root(), "f", nfs3.CreateHow{Mode: nfs3.Guarded, Attr: nfs3.SetAttr{Mode: new(uint32(0o644))}})
		check(t, err)
		_, err = oc.Write(ctx, r.FH, 0, newData, nfs3.FileSync)
		check(t, err)
		fi, err := os.Stat(filepath.Join(srv.Dir, "f"))
		check(t, err)
		reused = fi.Sys().(*syscall.Stat_t).Ino == oldIno
	}
	if !reused {
		t.Skip("the test directory's file system gave the new file another inode number in 20 tries (ext4 gives the old one)")
	}
	if n, err := f.WriteAt([]byte("XXXX"), 0); err != nil {
		t.Logf("write through the old descriptor: %d, %v", n, err)
	}
	fsyncErr := f.Sync()
	closeErr := f.Close()
	if !errors.Is(fsyncErr, syscall.ESTALE) && !errors.Is(closeErr, syscall.ESTALE) {
		t.Errorf("fsync and close of the old descriptor: %v, %v; want ESTALE", fsyncErr, closeErr)
	}
	if got, err := os.ReadFile(filepath.Join(srv.Dir, "f")); !bytes.Equal(got, newData) {
		t.Errorf("the new file on the server: %q, %v; want %q untouched", got, err, newData)
	}
	if got, err := os.ReadFile(m.path("f")); !bytes.Equal(got, newData) {
		t.Errorf("the new file through the mount: %q, %v; want %q", got, err, newData)
	}
}
