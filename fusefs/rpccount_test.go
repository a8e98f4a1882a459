package fusefs

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/nfsrdma/nfsrdma/fusefs/fusefstest"
	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// sentCall is what a recorder saw of one NFS call.
type sentCall struct {
	proc   uint32
	cred   sunrpc.OpaqueAuth
	count  uint32         // READ: the count asked for
	stable nfs3.StableHow // WRITE
	size   int            // WRITE: the data's length
	// SETATTR: the mode, owner and group it sets (nil: none).
	mode, uid, gid *uint32
}

// recorder is a transport that records the NFS calls going through it.
type recorder struct {
	sunrpc.Transport
	mu    sync.Mutex
	calls []sentCall
	// refuse, if set, picks calls answered NFS3ERR_ACCES (with no
	// post-op attributes) instead of being sent, as a squashing server
	// answers them.
	refuse func(sentCall) bool
	// grant, if set, limits the rights an ACCESS reply grants to those
	// it returns for the call (as a server's ACL or squashing would):
	// the granted bits are ANDed with it.
	grant func(sentCall) uint32
	// readDelay, if set, holds each READ that long before sending it (a
	// slow server: concurrent requests overlap as on the test bed).
	readDelay time.Duration
}

func (r *recorder) RoundTrip(ctx context.Context, req *sunrpc.Request) (*sunrpc.Reply, error) {
	if c, ok := parseCall(req); ok {
		r.mu.Lock()
		r.calls = append(r.calls, c)
		refuse, delay, grant := r.refuse, r.readDelay, r.grant
		r.mu.Unlock()
		if c.proc == nfs3.ProcAccess && grant != nil && (refuse == nil || !refuse(c)) {
			rep, err := r.Transport.RoundTrip(ctx, req)
			if err == nil {
				limitAccess(rep.Inline, grant(c))
			}
			return rep, err
		}
		if c.proc == nfs3.ProcRead && delay > 0 {
			time.Sleep(delay)
		}
		if refuse != nil && refuse(c) {
			// xid, REPLY, MSG_ACCEPTED, AUTH_NONE verifier, SUCCESS;
			// NFS3ERR_ACCES (13) and no attributes (a post_op_attr,
			// or the two of a wcc_data).
			var b []byte
			for _, w := range []uint32{req.XID, 1, 0, 0, 0, 0, 13, 0, 0} {
				b = binary.BigEndian.AppendUint32(b, w)
			}
			return sunrpc.NewReply(b, nil, nil), nil
		}
	}
	return r.Transport.RoundTrip(ctx, req)
}

// limitAccess ANDs the rights of an ACCESS reply b (a whole RPC reply) that
// succeeded with mask.
func limitAccess(b []byte, mask uint32) {
	// xid, REPLY, MSG_ACCEPTED, the verifier (flavor, length, body),
	// SUCCESS, then nfsstat3; the rights are the last word of ACCESS3resok.
	if len(b) < 20 {
		return
	}
	st := 20 + int(binary.BigEndian.Uint32(b[16:])+3)&^3 + 4
	if len(b) < st+4 || binary.BigEndian.Uint32(b[st:]) != 0 {
		return
	}
	w := b[len(b)-4:]
	binary.BigEndian.PutUint32(w, binary.BigEndian.Uint32(w)&mask)
}

// since returns the calls of proc recorded from index from on.
func (r *recorder) since(from int, proc uint32) []sentCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []sentCall
	for _, c := range r.calls[from:] {
		if c.proc == proc {
			out = append(out, c)
		}
	}
	return out
}

func (r *recorder) mark() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

// parseCall reads an NFS call's procedure, credential and the arguments the
// tests look at.
func parseCall(req *sunrpc.Request) (sentCall, bool) {
	h := req.Head
	if len(h) < 32 || binary.BigEndian.Uint32(h[4:]) != uint32(sunrpc.MsgCall) || binary.BigEndian.Uint32(h[12:]) != nfs3.Program {
		return sentCall{}, false
	}
	c := sentCall{proc: binary.BigEndian.Uint32(h[20:])}
	c.cred.Flavor = sunrpc.AuthFlavor(binary.BigEndian.Uint32(h[24:]))
	n := int(binary.BigEndian.Uint32(h[28:]))
	if 32+n <= len(h) {
		c.cred.Body = slices.Clone(h[32 : 32+n])
	}
	switch c.proc {
	case nfs3.ProcRead:
		c.count = binary.BigEndian.Uint32(h[len(h)-4:])
	case nfs3.ProcWrite:
		c.stable = nfs3.StableHow(binary.BigEndian.Uint32(h[len(h)-8:]))
		c.size = int(binary.BigEndian.Uint32(h[len(h)-4:]))
	case nfs3.ProcSetattr:
		parseSattr(&c, h[min(len(h), 32+(n+3)&^3):])
	}
	return c, true
}

