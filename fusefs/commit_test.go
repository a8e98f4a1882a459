package fusefs

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma/fusefs/fusefstest"
	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// unstableServer makes a go-nfs server (which writes FILE_SYNC whatever it
// is asked) look like one that keeps UNSTABLE writes in memory: it rewrites
// the replies of UNSTABLE WRITEs to "UNSTABLE, verifier writeVerf" and of
// COMMITs to "verifier commitVerf". A commitVerf different from writeVerf
// is a server that restarted and lost the writes.
type unstableServer struct {
	sunrpc.Transport
	mu                    sync.Mutex
	writeVerf, commitVerf nfs3.WriteVerf
	unstable, fileSync    atomic.Int64 // WRITEs asked for, by stability
	commits               atomic.Int64
}

func (u *unstableServer) setVerfs(w, c byte) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.writeVerf, u.commitVerf = nfs3.WriteVerf{w}, nfs3.WriteVerf{c}
}

func (u *unstableServer) RoundTrip(ctx context.Context, req *sunrpc.Request) (*sunrpc.Reply, error) {
	_, proc, _ := callProc(req.Head)
	rep, err := u.Transport.RoundTrip(ctx, req)
	if err != nil {
		return rep, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	switch proc {
	case nfs3.ProcWrite:
		// The head ends with stable_how and the data's length word.
		stable := nfs3.StableHow(binary.BigEndian.Uint32(req.Head[len(req.Head)-8:]))
		if stable != nfs3.Unstable {
			u.fileSync.Add(1)
			return rep, nil
		}
		u.unstable.Add(1)
		if off := resultsAfterWcc(rep); off > 0 {
			// count, committed, verf
			binary.BigEndian.PutUint32(rep.Inline[off+4:], uint32(nfs3.Unstable))
			copy(rep.Inline[off+8:], u.writeVerf[:])
		}
	case nfs3.ProcCommit:
		u.commits.Add(1)
		if off := resultsAfterWcc(rep); off > 0 {
			copy(rep.Inline[off:], u.commitVerf[:])
		}
	}
	return rep, nil
}

// resultsAfterWcc returns the offset in a successful WRITE or COMMIT reply of
// what follows its wcc_data, 0 if it failed.
func resultsAfterWcc(rep *sunrpc.Reply) int {
	d := sunrpc.NewBulkDecoder(rep.Inline, rep.Bulk)
	if _, err := sunrpc.DecodeReply(d); err != nil {
		return 0
	}
	if d.Uint32() != uint32(nfs3.StatusOK) {
		return 0
	}
	if d.Bool() {
		d.FixedOpaque(24) // pre_op_attr
	}
	if d.Bool() {
		d.FixedOpaque(84) // post_op_attr
	}
	if d.Err() != nil {
		return 0
	}
	return d.Offset()
}

// unstableMount is a mount (wsize 16 KiB) of a go-nfs server behind an
// unstableServer.
type unstableMount struct {
	dir  string
	srv  *fusefstest.Server
	us   *unstableServer
	fsys *FS
}

func mountUnstable(t *testing.T) *unstableMount {
	t.Helper()
	requireFUSE(t)
	srv := startGoNFS(t, backendDisk)
	ctx := testCtx(t)
	tcp, err := sunrpc.DialTCP(ctx, net.JoinHostPort(srv.Host, strconv.Itoa(srv.Port)), nil)
	if err != nil {
		t.Fatal(err)
	}
	us := &unstableServer{Transport: tcp}
	us.setVerfs(1, 1)
	tgt, err := nfs3.Mount(ctx, srv.Host, "/", &nfs3.MountOptions{MountPort: srv.Port, Transport: us})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tgt.Close() })
	o := DefaultOptions()
	o.Wsize = 16 << 10
	fsys, err := New(ctx, tgt.Client(), tgt.Root(), &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fsys.Close() })
	dir := t.TempDir()
	server, err := Mount(dir, fsys, MountConfig{DirectMountStrict: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if server.Unmount() != nil {
			syscall.Unmount(dir, syscall.MNT_DETACH)
			return
		}
		server.Wait()
	})
	return &unstableMount{dir: dir, srv: srv, us: us, fsys: fsys}
}

