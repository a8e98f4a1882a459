//go:build integration

package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/frwr"
	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
	"github.com/nfsrdma/nfsrdma/verbs/ibv"
	"github.com/nfsrdma/nfsrdma/xprt"
)

// rdmaNFS is an NFSv3 client over the RDMA transport to knfsd, with the
// export's root handle from MOUNT over TCP.
type rdmaNFS struct {
	tr   *xprt.Transport
	c    *nfs3.Client
	root nfs3.FileHandle
}

func dialRDMA(t *testing.T, cfg xprt.Config) *rdmaNFS {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m, err := nfs3.DialMount(ctx, serverAddr.String(), 0, sunrpc.AuthNone, nil)
	if err != nil {
		t.Fatalf("MOUNT over TCP: %v", err)
	}
	mr, err := m.Mnt(ctx, exportDir)
	m.Close()
	if err != nil {
		t.Fatalf("MNT %s: %v", exportDir, err)
	}
	fab, err := ibv.Open()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Fabric = fab
	cfg.Addr = nfsRDMA
	tr, err := xprt.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cred, err := (&sunrpc.AuthSys{MachineName: "testbed"}).Credential()
	if err != nil {
		t.Fatal(err)
	}
	c, err := nfs3.NewClient(tr, &nfs3.ClientOptions{Cred: cred})
	if err != nil {
		t.Fatal(err)
	}
	n := &rdmaNFS{tr: tr, c: c, root: mr.FH}
	t.Cleanup(func() {
		t.Logf("counters: %s", tr.Counters())
		c.Close()
		if live := fab.Live(); !live.Zero() {
			t.Errorf("verbs resources left after Close: %+v", live)
		}
	})
	return n
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// serverFile writes a file straight into knfsd's tmpfs export.
func serverFile(t *testing.T, name string, n int) []byte {
	t.Helper()
	data := make([]byte, n)
	rand.Read(data)
	if err := os.WriteFile(filepath.Join(exportDir, name), data, 0o666); err != nil {
		t.Fatal(err)
	}
	// Past the umask: root is nobody on the export and writes some of them.
	if err := os.Chmod(filepath.Join(exportDir, name), 0o666); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(filepath.Join(exportDir, name)) })
	return data
}

func TestXprtNullAndGetattr(t *testing.T) {
	n := dialRDMA(t, xprt.Config{})
	ctx := ctxT(t, 30*time.Second)
	if err := n.c.Null(ctx); err != nil {
		t.Fatal(err)
	}
	a, err := n.c.Getattr(ctx, n.root)
	if err != nil {
		t.Fatal(err)
	}
	if a.Type != nfs3.TypeDir {
		t.Fatalf("root is %v, want a directory", a.Type)
	}
	send, recv := n.tr.InlineSizes()
	if send != 4096 || recv != 4096 {
		t.Errorf("negotiated inline %d/%d, want 4096/4096 with knfsd", send, recv)
	}
	c := n.tr.Counters()
	if c.Credits != 64 {
		t.Errorf("credit grant %d, want knfsd's 64", c.Credits)
	}
}

// (Memory windows are forced where a test is about them, with the option
// that says it is unsafe: on rxe the transport registers per segment by
// default, and refuses windows otherwise.)
func TestXprtReadWriteChunk1MiB(t *testing.T) {
	n := dialRDMA(t, xprt.Config{Registration: frwr.ModeWindows, UnsafeWindows: true})
	ctx := ctxT(t, 60*time.Second)
	data := serverFile(t, "read-1MiB", 1<<20)
	lr, err := n.c.Lookup(ctx, n.root, "read-1MiB")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	rr, err := n.c.Read(ctx, lr.FH, 0, buf)
	if err != nil {
		t.Fatal(err)
	}
	if rr.Count != len(data) || !bytes.Equal(buf, data) {
		t.Fatalf("READ returned %d bytes, equal %v", rr.Count, bytes.Equal(buf[:rr.Count], data[:rr.Count]))
	}
	c := n.tr.Counters()
	if c.WriteChunks == 0 {
		t.Errorf("the 1 MiB READ used no Write chunk: %s", c)
	}
	if c.RemoteInvalidations == 0 {
		t.Errorf("knfsd did not invalidate the single-rkey READ remotely: %s", c)
	}
}

