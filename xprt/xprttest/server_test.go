package xprttest

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/rpcrdma"
	"github.com/nfsrdma/nfsrdma/sunrpc"
	"github.com/nfsrdma/nfsrdma/verbs"
)

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestNullInline(t *testing.T) {
	e := newEnv(t, Config{})
	c := e.dial(t, rawOptions{})
	want := []byte{0xf6, 0xab, 0x0e, 0x18, 1, 0, 3, 3}
	if !bytes.Equal(c.ServerPrivateData, want) {
		t.Errorf("server private data % x, want % x", c.ServerPrivateData, want)
	}
	rep := c.RoundTrip(rawCall{XID: 0x1001, Inline: nfsCall(0x1001, 0)})
	h := rep.Hdr
	if rep.HdrErr != nil || h.Proc != rpcrdma.ProcMsg || h.Credits != DefaultCredits || len(h.Reads) != 0 ||
		len(h.Writes) != 0 || h.HasReply {
		t.Fatalf("reply header %+v (%v), want RDMA_MSG, 64 credits, no chunks", h, rep.HdrErr)
	}
	if rep.WC.Flags&verbs.WCWithInv != 0 {
		t.Error("a reply to a call without chunks used Send With Invalidate")
	}
	d := decodeAccepted(t, rep.Inline, 0x1001)
	if d.Len() != 0 {
		t.Errorf("NULL reply has %d bytes of results", d.Len())
	}
	st := e.srv.Stats()
	if st.Calls != 1 || st.Replies != 1 || st.Connections != 1 || st.OverCredit != 0 || st.MaxOutstanding != 1 {
		t.Errorf("stats %+v", st)
	}
}

// writeArgs returns the head (up to and including the data's length word)
// of an NFSv3 WRITE call.
func writeHead(xid uint32, fh []byte, off uint64, n int) []byte {
	return nfsCall(xid, nfsProcWrite, opaque(fh), u64(off), u32(uint32(n)), u32(2 /* FILE_SYNC */), u32(uint32(n)))
}

func checkWriteReply(t *testing.T, rep *rawReply, xid uint32, n int) {
	t.Helper()
	if rep.HdrErr != nil || rep.Hdr.Proc != rpcrdma.ProcMsg {
		t.Fatalf("WRITE reply header %+v (%v)", rep.Hdr, rep.HdrErr)
	}
	d := decodeAccepted(t, rep.Inline, xid)
	nfsStatusOK(t, d)
	if d.Bool() { // wcc_data: pre_op_attr, then post_op_attr
		d.FixedOpaque(24)
	}
	skipPostOpAttr(d)
	if count := d.Uint32(); int(count) != n || d.Err() != nil {
		t.Fatalf("WRITE count %d (%v), want %d", count, d.Err(), n)
	}
}

func TestWriteThroughReadChunk(t *testing.T) {
	e := newEnv(t, Config{})
	e.writeFile(t, "f", nil)
	c := e.dial(t, rawOptions{RemoteInv: true})
	root := mount(t, c, 1)
	fh := lookup(t, c, 2, root, "f")

	data := randomBytes(100001, 7) // not a multiple of 4: the pad is implicit
	head := writeHead(3, fh, 0, len(data))
	rep := c.RoundTrip(rawCall{XID: 3, Inline: head, Reads: []rawRead{{Pos: uint32(len(head)), Data: data, Segs: 3}}})
	checkWriteReply(t, rep, 3, len(data))
	if got := e.readFile(t, "f"); !bytes.Equal(got, data) {
		t.Fatalf("file holds %d bytes, not the %d written", len(got), len(data))
	}
	st := e.srv.Stats()
	if st.ReadChunkBytes != uint64(len(data)) {
		t.Errorf("ReadChunkBytes %d, want %d", st.ReadChunkBytes, len(data))
	}
	// One window, one rkey, flag set: the reply invalidated it.
	if rep.WC.Flags&verbs.WCWithInv == 0 || st.SendWithInv != 1 {
		t.Errorf("reply flags %#x, SendWithInv %d: want Send With Invalidate", rep.WC.Flags, st.SendWithInv)
	}
}

