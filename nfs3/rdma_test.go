package nfs3_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/osfs"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/nfs3/gonfstest"
	"github.com/nfsrdma/nfsrdma/rpcrdma"
	"github.com/nfsrdma/nfsrdma/sunrpc"
	"github.com/nfsrdma/nfsrdma/verbs/sim"
	"github.com/nfsrdma/nfsrdma/xprt"
	"github.com/nfsrdma/nfsrdma/xprt/xprttest"
)

// The NFSv3 client over RPC-over-RDMA on the simulated fabric: xprt as the
// transport, xprttest as the server's RDMA side (knfsd's chunk handling) and
// go-nfs over an in-memory file system behind it. The procedures themselves
// are the conformance suite's (conformance_test.go); these check that the
// DDP-eligible items
// travel as RFC 8267 §3 says: WRITE data and long SYMLINK paths in Read
// chunks, READ data and READLINK paths in Write chunks, large directory pages
// in Reply chunks.

// rdmaIO is the transport's MaxIO in these tests, and the READ/WRITE size.
const rdmaIO = 256 << 10

// rdmaNFS is an NFSv3 client over xprt to an xprttest server on a sim fabric.
type rdmaNFS struct {
	fs   billy.Filesystem // the server's file system, to set up and inspect
	tr   *xprt.Transport
	c    *nfs3.Client
	root nfs3.FileHandle
	srv  *xprttest.Server
}

type rdmaOpts struct {
	client nfs3.ClientOptions
	// wrap, when set, sits in front of the go-nfs handler (to tamper with
	// replies).
	wrap func(next xprttest.Handler) xprttest.Handler
}