func TestXprtWriteReadChunk1MiB(t *testing.T) {
	n := dialRDMA(t, xprt.Config{})
	ctx := ctxT(t, 60*time.Second)
	cr, err := n.c.Create(ctx, n.root, "write-1MiB", nfs3.CreateHow{Mode: nfs3.Unchecked})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(filepath.Join(exportDir, "write-1MiB")) })
	fh := cr.FH
	if fh == nil {
		lr, err := n.c.Lookup(ctx, n.root, "write-1MiB")
		if err != nil {
			t.Fatal(err)
		}
		fh = lr.FH
	}
	data := make([]byte, 1<<20)
	rand.Read(data)
	wr, err := n.c.Write(ctx, fh, 0, data, nfs3.FileSync)
	if err != nil {
		t.Fatal(err)
	}
	if wr.Count != uint32(len(data)) {
		t.Fatalf("WRITE wrote %d", wr.Count)
	}
	got, err := os.ReadFile(filepath.Join(exportDir, "write-1MiB"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("server copy differs (err %v, %d bytes)", err, len(got))
	}
	if c := n.tr.Counters(); c.ReadChunks == 0 {
		t.Errorf("the 1 MiB WRITE used no Read chunk: %s", c)
	}
}

func TestXprtReaddirplusReplyChunk(t *testing.T) {
	dir := filepath.Join(exportDir, "dir2000")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for i := 0; i < 2000; i++ {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("entry-%04d", i)), nil, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	n := dialRDMA(t, xprt.Config{})
	ctx := ctxT(t, 120*time.Second)
	lr, err := n.c.Lookup(ctx, n.root, "dir2000")
	if err != nil {
		t.Fatal(err)
	}
	ents, err := n.c.ReadDirPlusAll(ctx, lr.FH)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range ents {
		seen[e.Name] = true
	}
	for i := 0; i < 2000; i++ {
		if !seen[fmt.Sprintf("entry-%04d", i)] {
			t.Fatalf("entry-%04d missing from %d entries", i, len(ents))
		}
	}
	if c := n.tr.Counters(); c.ReplyChunks == 0 {
		t.Errorf("READDIRPLUS used no Reply chunk: %s", c)
	}
}

// TestXprtPositionZero sends a WRITE encoded without a DDP-eligible item
// (all 8 KiB inline in the message): too long for the inline size, it
// travels whole in a position-zero Read chunk (RDMA_NOMSG).
func TestXprtPositionZero(t *testing.T) {
	n := dialRDMA(t, xprt.Config{})
	ctx := ctxT(t, 60*time.Second)
	data := serverFile(t, "pos0", 16)
	_ = data
	lr, err := n.c.Lookup(ctx, n.root, "pos0")
	if err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 8192)
	rand.Read(payload)
	args := sunrpc.AppendUint32(nil, uint32(len(lr.FH)))
	args = append(args, lr.FH...)
	for len(args)%4 != 0 {
		args = append(args, 0)
	}
	args = sunrpc.AppendUint64(args, 0)
	args = sunrpc.AppendUint32(args, uint32(len(payload)))
	args = sunrpc.AppendUint32(args, uint32(nfs3.FileSync))
	args = sunrpc.AppendUint32(args, uint32(len(payload)))
	args = append(args, payload...)
	cred, err := (&sunrpc.AuthSys{MachineName: "testbed"}).Credential()
	if err != nil {
		t.Fatal(err)
	}
	rpc, err := sunrpc.NewClient(n.tr, sunrpc.ClientConfig{Prog: nfs3.Program, Vers: nfs3.Version, Cred: cred})
	if err != nil {
		t.Fatal(err)
	}
	res, err := rpc.Call(ctx, nfs3.ProcWrite, &sunrpc.Args{Head: args, MaxResults: 512})
	if err != nil {
		t.Fatal(err)
	}
	st := res.Uint32()
	res.Release()
	if st != 0 {
		t.Fatalf("the position-zero WRITE got NFS status %d", st)
	}
	got, _ := os.ReadFile(filepath.Join(exportDir, "pos0"))
	if !bytes.Equal(got, payload) {
		t.Fatalf("server file differs after the position-zero WRITE (%d bytes)", len(got))
	}
	if c := n.tr.Counters(); c.PositionZero == 0 {
		t.Errorf("no position-zero Read chunk: %s", c)
	}
}