// parseSattr reads the mode, uid and gid of a SETATTR's arguments from b:
// its verifier, file handle and sattr3 (RFC 1813 §2.6).
func parseSattr(c *sentCall, b []byte) {
	word := func() (uint32, bool) {
		if len(b) < 4 {
			return 0, false
		}
		w := binary.BigEndian.Uint32(b)
		b = b[4:]
		return w, true
	}
	skip := func() bool { // an opaque<>
		n, ok := word()
		if !ok || len(b) < int((n+3)&^3) {
			return false
		}
		b = b[(n+3)&^3:]
		return true
	}
	if _, ok := word(); !ok || !skip() || !skip() { // verifier flavor and body, the handle
		return
	}
	for _, to := range []**uint32{&c.mode, &c.uid, &c.gid} {
		set, ok := word()
		if !ok {
			return
		}
		if set != 0 {
			v, ok := word()
			if !ok {
				return
			}
			*to = &v
		}
	}
}

// mountRecorded mounts srv with every NFS call recorded.
func mountRecorded(t *testing.T, srv *fusefstest.Server, o *Options, mc MountConfig) (*mounted, *recorder) {
	t.Helper()
	return mountRecordedSetup(t, srv, o, mc, nil)
}

// mountRecordedSetup is mountRecorded with setup called on the FS before it
// is mounted (see mountGoNFSSetup).
func mountRecordedSetup(t *testing.T, srv *fusefstest.Server, o *Options, mc MountConfig, setup func(*FS)) (*mounted, *recorder) {
	t.Helper()
	rec := &recorder{}
	m := mountGoNFSSetup(t, srv, o, func(tr sunrpc.Transport) sunrpc.Transport {
		rec.Transport = tr
		return rec
	}, mc, setup)
	return m, rec
}

// TestRPCRandomRead4K: a random reader costs exactly one READ of its size
// per read, however large the file and its read-ahead window.
func TestRPCRandomRead4K(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	data := make([]byte, 16<<20)
	rand.Read(data)
	check(t, os.WriteFile(filepath.Join(srv.Dir, "big"), data, 0o644))
	o := DefaultOptions()
	o.ReadAhead = 8 << 20
	m, rec := mountRecorded(t, srv, &o, MountConfig{})
	f, err := os.OpenFile(m.path("big"), os.O_RDONLY|syscall.O_DIRECT, 0)
	check(t, err)
	defer f.Close()
	from := rec.mark()
	const reads = 40
	p := make([]byte, 4096)
	for i := range reads {
		// Scattered, never adjacent, some within a segment of the last.
		off := int64((i*7919)%4096) * 4096
		if i%2 == 1 {
			off = int64((i*7919+5)%4096) * 4096
		}
		n, err := f.ReadAt(p, off)
		if err != nil || n != len(p) || !bytes.Equal(p, data[off:off+4096]) {
			t.Fatalf("read %d at %d: %d bytes, %v, right %v", i, off, n, err, bytes.Equal(p[:n], data[off:off+int64(n)]))
		}
	}
	got := rec.since(from, nfs3.ProcRead)
	if len(got) != reads {
		t.Errorf("%d random reads of 4 KiB made %d READs", reads, len(got))
	}
	for _, c := range got {
		if c.count != 4096 {
			t.Errorf("READ of %d bytes for a read of 4096", c.count)
			break
		}
	}
}