// newRDMA starts the server and dials it. Cleanup closes everything and
// checks the fabric for leaked resources and anomalies, and that no
// goroutine outlives the stack.
func newRDMA(t *testing.T, o rdmaOpts) *rdmaNFS {
	t.Helper()
	goroutines := runtime.NumGoroutine()
	n := &rdmaNFS{fs: gonfstest.NewMemFS()}
	// memfs acknowledges its root only once it holds something.
	if err := n.fs.MkdirAll("/.keep", 0o755); err != nil {
		t.Fatal(err)
	}
	fab := sim.NewFabric(sim.PanicOnDoubleInvalidation())
	h, stop, err := xprttest.NewNFSHandler(n.fs)
	if err != nil {
		t.Fatal(err)
	}
	if o.wrap != nil {
		h = o.wrap(h)
	}
	n.srv, err = xprttest.Start(xprttest.Config{Fabric: fab, Handler: h,
		Addr: netip.MustParseAddrPort("10.0.0.1:20049")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n.tr, err = xprt.Dial(ctx, xprt.Config{Fabric: fab, Addr: n.srv.Addr(), MaxIO: rdmaIO, IOBuffers: 16})
	if err != nil {
		t.Fatal(err)
	}
	// MOUNT over the same transport: go-nfs serves both programs.
	mc, err := nfs3.NewMountClient(n.tr, sunrpc.AuthNone, nil)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := mc.Mnt(ctx, "/")
	if err != nil {
		t.Fatalf("MNT over RDMA: %v", err)
	}
	n.root = mr.FH
	opts := o.client
	if opts.Rsize == 0 {
		opts.Rsize = rdmaIO
	}
	if opts.Wsize == 0 {
		opts.Wsize = rdmaIO
	}
	n.c, err = nfs3.NewClient(n.tr, &opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		t.Logf("xprt counters: %s", n.tr.Counters())
		t.Logf("server: %+v", n.srv.Stats())
		n.c.Close()
		n.srv.Close()
		stop()
		if a := fab.Anomalies(); a != (sim.Anomalies{}) {
			t.Errorf("fabric anomalies: %+v", a)
		}
		if live := fab.Live(); !live.Zero() {
			t.Errorf("verbs resources left: %+v", live)
		}
		fab.Close()
		checkGoroutines(t, goroutines)
	})
	return n
}

// checkGoroutines waits for the goroutine count to come back to before.
func checkGoroutines(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Errorf("%d goroutines left running, %d before:\n%s", runtime.NumGoroutine(), before, buf)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func rdmaCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// serverFile returns the content of name on the server's file system.
func (n *rdmaNFS) serverFile(t *testing.T, name string) []byte {
	t.Helper()
	f, err := n.fs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRDMALargeFile writes a multi-MiB file with pipelined UNSTABLE WRITEs and
// a COMMIT, and reads it back with pipelined READs, through the path API: the
// WRITE data travels in Read chunks, the READ data lands through Write chunks.
func TestRDMALargeFile(t *testing.T) {
	n := newRDMA(t, rdmaOpts{client: nfs3.ClientOptions{Window: 8}})
	ctx := rdmaCtx(t)
	tgt := nfs3.NewTarget(n.c, n.root, 0)
	const size = 5<<20 + 12345
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*131 + i>>9)
	}
	want := sha256.Sum256(data)
	writes := (size + rdmaIO - 1) / rdmaIO

	before := n.tr.Counters()
	f, err := tgt.OpenFileContext(ctx, "/big.bin", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if k, err := f.WriteAt(data, 0); k != size || err != nil {
		t.Fatalf("WriteAt: %d, %v", k, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	mid := n.tr.Counters()
	if got := mid.ReadChunks - before.ReadChunks; got < uint64(writes) {
		t.Errorf("%d calls carried a Read chunk for %d WRITEs", got, writes)
	}
	if sha256.Sum256(n.serverFile(t, "big.bin")) != want {
		t.Fatal("the server's copy differs")
	}

	g, err := tgt.OpenContext(ctx, "big.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	got := make([]byte, size)
	if k, err := g.ReadAt(got, 0); k != size || err != nil {
		t.Fatalf("ReadAt: %d, %v", k, err)
	}
	if sha256.Sum256(got) != want {
		t.Fatal("checksum mismatch reading back")
	}
	after := n.tr.Counters()
	if got := after.WriteChunks - mid.WriteChunks; got < uint64(writes) {
		t.Errorf("%d calls offered a Write chunk for %d READs", got, writes)
	}
	if after.MaxOutstanding < 2 {
		t.Errorf("READs and WRITEs were not pipelined: at most %d outstanding", after.MaxOutstanding)
	}

	// io.ReaderAt past the end, through the handle API.
	tail := make([]byte, 1<<20)
	k, err := n.c.ReadAt(ctx, g.Handle(), tail, size-1000)
	if k != 1000 || err != io.EOF || !bytes.Equal(tail[:k], data[size-1000:]) {
		t.Fatalf("ReadAt past the end: %d, %v", k, err)
	}
}

// TestRDMADirectoryPaging lists a directory of 1,200 entries: each 32 KiB
// page comes back through the Reply chunk, and the listing walks the cookies
// to the end.
func TestRDMADirectoryPaging(t *testing.T) {
	n := newRDMA(t, rdmaOpts{})
	ctx := rdmaCtx(t)
	const entries = 1200
	if err := n.fs.MkdirAll("/many", 0o755); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range entries {
		name := fmt.Sprintf("entry-%04d-with-a-longish-name", i)
		want = append(want, name)
		f, err := n.fs.Create("/many/" + name)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	slices.Sort(want)
	lr, err := n.c.Lookup(ctx, n.root, "many")
	if err != nil {
		t.Fatal(err)
	}
	dir := lr.FH

	names := func(list []string) []string {
		list = slices.DeleteFunc(list, func(s string) bool { return s == "." || s == ".." })
		slices.Sort(list)
		return list
	}
	before := n.tr.Counters()
	ents, err := n.c.ReadDirAll(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	after := n.tr.Counters()
	pages := after.Calls - before.Calls // one READDIR a page
	if pages < 2 {
		t.Errorf("the listing took %d page", pages)
	}
	// A 32 KiB page may not fit inline, so every READDIR offers a Reply
	// chunk (go-nfs fills its READDIR pages sparsely: they come back inline;
	// the READDIRPLUS pages below need the chunk).
	if got := after.ReplyChunks - before.ReplyChunks; got < pages {
		t.Errorf("%d of %d READDIR calls offered a Reply chunk", got, pages)
	}
	t.Logf("READDIR: %d pages", pages)
	var got []string
	for _, e := range ents {
		got = append(got, e.Name)
	}
	if got = names(got); !slices.Equal(got, want) {
		t.Errorf("READDIR listed %d names, want %d", len(got), entries)
	}
	plus, err := n.c.ReadDirPlusAll(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, e := range plus {
		got = append(got, e.Name)
		if e.Name != "." && e.Name != ".." && (e.Attr == nil || e.FH == nil || e.Attr.Type != nfs3.TypeReg) {
			t.Errorf("READDIRPLUS entry %s: %+v", e.Name, e)
		}
	}
	if got = names(got); !slices.Equal(got, want) {
		t.Errorf("READDIRPLUS listed %d names, want %d", len(got), entries)
	}
	if n.srv.Stats().ReplyChunkReplies == 0 {
		t.Error("no page came back through a Reply chunk")
	}
}

// TestRDMASymlink creates symbolic links with short and long targets and
// reads them back: a SYMLINK path too long to go inline travels in a Read
// chunk; a READLINK result always lands through a Write chunk.
func TestRDMASymlink(t *testing.T) {
	n := newRDMA(t, rdmaOpts{})
	ctx := rdmaCtx(t)
	long := strings.Repeat("a-rather-long-directory-name/", 137) + "target" // 3,979 bytes
	for _, tc := range []struct {
		name, target string
		readChunk    bool
	}{
		{"short", "some/target", false},
		{"long", long, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := n.tr.Counters()
			sl, err := n.c.Symlink(ctx, n.root, tc.name, nfs3.SetAttr{}, tc.target)
			if err != nil {
				t.Fatal(err)
			}
			mid := n.tr.Counters()
			if got := mid.ReadChunks > before.ReadChunks; got != tc.readChunk {
				t.Errorf("SYMLINK of %d bytes used a Read chunk: %v, want %v", len(tc.target), got, tc.readChunk)
			}
			if got, err := n.fs.Readlink(tc.name); err != nil || got != tc.target {
				t.Fatalf("the server's link: %d bytes, %v", len(got), err)
			}
			fh := sl.FH
			if fh == nil {
				lr, err := n.c.Lookup(ctx, n.root, tc.name)
				if err != nil {
					t.Fatal(err)
				}
				fh = lr.FH
			}
			rl, err := n.c.Readlink(ctx, fh)
			if err != nil {
				t.Fatal(err)
			}
			if rl.Target != tc.target {
				t.Errorf("READLINK returned %d bytes, want %d", len(rl.Target), len(tc.target))
			}
			if after := n.tr.Counters(); after.WriteChunks == mid.WriteChunks {
				t.Error("READLINK offered no Write chunk")
			}
		})
	}
	// The path API: Symlink then Readlink by path.
	tgt := nfs3.NewTarget(n.c, n.root, 0)
	if err := tgt.Symlink(ctx, "../x", "/via-path"); err != nil {
		t.Fatal(err)
	}
	if got, err := tgt.Readlink(ctx, "/via-path"); err != nil || got != "../x" {
		t.Errorf("Readlink: %q, %v", got, err)
	}
}

// TestRDMAErrorMapping checks that NFS errors over RDMA are Status values
// matching io/fs and syscall errors.
func TestRDMAErrorMapping(t *testing.T) {
	n := newRDMA(t, rdmaOpts{})
	ctx := rdmaCtx(t)
	c, root := n.c, n.root
	tgt := nfs3.NewTarget(c, root, 0)
	if _, err := tgt.Mkdir(ctx, "/d", 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := tgt.Create(ctx, "/d/f", 0o644); err != nil {
		t.Fatal(err)
	}

	_, err := c.Lookup(ctx, root, "missing")
	if !errors.Is(err, nfs3.ErrNoEnt) || !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, syscall.ENOENT) {
		t.Errorf("LOOKUP of a missing name: %v", err)
	}
	if _, err := tgt.Create(ctx, "/d/f", 0o644); !errors.Is(err, fs.ErrExist) || !errors.Is(err, syscall.EEXIST) {
		t.Errorf("guarded CREATE of an existing file: %v", err)
	}
	if _, err := tgt.Mkdir(ctx, "/d", 0o755); !errors.Is(err, fs.ErrExist) {
		t.Errorf("MKDIR of an existing directory: %v", err)
	}
	var pe *fs.PathError
	if _, err := tgt.OpenContext(ctx, "/d/nope"); !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &pe) || pe.Path != "/d/nope" {
		t.Errorf("Open of a missing file: %v", err)
	}
	if err := tgt.Remove(ctx, "/d/nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("REMOVE of a missing file: %v", err)
	}
	// go-nfs answers RMDIR of a non-empty directory with NFS3ERR_IO rather
	// than NFS3ERR_NOTEMPTY; only refusal is checked here (knfsd's answer is
	// checked in the integration suite).
	if err := tgt.RmDir(ctx, "/d"); err == nil {
		t.Error("RMDIR of a non-empty directory succeeded")
	}
	// A handle the server never issued.
	bogus := make(nfs3.FileHandle, nfs3.FHSize)
	for i := range bogus {
		bogus[i] = 0xa5
	}
	if _, err := c.Getattr(ctx, bogus); err == nil {
		t.Error("GETATTR of a bogus handle succeeded")
	} else if st, ok := errors.AsType[nfs3.Status](err); !ok {
		t.Errorf("GETATTR of a bogus handle: %v is not a Status", err)
	} else {
		t.Logf("GETATTR of a bogus handle: %v", st)
	}
	// A handle longer than NFS3_FHSIZE never leaves the client.
	calls := n.tr.Counters().Calls
	long := make(nfs3.FileHandle, nfs3.FHSize+1)
	var hl *nfs3.HandleTooLongError
	if _, err := c.Read(ctx, long, 0, make([]byte, 10)); !errors.As(err, &hl) || hl.Len != nfs3.FHSize+1 {
		t.Errorf("READ with a %d-byte handle: %v", len(long), err)
	}
	if _, err := c.Link(ctx, root, long, "x"); !errors.As(err, &hl) {
		t.Errorf("LINK into a %d-byte handle: %v", len(long), err)
	}
	if got := n.tr.Counters().Calls; got != calls {
		t.Errorf("%d calls sent with an over-long handle", got-calls)
	}
}

// tamper answers the NFS procedures in replies itself, with the whole RPC
// reply the function builds, and passes every other call to next.
type tamper struct {
	next    xprttest.Handler
	replies map[uint32]func(xid uint32, args *sunrpc.Decoder) []byte
}

func (h *tamper) ServeRPC(call []byte) []byte {
	d := sunrpc.NewDecoder(call)
	ch, err := sunrpc.DecodeCall(d)
	if err != nil || ch.Prog != nfs3.Program || h.replies[ch.Proc] == nil {
		return h.next.ServeRPC(call)
	}
	return h.replies[ch.Proc](ch.XID, d)
}

// accepted is an accepted RPC reply with accept status stat, then results.
func accepted(xid uint32, stat sunrpc.AcceptStat, results ...[]byte) []byte {
	b := sunrpc.AppendReply(nil, &sunrpc.ReplyHeader{XID: xid, Stat: sunrpc.MsgAccepted, Verf: sunrpc.AuthNone, Accept: stat})
	for _, r := range results {
		b = append(b, r...)
	}
	return b
}

func u32(vs ...uint32) []byte {
	var b []byte
	for _, v := range vs {
		b = sunrpc.AppendUint32(b, v)
	}
	return b
}

// readReply is a successful READ3res without attributes: count, eof, and
// data (its length word, the bytes, the pad).
func readReply(count uint32, data []byte) []byte {
	return sunrpc.AppendOpaque(u32(0, 0, count, 0), data)
}

// readCount skips a READ's handle and offset and returns its count.
func readCount(d *sunrpc.Decoder) uint32 {
	d.Opaque(nfs3.FHSize)
	d.Uint64()
	return d.Uint32()
}

// loopPage is a READDIR3resok page of 300 entries (more than fits inline)
// whose cookies are the same on every page and which never ends: a listing
// that would loop.
func loopPage() []byte {
	b := u32(0, 0)                        // NFS3_OK, no directory attributes
	b = append(b, 1, 2, 3, 4, 5, 6, 7, 8) // cookie verifier
	for i := range 300 {
		b = sunrpc.AppendBool(b, true)
		b = sunrpc.AppendUint64(b, uint64(1000+i))
		b = sunrpc.AppendString(b, fmt.Sprintf("looping-entry-%03d", i))
		b = sunrpc.AppendUint64(b, uint64(1+i))
	}
	return sunrpc.AppendBool(sunrpc.AppendBool(b, false), false)
}

type badReplyCheck struct {
	name string
	call func() error
	want func(error) bool
}

func runBadReplyChecks(t *testing.T, ctx context.Context, checks []badReplyCheck) {
	t.Helper()
	for _, ck := range checks {
		err := ck.call()
		if err == nil || !ck.want(err) {
			t.Errorf("%s: %v (%T)", ck.name, err, err)
		} else {
			t.Logf("%s: %v", ck.name, err)
		}
	}
	if ctx.Err() != nil {
		t.Fatal("calls hung")
	}
}

// TestRDMABadReplies has the server answer with NFS results that do not
// decode or break RFC 1813: each call fails promptly with a typed error,
// nothing panics or hangs, and the connection keeps serving.
func TestRDMABadReplies(t *testing.T) {
	ok := func(results ...[]byte) func(uint32, *sunrpc.Decoder) []byte {
		return func(xid uint32, _ *sunrpc.Decoder) []byte { return accepted(xid, sunrpc.Success, results...) }
	}
	h := &tamper{replies: map[uint32]func(uint32, *sunrpc.Decoder) []byte{
		// The status word cut in half.
		nfs3.ProcGetattr: ok([]byte{0, 0}),
		// A handle of 65 bytes (NFS3_FHSIZE is 64).
		nfs3.ProcLookup: ok(sunrpc.AppendOpaque(u32(0), make([]byte, nfs3.FHSize+1))),
		// An attributes_follow boolean of 7.
		nfs3.ProcAccess: ok(u32(0, 7)),
		// More data than asked: inline for a small READ; for a large one the
		// count word overstates what went into the Write chunk.
		nfs3.ProcRead: func(xid uint32, d *sunrpc.Decoder) []byte {
			count := readCount(d)
			if count <= 1024 {
				return accepted(xid, sunrpc.Success, readReply(2*count, make([]byte, 2*count)))
			}
			return accepted(xid, sunrpc.Success, readReply(count+4096, make([]byte, 16)))
		},
		// A directory whose cookies repeat, through the Reply chunk.
		nfs3.ProcReaddir: ok(loopPage()),
		// A path length of 1 GiB.
		nfs3.ProcReadlink: ok(u32(0, 0, 1<<30)),
		// A WRITE that claims more bytes written than were sent.
		nfs3.ProcWrite: ok(u32(0, 0, 0, 1<<20, uint32(nfs3.FileSync)), make([]byte, nfs3.WriteVerfSize)),
	}}
	n := newRDMA(t, rdmaOpts{wrap: func(next xprttest.Handler) xprttest.Handler { h.next = next; return h }})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fh := nfs3.FileHandle("a-handle")
	if _, _, err := n.c.IOSizes(ctx, n.root); err != nil { // for ReadAt
		t.Fatal(err)
	}

	replyErr := func(target any) func(error) bool {
		return func(err error) bool {
			var re *nfs3.ReplyError
			if !errors.As(err, &re) {
				return false
			}
			if e, ok := target.(error); ok {
				return errors.Is(err, e)
			}
			return target == nil || errors.As(err, target)
		}
	}
	overflow := func(asked int) func(error) bool {
		return func(err error) bool {
			var ro *nfs3.ReadOverflowError
			return errors.As(err, &ro) && ro.Asked == asked && ro.Got > uint64(asked)
		}
	}
	runBadReplyChecks(t, ctx, []badReplyCheck{
		{"GETATTR cut short", func() error { _, err := n.c.Getattr(ctx, fh); return err }, replyErr(sunrpc.ErrTruncated)},
		{"LOOKUP long handle", func() error { _, err := n.c.Lookup(ctx, fh, "x"); return err }, replyErr(new(*nfs3.HandleTooLongError))},
		{"ACCESS bad bool", func() error { _, err := n.c.Access(ctx, fh, 1); return err }, replyErr(new(*sunrpc.BoolError))},
		{"READ inline overflow", func() error { _, err := n.c.Read(ctx, fh, 0, make([]byte, 100)); return err }, overflow(100)},
		{"READ Write-chunk overflow", func() error { _, err := n.c.Read(ctx, fh, 0, make([]byte, 64<<10)); return err }, overflow(64 << 10)},
		{"ReadAt overflow", func() error { _, err := n.c.ReadAt(ctx, fh, make([]byte, 1<<20), 0); return err }, overflow(rdmaIO)},
		{"READDIR loop", func() error { _, err := n.c.ReadDirAll(ctx, fh); return err }, func(err error) bool {
			var cl *nfs3.CookieLoopError
			return errors.As(err, &cl) && !cl.Empty
		}},
		{"READLINK 1 GiB", func() error { _, err := n.c.Readlink(ctx, fh); return err }, replyErr(new(*sunrpc.LengthError))},
		{"WRITE overcount", func() error { _, err := n.c.Write(ctx, fh, 0, []byte("abc"), nfs3.FileSync); return err }, replyErr(nil)},
	})
	// The connection still serves well-formed replies.
	if err := n.c.Null(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := n.c.Fsinfo(ctx, n.root); err != nil {
		t.Fatal(err)
	}
	if c := n.tr.Counters(); c.Reconnects != 0 || c.MalformedReplies != 0 {
		t.Errorf("NFS-level garbage upset the transport: %s", c)
	}
}

// TestRDMABadRPCReplies answers with RPC replies that are malformed, carry
// the wrong xid or reject the call, and with an RDMA_ERROR: typed errors, no
// panic, no hang.
func TestRDMABadRPCReplies(t *testing.T) {
	h := &tamper{replies: map[uint32]func(uint32, *sunrpc.Decoder) []byte{
		// Eight bytes of an RPC reply.
		nfs3.ProcFsstat: func(xid uint32, _ *sunrpc.Decoder) []byte { return u32(xid, 1) },
		// A well-formed reply for another xid (the transport header carries
		// the call's xid, so it reaches this call).
		nfs3.ProcPathconf: func(xid uint32, _ *sunrpc.Decoder) []byte { return accepted(^xid, sunrpc.Success) },
		// Not a reply at all: a call message.
		nfs3.ProcFsinfo: func(xid uint32, _ *sunrpc.Decoder) []byte {
			return sunrpc.AppendCall(nil, &sunrpc.CallHeader{XID: xid, Prog: nfs3.Program, Vers: nfs3.Version})
		},
		nfs3.ProcCommit: func(xid uint32, _ *sunrpc.Decoder) []byte { return accepted(xid, sunrpc.GarbageArgs) },
		// READ data that does not fit the Write chunk offered: the server
		// answers RDMA_ERROR (ERR_CHUNK), as knfsd does.
		nfs3.ProcRead: func(xid uint32, d *sunrpc.Decoder) []byte {
			count := readCount(d)
			return accepted(xid, sunrpc.Success, readReply(count, make([]byte, count+8192)))
		},
	}}
	n := newRDMA(t, rdmaOpts{wrap: func(next xprttest.Handler) xprttest.Handler { h.next = next; return h }})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fh := nfs3.FileHandle("a-handle")
	malformed := func(err error) bool {
		var he *sunrpc.HeaderError
		return errors.As(err, &he) || errors.Is(err, sunrpc.ErrTruncated)
	}
	runBadReplyChecks(t, ctx, []badReplyCheck{
		{"FSSTAT truncated RPC reply", func() error { _, err := n.c.Fsstat(ctx, fh); return err }, malformed},
		{"PATHCONF wrong xid", func() error { _, err := n.c.Pathconf(ctx, fh); return err }, malformed},
		{"FSINFO call message as reply", func() error { _, err := n.c.Fsinfo(ctx, fh); return err }, malformed},
		{"COMMIT GARBAGE_ARGS", func() error { _, err := n.c.Commit(ctx, fh, 0, 0); return err }, func(err error) bool {
			return errors.Is(err, sunrpc.ErrGarbageArgs)
		}},
		{"READ beyond the Write chunk", func() error { _, err := n.c.Read(ctx, fh, 0, make([]byte, 64<<10)); return err }, func(err error) bool {
			var ce *rpcrdma.RemoteChunkError
			return errors.As(err, &ce)
		}},
	})
	if err := n.c.Null(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := n.c.Getattr(ctx, n.root); err != nil {
		t.Fatal(err)
	}
}

// An NFSv3 client over RPC-over-RDMA: here on the simulated fabric against
// an in-process server exporting a temporary directory; on real hardware the
// fabric is verbs/ibv.Open() and the address the server's port 20049. WRITE
// data travels in Read chunks and READ data lands through Write chunks,
// without copies.
func Example_rdma() {
	dir, err := os.MkdirTemp("", "nfs3-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	fab := sim.NewFabric() // ibv.Open() on a real device
	defer fab.Close()
	handler, stop, err := xprttest.NewNFSHandler(osfs.New(dir))
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	srv, err := xprttest.Start(xprttest.Config{Fabric: fab, Handler: handler})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	ctx := context.Background()
	tr, err := xprt.Dial(ctx, xprt.Config{Fabric: fab, Addr: srv.Addr(), MaxIO: 256 << 10})
	if err != nil {
		log.Fatal(err)
	}
	// The root handle: this server answers MOUNT over the same transport;
	// knfsd's mountd answers over TCP (nfs3.DialMount).
	mc, err := nfs3.NewMountClient(tr, sunrpc.AuthNone, nil)
	if err != nil {
		log.Fatal(err)
	}
	root, err := mc.Mnt(ctx, "/")
	if err != nil {
		log.Fatal(err)
	}
	c, err := nfs3.NewClient(tr, &nfs3.ClientOptions{Rsize: 256 << 10, Wsize: 256 << 10})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	cr, err := c.Create(ctx, root.FH, "data.bin", nfs3.CreateHow{Mode: nfs3.Guarded})
	if err != nil {
		log.Fatal(err)
	}
	data := bytes.Repeat([]byte("nfs over rdma "), 100_000)
	if _, err := c.WriteAt(ctx, cr.FH, data, 0); err != nil { // UNSTABLE WRITEs + COMMIT
		log.Fatal(err)
	}
	got := make([]byte, len(data))
	n, err := c.ReadAt(ctx, cr.FH, got, 0)
	fmt.Println(n, err, bytes.Equal(got, data))
	ctr := tr.Counters()
	fmt.Println("read chunks:", ctr.ReadChunks > 0, "write chunks:", ctr.WriteChunks > 0)
	// Output:
	// 1400000 <nil> true
	// read chunks: true write chunks: true
}
