package xprt

// The call lifecycle on the simulated fabric, each case as small as it can
// be: a caller giving up after its call is posted (windows, borrowed
// buffers, late replies), same-XID retries and abandoned attempts, credits
// handed on only after their receive is reposted, windows taken all at once,
// calls of many segments and long calls, and ErrClosed. Also the rig the
// rule tests share.

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/rpcrdma"
	"github.com/nfsrdma/nfsrdma/sunrpc"
	"github.com/nfsrdma/nfsrdma/sunrpc/sunrpctest"
	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/sim"
	"github.com/nfsrdma/nfsrdma/xprt/xprttest"
)

// rig is a transport against an xprttest server serving the conformance
// suite's handler, with the call headers the server saw.
type rig struct {
	t   *testing.T
	h   *sunrpctest.Handler
	tr  *Transport
	srv *xprttest.Server
	fab *sim.Fabric

	mu   sync.Mutex
	hdrs map[uint32][]rpcrdma.Header // by xid, in arrival order
	xid  uint32
	tag  uint32
}

// copyChunks copies the XID, procedure and chunk lists of a call's
// transport header, for a test to keep past Observe (the header is the
// server's).
func copyChunks(h *rpcrdma.Header) rpcrdma.Header {
	var c rpcrdma.Header
	c.XID, c.Proc = h.XID, h.Proc
	c.Reads = append(c.Reads, h.Reads...)
	for _, w := range h.Writes {
		c.Writes = append(c.Writes, append(rpcrdma.WriteChunk(nil), w...))
	}
	c.Reply, c.HasReply = append(c.Reply, h.Reply...), h.HasReply
	return c
}

func newRig(t *testing.T, cfg Config, scfg xprttest.Config, opts ...sim.Option) *rig {
	t.Helper()
	r := &rig{t: t, h: sunrpctest.NewHandler(), hdrs: map[uint32][]rpcrdma.Header{}, xid: 0x1000}
	scfg.Observe = func(_ xprttest.CallInfo, h *rpcrdma.Header) {
		c := copyChunks(h)
		r.mu.Lock()
		r.hdrs[h.XID] = append(r.hdrs[h.XID], c)
		r.mu.Unlock()
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	r.tr, r.srv, r.fab = simTarget(t, r.h, cfg, scfg, opts...)
	t.Cleanup(r.h.Close) // before the server's close: held calls end
	return r
}

func (r *rig) next() (xid, tag uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.xid++
	r.tag++
	return r.xid, r.tag
}

func (r *rig) ctx(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	r.t.Cleanup(cancel)
	return ctx
}

// header returns the n-th (from 0) call header the server saw for xid.
func (r *rig) header(xid uint32, n int) rpcrdma.Header {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	hs := r.hdrs[xid]
	if len(hs) <= n {
		r.t.Fatalf("the server saw %d headers for xid %#x", len(hs), xid)
	}
	return hs[n]
}

// serverQP is the server's QP of the current connection.
func (r *rig) serverQP() *sim.QP {
	qps := r.srv.QPs()
	if len(qps) == 0 {
		r.t.Fatal("no connection")
	}
	return qps[len(qps)-1]
}

func (r *rig) read(ctx context.Context, seed uint32, n int) error {
	xid, tag := r.next()
	rep, err := r.tr.RoundTrip(ctx, sunrpctest.ReadRequest(xid, sunrpctest.Control{Tag: tag}, seed, n, make([]byte, n)))
	if err != nil {
		return err
	}
	defer rep.Release()
	return sunrpctest.CheckRead(rep, xid, seed, n)
}

// mustNull makes a NULL call, failing the test if it fails: the
// connection is up and a credit came back.
func (r *rig) mustNull(ctx context.Context) {
	r.t.Helper()
	if err := r.null(ctx); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) null(ctx context.Context) error {
	xid, _ := r.next()
	rep, err := r.tr.RoundTrip(ctx, sunrpctest.NullRequest(xid))
	if err != nil {
		return err
	}
	rep.Release()
	return nil
}

// giveUpHeld sends a held READ of n bytes of seed into buf and gives up
// on it after the server has it; it returns the call's xid and tag.
func (r *rig) giveUpHeld(seed uint32, buf []byte) (xid, tag uint32) {
	r.t.Helper()
	xid, tag = r.next()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := r.tr.RoundTrip(ctx, sunrpctest.ReadRequest(xid, sunrpctest.Control{Tag: tag, Action: sunrpctest.Hold}, seed, len(buf), buf))
		errc <- err
	}()
	if err := r.h.WaitArrival(r.ctx(5*time.Second), tag, 1); err != nil {
		r.t.Fatal(err)
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			r.t.Fatalf("given-up READ: %v", err)
		}
	case <-time.After(5 * time.Second):
		r.t.Fatal("RoundTrip did not return after the cancel")
	}
	return xid, tag
}