func TestWriteThroughPositionZeroReadChunk(t *testing.T) {
	e := newEnv(t, Config{})
	e.writeFile(t, "f", nil)
	c := e.dial(t, rawOptions{})
	root := mount(t, c, 1)
	fh := lookup(t, c, 2, root, "f")

	data := randomBytes(6003, 8)
	msg := cat(writeHead(3, fh, 0, len(data)), data, sunrpc.PadBytes(len(data)))
	rep := c.RoundTrip(rawCall{XID: 3, Proc: rpcrdma.ProcNoMsg, Reads: []rawRead{{Pos: 0, Data: msg, Segs: 2}}})
	checkWriteReply(t, rep, 3, len(data))
	if got := e.readFile(t, "f"); !bytes.Equal(got, data) {
		t.Fatalf("file holds %d bytes, not the %d written", len(got), len(data))
	}
}

func TestReadThroughWriteChunk(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int
		segs int
	}{
		{"1MiB", 1 << 20, 4},
		{"odd", 100003, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Config{})
			data := randomBytes(tc.size, 9)
			e.writeFile(t, "big", data)
			c := e.dial(t, rawOptions{RemoteInv: true})
			root := mount(t, c, 1)
			fh := lookup(t, c, 2, root, "big")

			p, err := c.Start(rawCall{XID: 3, Inline: nfsCall(3, nfsProcRead, opaque(fh), u64(0), u32(uint32(tc.size))),
				Write: tc.size, WriteSegs: tc.segs})
			if err != nil {
				t.Fatal(err)
			}
			rep, err := c.Recv(10 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Finish(p, rep); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(rep.WriteData, data) {
				t.Fatalf("write chunk holds %d bytes, not the file's %d", len(rep.WriteData), len(data))
			}
			w := rep.Hdr.Writes
			if len(w) != 1 || len(w[0]) != len(p.hdr.Writes[0]) || w[0].TotalLength() != uint64(tc.size) {
				t.Fatalf("echoed write list %+v", w)
			}
			for i, s := range w[0] {
				if o := p.hdr.Writes[0][i]; s.Handle != o.Handle || s.Offset != o.Offset || s.Length > o.Length {
					t.Errorf("segment %d returned %+v, offered %+v", i, s, o)
				}
			}
			// The inline reply ends with the data's length word.
			d := decodeAccepted(t, rep.Inline, 3)
			nfsStatusOK(t, d)
			skipPostOpAttr(d)
			count, eof, n := d.Uint32(), d.Bool(), d.Uint32()
			if d.Err() != nil || int(count) != tc.size || !eof || int(n) != tc.size || d.Len() != 0 {
				t.Fatalf("inline READ result: count %d eof %v len %d, %d bytes left (%v)", count, eof, n, d.Len(), d.Err())
			}
			if rep.WC.Flags&verbs.WCWithInv == 0 || rep.WC.InvalidatedRKey != p.write.rkey {
				t.Errorf("reply flags %#x rkey %#x: want Send With Invalidate of %#x", rep.WC.Flags, rep.WC.InvalidatedRKey, p.write.rkey)
			}
			if st := e.srv.Stats(); st.WriteChunkBytes != uint64(tc.size) {
				t.Errorf("WriteChunkBytes %d", st.WriteChunkBytes)
			}
		})
	}
}

