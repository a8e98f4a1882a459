package nfs3

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/sunrpc"
	"github.com/nfsrdma/nfsrdma/sunrpc/sunrpctest"
)

// fakeReply is a fake server's results. For a DDP-eligible result, before ends
// with its length word and bulk holds its data; raw, when set, replaces the
// whole reply message (header included) to send malformed replies.
type fakeReply struct {
	before, bulk, after []byte
	raw                 []byte
}

type fakeHandler func(h sunrpc.CallHeader, args *sunrpc.Decoder, req *sunrpc.Request) fakeReply

func ok(results ...[]byte) fakeReply { return fakeReply{before: bytes.Join(results, nil)} }

func replyHeader(xid uint32) []byte {
	return sunrpc.AppendReply(nil, &sunrpc.ReplyHeader{XID: xid, Stat: sunrpc.MsgAccepted})
}

// memTransport is an in-memory Transport running a fake server. With rdma it
// behaves like RPC-over-RDMA for DDP-eligible results: the data lands in
// Request.ReplyBulk and the inline reply lacks it.
type memTransport struct {
	handle fakeHandler
	rdma   bool
	mu     sync.Mutex
	calls  []sunrpc.CallHeader
}

func (m *memTransport) RoundTrip(ctx context.Context, req *sunrpc.Request) (*sunrpc.Reply, error) {
	msg := append(append(append(bytes.Clone(req.Head), req.Bulk...), sunrpc.PadBytes(len(req.Bulk))...), req.Tail...)
	d := sunrpc.NewDecoder(msg)
	h, err := sunrpc.DecodeCall(d)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.calls = append(m.calls, h)
	m.mu.Unlock()
	r := m.handle(h, d, req)
	if r.raw != nil {
		return sunrpc.NewReply(r.raw, nil, nil), nil
	}
	inline := append(replyHeader(h.XID), r.before...)
	if m.rdma && req.ReplyBulk != nil && r.bulk != nil {
		n := copy(req.ReplyBulk, r.bulk)
		return sunrpc.NewReply(append(inline, r.after...), req.ReplyBulk[:n], nil), nil
	}
	inline = append(append(inline, r.bulk...), sunrpc.PadBytes(len(r.bulk))...)
	return sunrpc.NewReply(append(inline, r.after...), nil, nil), nil
}

func (m *memTransport) Close() error { return nil }

func (m *memTransport) procs() []uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ps []uint32
	for _, h := range m.calls {
		ps = append(ps, h.Proc)
	}
	return ps
}