// After RoundTrip returned on a cancel, the call's Write chunk
// window must be invalid (or its connection gone): a late RDMA WRITE with
// its rkey must fail at the device.
func TestLifecycleCancelAfterPostWindowInvalid(t *testing.T) {
	r := newRig(t, Config{}, xprttest.Config{})
	if err := r.null(r.ctx(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := bytes.Repeat([]byte{0x5a}, 64<<10)
	xid, _ := r.giveUpHeld(1, buf)
	seg := r.header(xid, 0).Writes[0][0]
	st := r.serverQP().RogueWrite(seg.Offset, seg.Handle, bytes.Repeat([]byte{0xee}, 64))
	if st == verbs.StatusSuccess {
		t.Fatalf("an RDMA WRITE with the given-up call's rkey %#x landed after RoundTrip returned", seg.Handle)
	}
	if !bytes.Equal(buf, bytes.Repeat([]byte{0x5a}, len(buf))) {
		t.Fatal("the caller's buffer changed")
	}
}

// Borrowed buffer: a READ into a borrowed registered buffer that
// the caller gave up on must not be written by the late reply.
func TestLifecycleCancelAfterPostBorrowedBuffer(t *testing.T) {
	r := newRig(t, Config{}, xprttest.Config{})
	ctx := r.ctx(10 * time.Second)
	r.mustNull(ctx)
	b, err := r.tr.Borrow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	buf := b.Bytes()[:64<<10]
	for i := range buf {
		buf[i] = 0x5a
	}
	_, tag := r.giveUpHeld(1, buf)
	r.h.Release(tag)
	if err := r.srv.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	r.mustNull(ctx)
	if n := len(buf) - bytes.Count(buf, []byte{0x5a}); n != 0 {
		t.Fatalf("%d bytes of the borrowed buffer were overwritten after RoundTrip returned", n)
	}
}

// The late reply is never copied into the caller's ReplyBulk.
func TestLifecycleCancelAfterPostNoLateCopy(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{{"remote-inv", Config{}}, {"local-inv", Config{MaxSegment: 16 << 10}}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, tc.cfg, xprttest.Config{})
			ctx := r.ctx(10 * time.Second)
			r.mustNull(ctx)
			buf := bytes.Repeat([]byte{0x5a}, 64<<10)
			_, tag := r.giveUpHeld(1, buf)
			r.h.Release(tag)
			if err := r.srv.WaitIdle(ctx); err != nil {
				t.Fatal(err)
			}
			if err := r.read(ctx, 2, 4096); err != nil {
				t.Fatal(err)
			}
			if n := len(buf) - bytes.Count(buf, []byte{0x5a}); n != 0 {
				t.Fatalf("%d bytes of ReplyBulk were overwritten after RoundTrip returned", n)
			}
		})
	}
}