func TestReadlinkThroughWriteChunk(t *testing.T) {
	e := newEnv(t, Config{})
	e.writeFile(t, "target", []byte("x"))
	target := "some/where/far/away/target-of-37-bytes"
	if err := e.fs.Symlink(target, "link"); err != nil {
		t.Fatal(err)
	}
	c := e.dial(t, rawOptions{})
	root := mount(t, c, 1)
	fh := lookup(t, c, 2, root, "link")
	rep := c.RoundTrip(rawCall{XID: 3, Inline: nfsCall(3, nfsProcReadlink, opaque(fh)), Write: 1024})
	if string(rep.WriteData) != target {
		t.Fatalf("write chunk holds %q, want %q", rep.WriteData, target)
	}
	d := decodeAccepted(t, rep.Inline, 3)
	nfsStatusOK(t, d)
	skipPostOpAttr(d)
	if n := d.Uint32(); int(n) != len(target) || d.Len() != 0 {
		t.Fatalf("inline READLINK: length %d, %d bytes left", n, d.Len())
	}
	if rep.WC.Flags&verbs.WCWithInv != 0 {
		t.Error("Send With Invalidate used though the client did not allow it")
	}
}

func readdirplusArgs(fh []byte, maxcount uint32) []byte {
	return cat(opaque(fh), u64(0), make([]byte, 8), u32(maxcount), u32(maxcount))
}

func TestReaddirplusThroughReplyChunk(t *testing.T) {
	for _, policy := range []ReplyChunkPolicy{ReplyChunkWhenNeeded, ReplyChunkAlways} {
		t.Run(fmt.Sprint(policy), func(t *testing.T) {
			e := newEnv(t, Config{ReplyChunk: policy})
			for i := range 200 {
				e.writeFile(t, fmt.Sprintf("a-rather-long-file-name-%04d", i), nil)
			}
			c := e.dial(t, rawOptions{})
			root := mount(t, c, 1)
			const max = 64 << 10
			rep := c.RoundTrip(rawCall{XID: 2, Inline: nfsCall(2, nfsProcReaddirp, readdirplusArgs(root, max)),
				Reply: max + 1024, ReplySegs: 3})
			if rep.Hdr.Proc != rpcrdma.ProcNoMsg || len(rep.Inline) != 0 {
				t.Fatalf("reply %v with %d inline bytes, want RDMA_NOMSG", rep.Hdr.Proc, len(rep.Inline))
			}
			if len(rep.ReplyData) <= 4096 {
				t.Fatalf("reply chunk holds %d bytes", len(rep.ReplyData))
			}
			d := decodeAccepted(t, rep.ReplyData, 2)
			nfsStatusOK(t, d)
			st := e.srv.Stats()
			if st.ReplyChunkReplies != 1 || st.ReplyChunkBytes != uint64(len(rep.ReplyData)) {
				t.Errorf("stats %+v", st)
			}
			// A short reply: inline unless the policy is knfsd's.
			rep = c.RoundTrip(rawCall{XID: 3, Inline: nfsCall(3, 0), Reply: 4096})
			wantProc := rpcrdma.ProcMsg
			msg := rep.Inline
			if policy == ReplyChunkAlways {
				wantProc, msg = rpcrdma.ProcNoMsg, rep.ReplyData
			}
			if rep.Hdr.Proc != wantProc || !rep.Hdr.HasReply {
				t.Fatalf("short reply %v, reply chunk present %v; want %v with the chunk echoed", rep.Hdr.Proc, rep.Hdr.HasReply, wantProc)
			}
			decodeAccepted(t, msg, 3)
		})
	}
}

func (p ReplyChunkPolicy) String() string {
	if p == ReplyChunkAlways {
		return "always"
	}
	return "when-needed"
}

func TestReplyTooLargeWithoutReplyChunk(t *testing.T) {
	e := newEnv(t, Config{})
	for i := range 100 {
		e.writeFile(t, fmt.Sprintf("name-%04d", i), nil)
	}
	c := e.dial(t, rawOptions{RecvSize: 1024})
	root := mount(t, c, 1)
	rep := c.RoundTrip(rawCall{XID: 2, Inline: nfsCall(2, nfsProcReaddirp, readdirplusArgs(root, 32<<10))})
	if rep.Hdr.Proc != rpcrdma.ProcError || rep.Hdr.ErrCode != rpcrdma.ErrCodeChunk {
		t.Fatalf("reply %+v, want ERR_CHUNK (the client receives 1024 bytes)", rep.Hdr)
	}
}