// TestRPCPipelinedDirectRead: a direct-I/O reader that keeps several
// sequential reads in flight (libaio, several threads) gets exactly what it
// asks for, one READ per read, as from the kernel client: read-ahead
// windows started for reads already on their way only fetch the same
// bytes twice.
func TestRPCPipelinedDirectRead(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	const chunk = 256 << 10
	data := make([]byte, 16<<20)
	rand.Read(data)
	check(t, os.WriteFile(filepath.Join(srv.Dir, "big"), data, 0o644))
	o := DefaultOptions()
	o.ReadAhead = 8 << 20
	o.Rsize = chunk
	m, rec := mountRecorded(t, srv, &o, MountConfig{})
	rec.mu.Lock()
	rec.readDelay = 2 * time.Millisecond
	rec.mu.Unlock()
	f, err := os.OpenFile(m.path("big"), os.O_RDONLY|syscall.O_DIRECT, 0)
	check(t, err)
	defer f.Close()
	from := rec.mark()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := make([]byte, chunk)
			for {
				// Three passes, as a time-based benchmark wraps around.
				off := next.Add(chunk) - chunk
				if off >= 3*int64(len(data)) {
					return
				}
				off %= int64(len(data))
				n, err := f.ReadAt(p, off)
				if err != nil || n != len(p) || !bytes.Equal(p, data[off:off+chunk]) {
					t.Errorf("read at %d: %d bytes, %v", off, n, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	var fetched int
	got := rec.since(from, nfs3.ProcRead)
	for _, c := range got {
		fetched += int(c.count)
	}
	// The first reads may come one at a time and open a window before
	// two overlap: at most that window's first segments more.
	if fetched > 3*len(data)+2*chunk || len(got) > 3*len(data)/chunk+2 {
		t.Errorf("8 pipelined direct readers, 3 passes over a %d MiB file, fetched %d MiB in %d READs", len(data)>>20, fetched>>20, len(got))
	}
}

// TestRPCRereadGoesToServer: data read ahead and given out once is not
// given again from the read-ahead: a sequential reader's second pass over
// what it read (the kernel asks only when its page cache let go of it)
// costs READs, as on the kernel client, so the server's answer (new data,
// a stale handle) is seen.
func TestRPCRereadGoesToServer(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	data := make([]byte, 1<<20)
	rand.Read(data)
	check(t, os.WriteFile(filepath.Join(srv.Dir, "f"), data, 0o644))
	o := DefaultOptions()
	o.ReadAhead = 4 << 20
	m, rec := mountRecorded(t, srv, &o, MountConfig{})
	f, err := os.OpenFile(m.path("f"), os.O_RDONLY|syscall.O_DIRECT, 0)
	check(t, err)
	defer f.Close()
	p := make([]byte, 64<<10)
	for off := int64(0); off < int64(len(data)); off += int64(len(p)) {
		if n, err := f.ReadAt(p, off); err != nil || n != len(p) || !bytes.Equal(p, data[off:off+int64(n)]) {
			t.Fatalf("first pass at %d: %d bytes, %v", off, n, err)
		}
	}
	// The server's copy changes; the reader goes over it again.
	data[0] ^= 0xff
	check(t, os.WriteFile(filepath.Join(srv.Dir, "f"), data, 0o644))
	from := rec.mark()
	if n, err := f.ReadAt(p, 0); err != nil || n != len(p) {
		t.Fatalf("second pass: %d bytes, %v", n, err)
	}
	if got := rec.since(from, nfs3.ProcRead); len(got) == 0 {
		t.Errorf("reading again what the read-ahead gave out made no READ")
	}
	if p[0] != data[0] {
		t.Errorf("reading again gave the read-ahead's old byte %#x, the server has %#x", p[0], data[0])
	}
}

// TestRPCSequentialSmallWrites: 256 sequential writes of 4 KiB are gathered
// into WRITEs of wsize.
func TestRPCSequentialSmallWrites(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	o := DefaultOptions()
	o.Wsize = 64 << 10
	m, rec := mountRecorded(t, srv, &o, MountConfig{})
	data := make([]byte, 1<<20)
	rand.Read(data)
	f, err := os.Create(m.path("seq"))
	check(t, err)
	from := rec.mark()
	for off := 0; off < len(data); off += 4096 {
		_, err := f.Write(data[off : off+4096])
		check(t, err)
	}
	check(t, f.Close())
	writes := rec.since(from, nfs3.ProcWrite)
	if want := len(data) / (64 << 10); len(writes) != want {
		t.Errorf("256 writes of 4 KiB made %d WRITEs, want %d (wsize 64 KiB)", len(writes), want)
	}
	for _, w := range writes {
		if w.size != 64<<10 {
			t.Errorf("a WRITE of %d bytes", w.size)
			break
		}
	}
	got, err := os.ReadFile(filepath.Join(srv.Dir, "seq"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("server copy: %d bytes, %v", len(got), err)
	}
	// A write that does not follow the gathered ones sends them first; a
	// stat in between sees the size of both.
	f, err = os.OpenFile(m.path("seq"), os.O_WRONLY, 0)
	check(t, err)
	_, err = f.WriteAt([]byte("head"), 0)
	check(t, err)
	_, err = f.WriteAt([]byte("tail"), int64(len(data)))
	check(t, err)
	if fi, err := os.Stat(m.path("seq")); err != nil || fi.Size() != int64(len(data))+4 {
		t.Fatalf("stat with writes gathered: %v, %v", fi, err)
	}
	check(t, f.Close())
	got, err = os.ReadFile(filepath.Join(srv.Dir, "seq"))
	if err != nil || string(got[:4]) != "head" || string(got[len(data):]) != "tail" {
		t.Fatalf("server copy after two small writes: %d bytes, %v", len(got), err)
	}
}

// TestRPCCreateWriteClose: creating a small file costs CREATE and one
// FILE_SYNC WRITE at close, no COMMIT; a stat right after costs nothing.
func TestRPCCreateWriteClose(t *testing.T) {
	// memfs: go-nfs's CREATE reply on the disk backend lacks the new
	// file's attributes (so a GETATTR must follow, as with the kernel).
	srv := startGoNFS(t, backendMem)
	us := &unstableServer{}
	us.setVerfs(1, 1)
	m := mountGoNFSVia(t, srv, nil, func(tr sunrpc.Transport) sunrpc.Transport {
		us.Transport = tr
		return us
	})
	before := map[uint32]uint64{}
	procs := []uint32{nfs3.ProcCreate, nfs3.ProcWrite, nfs3.ProcCommit, nfs3.ProcGetattr, nfs3.ProcLookup, nfs3.ProcSetattr}
	for _, p := range procs {
		before[p] = m.calls(p)
	}
	data := make([]byte, 4096)
	rand.Read(data)
	check(t, os.WriteFile(m.path("small"), data, 0o644))
	delta := func(p uint32) uint64 { return m.calls(p) - before[p] }
	if delta(nfs3.ProcCreate) != 1 || delta(nfs3.ProcWrite) != 1 || delta(nfs3.ProcCommit) != 0 || delta(nfs3.ProcGetattr) != 0 || delta(nfs3.ProcSetattr) != 0 {
		t.Errorf("create+write 4 KiB+close: CREATE %d WRITE %d COMMIT %d GETATTR %d SETATTR %d; want 1 1 0 0 0",
			delta(nfs3.ProcCreate), delta(nfs3.ProcWrite), delta(nfs3.ProcCommit), delta(nfs3.ProcGetattr), delta(nfs3.ProcSetattr))
	}
	if us.fileSync.Load() != 1 || us.unstable.Load() != 0 {
		t.Errorf("WRITEs: %d FILE_SYNC, %d UNSTABLE; want 1, 0", us.fileSync.Load(), us.unstable.Load())
	}
	for _, p := range procs {
		before[p] = m.calls(p)
	}
	for range 3 {
		fi, err := os.Stat(m.path("small"))
		if err != nil || fi.Size() != 4096 {
			t.Fatalf("stat after create: %v, %v", fi, err)
		}
	}
	if g, l := delta(nfs3.ProcGetattr), delta(nfs3.ProcLookup); g != 0 || l != 0 {
		t.Errorf("stat after create within actimeo: %d GETATTR, %d LOOKUP", g, l)
	}
	got, err := readServer(srv, "small")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("server copy: %d bytes, %v", len(got), err)
	}
}

// TestRPCListNoLookups: ls -l of a directory read with READDIRPLUS sends no
// LOOKUP, and one GETATTR: the directory's open revalidates it (as the
// kernel client's does), no entry needs one.
func TestRPCListNoLookups(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	const files = 300
	check(t, os.Mkdir(filepath.Join(srv.Dir, "d"), 0o755))
	for i := range files {
		check(t, os.WriteFile(filepath.Join(srv.Dir, "d", "file-with-a-longish-name-"+string(rune('a'+i%26))+strconv.Itoa(i)), []byte("x"), 0o644))
	}
	m, rec := mountRecorded(t, srv, nil, MountConfig{})
	_, err := os.Lstat(m.path("d"))
	check(t, err)
	from := rec.mark()
	ents, err := os.ReadDir(m.path("d"))
	check(t, err)
	if len(ents) != files {
		t.Fatalf("listed %d entries, want %d", len(ents), files)
	}
	for _, e := range ents {
		fi, err := os.Lstat(filepath.Join(m.path("d"), e.Name()))
		if err != nil || fi.Size() != 1 {
			t.Fatalf("lstat %s: %v, %v", e.Name(), fi, err)
		}
	}
	if l, g, rdp := len(rec.since(from, nfs3.ProcLookup)), len(rec.since(from, nfs3.ProcGetattr)), len(rec.since(from, nfs3.ProcReaddirplus)); l != 0 || g != 1 || rdp == 0 {
		t.Errorf("ls -l of %d files: %d LOOKUP, %d GETATTR, %d READDIRPLUS; want 0, 1, >0", files, l, g, rdp)
	}
}

// TestRPCWriteThenSetattr: a small file written, then chmod-ed and its
// times set before close (as tar does), costs one FILE_SYNC WRITE and no
// COMMIT.
func TestRPCWriteThenSetattr(t *testing.T) {
	srv := startGoNFS(t, backendMem)
	us := &unstableServer{}
	us.setVerfs(1, 1)
	m := mountGoNFSVia(t, srv, nil, func(tr sunrpc.Transport) sunrpc.Transport {
		us.Transport = tr
		return us
	})
	f, err := os.OpenFile(m.path("t"), os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	check(t, err)
	_, err = f.Write(make([]byte, 4096))
	check(t, err)
	check(t, f.Chmod(0o644))
	check(t, os.Chtimes(m.path("t"), time.Unix(1e9, 0), time.Unix(1e9, 0)))
	check(t, f.Close())
	if c := m.calls(nfs3.ProcCommit); c != 0 || us.fileSync.Load() != 1 || us.unstable.Load() != 0 {
		t.Errorf("write, chmod, utimes, close: %d COMMITs, %d FILE_SYNC and %d UNSTABLE WRITEs; want 0, 1, 0", c, us.fileSync.Load(), us.unstable.Load())
	}
	// (memfs keeps no times: only the size is checked.)
	if fi, err := os.Stat(m.path("t")); err != nil || fi.Size() != 4096 || fi.Mode().Perm() != 0o644 {
		t.Fatalf("stat: %v, %v", fi, err)
	}
}

// TestRPCDirectReadWriteNoGetattr: a direct-I/O reader that also writes
// (fio's randrw) costs its READs and WRITEs only: the kernel's own check
// of the size before a read, once a write made it forget the attributes,
// is answered from the trusted attributes. A stat after a READ still asks
// the server for the atime the READ moved, as on the Linux client.
func TestRPCDirectReadWriteNoGetattr(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	data := make([]byte, 1<<20)
	rand.Read(data)
	check(t, os.WriteFile(filepath.Join(srv.Dir, "f"), data, 0o644))
	o := DefaultOptions()
	o.AcRegMin, o.AcRegMax = time.Minute, time.Minute
	m, rec := mountRecorded(t, srv, &o, MountConfig{})
	f, err := os.OpenFile(m.path("f"), os.O_RDWR|syscall.O_DIRECT, 0)
	check(t, err)
	defer f.Close()
	from := rec.mark()
	fuseBefore := fuseRequests(m)
	// Readers and a writer at once, as fio's randrw keeps both in flight:
	// the kernel's size checks then come after READs moved the atime.
	var wg sync.WaitGroup
	const n = 60
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := make([]byte, 4096)
			for i := range n {
				off := int64((i*7919+r*31)%128) * 4096
				// The first half, which the writer leaves alone.
				if k, err := f.ReadAt(p, off); err != nil || k != len(p) || !bytes.Equal(p, data[off:off+4096]) {
					t.Errorf("read at %d: %d bytes, %v", off, k, err)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		p := make([]byte, 4096)
		for i := range n / 2 {
			off := int64(128+(i*13)%128) * 4096
			rand.Read(p)
			if _, err := f.WriteAt(p, off); err != nil {
				t.Errorf("write at %d: %v", off, err)
				return
			}
		}
	}()
	wg.Wait()
	if g := len(rec.since(from, nfs3.ProcGetattr)); g > 2 {
		t.Errorf("%d direct reads and %d writes at once sent %d GETATTRs, want at most 2", 4*n, n/2, g)
	}
	// Nor does the kernel ask the mount server: a direct open's reads do
	// not re-read the attributes a write made the kernel forget.
	if g := fuseRequests(m)["GETATTR"] - fuseBefore["GETATTR"]; g > 2 {
		t.Errorf("%d direct reads and %d writes at once made %d FUSE GETATTR requests, want at most 2", 4*n, n/2, g)
	}
	p := make([]byte, 4096)
	from = rec.mark()
	if _, err := f.Stat(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadAt(p, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Stat(); err != nil {
		t.Fatal(err)
	}
	if g := len(rec.since(from, nfs3.ProcGetattr)); g < 1 {
		t.Errorf("fstat after a READ sent no GETATTR (the atime the READ moved)")
	}
}

// TestRPCDirectWriteStable: a direct (O_DIRECT) write that one WRITE
// carries goes FILE_SYNC, as the Linux client sends such a direct-I/O
// request (fio's direct writes): no copy kept for a resend, no COMMIT at
// close. A direct write larger than wsize goes UNSTABLE in wsize pieces.
func TestRPCDirectWriteStable(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	o := DefaultOptions()
	o.Rsize, o.Wsize = 256<<10, 64<<10 // FUSE requests up to 256 KiB
	m, rec := mountRecorded(t, srv, &o, MountConfig{})
	check(t, os.WriteFile(m.path("f"), nil, 0o644))
	f, err := os.OpenFile(m.path("f"), os.O_RDWR|syscall.O_DIRECT, 0)
	check(t, err)
	buf := directBuf(256 << 10)
	rand.Read(buf)
	from := rec.mark()
	for _, size := range []int{4 << 10, 64 << 10} {
		if _, err := f.WriteAt(buf[:size], 0); err != nil {
			t.Fatal(err)
		}
	}
	check(t, f.Close())
	ws := rec.since(from, nfs3.ProcWrite)
	if len(ws) != 2 {
		t.Fatalf("2 direct writes of at most wsize: %d WRITEs, want 2", len(ws))
	}
	for _, w := range ws {
		if w.stable != nfs3.FileSync {
			t.Errorf("direct write of %d bytes went %v, want FILE_SYNC", w.size, w.stable)
		}
	}
	if c := rec.since(from, nfs3.ProcCommit); len(c) != 0 {
		t.Errorf("%d COMMITs after FILE_SYNC direct writes, want 0", len(c))
	}

	f, err = os.OpenFile(m.path("f"), os.O_RDWR|syscall.O_DIRECT, 0)
	check(t, err)
	from = rec.mark()
	if _, err := f.WriteAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	check(t, f.Close())
	ws = rec.since(from, nfs3.ProcWrite)
	if len(ws) != 4 {
		t.Fatalf("a direct write of 4 x wsize: %d WRITEs, want 4", len(ws))
	}
	for _, w := range ws {
		if w.stable != nfs3.Unstable {
			t.Errorf("a piece of a direct write larger than wsize went %v, want UNSTABLE", w.stable)
		}
	}
	// (This server answers every WRITE FILE_SYNC, so no COMMIT follows.)
	got, err := os.ReadFile(filepath.Join(srv.Dir, "f"))
	check(t, err)
	if !bytes.Equal(got, buf) {
		t.Error("the server's file differs from what was written")
	}
}

// directBuf returns n bytes aligned for O_DIRECT.
func directBuf(n int) []byte {
	b := make([]byte, n+4096)
	off := 4096 - int(uintptr(unsafe.Pointer(&b[0]))&4095)
	return b[off : off+n : off+n]
}