// TestCommitAndResend: UNSTABLE writes are COMMITted at close; when the
// COMMIT's verifier shows the server lost them, they are sent again
// FILE_SYNC, and the file is right.
func TestCommitAndResend(t *testing.T) {
	m := mountUnstable(t)
	dir, srv, us := m.dir, m.srv, m.us

	data := bytes.Repeat([]byte("unstable data. "), 10000) // 150 kB: ten 16 KiB WRITEs
	check(t, os.WriteFile(filepath.Join(dir, "kept"), data, 0o644))
	if us.unstable.Load() < 10 || us.commits.Load() == 0 || us.fileSync.Load() != 0 {
		t.Fatalf("verifier kept: %d UNSTABLE WRITEs, %d COMMITs, %d FILE_SYNC WRITEs", us.unstable.Load(), us.commits.Load(), us.fileSync.Load())
	}

	us.setVerfs(1, 2) // the server "restarted": the COMMIT's verifier differs
	check(t, os.WriteFile(filepath.Join(dir, "resent"), data, 0o644))
	if us.fileSync.Load() < 10 {
		t.Fatalf("verifier changed: %d FILE_SYNC WRITEs resent", us.fileSync.Load())
	}
	got, err := os.ReadFile(filepath.Join(srv.Dir, "resent"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("server copy: %d bytes, %v", len(got), err)
	}

	// fsync commits too.
	us.setVerfs(3, 3)
	before := us.commits.Load()
	f, err := os.OpenFile(filepath.Join(dir, "synced"), os.O_CREATE|os.O_WRONLY, 0o644)
	check(t, err)
	_, err = f.Write(data)
	check(t, err)
	check(t, f.Sync())
	if us.commits.Load() == before {
		t.Error("fsync sent no COMMIT")
	}
	check(t, f.Close())

	// Unless all the dirty data fits in one WRITE: then it is that WRITE,
	// FILE_SYNC, and no COMMIT (as the Linux client does).
	before, syncs := us.commits.Load(), us.fileSync.Load()
	f, err = os.OpenFile(filepath.Join(dir, "small"), os.O_CREATE|os.O_WRONLY, 0o644)
	check(t, err)
	_, err = f.Write(data[:5000])
	check(t, err)
	check(t, f.Sync())
	if c, s := us.commits.Load()-before, us.fileSync.Load()-syncs; c != 0 || s != 1 {
		t.Errorf("fsync of 5000 bytes: %d COMMITs, %d FILE_SYNC WRITEs; want 0, 1", c, s)
	}
	check(t, f.Close())
	if got, err := os.ReadFile(filepath.Join(srv.Dir, "small")); err != nil || !bytes.Equal(got, data[:5000]) {
		t.Fatalf("server copy of small: %d bytes, %v", len(got), err)
	}
}

// TestKeptWritesMemory: the memory of writes behind and of UNSTABLE writes
// kept for their COMMIT is reused once they are durable, rather than each
// write taking fresh memory; and a kept write's memory is never reused
// before then (a resend after a server restart sends its own bytes).
func TestKeptWritesMemory(t *testing.T) {
	m := mountUnstable(t)
	wbufs := m.fsys.wbufs
	const files, size = 12, 256 << 10 // 16 WRITEs of 16 KiB each
	data := make([]byte, size)
	for i := range files {
		for j := range data {
			data[j] = byte(i*7 + j)
		}
		check(t, os.WriteFile(filepath.Join(m.dir, fmt.Sprint("f", i)), data, 0o644))
	}
	writes := m.us.unstable.Load() + m.us.fileSync.Load()
	if made := int64(wbufs.Made()); writes < files*size/(16<<10) || made > writes/3 {
		t.Errorf("%d WRITEs took %d fresh buffers; want at most a third", writes, made)
	}

	// A write kept UNSTABLE while other files are written and committed.
	f, err := os.OpenFile(filepath.Join(m.dir, "first"), os.O_CREATE|os.O_RDWR, 0o644)
	check(t, err)
	defer f.Close()
	first := bytes.Repeat([]byte("first file. "), 20000)
	_, err = f.Write(first)
	check(t, err)
	check(t, unix.SyncFileRange(int(f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER))
	made := wbufs.Made()
	for i := range 4 {
		for j := range data {
			data[j] = byte(i*13 + j)
		}
		check(t, os.WriteFile(filepath.Join(m.dir, fmt.Sprint("g", i)), data, 0o644))
	}
	// first holds its buffers (15) until its COMMIT; the rest are reused.
	if d := wbufs.Made() - made; d > 64/3 {
		t.Errorf("4 more files (64 WRITEs) took %d fresh buffers; want at most a third", d)
	}
	// The server "restarts" and loses first's writes: close resends them
	// from what was kept.
	check(t, os.WriteFile(filepath.Join(m.srv.Dir, "first"), make([]byte, len(first)), 0o644))
	m.us.setVerfs(1, 2)
	resent := m.us.fileSync.Load()
	check(t, f.Close())
	if m.us.fileSync.Load() == resent {
		t.Fatal("no write was resent after the verifier changed")
	}
	got, err := os.ReadFile(filepath.Join(m.srv.Dir, "first"))
	check(t, err)
	if !bytes.Equal(got, first) {
		i := 0
		for i < min(len(got), len(first)) && got[i] == first[i] {
			i++
		}
		t.Fatalf("server copy of first after the resend differs at byte %d of %d", i, len(first))
	}
}
