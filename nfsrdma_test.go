package nfsrdma

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/nfs3/gonfstest"
	"github.com/nfsrdma/nfsrdma/sunrpc"
	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/sim"
	"github.com/nfsrdma/nfsrdma/xprt"
	"github.com/nfsrdma/nfsrdma/xprt/memlock"
	"github.com/nfsrdma/nfsrdma/xprt/xprttest"
)

// TestMain fails the tests if goroutines outlive them (a connection, the
// fabric's engine or a server left running).
func TestMain(m *testing.M) {
	gonfstest.Quiet()
	goleak.VerifyTestMain(m)
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// readRecord reads one RPC record (RFC 5531 §11).
func readRecord(r io.Reader) ([]byte, error) {
	var rec []byte
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return nil, err
		}
		m := binary.BigEndian.Uint32(hdr[:])
		frag := make([]byte, m&^(1<<31))
		if _, err := io.ReadFull(r, frag); err != nil {
			return nil, err
		}
		rec = append(rec, frag...)
		if m&(1<<31) != 0 {
			return rec, nil
		}
	}
}

// rdmaBed is a server for Mount on the simulated fabric: go-nfs over an
// in-memory file system behind both MOUNT over TCP on 127.0.0.1 and
// RPC-over-RDMA at 127.0.0.1:20049 of a sim fabric, so that the root handle
// MOUNT gives works over RDMA.
type rdmaBed struct {
	fab       *sim.Fabric
	srv       *xprttest.Server
	mountPort int
	tcpConns  atomic.Int64 // TCP connections accepted (MOUNT)
}

