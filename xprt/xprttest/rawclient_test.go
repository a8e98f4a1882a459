package xprttest

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/rpcrdma"
	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/sim"
	"github.com/nfsrdma/nfsrdma/verbs/verbstest"
)

// rawClient is a minimal RPC-over-RDMA requester built straight on verbs:
// it sends what a test spells out (windows bound per chunk, chained before
// the Send) and reports exactly what came back. It is driven by one
// goroutine.
type rawClient struct {
	t        testing.TB
	ep       verbs.Endpoint
	pd       verbs.PD
	scq, rcq verbs.CQ
	qp       verbs.QP
	recv     *verbstest.Buffer
	send     *verbstest.Buffer
	recvSize int
	nrecv    int
	// ServerPrivateData is what the server sent with its accept.
	ServerPrivateData []byte
	nextID            uint64
	closed            bool
}

type rawOptions struct {
	RemoteInv     bool // advertise Send With Invalidate
	NoPrivateData bool
	RecvSize      int // receive buffer size advertised and posted; default 4096
	Receives      int // default 64
	// NoResponderResources offers the server no RDMA READs.
	NoResponderResources bool
}

func dialRaw(t testing.TB, f verbs.Fabric, addr netip.AddrPort, o rawOptions) *rawClient {
	t.Helper()
	if o.RecvSize == 0 {
		o.RecvSize = 4096
	}
	if o.Receives == 0 {
		o.Receives = 64
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := &rawClient{t: t, recvSize: o.RecvSize, nrecv: o.Receives}
	var err error
	must := func(e error) {
		t.Helper()
		if e != nil {
			c.Close()
			t.Fatal(e)
		}
	}
	c.ep, err = f.Resolve(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	dev := c.ep.Device()
	c.pd, err = dev.AllocPD()
	must(err)
	c.scq, err = dev.CreateCQ(256)
	must(err)
	c.rcq, err = dev.CreateCQ(o.Receives + 1)
	must(err)
	c.qp, err = c.ep.CreateQP(c.pd, verbs.QPConfig{SendCQ: c.scq, RecvCQ: c.rcq, MaxSendWR: 255,
		MaxRecvWR: o.Receives, MaxSendSGE: 1, MaxRecvSGE: 1})
	must(err)
	c.recv, err = verbstest.NewBuffer(c.pd, o.Receives*o.RecvSize, verbs.AccessLocalWrite)
	must(err)
	c.send, err = verbstest.NewBuffer(c.pd, 1<<16, verbs.AccessLocalWrite)
	must(err)
	for i := range o.Receives {
		must(c.postRecv(i))
	}
	p := verbstest.DefaultConnParam()
	if o.NoResponderResources {
		p.ResponderResources = 0
	}
	if !o.NoPrivateData {
		p.PrivateData = rpcrdma.PrivateData{RemoteInvalidation: o.RemoteInv, SendSize: 4096,
			RecvSize: uint32(o.RecvSize)}.Append(nil)
	}
	c.ServerPrivateData, err = c.ep.Connect(ctx, p)
	must(err)
	t.Cleanup(func() { c.Close() })
	return c
}

func (c *rawClient) postRecv(i int) error {
	_, err := c.qp.PostRecv([]verbs.RecvWR{{ID: uint64(i), SGL: []verbs.SGE{c.recv.SGE(uint64(i*c.recvSize), c.recvSize)}}})
	return err
}

// SimQP is the client's QP for fault injection and rogue accesses.
func (c *rawClient) SimQP() *sim.QP { return c.qp.(*sim.QP) }

// Close disconnects and releases everything; idempotent.
func (c *rawClient) Close() {
	if c.closed {
		return
	}
	c.closed = true
	if c.ep != nil {
		c.ep.Disconnect()
	}
	for _, r := range []interface{ Close() error }{c.qp, c.rcq, c.scq, c.recv, c.send, c.pd, c.ep} {
		if r == nil || isNilBuffer(r) {
			continue
		}
		if err := r.Close(); err != nil {
			c.t.Errorf("closing the raw client: %v", err)
		}
	}
}

func isNilBuffer(r interface{ Close() error }) bool {
	b, ok := r.(*verbstest.Buffer)
	return ok && b == nil
}

// rawCall is one call as the test spells it.
type rawCall struct {
	XID  uint32
	Proc rpcrdma.Proc // RDMA_MSG unless set
	// Inline is what follows the transport header in the Send.
	Inline []byte
	// Reads are Read chunks, each exposed through its own window.
	Reads []rawRead
	// Write and Reply are the sizes of a Write chunk and a Reply chunk
	// (0: none), split into WriteSegs / ReplySegs segments (default 1).
	Write, WriteSegs int
	Reply, ReplySegs int
	// Raw, when set, is sent as the whole message: no header is built and
	// no window bound.
	Raw []byte
	// Credits requested (default 32).
	Credits uint32
}

type rawRead struct {
	Pos  uint32
	Data []byte
	Segs int
}

// window is one chunk's registered buffer and memory window.
type window struct {
	buf     *verbstest.Buffer
	mw      verbs.MW
	rkey    uint32
	segs    []rpcrdma.Segment
	invalid bool // invalidated (remotely or locally)
}

// pending is a call sent and not yet finished.
type pending struct {
	call   rawCall
	hdr    rpcrdma.Header
	reads  []*window
	write  *window
	reply  *window
	closed bool
}

func (p *pending) windows() []*window {
	ws := append([]*window(nil), p.reads...)
	if p.write != nil {
		ws = append(ws, p.write)
	}
	if p.reply != nil {
		ws = append(ws, p.reply)
	}
	return ws
}

// RKeys are the distinct rkeys the call exposed.
func (p *pending) RKeys() []uint32 {
	var ks []uint32
	for _, w := range p.windows() {
		ks = append(ks, w.rkey)
	}
	return ks
}

// rawReply is what came back for a call.
type rawReply struct {
	WC     verbs.Completion
	Raw    []byte
	Hdr    rpcrdma.Header
	HdrErr error
	// Inline is the RPC bytes after the header (RDMA_MSG).
	Inline []byte
	// WriteData and ReplyData are the bytes the server reported writing
	// into the Write chunk and the Reply chunk (filled in by finish).
	WriteData []byte
	ReplyData []byte
}

// XID is the xid of the reply's fixed header.
func (r *rawReply) XID() uint32 { return r.Hdr.XID }

func (c *rawClient) newWindow(n int, access verbs.Access, data []byte, nsegs int) (*window, error) {
	buf, err := verbstest.NewBuffer(c.pd, max(n, 1), verbs.AccessLocalWrite|verbs.AccessMWBind)
	if err != nil {
		return nil, err
	}
	copy(buf.Bytes(), data)
	mw, err := c.pd.AllocMW()
	if err != nil {
		buf.Close()
		return nil, err
	}
	w := &window{buf: buf, mw: mw}
	w.rkey = verbs.NextRKey(mw.RKey(), uint8(mw.RKey())+1)
	nsegs = max(nsegs, 1)
	per := (n + nsegs - 1) / nsegs
	for off := 0; off < n; off += per {
		k := min(per, n-off)
		w.segs = append(w.segs, rpcrdma.Segment{Handle: w.rkey, Length: uint32(k), Offset: buf.Addr(uint64(off))})
	}
	return w, nil
}

func (w *window) bindWR(access verbs.Access) verbs.SendWR {
	return verbs.SendWR{Opcode: verbs.OpBindMW, MW: w.mw, BindMR: w.buf.MR, BindAddr: w.buf.MR.Addr(),
		BindLength: uint64(len(w.buf.Bytes())), BindAccess: access, BindRKey: w.rkey}
}

// Start binds the call's windows and sends it, waiting for the send
// completions (so the send buffer can be reused at once).
func (c *rawClient) Start(call rawCall) (*pending, error) {
	p := &pending{call: call}
	var wrs []verbs.SendWR
	msg := call.Raw
	if msg == nil {
		if call.Credits == 0 {
			call.Credits = 32
		}
		p.hdr = rpcrdma.Header{XID: call.XID, Credits: call.Credits, Proc: call.Proc}
		for _, r := range call.Reads {
			w, err := c.newWindow(len(r.Data), verbs.AccessRemoteRead, r.Data, r.Segs)
			if err != nil {
				c.release(p)
				return nil, err
			}
			p.reads = append(p.reads, w)
			wrs = append(wrs, w.bindWR(verbs.AccessRemoteRead))
			for _, s := range w.segs {
				p.hdr.Reads = append(p.hdr.Reads, rpcrdma.ReadSegment{Position: r.Pos, Segment: s})
			}
		}
		if call.Write > 0 {
			w, err := c.newWindow(call.Write, verbs.AccessRemoteWrite, nil, call.WriteSegs)
			if err != nil {
				c.release(p)
				return nil, err
			}
			p.write = w
			wrs = append(wrs, w.bindWR(verbs.AccessRemoteWrite))
			p.hdr.Writes = []rpcrdma.WriteChunk{w.segs}
		}
		if call.Reply > 0 {
			w, err := c.newWindow(call.Reply, verbs.AccessRemoteWrite, nil, call.ReplySegs)
			if err != nil {
				c.release(p)
				return nil, err
			}
			p.reply = w
			wrs = append(wrs, w.bindWR(verbs.AccessRemoteWrite))
			p.hdr.Reply, p.hdr.HasReply = w.segs, true
		}
		var err error
		msg, err = p.hdr.Append(nil)
		if err != nil {
			c.release(p)
			return nil, err
		}
		msg = append(msg, call.Inline...)
	}
	if len(msg) > len(c.send.Bytes()) {
		c.release(p)
		return nil, fmt.Errorf("message of %d bytes", len(msg))
	}
	copy(c.send.Bytes(), msg)
	wrs = append(wrs, verbs.SendWR{Opcode: verbs.OpSend, SGL: []verbs.SGE{c.send.SGE(0, len(msg))}})
	for i := range wrs {
		c.nextID++
		wrs[i].ID = c.nextID
		wrs[i].Flags |= verbs.SendSignaled
	}
	if _, err := c.qp.PostSend(wrs); err != nil {
		c.release(p)
		return nil, err
	}
	if err := c.reapSends(len(wrs)); err != nil {
		c.release(p)
		return nil, err
	}
	return p, nil
}

// reapSends waits for n send completions, all successful.
func (c *rawClient) reapSends(n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wcs, err := verbstest.Reap(ctx, c.scq, n)
	if err != nil {
		return err
	}
	for _, wc := range wcs {
		if wc.Status != verbs.StatusSuccess {
			return &verbs.CompletionError{Completion: wc}
		}
	}
	return nil
}

// Recv waits up to d for the next message from the server.
func (c *rawClient) Recv(d time.Duration) (*rawReply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	wcs, err := verbstest.Reap(ctx, c.rcq, 1)
	if err != nil {
		return nil, err
	}
	wc := wcs[0]
	if wc.Status != verbs.StatusSuccess {
		return nil, &verbs.CompletionError{Completion: wc}
	}
	i := int(wc.ID)
	r := &rawReply{WC: wc, Raw: append([]byte(nil), c.recv.Bytes()[i*c.recvSize:i*c.recvSize+int(wc.ByteLen)]...)}
	if err := c.postRecv(i); err != nil {
		return nil, err
	}
	n, err := r.Hdr.Decode(r.Raw)
	r.HdrErr = err
	if err == nil {
		r.Inline = r.Raw[n:]
	}
	return r, nil
}

// Finish invalidates every window of p the reply did not invalidate
// remotely (LOCAL_INV, waiting for the completions), then copies out what
// the server reports it wrote, and releases p's windows. rep may be nil
// (no reply): the windows are invalidated all the same.
func (c *rawClient) Finish(p *pending, rep *rawReply) error {
	err := c.Invalidate(p, rep)
	if rep != nil && rep.HdrErr == nil {
		if p.write != nil && len(rep.Hdr.Writes) > 0 {
			rep.WriteData = gather(p.write, rep.Hdr.Writes[0])
		}
		if p.reply != nil && rep.Hdr.HasReply {
			rep.ReplyData = gather(p.reply, rep.Hdr.Reply)
		}
	}
	c.release(p)
	return err
}

// Invalidate invalidates every window of p still valid after rep (which
// may be nil) with LOCAL_INV and waits for the completions.
func (c *rawClient) Invalidate(p *pending, rep *rawReply) error {
	var wrs []verbs.SendWR
	for _, w := range p.windows() {
		if rep != nil && rep.WC.Flags&verbs.WCWithInv != 0 && rep.WC.InvalidatedRKey == w.rkey {
			w.invalid = true
		}
		if w.invalid {
			continue
		}
		w.invalid = true
		c.nextID++
		wrs = append(wrs, verbs.SendWR{ID: c.nextID, Opcode: verbs.OpLocalInv, InvalidateRKey: w.rkey, Flags: verbs.SendSignaled})
	}
	if len(wrs) == 0 {
		return nil
	}
	if _, err := c.qp.PostSend(wrs); err != nil {
		return err
	}
	return c.reapSends(len(wrs))
}

// gather copies the bytes the returned segment lengths say were written,
// bounded by what was offered.
func gather(w *window, got rpcrdma.WriteChunk) []byte {
	var out []byte
	base := w.buf.Addr(0)
	for i, s := range got {
		if i >= len(w.segs) {
			break
		}
		off := w.segs[i].Offset - base
		n := min(s.Length, w.segs[i].Length)
		out = append(out, w.buf.Bytes()[off:off+uint64(n)]...)
	}
	return out
}

func (c *rawClient) release(p *pending) {
	if p.closed {
		return
	}
	p.closed = true
	for _, w := range p.windows() {
		w.mw.Close()
		w.buf.Close()
	}
}

// RoundTrip sends call, waits for its reply and finishes it.
func (c *rawClient) RoundTrip(call rawCall) *rawReply {
	c.t.Helper()
	p, err := c.Start(call)
	if err != nil {
		c.t.Fatalf("sending xid %#x: %v", call.XID, err)
	}
	rep, err := c.Recv(10 * time.Second)
	if err != nil {
		c.Finish(p, nil)
		c.t.Fatalf("waiting for the reply to xid %#x: %v", call.XID, err)
	}
	if err := c.Finish(p, rep); err != nil {
		c.t.Fatalf("finishing xid %#x: %v", call.XID, err)
	}
	if rep.HdrErr == nil && rep.Hdr.XID != call.XID {
		c.t.Fatalf("reply xid %#x, want %#x", rep.Hdr.XID, call.XID)
	}
	return rep
}

// noLeaks fails the test if goroutines started during it are still running
// a few seconds after the test's other cleanups ran: call it first, so that
// its cleanup runs last.
func noLeaks(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Errorf("%d goroutines leaked:\n%s", n-before, buf)
		}
	})
}