func newFakeClient(t *testing.T, m *memTransport, opts *ClientOptions) *Client {
	t.Helper()
	c, err := NewClient(m, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var testFH = FileHandle("fake-handle-0001")

func status(st Status) []byte { return sunrpc.AppendUint32(nil, uint32(st)) }

// fakeFile is a one-file NFS server that tracks stability like a real one:
// unstable data is lost by a "reboot", which also changes the verifier.
type fakeFile struct {
	mu        sync.Mutex
	durable   []byte // what survives a reboot
	current   []byte // what reads see
	verf      WriteVerf
	rebootAt  int // reboot on this COMMIT (1-based; 0 never); rebootAll: every COMMIT
	rebootAll bool
	commits   int
	shortBy   int  // WRITE and READ move at most this many bytes (0: all)
	neverSync bool // answer every WRITE as UNSTABLE
	stables   []StableHow
}

func grow(b []byte, n int) []byte {
	if len(b) < n {
		b = append(b, make([]byte, n-len(b))...)
	}
	return b
}

func (f *fakeFile) attr() Attr {
	return Attr{Type: TypeReg, Mode: 0o644, Nlink: 1, Size: uint64(len(f.current)), FileID: 7}
}

func (f *fakeFile) handle(h sunrpc.CallHeader, d *sunrpc.Decoder, _ *sunrpc.Request) fakeReply {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch h.Proc {
	case ProcFsinfo:
		r := appendPostOpAttr(status(StatusOK), nil)
		for _, v := range []uint32{64 << 10, 64 << 10, 1, 64 << 10, 64 << 10, 1, 4096} {
			r = sunrpc.AppendUint32(r, v)
		}
		r = sunrpc.AppendUint64(r, 1<<40)
		r = appendTime(r, Time{})
		return ok(sunrpc.AppendUint32(r, 0))
	case ProcGetattr:
		a := f.attr()
		return ok(appendAttr(status(StatusOK), &a))
	case ProcWrite:
		decodeFH(d)
		off, _, how := d.Uint64(), d.Uint32(), StableHow(d.Uint32())
		data := d.Opaque(-1)
		if f.shortBy > 0 && len(data) > f.shortBy {
			data = data[:f.shortBy]
		}
		f.stables = append(f.stables, how)
		end := int(off) + len(data)
		f.current = grow(f.current, end)
		copy(f.current[off:], data)
		committed := how
		if f.neverSync {
			committed = Unstable
		} else if how != Unstable {
			committed = FileSync
			f.durable = grow(f.durable, end)
			copy(f.durable[off:], data)
		}
		r := appendWcc(status(StatusOK), &WccData{})
		r = sunrpc.AppendUint32(r, uint32(len(data)))
		r = sunrpc.AppendUint32(r, uint32(committed))
		return ok(append(r, f.verf[:]...))
	case ProcCommit:
		f.commits++
		if f.rebootAll || f.commits == f.rebootAt {
			f.current = bytes.Clone(f.durable) // unstable data lost
			f.verf[0]++
		} else {
			f.durable = bytes.Clone(f.current)
		}
		return ok(append(appendWcc(status(StatusOK), &WccData{}), f.verf[:]...))
	case ProcRead:
		decodeFH(d)
		off, count := int(d.Uint64()), int(d.Uint32())
		if f.shortBy > 0 {
			count = min(count, f.shortBy)
		}
		end := min(off+count, len(f.current))
		var data []byte
		if off < end {
			data = f.current[off:end]
		}
		a := f.attr()
		r := appendPostOpAttr(status(StatusOK), &a)
		r = sunrpc.AppendUint32(r, uint32(len(data)))
		r = sunrpc.AppendBool(r, end >= len(f.current))
		return fakeReply{before: sunrpc.AppendUint32(r, uint32(len(data))), bulk: bytes.Clone(data)}
	}
	return ok(status(ErrNotSupp))
}

func TestRDMAStyleBulk(t *testing.T) {
	for _, rdma := range []bool{false, true} {
		var gotWrite, gotSymlink *sunrpc.Request
		m := &memTransport{rdma: rdma}
		m.handle = func(h sunrpc.CallHeader, d *sunrpc.Decoder, req *sunrpc.Request) fakeReply {
			switch h.Proc {
			case ProcWrite:
				gotWrite = req
				decodeFH(d)
				d.Uint64()
				n := d.Uint32()
				d.Uint32()
				data := d.Opaque(-1)
				if d.Err() != nil || int(n) != len(data) {
					t.Errorf("WRITE args: %v", d.Err())
				}
				r := appendWcc(status(StatusOK), &WccData{})
				r = sunrpc.AppendUint32(r, n)
				r = sunrpc.AppendUint32(r, uint32(FileSync))
				return ok(r, make([]byte, 8))
			case ProcSymlink:
				gotSymlink = req
				r := appendPostOpFH(status(StatusOK), testFH)
				return ok(appendWcc(appendPostOpAttr(r, nil), &WccData{}))
			case ProcRead:
				r := appendPostOpAttr(status(StatusOK), nil)
				r = sunrpc.AppendBool(sunrpc.AppendUint32(r, 5), true)
				return fakeReply{before: sunrpc.AppendUint32(r, 5), bulk: []byte("hello")}
			case ProcReadlink:
				r := appendPostOpAttr(status(StatusOK), nil)
				return fakeReply{before: sunrpc.AppendUint32(r, 6), bulk: []byte("target")}
			}
			return ok(status(ErrNotSupp))
		}
		c := newFakeClient(t, m, nil)
		ctx := testCtx(t)

		data := []byte("payload of seven")
		if _, err := c.Write(ctx, testFH, 0, data, FileSync); err != nil {
			t.Fatal(err)
		}
		// The data travels as Bulk, the caller's own slice, after a Head
		// ending with its length word; nothing follows.
		if &gotWrite.Bulk[0] != &data[0] || len(gotWrite.Tail) != 0 ||
			binary.BigEndian.Uint32(gotWrite.Head[len(gotWrite.Head)-4:]) != uint32(len(data)) {
			t.Errorf("WRITE request split wrong: head %d bulk %d tail %d", len(gotWrite.Head), len(gotWrite.Bulk), len(gotWrite.Tail))
		}
		if _, err := c.Symlink(ctx, testFH, "l", SetAttr{}, "some/target"); err != nil {
			t.Fatal(err)
		}
		if string(gotSymlink.Bulk) != "some/target" ||
			binary.BigEndian.Uint32(gotSymlink.Head[len(gotSymlink.Head)-4:]) != uint32(len("some/target")) {
			t.Errorf("SYMLINK request split wrong")
		}

		p := make([]byte, 64)
		rr, err := c.Read(ctx, testFH, 0, p)
		if err != nil || rr.Count != 5 || !rr.EOF || string(p[:5]) != "hello" {
			t.Fatalf("rdma=%v: READ %+v %q %v", rdma, rr, p[:5], err)
		}
		rl, err := c.Readlink(ctx, testFH)
		if err != nil || rl.Target != "target" {
			t.Fatalf("rdma=%v: READLINK %q %v", rdma, rl.Target, err)
		}
	}
}

func TestReadOverflow(t *testing.T) {
	for _, rdma := range []bool{false, true} {
		m := &memTransport{rdma: rdma, handle: func(h sunrpc.CallHeader, d *sunrpc.Decoder, _ *sunrpc.Request) fakeReply {
			r := appendPostOpAttr(status(StatusOK), nil)
			r = sunrpc.AppendBool(sunrpc.AppendUint32(r, 10), false)
			return fakeReply{before: sunrpc.AppendUint32(r, 10), bulk: []byte("0123456789")}
		}}
		c := newFakeClient(t, m, nil)
		_, err := c.Read(testCtx(t), testFH, 0, make([]byte, 4))
		var ro *ReadOverflowError
		if !errors.As(err, &ro) || ro.Asked != 4 || ro.Got != 10 {
			t.Errorf("rdma=%v: err = %v", rdma, err)
		}
	}
}

func TestJukeboxRetried(t *testing.T) {
	n := 0
	m := &memTransport{handle: func(h sunrpc.CallHeader, d *sunrpc.Decoder, _ *sunrpc.Request) fakeReply {
		if n++; n <= 2 {
			return ok(status(ErrJukebox))
		}
		a := Attr{Type: TypeDir}
		return ok(appendAttr(status(StatusOK), &a))
	}}
	c := newFakeClient(t, m, &ClientOptions{JukeboxDelay: time.Millisecond})
	a, err := c.Getattr(testCtx(t), testFH)
	if err != nil || a.Type != TypeDir || n != 3 {
		t.Fatalf("getattr after jukebox: %+v %v (calls %d)", a, err, n)
	}
	// A context ending during the backoff stops the retries.
	n = -1 << 30
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.Getattr(ctx, testFH); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
}

func TestWriteVerifierChange(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 20000) // 320000 bytes: 5 WRITEs of 64 KiB
	ff := &fakeFile{rebootAt: 1}
	c := newFakeClient(t, &memTransport{handle: ff.handle}, nil)
	ctx := testCtx(t)
	n, err := c.WriteAt(ctx, testFH, data, 0)
	if err != nil || n != len(data) {
		t.Fatalf("WriteAt: %d %v", n, err)
	}
	if !bytes.Equal(ff.durable, data) || !bytes.Equal(ff.current, data) {
		t.Fatal("data lost across the server reboot")
	}
	var syncs int
	for _, s := range ff.stables {
		if s == FileSync {
			syncs++
		}
	}
	if syncs != 5 {
		t.Errorf("resent %d WRITEs with FILE_SYNC, want 5 (%v)", syncs, ff.stables)
	}

	// A server that never syncs and loses everything at every COMMIT: a
	// typed error after a bounded number of tries, not a loop.
	ff = &fakeFile{rebootAll: true, neverSync: true}
	c = newFakeClient(t, &memTransport{handle: ff.handle}, nil)
	_, err = c.WriteAt(ctx, testFH, data[:1000], 0)
	var vc *VerifierChangedError
	if !errors.As(err, &vc) || vc.Tries != maxWriteTries || ff.commits != maxWriteTries {
		t.Fatalf("endless reboots: %v (%d commits)", err, ff.commits)
	}
}

func TestFileSyncResendsLostSmallWrites(t *testing.T) {
	ff := &fakeFile{rebootAt: 1}
	m := &memTransport{handle: ff.handle}
	c := newFakeClient(t, m, nil)
	tgt := NewTarget(c, FileHandle("root"), 0)
	defer tgt.Close()
	f := tgt.newFile("/f", testFH)
	var want []byte
	for i := range 50 {
		chunk := bytes.Repeat([]byte{byte('a' + i%26)}, 100)
		want = append(want, chunk...)
		if _, err := f.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ff.durable, want) {
		t.Fatalf("durable data wrong after reboot (%d bytes)", len(ff.durable))
	}
	if ff.commits != 1 {
		t.Errorf("%d commits", ff.commits)
	}
}

func TestShortReadsAndWrites(t *testing.T) {
	ff := &fakeFile{shortBy: 1000}
	c := newFakeClient(t, &memTransport{handle: ff.handle}, &ClientOptions{Window: 3})
	ctx := testCtx(t)
	data := make([]byte, 200000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if n, err := c.WriteAt(ctx, testFH, data, 0); err != nil || n != len(data) {
		t.Fatalf("WriteAt: %d %v", n, err)
	}
	got := make([]byte, len(data)+10)
	n, err := c.ReadAt(ctx, testFH, got, 0)
	if n != len(data) || err != io.EOF || !bytes.Equal(got[:n], data) {
		t.Fatalf("ReadAt: %d %v", n, err)
	}
}

func TestSetattrGuard(t *testing.T) {
	ctime := Time{Seconds: 1000, Nseconds: 5}
	var got SetAttr
	m := &memTransport{handle: func(h sunrpc.CallHeader, d *sunrpc.Decoder, _ *sunrpc.Request) fakeReply {
		decodeFH(d)
		got = decodeSetAttr(d)
		if d.Bool() && decodeTime(d) != ctime {
			return ok(appendWcc(status(ErrNotSync), &WccData{Before: &WccAttr{Ctime: ctime}}))
		}
		return ok(appendWcc(status(StatusOK), &WccData{After: &Attr{Type: TypeReg, Mode: 0o600}}))
	}}
	c := newFakeClient(t, m, nil)
	ctx := testCtx(t)
	attr := SetAttr{Mode: new(uint32(0o600)), UID: new(uint32(5)), Size: new(uint64(9)),
		Atime: SetTime{How: SetToServerTime}, Mtime: SetTime{How: SetToClientTime, Time: Time{Seconds: 77}}}
	w, err := c.Setattr(ctx, testFH, attr, &Time{Seconds: 1})
	if !errors.Is(err, ErrNotSync) || w.Before == nil || w.Before.Ctime != ctime {
		t.Fatalf("stale guard: %+v %v", w, err)
	}
	w, err = c.Setattr(ctx, testFH, attr, &ctime)
	if err != nil || w.After == nil || w.After.Mode != 0o600 {
		t.Fatalf("matching guard: %+v %v", w, err)
	}
	if *got.Mode != 0o600 || *got.UID != 5 || got.GID != nil || *got.Size != 9 ||
		got.Atime.How != SetToServerTime || got.Mtime != attr.Mtime {
		t.Errorf("sattr3 on the wire: %+v", got)
	}
}

func TestLinkConforming(t *testing.T) {
	m := &memTransport{handle: func(h sunrpc.CallHeader, d *sunrpc.Decoder, _ *sunrpc.Request) fakeReply {
		file, dir, name := decodeFH(d), decodeFH(d), d.String(-1)
		if d.Err() != nil || !bytes.Equal(file, testFH) || string(dir) != "dir" || name != "hard" {
			return ok(appendWcc(appendPostOpAttr(status(ErrInval), nil), &WccData{}))
		}
		a := Attr{Type: TypeReg, Nlink: 2}
		return ok(appendWcc(appendPostOpAttr(status(StatusOK), &a), &WccData{After: &Attr{Type: TypeDir}}))
	}}
	c := newFakeClient(t, m, nil)
	r, err := c.Link(testCtx(t), testFH, FileHandle("dir"), "hard")
	if err != nil || r.Attr == nil || r.Attr.Nlink != 2 || r.DirWcc.After == nil {
		t.Fatalf("link: %+v %v", r, err)
	}
}

func TestCookieLoop(t *testing.T) {
	page := func(eof bool, names ...string) []byte {
		r := appendPostOpAttr(status(StatusOK), nil)
		r = append(r, make([]byte, 8)...)
		for i, n := range names {
			r = sunrpc.AppendBool(r, true)
			r = sunrpc.AppendUint64(r, uint64(i))
			r = sunrpc.AppendString(r, n)
			r = sunrpc.AppendUint64(r, uint64(100+i)) // the same cookies every page
		}
		return sunrpc.AppendBool(sunrpc.AppendBool(r, false), eof)
	}
	m := &memTransport{handle: func(h sunrpc.CallHeader, d *sunrpc.Decoder, _ *sunrpc.Request) fakeReply {
		return ok(page(false, "a", "b"))
	}}
	c := newFakeClient(t, m, nil)
	ctx := testCtx(t)
	_, err := c.ReadDirAll(ctx, testFH)
	var cl *CookieLoopError
	if !errors.As(err, &cl) || cl.Cookie != 101 || cl.Empty {
		t.Fatalf("repeated cookie: %v", err)
	}
	if calls := len(m.procs()); calls != 2 {
		t.Errorf("%d READDIR calls, want 2", calls)
	}
	m.handle = func(h sunrpc.CallHeader, d *sunrpc.Decoder, _ *sunrpc.Request) fakeReply { return ok(page(false)) }
	if _, err := c.ReadDirAll(ctx, testFH); !errors.As(err, &cl) || !cl.Empty {
		t.Fatalf("empty page: %v", err)
	}
}

// TestMalformedRepliesTCP sends broken results over a real TCP connection: the
// client must return a typed error promptly, never panic or hang.
func TestMalformedRepliesTCP(t *testing.T) {
	replies := map[uint32][]byte{
		ProcGetattr:  status(StatusOK)[:2],                                     // status cut short
		ProcLookup:   sunrpc.AppendUint32(status(StatusOK), 200),               // handle of 200 bytes
		ProcAccess:   sunrpc.AppendUint32(status(StatusOK), 7),                 // post_op_attr bool of 7
		ProcReaddir:  append(appendPostOpAttr(status(StatusOK), nil), 1, 2, 3), // verifier cut short
		ProcFsstat:   appendPostOpAttr(status(StatusOK), nil),                  // fields missing
		ProcReadlink: sunrpc.AppendUint32(appendPostOpAttr(status(StatusOK), nil), 1<<30),
	}
	addr := serveTCP(t, func(h sunrpc.CallHeader, d *sunrpc.Decoder, _ *sunrpc.Request) fakeReply {
		return fakeReply{before: replies[h.Proc]}
	})
	tr, err := sunrpc.DialTCP(testCtx(t), addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	checks := []struct {
		name string
		call func() error
		want any
	}{
		{"getattr", func() error { _, err := c.Getattr(ctx, testFH); return err }, sunrpc.ErrTruncated},
		{"lookup", func() error { _, err := c.Lookup(ctx, testFH, "x"); return err }, new(*HandleTooLongError)},
		{"access", func() error { _, err := c.Access(ctx, testFH, 1); return err }, new(*sunrpc.BoolError)},
		{"readdir", func() error { _, err := c.ReadDirAll(ctx, testFH); return err }, sunrpc.ErrTruncated},
		{"fsstat", func() error { _, err := c.Fsstat(ctx, testFH); return err }, sunrpc.ErrTruncated},
		{"readlink", func() error { _, err := c.Readlink(ctx, testFH); return err }, new(*sunrpc.LengthError)},
	}
	for _, ck := range checks {
		err := ck.call()
		var re *ReplyError
		if !errors.As(err, &re) {
			t.Errorf("%s: %v is not a *ReplyError", ck.name, err)
			continue
		}
		switch w := ck.want.(type) {
		case error:
			if !errors.Is(err, w) {
				t.Errorf("%s: %v, want %v", ck.name, err, w)
			}
		default:
			if !errors.As(err, w) {
				t.Errorf("%s: %v, want %T", ck.name, err, w)
			}
		}
	}
	if ctx.Err() != nil {
		t.Fatal("calls hung")
	}
}

// serveTCP runs handler as an RPC server over TCP on 127.0.0.1.
func serveTCP(t *testing.T, handler fakeHandler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sunrpctest.Conns
	conns.Serve(ln, func(c net.Conn) {
		m := &memTransport{handle: handler}
		sunrpctest.ServeRecords(c, func(call []byte) []byte {
			rep, err := m.RoundTrip(context.Background(), &sunrpc.Request{XID: binary.BigEndian.Uint32(call), Head: call})
			if err != nil {
				c.Close() // the call does not decode: drop the connection
				return nil
			}
			return rep.Inline
		})
	})
	t.Cleanup(conns.Close)
	return ln.Addr().String()
}

func TestMountFake(t *testing.T) {
	exports := []Export{{Dir: "/export", Groups: []string{"10.0.0.0/8", "admins"}}, {Dir: "/pub"}}
	addr := serveTCP(t, func(h sunrpc.CallHeader, d *sunrpc.Decoder, _ *sunrpc.Request) fakeReply {
		switch h.Proc {
		case MountProcMnt:
			switch d.String(-1) {
			case "/export":
				r := appendFH(sunrpc.AppendUint32(nil, uint32(MountOK)), testFH)
				r = sunrpc.AppendUint32(r, 2)
				r = sunrpc.AppendUint32(r, uint32(sunrpc.AuthFlavorSys))
				return ok(sunrpc.AppendUint32(r, uint32(sunrpc.AuthFlavorNone)))
			case "/secret":
				return ok(sunrpc.AppendUint32(nil, uint32(MountErrAcces)))
			}
			return ok(sunrpc.AppendUint32(nil, uint32(MountErrNoEnt)))
		case MountProcExport:
			return ok(appendExports(nil, exports))
		case MountProcDump:
			r := sunrpc.AppendBool(nil, true)
			r = sunrpc.AppendString(sunrpc.AppendString(r, "client1"), "/export")
			return ok(sunrpc.AppendBool(r, false))
		case MountProcUmnt, MountProcUmntAll, MountProcNull:
			return ok()
		}
		return fakeReply{raw: sunrpc.AppendReply(nil, &sunrpc.ReplyHeader{XID: h.XID, Stat: sunrpc.MsgAccepted, Accept: sunrpc.ProcUnavail})}
	})
	host, port, _ := net.SplitHostPort(addr)
	var p int
	for _, ch := range port {
		p = p*10 + int(ch-'0')
	}
	ctx := testCtx(t)
	mc, err := DialMount(ctx, host, p, sunrpc.AuthNone, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	res, err := mc.Mnt(ctx, "/export")
	if err != nil || !bytes.Equal(res.FH, testFH) || len(res.AuthFlavors) != 2 || res.AuthFlavors[0] != sunrpc.AuthFlavorSys {
		t.Fatalf("mnt: %+v %v", res, err)
	}
	if _, err := mc.Mnt(ctx, "/secret"); !errors.Is(err, MountErrAcces) || !errors.Is(err, fs.ErrPermission) {
		t.Errorf("mnt refused: %v", err)
	}
	if _, err := mc.Mnt(ctx, "/nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("mnt missing: %v", err)
	}
	got, err := mc.Export(ctx)
	if err != nil || len(got) != 2 || got[0].Dir != "/export" || len(got[0].Groups) != 2 || got[1].Dir != "/pub" {
		t.Fatalf("export: %+v %v", got, err)
	}
	dump, err := mc.Dump(ctx)
	if err != nil || len(dump) != 1 || dump[0].Host != "client1" {
		t.Fatalf("dump: %+v %v", dump, err)
	}
	if err := mc.Umnt(ctx, "/export"); err != nil {
		t.Fatal(err)
	}
	if err := mc.UmntAll(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestReadAtEOFOnChunkBoundary(t *testing.T) {
	ff := &fakeFile{current: bytes.Repeat([]byte{1}, 3*1000)}
	c := newFakeClient(t, &memTransport{handle: ff.handle}, &ClientOptions{Rsize: 1000, Window: 2})
	ctx := testCtx(t)
	for _, tc := range []struct {
		size, off int
		n         int
		err       error
	}{
		{5000, 0, 3000, io.EOF},
		{3000, 0, 3000, nil},
		{2000, 1000, 2000, nil},
		{2500, 1000, 2000, io.EOF},
		{10, 3000, 0, io.EOF},
		{0, 9999, 0, nil},
	} {
		n, err := c.ReadAt(ctx, testFH, make([]byte, tc.size), int64(tc.off))
		if n != tc.n || err != tc.err {
			t.Errorf("ReadAt(%d bytes at %d) = %d, %v; want %d, %v", tc.size, tc.off, n, err, tc.n, tc.err)
		}
	}
}