// A same-XID retry on the live connection must not be completed by
// the first attempt's reply with data the server never wrote for it.
func TestLifecycleRetryNotCompletedByFirstReply(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		opts []sim.Option
	}{{"register", Config{}, []sim.Option{sim.WithoutMemWindows()}}, {"segments", Config{MaxSegment: 16 << 10}, nil}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, tc.cfg, xprttest.Config{}, tc.opts...)
			ctx := r.ctx(20 * time.Second)
			const n = 64 << 10
			for i := range 4 { // other data in the pooled buffers
				if err := r.read(ctx, 100+uint32(i), n); err != nil {
					t.Fatal(err)
				}
			}
			xid, tag := r.next()
			req := func() *sunrpc.Request {
				return sunrpctest.ReadRequest(xid, sunrpctest.Control{Tag: tag, Action: sunrpctest.Hold}, 7, n, make([]byte, n))
			}
			c1, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			if _, err := r.tr.RoundTrip(c1, req()); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("first attempt: %v", err)
			}
			req2 := req()
			done := make(chan error, 1)
			go func() {
				rep, err := r.tr.RoundTrip(ctx, req2)
				if err == nil {
					err = sunrpctest.CheckRead(rep, xid, 7, n)
					rep.Release()
				}
				done <- err
			}()
			if err := r.h.WaitArrival(ctx, tag, 2); err != nil {
				t.Fatal(err)
			}
			r.h.ReleaseArrival(tag, 1) // the first attempt's reply, while the retry waits
			var err error
			select {
			case err = <-done:
			case <-time.After(300 * time.Millisecond):
				r.h.Release(tag)
				err = <-done
			}
			if err != nil {
				t.Fatalf("the retry: %v", err)
			}
		})
	}
}

// An abandoned attempt that finishes after its retry (same XID)
// was sent must not remove the retry from the xid table: the retry's
// reply would be dropped as an unknown xid.
func TestLifecycleAbandonedAttemptKeepsSuccessor(t *testing.T) {
	r := newRig(t, Config{MaxSegment: 16 << 10}, xprttest.Config{})
	ctx := r.ctx(30 * time.Second)
	r.mustNull(ctx)
	const n = 64 << 10 // four windows: local invalidation
	xid, tag := r.next()
	req := func() *sunrpc.Request {
		return sunrpctest.ReadRequest(xid, sunrpctest.Control{Tag: tag, Action: sunrpctest.Hold}, 5, n, make([]byte, n))
	}
	c1, cancel1 := context.WithCancel(ctx)
	first := make(chan error, 1)
	go func() {
		_, err := r.tr.RoundTrip(c1, req())
		first <- err
	}()
	if err := r.h.WaitArrival(ctx, tag, 1); err != nil {
		t.Fatal(err)
	}
	qp := r.serverQP().Peer()
	inv0 := r.tr.Counters().LocalInvalidations
	qp.HoldSendCompletions() // the first attempt's LOCAL_INVs will not complete
	r.h.ReleaseArrival(tag, 1)
	waitFor(t, "the first reply's LOCAL_INVs", func() bool { return r.tr.Counters().LocalInvalidations > inv0 })
	cancel1()
	select {
	case <-first:
	case <-time.After(2 * time.Second):
		// The caller waits for its invalidation (the fixed lifecycle):
		// nothing to reproduce.
		qp.ReleaseSendCompletions()
		<-first
		return
	}
	second := make(chan error, 1)
	go func() {
		c2, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		rep, err := r.tr.RoundTrip(c2, req())
		if err == nil {
			err = sunrpctest.CheckRead(rep, xid, 5, n)
			rep.Release()
		}
		second <- err
	}()
	if err := r.h.WaitArrival(ctx, tag, 2); err != nil {
		t.Fatal(err)
	}
	qp.ReleaseSendCompletions() // the first attempt finishes now
	waitFor(t, "the send queue to drain", func() bool { return qp.HeldSendCompletions() == 0 })
	r.h.Release(tag) // the retry's reply
	if err := <-second; err != nil {
		t.Fatalf("the retry after the abandoned attempt finished: %v (bad xids %d)", err, r.tr.Counters().BadXIDs)
	}
}

