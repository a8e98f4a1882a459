package nfs3

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/nfsrdma/nfsrdma/nfs3/gonfstest"
	"github.com/nfsrdma/nfsrdma/sunrpc"
	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/sim"
	"github.com/nfsrdma/nfsrdma/xprt"
	"github.com/nfsrdma/nfsrdma/xprt/xprttest"
)

// rdmaBed is a server for MountRDMA on the simulated fabric: go-nfs over an
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
		Addr: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), RDMAPort)})
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
					rec, err := readTestRecord(br)
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

// useFabric makes Mount open fab in place of rdma-core.
func useFabric(t *testing.T, fab verbs.Fabric, err error) {
	saved := openFabric
	openFabric = func() (verbs.Fabric, error) { return fab, err }
	t.Cleanup(func() { openFabric = saved })
}

// TestMountRDMA mounts by host name over RDMA with two connections on a
// fabric Mount opened, writes, reads back and lists, and checks that Close
// releases the connections and the fabric.
func TestMountRDMA(t *testing.T) {
	b := newRDMABed(t)
	useFabric(t, b.fab, nil)
	ctx := testCtx(t)
	tgt, err := MountRDMA(ctx, "localhost:/", &MountOptions{
		MountPort: b.mountPort,
		Cred:      &sunrpc.AuthNone,
		NConnect:  2,
		RDMA:      &xprt.Config{IOBuffers: 8},
		Client:    ClientOptions{Rsize: 64 << 10},
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
	data := bytes.Repeat([]byte("nfsrdma "), 40<<10) // 320 KiB: several READs and WRITEs
	f, err := tgt.OpenFileContext(ctx, "docs/a", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteContext(ctx, data); err != nil {
		t.Fatal(err)
	}
	if err := f.CloseContext(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := tgt.ReadFileContext(ctx, "docs/a")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes (%v), want %d", len(got), err, len(data))
	}
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

// TestMountRDMACloseReportsLeak: a verbs resource still live on the fabric
// Mount opened, once the connections are closed, is Close's error.
func TestMountRDMACloseReportsLeak(t *testing.T) {
	b := newRDMABed(t)
	useFabric(t, b.fab, nil)
	ctx := testCtx(t)
	tgt, err := MountRDMA(ctx, "127.0.0.1:/", &MountOptions{MountPort: b.mountPort, Cred: &sunrpc.AuthNone, RDMA: &xprt.Config{IOBuffers: 4, MaxIO: 64 << 10}})
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

// TestMountRDMAGivenFabric: a Fabric in MountOptions.RDMA is the caller's:
// Close leaves it open.
func TestMountRDMAGivenFabric(t *testing.T) {
	b := newRDMABed(t)
	useFabric(t, nil, errors.New("Mount opened a fabric although one was given"))
	ctx := testCtx(t)
	tgt, err := MountRDMA(ctx, "localhost:/", &MountOptions{MountPort: b.mountPort, Cred: &sunrpc.AuthNone,
		RDMA: &xprt.Config{Fabric: b.fab, IOBuffers: 4, MaxIO: 64 << 10}})
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

// TestMountRDMANoRDMA: without RDMA (a build without cgo, no device) the
// mount fails at once with the fabric's error, before asking the server.
func TestMountRDMANoRDMA(t *testing.T) {
	b := newRDMABed(t)
	useFabric(t, nil, fmt.Errorf("%w: this binary was built without cgo", verbs.ErrNoRDMA))
	_, err := MountRDMA(testCtx(t), "localhost:/", &MountOptions{MountPort: b.mountPort, Cred: &sunrpc.AuthNone})
	if !errors.Is(err, verbs.ErrNoRDMA) || !strings.Contains(err.Error(), "nfs3: mount localhost:/: ") {
		t.Fatalf("err = %v, want the mount's ErrNoRDMA", err)
	}
	if n := b.tcpConns.Load(); n != 0 {
		t.Errorf("%d MOUNT connections made without RDMA", n)
	}
}

func TestMountOptionsRefused(t *testing.T) {
	ctx := testCtx(t)
	if _, err := Mount(ctx, "127.0.0.1", "/", &MountOptions{Proto: ProtoRDMA, Transport: &memTransport{}}); !errors.Is(err, errTransportAndProto) {
		t.Errorf("Transport with ProtoRDMA: %v", err)
	}
	if _, err := Mount(ctx, "127.0.0.1", "/", &MountOptions{Proto: "udp"}); err == nil || !strings.Contains(err.Error(), `unknown Proto "udp"`) {
		t.Errorf("Proto udp: %v", err)
	}
	if _, err := MountTCP(ctx, "127.0.0.1", nil); err == nil || !strings.Contains(err.Error(), "want host:/export") {
		t.Errorf("spec without export: %v", err)
	}
}

// TestMountTCPSpec mounts "localhost:/" over TCP with two connections.
func TestMountTCPSpec(t *testing.T) {
	s := startGoNFS(t)
	ctx := testCtx(t)
	tgt, err := MountTCP(ctx, "localhost:/", &MountOptions{MountPort: s.port, NFSPort: s.port, Cred: &sunrpc.AuthNone, NConnect: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	if _, ok := tgt.c.rpc.Transport().(*sunrpc.MultiTransport); !ok {
		t.Errorf("transport %T, want a MultiTransport of NConnect 2", tgt.c.rpc.Transport())
	}
	if err := tgt.Client().Null(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := MountTCP(ctx, "localhost:/", &MountOptions{MountPort: s.port, NFSPort: s.port, Cred: &sunrpc.AuthNone, NConnect: MaxNConnect + 1}); err == nil {
		t.Error("NConnect above MaxNConnect accepted")
	}
}

func TestSplitSpec(t *testing.T) {
	for _, tc := range []struct{ spec, host, export string }{
		{"server:/export", "server", "/export"},
		{"10.99.0.1:/export-insecure", "10.99.0.1", "/export-insecure"},
		{"[fe80::1%rxe0]:/a/b", "fe80::1%rxe0", "/a/b"},
		{"fe80::1:/a", "fe80::1", "/a"},
		{"server:/", "server", "/"},
		{"server:/a:b", "server", "/a:b"},
		{"server", "", ""},
		{"server:export", "", ""},
		{":/export", "", ""},
		{"[::1]/export", "", ""},
		{"a b:/x", "", ""},
	} {
		h, e, err := SplitSpec(tc.spec)
		if tc.host == "" {
			if err == nil {
				t.Errorf("SplitSpec(%q) = %q, %q; want an error", tc.spec, h, e)
			}
			continue
		}
		if err != nil || h != tc.host || e != tc.export {
			t.Errorf("SplitSpec(%q) = %q, %q, %v; want %q, %q", tc.spec, h, e, err, tc.host, tc.export)
		}
	}
}

// TestStatusText: errors say what the status means, and still match.
func TestStatusText(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{ErrAcces, "NFS3ERR_ACCES (permission denied)"},
		{ErrNoEnt, "NFS3ERR_NOENT (no such file or directory)"},
		{ErrBadHandle, "NFS3ERR_BADHANDLE (illegal NFS file handle)"},
		{ErrJukebox, "NFS3ERR_JUKEBOX (the server is slow to answer: try again later)"},
		{ErrServerFault, "NFS3ERR_SERVERFAULT (remote I/O error)"},
		{Status(12345), "nfsstat3(12345)"},
		{MountErrNoEnt, "MNT3ERR_NOENT (no such file or directory)"},
		{MountErrAcces, "MNT3ERR_ACCES (permission denied)"},
		{MountStatus(99), "mountstat3(99)"},
		{pathErr("open", "docs/a", ErrAcces), "open docs/a: NFS3ERR_ACCES (permission denied)"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("%#v: %q, want %q", tc.err, got, tc.want)
		}
	}
	err := pathErr("open", "docs/a", ErrAcces)
	var st Status
	if !errors.Is(err, fs.ErrPermission) || !errors.Is(err, syscall.EACCES) || !errors.As(err, &st) || st != ErrAcces {
		t.Errorf("%v does not match fs.ErrPermission, EACCES and Status", err)
	}
	if !errors.Is(MountErrAcces, fs.ErrPermission) {
		t.Error("MNT3ERR_ACCES does not match fs.ErrPermission")
	}
	for s := range statusInfo {
		if s != StatusOK && !strings.HasSuffix(s.Error(), ")") {
			t.Errorf("%d: %q has no meaning", uint32(s), s.Error())
		}
	}
}

// TestPathStyles: the path methods take io/fs names and, deprecated, rooted
// paths for the same files; the io/fs methods take io/fs names only; each
// io/fs method's Context twin gives what it gives.
func TestPathStyles(t *testing.T) {
	s := startGoNFS(t)
	tgt := s.mount(t, nil)
	ctx := testCtx(t)
	if _, err := tgt.Mkdir(ctx, "docs", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := tgt.OpenFileContext(ctx, "docs/a", os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteContext(ctx, []byte("hello"))
	if err := f.CloseContext(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"docs/a", "/docs/a", "docs/../docs/a", "./docs/a"} {
		fi, err := tgt.StatContext(ctx, p)
		if err != nil || fi.Name() != "a" || fi.Size() != 5 {
			t.Errorf("StatContext(%q) = %v, %v", p, fi, err)
		}
		if b, err := tgt.ReadFileContext(ctx, p); err != nil || string(b) != "hello" {
			t.Errorf("ReadFileContext(%q) = %q, %v", p, b, err)
		}
	}
	for _, p := range []string{".", "/", ""} {
		fi, err := tgt.StatContext(ctx, p)
		if err != nil || fi.Name() != "." || !fi.IsDir() {
			t.Errorf("StatContext(%q) = %v, %v; want the root, named \".\"", p, fi, err)
		}
	}
	if fi, err := tgt.Stat("docs/a"); err != nil || fi.Name() != "a" {
		t.Errorf("Stat(docs/a) = %v, %v", fi, err)
	}
	if fi, err := tgt.Stat("."); err != nil || fi.Name() != "." {
		t.Errorf("Stat(.) = %v, %v", fi, err)
	}
	for _, p := range []string{"/docs/a", "docs/../docs/a", "", "/"} {
		if _, err := tgt.Stat(p); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("Stat(%q) = %v, want fs.ErrInvalid", p, err)
		}
		if _, err := tgt.Open(p); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("Open(%q) = %v, want fs.ErrInvalid", p, err)
		}
	}
	a, err := tgt.ReadDir("docs")
	if err != nil {
		t.Fatal(err)
	}
	b, err := tgt.ReadDirContext(ctx, "/docs")
	if err != nil || len(a) != 1 || len(b) != 1 || a[0].Name() != b[0].Name() {
		t.Errorf("ReadDir(docs) = %v; ReadDirContext(/docs) = %v, %v", a, b, err)
	}
	if _, err := tgt.StatContext(ctx, "docs/missing"); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "stat docs/missing: NFS3ERR_NOENT (no such file or directory)") {
		t.Errorf("StatContext(docs/missing) = %v", err)
	}
}