func TestReplyChunkTooSmallDropsConnection(t *testing.T) {
	e := newEnv(t, Config{})
	for i := range 100 {
		e.writeFile(t, fmt.Sprintf("name-%04d", i), nil)
	}
	c := e.dial(t, rawOptions{})
	root := mount(t, c, 1)
	p, err := c.Start(rawCall{XID: 2, Inline: nfsCall(2, nfsProcReaddirp, readdirplusArgs(root, 32<<10)), Reply: 5000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Recv(5 * time.Second); err == nil {
		t.Fatal("got a reply; want the connection dropped")
	}
	c.release(p)
	waitFor(t, func() bool { return e.srv.Stats().Disconnects == 1 })
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSendWithInvalidate(t *testing.T) {
	for _, tc := range []struct {
		name      string
		remoteInv bool
		unasked   bool
		call      rawCall
		want      bool
	}{
		{"allowed one rkey", true, false, rawCall{Write: 100}, true},
		{"allowed one rkey many segments", true, false, rawCall{Write: 100, WriteSegs: 4}, true},
		{"allowed no rkey", true, false, rawCall{}, false},
		{"allowed two rkeys", true, false, rawCall{Write: 100, Reply: 4096}, false},
		{"not allowed one rkey", false, false, rawCall{Write: 100}, false},
		{"not allowed, forced", false, true, rawCall{Reply: 4096}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Config{Handler: NullHandler(), Misbehave: Misbehavior{SendWithInvUnasked: tc.unasked}})
			c := e.dial(t, rawOptions{RemoteInv: tc.remoteInv})
			call := tc.call
			call.XID = 9
			call.Inline = rpcCall(9, 400000, 1, 0)
			p, err := c.Start(call)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := c.Recv(5 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			keys := p.RKeys()
			if err := c.Finish(p, rep); err != nil {
				t.Fatal(err)
			}
			got := rep.WC.Flags&verbs.WCWithInv != 0
			if got != tc.want {
				t.Fatalf("Send With Invalidate %v, want %v", got, tc.want)
			}
			if got && rep.WC.InvalidatedRKey != keys[0] {
				t.Errorf("invalidated %#x, want %#x", rep.WC.InvalidatedRKey, keys[0])
			}
		})
	}
}

// fixedHeader builds a transport header by hand.
func fixedHeader(xid, vers, credits, proc uint32, rest ...uint32) []byte {
	b := binary.BigEndian.AppendUint32(nil, xid)
	b = binary.BigEndian.AppendUint32(b, vers)
	b = binary.BigEndian.AppendUint32(b, credits)
	b = binary.BigEndian.AppendUint32(b, proc)
	for _, v := range rest {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	return b
}

func TestMalformedCalls(t *testing.T) {
	e := newEnv(t, Config{Handler: NullHandler()})
	c := e.dial(t, rawOptions{})
	null := rpcCall(0x77, 100003, 3, 0)

	// Version 2: ERR_VERS, low = high = 1, the call's version echoed.
	rep := c.RoundTrip(rawCall{XID: 0x10, Raw: cat(fixedHeader(0x10, 2, 8, 0, 0, 0, 0), null)})
	if len(rep.Raw) != 28 {
		t.Fatalf("ERR_VERS reply of %d bytes: % x", len(rep.Raw), rep.Raw)
	}
	w := func(i int) uint32 { return binary.BigEndian.Uint32(rep.Raw[4*i:]) }
	if w(0) != 0x10 || w(1) != 2 || w(2) != DefaultCredits || w(3) != uint32(rpcrdma.ProcError) ||
		w(4) != uint32(rpcrdma.ErrCodeVers) || w(5) != 1 || w(6) != 1 {
		t.Fatalf("ERR_VERS reply % x", rep.Raw)
	}

	for _, tc := range []struct {
		name string
		msg  []byte
	}{
		{"bad read list discriminator", fixedHeader(0x11, 1, 8, 0, 7)},
		{"truncated chunk lists", fixedHeader(0x12, 1, 8, 0, 0, 0)},
		{"RDMA_NOMSG without chunks", fixedHeader(0x13, 1, 8, 1, 0, 0, 0)},
		{"RDMA_MSGP", fixedHeader(0x14, 1, 8, 2, 0, 0, 0)},
		{"read chunk beyond the message", cat(fixedHeader(0x15, 1, 8, 0, 1, 4096, 0xdead, 4, 0, 0, 0, 0, 0), null)},
	} {
		rep := c.RoundTrip(rawCall{XID: binary.BigEndian.Uint32(tc.msg), Raw: tc.msg})
		if rep.HdrErr != nil || rep.Hdr.Proc != rpcrdma.ProcError || rep.Hdr.ErrCode != rpcrdma.ErrCodeChunk {
			t.Errorf("%s: reply %+v (%v), want ERR_CHUNK", tc.name, rep.Hdr, rep.HdrErr)
		}
	}

	// Too short to name a call, RDMA_DONE, RDMA_ERROR: dropped, like
	// knfsd; the next call is answered.
	for _, msg := range [][]byte{{1, 2, 3, 4, 5, 6, 7, 8}, fixedHeader(0x20, 1, 8, 3), fixedHeader(0x21, 1, 8, 4, 2)} {
		if _, err := c.Start(rawCall{Raw: msg}); err != nil {
			t.Fatal(err)
		}
	}
	rep = c.RoundTrip(rawCall{XID: 0x77, Inline: null})
	decodeAccepted(t, rep.Inline, 0x77)
	// The dropped messages were reaped before the last call (RC order);
	// the goroutines that count them may still be running.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.srv.WaitIdle(ctx); err != nil {
		t.Fatalf("server not idle: %v", err)
	}
	st := e.srv.Stats()
	if st.RDMAErrors != 6 || st.Malformed != 9 || st.Dropped != 3 {
		t.Errorf("stats %+v", st)
	}
}

func TestCredits(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want uint32
	}{
		{Config{}, 64},
		{Config{GrantZeroCredits: true}, 0},
		{Config{Credits: 100000}, 100000},
	} {
		e := newEnv(t, tc.cfg)
		c := e.dial(t, rawOptions{})
		rep := c.RoundTrip(rawCall{XID: 1, Inline: nfsCall(1, 0)})
		if rep.Hdr.Credits != tc.want {
			t.Errorf("%+v: granted %d, want %d", tc.cfg, rep.Hdr.Credits, tc.want)
		}
	}
}

func TestNoPrivateData(t *testing.T) {
	e := newEnv(t, Config{NoPrivateData: true})
	c := e.dial(t, rawOptions{NoPrivateData: true})
	if len(c.ServerPrivateData) != 0 {
		t.Fatalf("server sent private data % x", c.ServerPrivateData)
	}
	// No private data from the client: replies are limited to 1024 bytes
	// inline and Send With Invalidate is never used.
	rep := c.RoundTrip(rawCall{XID: 1, Inline: nfsCall(1, 0), Write: 64})
	if rep.WC.Flags&verbs.WCWithInv != 0 {
		t.Error("Send With Invalidate without the client's consent")
	}
}

// blockingHandler answers NULL-style calls once release is closed.
func blockingHandler(release <-chan struct{}) Handler {
	null := NullHandler()
	return HandlerFunc(func(call []byte) []byte {
		<-release
		return null.ServeRPC(call)
	})
}

func TestOverCredit(t *testing.T) {
	release := make(chan struct{})
	var served atomic.Bool
	e := newEnv(t, Config{Credits: 2, Handler: HandlerFunc(func(call []byte) []byte {
		if served.Swap(true) {
			<-release
		}
		return NullHandler().ServeRPC(call)
	})})
	c := e.dial(t, rawOptions{})
	c.RoundTrip(rawCall{XID: 1, Inline: rpcCall(1, 1, 1, 0)}) // the grant of 2 is now known
	var ps []*pending
	for i := range 4 {
		xid := uint32(10 + i)
		p, err := c.Start(rawCall{XID: xid, Inline: rpcCall(xid, 1, 1, 0)})
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	waitFor(t, func() bool { return e.srv.Stats().Calls == 5 })
	close(release)
	for range ps {
		if _, err := c.Recv(5 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range ps {
		c.Finish(p, nil)
	}
	if st := e.srv.Stats(); st.OverCredit != 2 || st.MaxOutstanding != 4 {
		t.Errorf("OverCredit %d MaxOutstanding %d, want 2 and 4", st.OverCredit, st.MaxOutstanding)
	}
}

func TestFirstCallAloneBeforeFirstReply(t *testing.T) {
	release := make(chan struct{})
	e := newEnv(t, Config{Handler: blockingHandler(release)})
	c := e.dial(t, rawOptions{})
	for xid := uint32(1); xid <= 2; xid++ {
		if _, err := c.Start(rawCall{XID: xid, Inline: rpcCall(xid, 1, 1, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { return e.srv.Stats().Calls == 2 })
	close(release)
	for range 2 {
		if _, err := c.Recv(5 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if st := e.srv.Stats(); st.OverCredit != 1 {
		t.Errorf("OverCredit %d, want 1 (credits start at 1)", st.OverCredit)
	}
}

func TestConcurrentReads(t *testing.T) {
	e := newEnv(t, Config{})
	const n = 32
	files := make([][]byte, n)
	for i := range files {
		files[i] = randomBytes(8192+i*1000, uint64(i))
		e.writeFile(t, fmt.Sprintf("f%d", i), files[i])
	}
	c := e.dial(t, rawOptions{RemoteInv: true})
	root := mount(t, c, 1)
	fhs := make([][]byte, n)
	for i := range fhs {
		fhs[i] = lookup(t, c, uint32(2+i), root, fmt.Sprintf("f%d", i))
	}
	pend := make(map[uint32]*pending)
	for i := range n {
		xid := uint32(100 + i)
		p, err := c.Start(rawCall{XID: xid, Inline: nfsCall(xid, nfsProcRead, opaque(fhs[i]), u64(0), u32(1<<20)),
			Write: 1 << 20, WriteSegs: 2})
		if err != nil {
			t.Fatal(err)
		}
		pend[xid] = p
	}
	for range n {
		rep, err := c.Recv(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		p := pend[rep.Hdr.XID]
		if p == nil {
			t.Fatalf("reply to unknown xid %#x", rep.Hdr.XID)
		}
		delete(pend, rep.Hdr.XID)
		if err := c.Finish(p, rep); err != nil {
			t.Fatal(err)
		}
		if i := rep.Hdr.XID - 100; !bytes.Equal(rep.WriteData, files[i]) {
			t.Fatalf("file %d: %d bytes back, want %d", i, len(rep.WriteData), len(files[i]))
		}
	}
	if st := e.srv.Stats(); st.SendWithInv != n || st.OverCredit != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestCloseReleasesEverything(t *testing.T) {
	e := newEnv(t, Config{})
	c := e.dial(t, rawOptions{})
	c.RoundTrip(rawCall{XID: 1, Inline: nfsCall(1, 0)})
	if len(e.srv.QPs()) != 1 {
		t.Fatalf("%d server QPs", len(e.srv.QPs()))
	}
	if err := e.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	select {
	case ev := <-c.ep.Events():
		if ev.Type != verbs.CMDisconnected {
			t.Errorf("client event %v", ev.Type)
		}
	case <-time.After(5 * time.Second):
		t.Error("the client was not disconnected")
	}
	c.Close()
	if live := e.f.Live(); !live.Zero() {
		t.Errorf("live after both closed: %+v", live)
	}
}