// rnrZeroFabricCounted connects with an RNR retry count of 0: a Send the
// server posts when the client has no receive posted fails
// (RNR_RETRY_EXC_ERR) instead of waiting, as on iWARP, or as a stall would
// show on IB. It also counts the receives and SENDs the client posts.
type rnrZeroFabricCounted struct {
	verbs.Fabric
	mu       sync.Mutex
	posted   int // receive WRs posted, all connections
	sent     int // SENDs posted, all connections
	shortest int // the least posted−sent seen at a SEND post
}

func (f *rnrZeroFabricCounted) Resolve(ctx context.Context, addr netip.AddrPort) (verbs.Endpoint, error) {
	ep, err := f.Fabric.Resolve(ctx, addr)
	if err != nil {
		return nil, err
	}
	return rnrZeroEndpoint{ep, f}, nil
}

type rnrZeroEndpoint struct {
	verbs.Endpoint
	f *rnrZeroFabricCounted
}

func (ep rnrZeroEndpoint) Connect(ctx context.Context, p verbs.ConnParam) ([]byte, error) {
	p.RNRRetryCount = 0
	return ep.Endpoint.Connect(ctx, p)
}

func (ep rnrZeroEndpoint) CreateQP(pd verbs.PD, cfg verbs.QPConfig) (verbs.QP, error) {
	qp, err := ep.Endpoint.CreateQP(pd, cfg)
	if err != nil || ep.f == nil {
		return qp, err
	}
	return &countingQP{QP: qp, f: ep.f}, nil
}

// countingQP checks, at every SEND it posts, that as many receives were
// posted as calls sent: each call's reply has a receive waiting for it.
type countingQP struct {
	verbs.QP
	f *rnrZeroFabricCounted
}

func (q *countingQP) PostRecv(wrs []verbs.RecvWR) (int, error) {
	n, err := q.QP.PostRecv(wrs)
	if err == nil {
		n = len(wrs)
	}
	q.f.mu.Lock()
	for _, wr := range wrs[:n] {
		if wr.ID != sentinelID {
			q.f.posted++
		}
	}
	q.f.mu.Unlock()
	return n, err
}

func (q *countingQP) PostSend(wrs []verbs.SendWR) (int, error) {
	q.f.mu.Lock()
	for _, wr := range wrs {
		if wr.Opcode == verbs.OpSend && wr.ID != sentinelID {
			q.f.sent++
			q.f.shortest = min(q.f.shortest, q.f.posted-q.f.sent)
		}
	}
	q.f.mu.Unlock()
	return q.QP.PostSend(wrs)
}