func newRDMABed(t *testing.T) *rdmaBed {
	t.Helper()
	fsys := gonfstest.NewMemFS()
	if err := fsys.MkdirAll("/.keep", 0o755); err != nil { // memfs acknowledges its root only once it holds something
		t.Fatal(err)
	}
	rpc := gonfstest.NewRPCServer(fsys)
	b := &rdmaBed{fab: sim.NewFabric(sim.PanicOnDoubleInvalidation())}
	var err error
	b.srv, err = xprttest.Start(xprttest.Config{Fabric: b.fab, Handler: rpc,
		Addr: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), Port)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b.mountPort = ln.Addr().(*net.TCPAddr).Port
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			b.tcpConns.Add(1)
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			wg.Go(func() {
				defer conn.Close()
				br := bufio.NewReader(conn)
				for {
					rec, err := readRecord(br)
					if err != nil {
						return
					}
					rep := rpc.ServeRPC(rec)
					if rep == nil {
						return
					}
					out := binary.BigEndian.AppendUint32(nil, uint32(len(rep))|1<<31)
					if _, err := conn.Write(append(out, rep...)); err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
		b.srv.Close()
		rpc.Close()
		b.fab.Close()
	})
	return b
}

// useFabric makes Mount open fab in place of rdma-core, with no
// locked-memory limit (the simulated fabric pins nothing) unless the test
// sets one (useMemlockLimit).
func useFabric(t *testing.T, fab verbs.Fabric, err error) {
	saved := openFabric
	openFabric = func() (verbs.Fabric, error) { return fab, err }
	t.Cleanup(func() { openFabric = saved })
	useMemlockLimit(t, -1)
}

// useMemlockLimit makes Mount read limit (bytes; -1: none) as the process's
// RLIMIT_MEMLOCK.
func useMemlockLimit(t *testing.T, limit int64) {
	saved := memlockLimit
	memlockLimit = func() (int64, error) { return limit, nil }
	t.Cleanup(func() { memlockLimit = saved })
}

// TestMount mounts by host name over RDMA with two connections on a
// fabric Mount opened, writes, reads back and lists, and checks that Close
// releases the connections and the fabric.
func TestMount(t *testing.T) {
	b := newRDMABed(t)
	useFabric(t, b.fab, nil)
	ctx := testCtx(t)
	tgt, err := Mount(ctx, "localhost:/", &Options{
		MountOptions: nfs3.MountOptions{
			MountPort: b.mountPort,
			Cred:      &sunrpc.AuthNone,
			NConnect:  2,
			Client:    nfs3.ClientOptions{Rsize: 64 << 10},
		},
		RDMA: xprt.Config{IOBuffers: 8},
	})
	if err != nil {
		t.Fatal(err)
	}
	// rsize as asked; wsize capped by the RDMA buffers MaxIO sized from it.
	if r, w, err := tgt.Client().IOSizes(ctx, tgt.Root()); err != nil || r != 64<<10 || w != 64<<10 {
		t.Errorf("IOSizes = %d, %d, %v; want 64 KiB both (MaxIO from Rsize)", r, w, err)
	}
	if got := b.srv.Stats().Connections; got != 2 {
		t.Errorf("RDMA connections = %d, want 2 (NConnect)", got)
	}
	if _, err := tgt.Mkdir(ctx, "docs", 0o755); err != nil {
		t.Fatal(err)
	}
	writeReadBack(ctx, t, tgt, "docs/a", bytes.Repeat([]byte("nfsrdma "), 40<<10)) // 320 KiB: several READs and WRITEs
	ents, err := tgt.ReadDirContext(ctx, "docs")
	if err != nil || len(ents) != 1 || ents[0].Name() != "a" {
		t.Fatalf("ReadDirContext(docs) = %v, %v", ents, err)
	}
	if st := b.srv.Stats(); st.ReadChunkBytes == 0 || st.WriteChunkBytes == 0 {
		t.Errorf("no chunk traffic (%+v): the data did not go over RDMA", st)
	}
	// The server's resources live on the same simulated fabric: let them go
	// first, so that what Close checks is the Target's.
	b.srv.Close()
	if err := tgt.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if live := b.fab.Live(); !live.Zero() {
		t.Errorf("verbs resources left: %+v", live)
	}
	if _, err := b.fab.Devices(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.fab.OpenDevice("sim0"); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("the fabric Mount opened is still open after Close (OpenDevice: %v)", err)
	}
}

// writeReadBack creates name with data and reads it back.
func writeReadBack(ctx context.Context, t *testing.T, tgt *nfs3.Target, name string, data []byte) {
	t.Helper()
	f, err := tgt.OpenFileContext(ctx, name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteContext(ctx, data); err != nil {
		t.Fatal(err)
	}
	if err := f.CloseContext(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := tgt.ReadFileContext(ctx, name); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes of %s (%v), want %d", len(got), name, err, len(data))
	}
}

// TestMountCloseReportsLeak: a verbs resource still live on the fabric
// Mount opened, once the connections are closed, is Close's error.
func TestMountCloseReportsLeak(t *testing.T) {
	b := newRDMABed(t)
	useFabric(t, b.fab, nil)
	ctx := testCtx(t)
	tgt, err := Mount(ctx, "127.0.0.1:/", &Options{MountOptions: nfs3.MountOptions{MountPort: b.mountPort, Cred: &sunrpc.AuthNone}, RDMA: xprt.Config{IOBuffers: 4, MaxIO: 64 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	b.srv.Close()
	dev, err := b.fab.OpenDevice("sim0")
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if err := tgt.Close(); err == nil || !strings.Contains(err.Error(), "still live") {
		t.Fatalf("Close with a device left open = %v, want the leak reported", err)
	}
}

// TestMountGivenFabric: a Fabric in MountOptions.RDMA is the caller's:
// Close leaves it open.
func TestMountGivenFabric(t *testing.T) {
	b := newRDMABed(t)
	useFabric(t, nil, errors.New("Mount opened a fabric although one was given"))
	ctx := testCtx(t)
	tgt, err := Mount(ctx, "localhost:/", &Options{MountOptions: nfs3.MountOptions{MountPort: b.mountPort, Cred: &sunrpc.AuthNone},
		RDMA: xprt.Config{Fabric: b.fab, IOBuffers: 4, MaxIO: 64 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tgt.Close(); err != nil {
		t.Fatal(err)
	}
	d, err := b.fab.OpenDevice("sim0")
	if err != nil {
		t.Fatalf("the caller's fabric was closed: %v", err)
	}
	d.Close()
}

// TestMountNoRDMA: without RDMA (a build without cgo, no device) the
// mount fails at once with the fabric's error, before asking the server.
func TestMountNoRDMA(t *testing.T) {
	b := newRDMABed(t)
	useFabric(t, nil, fmt.Errorf("%w: this binary was built without cgo", verbs.ErrNoRDMA))
	_, err := Mount(testCtx(t), "localhost:/", &Options{MountOptions: nfs3.MountOptions{MountPort: b.mountPort, Cred: &sunrpc.AuthNone}})
	if !errors.Is(err, verbs.ErrNoRDMA) || !strings.Contains(err.Error(), "nfsrdma: mount localhost:/: ") {
		t.Fatalf("err = %v, want the mount's ErrNoRDMA", err)
	}
	if n := b.tcpConns.Load(); n != 0 {
		t.Errorf("%d MOUNT connections made without RDMA", n)
	}
}

// TestMountTCP: Options.TCP mounts over TCP through the same call.
func TestMountTCP(t *testing.T) {
	s := gonfstest.Start(t)
	useFabric(t, nil, errors.New("a TCP mount opened the fabric"))
	ctx := testCtx(t)
	tgt, err := Mount(ctx, "localhost:/", &Options{TCP: true, MountOptions: nfs3.MountOptions{MountPort: s.Port, NFSPort: s.Port, Cred: &sunrpc.AuthNone, NConnect: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tgt.Client().Null(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tgt.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestMountRefusesDialOptions(t *testing.T) {
	useFabric(t, nil, errors.New("opened"))
	_, err := Mount(testCtx(t), "127.0.0.1:/x", &Options{MountOptions: nfs3.MountOptions{Dial: func(context.Context, netip.Addr) (sunrpc.Transport, error) { return nil, nil }}})
	if err == nil || !strings.Contains(err.Error(), "leave MountOptions.Transport, Dial and Release nil") {
		t.Errorf("Mount with Dial set: %v", err)
	}
}

// TestMountSizedToMemlock: under Debian's 8 MiB locked-memory limit a
// Mount with the defaults (two connections) takes a smaller pool, as the
// mount helper does, and works: the I/O size comes down to what fits.
func TestMountSizedToMemlock(t *testing.T) {
	b := newRDMABed(t)
	useFabric(t, b.fab, nil)
	useMemlockLimit(t, 8<<20)
	ctx := testCtx(t)
	tgt, err := Mount(ctx, "127.0.0.1:/", &Options{MountOptions: nfs3.MountOptions{
		MountPort: b.mountPort, Cred: &sunrpc.AuthNone, NConnect: 2}})
	if err != nil {
		t.Fatalf("Mount under an 8 MiB limit: %v", err)
	}
	defer tgt.Close()
	r, w, err := tgt.Client().IOSizes(ctx, tgt.Root())
	if err != nil || r >= defaultMaxIO || w >= defaultMaxIO || r < 64<<10 {
		t.Errorf("IOSizes = %d, %d, %v; want the pool's smaller I/O size (64 KiB to 512 KiB)", r, w, err)
	}
	cfg := xprt.Config{MaxIO: int(max(r, w))}
	if _, err := memlock.Fit(&cfg, 2, 8<<20, true); err != nil {
		t.Errorf("two connections at %d bytes do not fit 8 MiB: %v", cfg.MaxIO, err)
	}
	writeReadBack(ctx, t, tgt, "f", bytes.Repeat([]byte("memlock "), 64<<10)) // 512 KiB: several READs and WRITEs
	b.srv.Close()
}

// TestMountMemlockTooSmall: where not even the smallest pool fits, Mount
// fails before asking the server anything, with an error naming the fix;
// a pool the caller set is checked as it is.
func TestMountMemlockTooSmall(t *testing.T) {
	b := newRDMABed(t)
	for _, tc := range []struct {
		name  string
		limit int64
		rdma  xprt.Config
	}{
		{name: "64 KiB", limit: 64 << 10},
		{name: "the caller's pool over 8 MiB", limit: 8 << 20, rdma: xprt.Config{IOBuffers: 32, MaxIO: 1 << 20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fab := sim.NewFabric()
			useFabric(t, fab, nil)
			useMemlockLimit(t, tc.limit)
			_, err := Mount(testCtx(t), "127.0.0.1:/", &Options{MountOptions: nfs3.MountOptions{
				MountPort: b.mountPort, Cred: &sunrpc.AuthNone}, RDMA: tc.rdma})
			var me *memlock.Error
			if !errors.As(err, &me) {
				t.Fatalf("Mount: %v; want a *memlock.Error", err)
			}
			for _, want := range []string{"ulimit -l", "limits.conf", "LimitMEMLOCK="} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%q lacks %q", err, want)
				}
			}
			if n := b.tcpConns.Load(); n != 0 {
				t.Errorf("%d MOUNT connections: the server was asked before the limit was checked", n)
			}
			if _, err := fab.OpenDevice("sim0"); !errors.Is(err, verbs.ErrClosed) {
				t.Errorf("the fabric Mount opened is still open after the refusal (OpenDevice: %v)", err)
			}
		})
	}
}

// TestMountV4MemlockTooSmall: MountV4 over rdma-core fits its pool to the
// locked-memory limit as Mount does (they share rdmaDialer), and refuses a
// limit nothing fits before dialing, closing the fabric it opened.
func TestMountV4MemlockTooSmall(t *testing.T) {
	fab := sim.NewFabric()
	useFabric(t, fab, nil)
	useMemlockLimit(t, 64<<10)
	_, err := MountV4(testCtx(t), "127.0.0.1:/", nil)
	var me *memlock.Error
	if !errors.As(err, &me) {
		t.Fatalf("MountV4: %v; want a *memlock.Error", err)
	}
	if _, err := fab.OpenDevice("sim0"); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("the fabric MountV4 opened is still open after the refusal (OpenDevice: %v)", err)
	}
}