// TestXprtConcurrentCredits runs 256 concurrent READs against knfsd's 64
// credits: never more outstanding than granted, all complete.
func TestXprtConcurrentCredits(t *testing.T) {
	n := dialRDMA(t, xprt.Config{})
	ctx := ctxT(t, 180*time.Second)
	data := serverFile(t, "conc", 64<<10)
	lr, err := n.c.Lookup(ctx, n.root, "conc")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 256)
	for i := 0; i < 256; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			off := (i * 4096) % len(data)
			buf := make([]byte, 4096)
			rr, err := n.c.Read(ctx, lr.FH, uint64(off), buf)
			if err == nil && !bytes.Equal(buf[:rr.Count], data[off:off+rr.Count]) {
				err = fmt.Errorf("read %d: wrong bytes", i)
			}
			if err != nil {
				errs <- err
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	c := n.tr.Counters()
	if c.MaxOutstanding > 64 {
		t.Errorf("%d calls outstanding at once, more than knfsd's 64 credits", c.MaxOutstanding)
	}
	if c.Calls < 256 {
		t.Errorf("calls %d", c.Calls)
	}
	t.Logf("max outstanding %d, credit waits %d", c.MaxOutstanding, c.CreditWaits)
}

// TestXprtLocalInvalidationAndCongestion: a 1 MiB READ split into four
// Write-chunk segments carries four rkeys, so knfsd cannot invalidate
// remotely and the client invalidates locally; a small send queue makes
// concurrent calls wait for room.
func TestXprtLocalInvalidationAndCongestion(t *testing.T) {
	n := dialRDMA(t, xprt.Config{MaxSegment: 256 << 10, SendQueue: 40, Registration: frwr.ModeWindows, UnsafeWindows: true})
	ctx := ctxT(t, 180*time.Second)
	data := serverFile(t, "multi", 1<<20)
	lr, err := n.c.Lookup(ctx, n.root, "multi")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1<<20)
			rr, err := n.c.Read(ctx, lr.FH, 0, buf)
			if err == nil && (rr.Count != len(data) || !bytes.Equal(buf, data)) {
				err = fmt.Errorf("READ returned wrong bytes (%d)", rr.Count)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	c := n.tr.Counters()
	if c.LocalInvalidations == 0 {
		t.Errorf("no local invalidation for multi-rkey READs: %s", c)
	}
	if c.CongestionWaits == 0 {
		t.Errorf("no congestion wait with a 40-WR send queue: %s", c)
	}
}

// Zero-copy against knfsd: a 1 MiB WRITE from a borrowed registered buffer
// (knfsd RDMA-READs it from there) and a READ of it back into another
// borrowed buffer (knfsd RDMA-WRITEs there) move the data exactly, with no
// copy at the client.
func TestXprtZeroCopyBorrowed(t *testing.T) {
	n := dialRDMA(t, xprt.Config{})
	ctx := ctxT(t, 60*time.Second)
	cr, err := n.c.Create(ctx, n.root, "zero-copy", nfs3.CreateHow{Mode: nfs3.Unchecked})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(filepath.Join(exportDir, "zero-copy")) })
	wb, err := n.tr.Borrow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Release()
	data := wb.Bytes()[:1<<20]
	rand.Read(data)
	want := bytes.Clone(data)
	if wr, err := n.c.Write(ctx, cr.FH, 0, data, nfs3.FileSync); err != nil || int(wr.Count) != len(data) {
		t.Fatalf("WRITE: %v (%d bytes)", err, wr.Count)
	}
	rb, err := n.tr.Borrow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Release()
	got := rb.Bytes()[:1<<20]
	clear(got)
	if rr, err := n.c.Read(ctx, cr.FH, 0, got); err != nil || rr.Count != len(got) {
		t.Fatalf("READ: %v (%d bytes)", err, rr.Count)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the READ does not return what the zero-copy WRITE wrote")
	}
	if onServer, err := os.ReadFile(filepath.Join(exportDir, "zero-copy")); err != nil || !bytes.Equal(onServer, want) {
		t.Fatalf("the server's file differs from the borrowed buffer (%v)", err)
	}
	if c := n.tr.Counters(); c.ZeroCopyWrites != 1 || c.ZeroCopyReads != 1 {
		t.Errorf("zero-copy writes %d, reads %d: want 1 and 1", c.ZeroCopyWrites, c.ZeroCopyReads)
	}
}

// Config.BusyPoll on rxe: the reply loop spins in the provider and reaps
// replies there; every call completes.
func TestXprtBusyPoll(t *testing.T) {
	n := dialRDMA(t, xprt.Config{BusyPoll: 20 * time.Millisecond})
	ctx := ctxT(t, 60*time.Second)
	for i := range 50 {
		if _, err := n.c.Getattr(ctx, n.root); err != nil {
			t.Fatalf("GETATTR %d: %v", i, err)
		}
	}
	c := n.tr.Counters()
	if c.BusyPolls == 0 || c.BusyPollHits == 0 {
		t.Errorf("busy polls %d, hits %d: the reply loop did not reap by spinning", c.BusyPolls, c.BusyPollHits)
	}
}