// A reply's credit may be handed to the next call only after the
// receive it consumed is reposted; otherwise the server's next reply can
// find no receive (RNR). With an RNR retry count of 0 that breaks the
// connection.
func TestLifecycleRepostBeforeCredit(t *testing.T) {
	h := sunrpctest.NewHandler()
	fab := sim.NewFabric(sim.PanicOnDoubleInvalidation())
	srv, err := xprttest.Start(xprttest.Config{Fabric: fab, Handler: h, Credits: 32})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cf := &rnrZeroFabricCounted{Fabric: fab, shortest: 1 << 30}
	tr, err := Dial(ctx, Config{Fabric: cf, Addr: srv.Addr(), Slots: 32, MaxIO: 64 << 10, IOBuffers: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		tr.Close()
		h.Close()
		srv.Close()
		fab.Close()
	}()
	var xid sync.Mutex
	next := uint32(0x5000)
	errs := parallel(64, func(int) error {
		for range 100 {
			xid.Lock()
			next++
			x := next
			xid.Unlock()
			rep, err := tr.RoundTrip(ctx, sunrpctest.NullRequest(x))
			if err != nil {
				return err
			}
			rep.Release()
		}
		return nil
	})
	noErrors(t, errs)
	if c := tr.Counters(); c.Disconnects != 0 || c.ErrorCompletions != 0 {
		t.Fatalf("the connection broke (RNR): %s", c)
	}
	cf.mu.Lock()
	defer cf.mu.Unlock()
	t.Logf("receives posted minus calls sent, at its lowest: %d", cf.shortest)
	if cf.shortest < 0 {
		t.Fatalf("a call was sent with %d fewer receives posted than calls sent: a credit was handed on before its receive was reposted", -cf.shortest)
	}
}

// Calls that need several windows take them all at once or not at
// all; taken one at a time, calls holding some wait for more, forever.
func TestLifecycleWindowsNoDeadlock(t *testing.T) {
	// Two I/O buffers, eight windows; each READ needs eight.
	r := newRig(t, Config{MaxIO: 32 << 10, MaxSegment: 4 << 10, IOBuffers: 2}, xprttest.Config{})
	if err := r.null(r.ctx(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	for round := range 50 {
		ctx := r.ctx(5 * time.Second)
		if errs := parallel(16, func(i int) error { return r.read(ctx, uint32(i), 32<<10) }); len(errs) > 0 {
			t.Fatalf("round %d: %d of 16 READs failed (%v); windows free %d", round, len(errs), errs[0], r.tr.reg.Counters().FreeWindows)
		}
	}
}

// A call with a Read chunk and a Write chunk of eight segments
// each (17 WRs with its Send) must not panic.
func TestLifecycleSixteenSegmentCall(t *testing.T) {
	r := newRig(t, Config{MaxIO: 64 << 10, MaxSegment: 8 << 10}, xprttest.Config{})
	ctx := r.ctx(20 * time.Second)
	r.mustNull(ctx)
	xid, tag := r.next()
	req := sunrpctest.ReadRequest(xid, sunrpctest.Control{Tag: tag}, 3, 64<<10, make([]byte, 64<<10))
	data := sunrpctest.Pattern(9, 64<<10)
	req.Head = sunrpc.AppendUint32(req.Head, uint32(len(data))) // an extra argument the server ignores
	req.Bulk = data
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("RoundTrip panicked: %v", p)
			}
		}()
		rep, err := r.tr.RoundTrip(ctx, req)
		if err == nil {
			err = sunrpctest.CheckRead(rep, xid, 3, 64<<10)
			rep.Release()
		}
		if err != nil {
			t.Fatalf("16-segment call: %v", err)
		}
	}()
	if c := r.tr.Counters(); c.ReadChunks != 1 || c.WriteChunks != 1 {
		t.Fatalf("the call carried %d Read and %d Write chunks, want one of each: %s", c.ReadChunks, c.WriteChunks, c)
	}
	if err := r.read(ctx, 4, 4096); err != nil {
		t.Fatalf("after the 16-segment call: %v", err)
	}
}

// A long call (sent whole in a position-zero Read chunk) of an
// 8 KiB head and a bulk of MaxIO−1 (then MaxIO−4) bytes is sent whole, not
// a panic and not truncated.
func TestLifecycleLongCallPositionZero(t *testing.T) {
	r := newRig(t, Config{MaxIO: 64 << 10}, xprttest.Config{})
	ctx := r.ctx(20 * time.Second)
	for _, n := range []int{64<<10 - 1, 64<<10 - 4} {
		xid, tag := r.next()
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("RoundTrip of %d bytes panicked: %v", n, p)
				}
			}()
			rep, err := r.tr.RoundTrip(ctx, sunrpctest.WriteRequest(xid, sunrpctest.Control{Tag: tag}, 8192, 11, sunrpctest.Pattern(11, n), 0xfeed))
			if err == nil {
				err = sunrpctest.CheckWrite(rep, xid, n, 0xfeed)
				rep.Release()
			}
			if err != nil {
				t.Errorf("long call with %d bytes of bulk: %v", n, err)
			}
		}()
	}
}

// ErrClosed is sunrpc.ErrClosed (nfs3 maps it to ENOTCONN).
func TestLifecycleErrClosedIsSunrpcErrClosed(t *testing.T) {
	if !errors.Is(ErrClosed, sunrpc.ErrClosed) {
		t.Fatal("errors.Is(xprt.ErrClosed, sunrpc.ErrClosed) is false")
	}
}
