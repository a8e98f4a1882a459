package verbstest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/rcpair"
)

// --- helpers shared by the cases ---

func testCtx(t *testing.T, env Env) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), env.timeout())
	t.Cleanup(cancel)
	return ctx
}

// reap waits for exactly n completions on cq.
func reap(t *testing.T, env Env, cq verbs.CQ, n int, what string) []verbs.Completion {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), env.timeout())
	defer cancel()
	wcs, err := Reap(ctx, cq, n)
	if err != nil {
		t.Fatalf("%s: reaped %d of %d completions %s: %v", what, len(wcs), n, fmtWCs(wcs), err)
	}
	return wcs
}

// expectNoCompletion checks that cq stays empty for a moment.
func expectNoCompletion(t *testing.T, cq verbs.CQ, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := cq.Wait(ctx); err == nil {
		var wcs [4]verbs.Completion
		n, _ := cq.Poll(wcs[:])
		t.Fatalf("%s: unexpected completions %s", what, fmtWCs(wcs[:n]))
	}
}

func fmtWCs(wcs []verbs.Completion) string {
	parts := make([]string, len(wcs))
	for i, wc := range wcs {
		parts[i] = fmt.Sprintf("{id %d %s %s len %d}", wc.ID, wc.Status, wc.Opcode, wc.ByteLen)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func expectWC(t *testing.T, wc verbs.Completion, id uint64, st verbs.Status, what string) {
	t.Helper()
	if wc.ID != id || wc.Status != st {
		t.Fatalf("%s: completion {id %d %s}, want {id %d %s}", what, wc.ID, wc.Status, id, st)
	}
}

func postSend(t *testing.T, s *Side, wrs ...verbs.SendWR) {
	t.Helper()
	if bad, err := s.QP.PostSend(wrs); err != nil {
		t.Fatalf("PostSend (WR %d of %d): %v", bad, len(wrs), err)
	}
}

func postRecv(t *testing.T, s *Side, id uint64, sgl ...verbs.SGE) {
	t.Helper()
	if _, err := s.QP.PostRecv([]verbs.RecvWR{{ID: id, SGL: sgl}}); err != nil {
		t.Fatalf("PostRecv %d: %v", id, err)
	}
}

func send(id uint64, signaled bool, sgl ...verbs.SGE) verbs.SendWR {
	wr := verbs.SendWR{ID: id, Opcode: verbs.OpSend, SGL: sgl}
	if signaled {
		wr.Flags = verbs.SendSignaled
	}
	return wr
}

// rdma posts one signaled RDMA WRITE or READ and returns its completion.
func rdma(t *testing.T, env Env, s *Side, op verbs.Opcode, id uint64, local verbs.SGE, raddr uint64, rkey uint32) verbs.Completion {
	t.Helper()
	postSend(t, s, verbs.SendWR{ID: id, Opcode: op, Flags: verbs.SendSignaled, SGL: []verbs.SGE{local}, RemoteAddr: raddr, RKey: rkey})
	return reap(t, env, s.SendCQ, 1, op.String())[0]
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed+1))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

func expectState(t *testing.T, s *Side, want verbs.QPState, who string) {
	t.Helper()
	st, err := s.QP.State()
	if err != nil || st != want {
		t.Errorf("%s QP state %v (%v), want %v", who, st, err, want)
	}
}

// expectErrored checks that a side's QP went to the error state: its
// sentinel receive (posted before) is flushed.
func expectErrored(t *testing.T, env Env, s *Side, sentinel uint64, who string) {
	t.Helper()
	wc := reap(t, env, s.RecvCQ, 1, who+" sentinel receive")[0]
	expectWC(t, wc, sentinel, verbs.StatusWRFlushErr, who+" sentinel receive")
	expectState(t, s, verbs.QPError, who)
}

func requireWindows(t *testing.T, p *Pair) {
	t.Helper()
	if a := p.Client.Endpoint.Device().Attr(); !a.Has(verbs.CapMemWindow2) {
		t.Skipf("device %s has no type-2 memory windows", a.Name)
	}
}

func allocMW(t *testing.T, pd verbs.PD) verbs.MW {
	t.Helper()
	mw, err := pd.AllocMW()
	if err != nil {
		t.Fatalf("AllocMW: %v", err)
	}
	t.Cleanup(func() {
		if err := mw.Close(); err != nil {
			t.Errorf("closing a window: %v", err)
		}
	})
	return mw
}

// nextKey returns rkey with a different, unpredictable key byte.
func nextKey(rkey uint32) uint32 {
	return verbs.NextRKey(rkey, uint8(rkey)+1+uint8(rand.IntN(255)))
}

func bindWR(id uint64, signaled bool, mw verbs.MW, b *Buffer, off, n uint64, access verbs.Access) verbs.SendWR {
	wr := verbs.SendWR{ID: id, Opcode: verbs.OpBindMW, MW: mw, BindMR: b.MR, BindAddr: b.Addr(off), BindLength: n,
		BindAccess: access, BindRKey: nextKey(mw.RKey())}
	if signaled {
		wr.Flags = verbs.SendSignaled
	}
	return wr
}

// bind binds mw over [off, off+n) of b with a new rkey, waits for the
// completion and returns the rkey.
func bind(t *testing.T, env Env, s *Side, mw verbs.MW, b *Buffer, off, n uint64, access verbs.Access) uint32 {
	t.Helper()
	wr := bindWR(100, true, mw, b, off, n, access)
	postSend(t, s, wr)
	if got := mw.RKey(); got != wr.BindRKey {
		t.Fatalf("MW.RKey after posting a bind is %#x, want %#x", got, wr.BindRKey)
	}
	wc := reap(t, env, s.SendCQ, 1, "BIND_MW")[0]
	expectWC(t, wc, 100, verbs.StatusSuccess, "BIND_MW")
	if wc.Opcode != verbs.WCBindMW {
		t.Errorf("BIND_MW completion opcode %s", wc.Opcode)
	}
	return wr.BindRKey
}

// localInv invalidates rkey, which the caller knows is valid.
func localInv(t *testing.T, env Env, s *Side, rkey uint32) {
	t.Helper()
	postSend(t, s, verbs.SendWR{ID: 200, Opcode: verbs.OpLocalInv, Flags: verbs.SendSignaled, InvalidateRKey: rkey})
	wc := reap(t, env, s.SendCQ, 1, "LOCAL_INV")[0]
	expectWC(t, wc, 200, verbs.StatusSuccess, "LOCAL_INV")
	if wc.Opcode != verbs.WCLocalInv {
		t.Errorf("LOCAL_INV completion opcode %s", wc.Opcode)
	}
}

// windowSetup gives a pair a client buffer to expose (LOCAL_WRITE |
// MW_BIND, as the transport registers), a window, and a server buffer.
func windowSetup(t *testing.T, p *Pair, n int) (cb *Buffer, mw verbs.MW, sb *Buffer) {
	requireWindows(t, p)
	cb = MustBuffer(t, p.Client.PD, n, verbs.AccessLocalWrite|verbs.AccessMWBind)
	if cb.MR.RKey() != 0 {
		t.Logf("an MR without remote access has rkey %#x (expected 0)", cb.MR.RKey())
	}
	sb = MustBuffer(t, p.Server.PD, n, verbs.AccessLocalWrite)
	mw = allocMW(t, p.Client.PD)
	return cb, mw, sb
}

// --- the cases ---

func testDeviceAttributes(t *testing.T, env Env) {
	names, err := env.Fabric.Devices()
	if err != nil || len(names) == 0 {
		t.Fatalf("Devices: %v, %v", names, err)
	}
	name := env.Device
	if name == "" {
		name = names[0]
	}
	if !slices.Contains(names, name) {
		t.Fatalf("device %q not among %v", name, names)
	}
	d, err := env.Fabric.OpenDevice(name)
	if err != nil {
		t.Fatalf("OpenDevice(%q): %v", name, err)
	}
	a := d.Attr()
	t.Logf("%s: %+v", name, a)
	if d.Name() != name || a.Name != name {
		t.Errorf("device names %q/%q, want %q", d.Name(), a.Name, name)
	}
	for _, c := range []struct {
		what string
		ok   bool
	}{
		{"MaxQPWR > 0", a.MaxQPWR > 0},
		{"MaxSGE >= 1", a.MaxSGE >= 1},
		{"MaxCQE > 0", a.MaxCQE > 0},
		{"MaxMR > 0", a.MaxMR > 0},
		{"MaxMRSize > 0", a.MaxMRSize > 0},
		{"MaxQPRdAtom > 0", a.MaxQPRdAtom > 0},
		{"a driver name", a.Driver != ""},
	} {
		if !c.ok {
			t.Errorf("attributes: want %s", c.what)
		}
	}
	if a.Has(verbs.CapMemWindow2) {
		if a.MaxMW <= 0 || !(a.Has(verbs.CapMemWindow2A) || a.Has(verbs.CapMemWindow2B)) {
			t.Errorf("type-2 windows without MaxMW or kind: %+v", a)
		}
	} else {
		t.Logf("%s has no type-2 memory windows: the window cases will be skipped", name)
	}
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatalf("AllocPD: %v", err)
	}
	cq, err := d.CreateCQ(8)
	if err != nil {
		t.Fatalf("CreateCQ: %v", err)
	}
	for _, c := range []interface{ Close() error }{cq, cq, pd, pd, d, d} { // twice each: Close is idempotent
		if err := c.Close(); err != nil {
			t.Errorf("Close %T: %v", c, err)
		}
	}
}

func testBadInput(t *testing.T, env Env) {
	ctx := testCtx(t, env)
	if _, err := env.Fabric.OpenDevice("nosuchdev"); err == nil || !strings.Contains(err.Error(), "nosuchdev") {
		t.Errorf("OpenDevice(nosuchdev): %v, want an error naming the device", err)
	}

	// A port where nothing listens: listen, note the port, stop.
	l, err := env.Fabric.Listen(env.ListenAddr)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	target := netip.AddrPortFrom(env.ConnectAddr.Addr(), l.Addr().Port())
	if err := l.Close(); err != nil {
		t.Fatalf("closing the listener: %v", err)
	}
	ep, err := env.Fabric.Resolve(ctx, target)
	if err != nil {
		if !strings.Contains(err.Error(), target.String()) {
			t.Errorf("Resolve(%s) error does not name the address: %v", target, err)
		}
		t.Logf("no listener: Resolve fails: %v", err)
		return
	}
	s, err := rcpair.NewSide(ep, nil, PairConfig{}.WithDefaults())
	defer func() {
		if err := s.Close(); err != nil {
			t.Errorf("closing: %v", err)
		}
	}()
	if err != nil {
		t.Fatalf("creating the QP: %v", err)
	}
	_, err = ep.Connect(ctx, DefaultConnParam())
	switch {
	case err == nil:
		t.Fatalf("Connect to %s with no listener succeeded", target)
	case !strings.Contains(err.Error(), target.String()):
		t.Errorf("Connect error does not name the address %s: %v", target, err)
	case !errors.Is(err, syscall.ECONNREFUSED):
		t.Logf("no listener: Connect fails without ECONNREFUSED: %v", err)
	default:
		t.Logf("no listener: %v", err)
	}
}

func testPrivateData(t *testing.T, env Env) {
	cp, sp := DefaultConnParam(), DefaultConnParam()
	cp.PrivateData = []byte("nfsrdma client: private data")
	sp.PrivateData = []byte("server: accepted")
	p := NewPair(t, env, PairConfig{ClientParam: &cp, ServerParam: &sp})
	for _, c := range []struct {
		who       string
		got, sent []byte
	}{{"server", p.Server.PeerPrivateData, cp.PrivateData}, {"client", p.Client.PeerPrivateData, sp.PrivateData}} {
		if !bytes.HasPrefix(c.got, c.sent) || bytes.ContainsFunc(c.got[min(len(c.sent), len(c.got)):], func(r rune) bool { return r != 0 }) {
			t.Errorf("%s got private data %q, want %q (zero padding allowed)", c.who, c.got, c.sent)
		}
	}

	// Reject, with private data.
	ctx := testCtx(t, env)
	l, err := env.Fabric.Listen(env.ListenAddr)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	defer l.Close()
	target := env.ConnectAddr
	if target.Port() == 0 {
		target = netip.AddrPortFrom(target.Addr(), l.Addr().Port())
	}
	srvErr := make(chan error, 1)
	go func() {
		ep, err := l.Accept(ctx)
		if err != nil {
			srvErr <- err
			return
		}
		if pd := ep.PrivateData(); !bytes.HasPrefix(pd, cp.PrivateData) {
			err = fmt.Errorf("request private data %q", pd)
		}
		srvErr <- errors.Join(err, ep.Reject([]byte("no")), ep.Close())
	}()
	ep, err := env.Fabric.Resolve(ctx, target)
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	s, err := rcpair.NewSide(ep, nil, PairConfig{}.WithDefaults())
	defer s.Close()
	if err != nil {
		t.Fatalf("client side: %v", err)
	}
	if _, err := ep.Connect(ctx, cp); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("Connect rejected by the peer: %v, want ECONNREFUSED", err)
	}
	if err := <-srvErr; err != nil {
		t.Errorf("server side of the reject: %v", err)
	}
}

func testSendRecv(t *testing.T, env Env) {
	p := NewPair(t, env, PairConfig{})
	cb := MustBuffer(t, p.Client.PD, 8192, verbs.AccessLocalWrite)
	sb := MustBuffer(t, p.Server.PD, 8192, verbs.AccessLocalWrite)
	fill(sb.Bytes(), 1)

	// Server to client: the second message gathered from two SGEs and
	// scattered over two.
	postRecv(t, p.Client, 1, cb.SGE(0, 4096))
	postRecv(t, p.Client, 2, cb.SGE(4096, 100), cb.SGE(5000, 3000))
	postSend(t, p.Server, send(10, true, sb.SGE(0, 1000)), send(11, true, sb.SGE(1000, 50), sb.SGE(3000, 1000)))
	wcs := reap(t, env, p.Client.RecvCQ, 2, "client receives")
	for i, want := range []uint32{1000, 1050} {
		wc := wcs[i]
		expectWC(t, wc, uint64(i+1), verbs.StatusSuccess, "receive")
		if wc.Opcode != verbs.WCRecv || wc.ByteLen != want || wc.QPNum != p.Client.QP.Num() || wc.Flags&verbs.WCWithInv != 0 {
			t.Errorf("receive %d: %+v, want RECV of %d bytes on QP %d", i+1, wc, want, p.Client.QP.Num())
		}
	}
	c, s := cb.Bytes(), sb.Bytes()
	msg2 := append(slices.Clone(s[1000:1050]), s[3000:4000]...)
	if !bytes.Equal(c[:1000], s[:1000]) || !bytes.Equal(c[4096:4196], msg2[:100]) || !bytes.Equal(c[5000:5950], msg2[100:]) {
		t.Error("received bytes differ from the sent ones")
	}
	for i, wc := range reap(t, env, p.Server.SendCQ, 2, "server sends") {
		expectWC(t, wc, uint64(10+i), verbs.StatusSuccess, "send")
		if wc.Opcode != verbs.WCSend {
			t.Errorf("send completion opcode %s", wc.Opcode)
		}
	}

	// Client to server: an unsignaled send then a signaled one; only the
	// signaled one completes.
	fill(c[:256], 2)
	postRecv(t, p.Server, 3, sb.SGE(4096, 128))
	postRecv(t, p.Server, 4, sb.SGE(4224, 128))
	postSend(t, p.Client, send(20, false, cb.SGE(0, 128)), send(21, true, cb.SGE(128, 128)))
	wcs = reap(t, env, p.Server.RecvCQ, 2, "server receives")
	expectWC(t, wcs[0], 3, verbs.StatusSuccess, "receive")
	expectWC(t, wcs[1], 4, verbs.StatusSuccess, "receive")
	if !bytes.Equal(s[4096:4352], c[:256]) {
		t.Error("server received bytes differ")
	}
	expectWC(t, reap(t, env, p.Client.SendCQ, 1, "client send")[0], 21, verbs.StatusSuccess, "signaled send")
	expectNoCompletion(t, p.Client.SendCQ, "after the signaled send")
}

func testReceiveTooSmall(t *testing.T, env Env) {
	p := NewPair(t, env, PairConfig{})
	cb := MustBuffer(t, p.Client.PD, 4096, verbs.AccessLocalWrite)
	sb := MustBuffer(t, p.Server.PD, 4096, verbs.AccessLocalWrite)
	postRecv(t, p.Client, 1, cb.SGE(0, 16))
	postSend(t, p.Server, send(10, true, sb.SGE(0, 100)))
	rc := reap(t, env, p.Client.RecvCQ, 1, "receive")[0]
	switch {
	case rc.ID != 1 || rc.Status == verbs.StatusSuccess:
		t.Fatalf("receive too small: %+v, want an error", rc)
	case rc.Status != verbs.StatusLocLenErr:
		// rxe completes it with REM_INV_REQ_ERR (its RC class C error).
		t.Logf("DEPARTURE: a receive too small completed with %s, not LOC_LEN_ERR", rc.Status)
	}
	wc := reap(t, env, p.Server.SendCQ, 1, "send")[0]
	if wc.ID != 10 || wc.Status == verbs.StatusSuccess {
		t.Errorf("send into a receive too small: %+v, want an error", wc)
	}
	t.Logf("the sender of a message too large for the receive gets %s", wc.Status)
	expectState(t, p.Client, verbs.QPError, "receiver")
}

func testRDMAWriteRead(t *testing.T, env Env) {
	p := NewPair(t, env, PairConfig{})
	cb := MustBuffer(t, p.Client.PD, 64<<10, verbs.AccessLocalWrite)
	sb := MustBuffer(t, p.Server.PD, 64<<10, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	rkey := sb.MR.RKey()
	if rkey == 0 {
		t.Fatal("an MR with remote access has rkey 0")
	}
	c, s := cb.Bytes(), sb.Bytes()
	fill(c[:32<<10], 3)
	wc := rdma(t, env, p.Client, verbs.OpRDMAWrite, 1, cb.SGE(0, 32<<10), sb.Addr(1000), rkey)
	expectWC(t, wc, 1, verbs.StatusSuccess, "RDMA WRITE")
	if wc.Opcode != verbs.WCRDMAWrite || !bytes.Equal(s[1000:1000+32<<10], c[:32<<10]) {
		t.Errorf("RDMA WRITE: %+v; bytes equal: %v", wc, bytes.Equal(s[1000:1000+32<<10], c[:32<<10]))
	}
	fill(s[40000:50000], 4)
	wc = rdma(t, env, p.Client, verbs.OpRDMARead, 2, cb.SGE(32<<10, 10000), sb.Addr(40000), rkey)
	expectWC(t, wc, 2, verbs.StatusSuccess, "RDMA READ")
	if wc.Opcode != verbs.WCRDMARead || wc.ByteLen != 10000 || !bytes.Equal(c[32<<10:32<<10+10000], s[40000:50000]) {
		t.Errorf("RDMA READ: %+v; bytes equal: %v", wc, bytes.Equal(c[32<<10:32<<10+10000], s[40000:50000]))
	}

	// An unsignaled WRITE then a SEND: when the receive completes, the
	// written data is in place (RC ordering).
	fill(c[:4096], 5)
	postRecv(t, p.Server, 3, sb.SGE(60000, 64))
	postSend(t, p.Client,
		verbs.SendWR{ID: 4, Opcode: verbs.OpRDMAWrite, SGL: []verbs.SGE{cb.SGE(0, 4096)}, RemoteAddr: sb.Addr(0), RKey: rkey},
		send(5, true, cb.SGE(4096, 64)))
	expectWC(t, reap(t, env, p.Server.RecvCQ, 1, "receive")[0], 3, verbs.StatusSuccess, "receive after WRITE")
	if !bytes.Equal(s[:4096], c[:4096]) {
		t.Error("data written before a SEND is not in place when its receive completes")
	}
	expectWC(t, reap(t, env, p.Client.SendCQ, 1, "send")[0], 5, verbs.StatusSuccess, "send after WRITE")
}

func testWindowWriteInvalidate(t *testing.T, env Env) {
	p := NewPair(t, env, PairConfig{})
	cb, mw, sb := windowSetup(t, p, 16<<10)
	rkey := bind(t, env, p.Client, mw, cb, 4096, 4096, verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	c, s := cb.Bytes(), sb.Bytes()

	fill(s[:4096], 6)
	expectWC(t, rdma(t, env, p.Server, verbs.OpRDMAWrite, 1, sb.SGE(0, 4096), cb.Addr(4096), rkey), 1, verbs.StatusSuccess, "WRITE through the window")
	if !bytes.Equal(c[4096:8192], s[:4096]) {
		t.Error("WRITE through the window: bytes differ")
	}
	expectWC(t, rdma(t, env, p.Server, verbs.OpRDMARead, 2, sb.SGE(8192, 4096), cb.Addr(4096), rkey), 2, verbs.StatusSuccess, "READ through the window")
	if !bytes.Equal(s[8192:12288], c[4096:8192]) {
		t.Error("READ through the window: bytes differ")
	}

	postRecv(t, p.Client, 99, cb.SGE(0, 64)) // flushes when the client QP goes to error
	localInv(t, env, p.Client, rkey)
	before := slices.Clone(c)
	fill(s[:4096], 7)
	wc := rdma(t, env, p.Server, verbs.OpRDMAWrite, 3, sb.SGE(0, 4096), cb.Addr(4096), rkey)
	expectWC(t, wc, 3, verbs.StatusRemAccessErr, "WRITE with an invalidated rkey")
	if !bytes.Equal(c, before) {
		t.Error("a WRITE with an invalidated rkey changed the memory")
	}
	expectErrored(t, env, p.Client, 99, "window owner")
	expectState(t, p.Server, verbs.QPError, "requester")
}

func testWindowBounds(t *testing.T, env Env) {
	t.Run("OutsideWindowInsideMR", func(t *testing.T) {
		p := NewPair(t, env, PairConfig{})
		cb, mw, sb := windowSetup(t, p, 16<<10)
		rkey := bind(t, env, p.Client, mw, cb, 4096, 4096, verbs.AccessRemoteWrite)
		postRecv(t, p.Client, 99, cb.SGE(0, 64))
		before := slices.Clone(cb.Bytes())
		fill(sb.Bytes()[:64], 8)
		wc := rdma(t, env, p.Server, verbs.OpRDMAWrite, 1, sb.SGE(0, 64), cb.Addr(8192-32), rkey) // straddles the window's end
		changed := !bytes.Equal(cb.Bytes(), before)
		if env.Quirks.WindowBoundsEnforced {
			expectWC(t, wc, 1, verbs.StatusRemAccessErr, "WRITE past the window's end")
			if changed {
				t.Error("a WRITE past the window's end changed the memory")
			}
			expectErrored(t, env, p.Client, 99, "window owner")
			return
		}
		t.Logf("DEPARTURE (Quirks.WindowBoundsEnforced=false): a WRITE past the window's end, inside the MR, completed with %s and changed memory: %v; register each I/O buffer as its own MR", wc.Status, changed)
	})
	t.Run("BeyondMR", func(t *testing.T) {
		p := NewPair(t, env, PairConfig{})
		cb, mw, sb := windowSetup(t, p, 16<<10)
		rkey := bind(t, env, p.Client, mw, cb, 12<<10, 4096, verbs.AccessRemoteWrite)
		postRecv(t, p.Client, 99, cb.SGE(0, 64))
		before := slices.Clone(cb.Bytes())
		wc := rdma(t, env, p.Server, verbs.OpRDMAWrite, 1, sb.SGE(0, 64), cb.Addr(16<<10-32), rkey) // crosses the MR's end
		expectWC(t, wc, 1, verbs.StatusRemAccessErr, "WRITE past the MR's end")
		if !bytes.Equal(cb.Bytes(), before) {
			t.Error("a WRITE past the MR's end changed the memory")
		}
		expectErrored(t, env, p.Client, 99, "window owner")
	})
}

func testWindowSendWithInvalidate(t *testing.T, env Env) {
	p := NewPair(t, env, PairConfig{})
	cb, mw, sb := windowSetup(t, p, 16<<10)
	c, s := cb.Bytes(), sb.Bytes()

	// The client advertises a window in a call: BIND chained unsignaled
	// before the SEND, as the transport posts them.
	postRecv(t, p.Server, 1, sb.SGE(0, 64))
	postRecv(t, p.Client, 2, cb.SGE(1024, 1024))
	bw := bindWR(10, false, mw, cb, 8192, 4096, verbs.AccessRemoteWrite)
	rkey := bw.BindRKey
	binary.BigEndian.PutUint64(c[0:], cb.Addr(8192))
	binary.BigEndian.PutUint32(c[8:], rkey)
	postSend(t, p.Client, bw, send(11, true, cb.SGE(0, 12)))
	if mw.RKey() != rkey {
		t.Fatalf("MW.RKey after the post is %#x, want %#x", mw.RKey(), rkey)
	}

	// The server writes the result through the window and replies with
	// Send With Invalidate.
	expectWC(t, reap(t, env, p.Server.RecvCQ, 1, "call")[0], 1, verbs.StatusSuccess, "call")
	addr, key := binary.BigEndian.Uint64(s[0:]), binary.BigEndian.Uint32(s[8:])
	fill(s[4096:8192], 9)
	fill(s[64:96], 10)
	postSend(t, p.Server,
		verbs.SendWR{ID: 20, Opcode: verbs.OpRDMAWrite, SGL: []verbs.SGE{sb.SGE(4096, 4096)}, RemoteAddr: addr, RKey: key},
		verbs.SendWR{ID: 21, Opcode: verbs.OpSendWithInv, Flags: verbs.SendSignaled, SGL: []verbs.SGE{sb.SGE(64, 32)}, InvalidateRKey: key})

	wc := reap(t, env, p.Client.RecvCQ, 1, "reply")[0]
	expectWC(t, wc, 2, verbs.StatusSuccess, "reply")
	if wc.Flags&verbs.WCWithInv == 0 || wc.InvalidatedRKey != rkey || wc.ByteLen != 32 {
		t.Errorf("reply completion %+v, want WCWithInv with InvalidatedRKey %#x and 32 bytes", wc, rkey)
	}
	if !bytes.Equal(c[8192:12288], s[4096:8192]) || !bytes.Equal(c[1024:1056], s[64:96]) {
		t.Error("written or received bytes differ")
	}
	expectWC(t, reap(t, env, p.Client.SendCQ, 1, "call send")[0], 11, verbs.StatusSuccess, "call send (retiring the BIND)")
	expectWC(t, reap(t, env, p.Server.SendCQ, 1, "reply send")[0], 21, verbs.StatusSuccess, "Send With Invalidate")

	// The window is invalid now: a late WRITE with its rkey fails.
	postRecv(t, p.Client, 99, cb.SGE(0, 64))
	before := slices.Clone(c)
	wc = rdma(t, env, p.Server, verbs.OpRDMAWrite, 22, sb.SGE(0, 4096), addr, key)
	expectWC(t, wc, 22, verbs.StatusRemAccessErr, "WRITE after remote invalidation")
	if !bytes.Equal(c, before) {
		t.Error("a WRITE after remote invalidation changed the memory")
	}
	expectErrored(t, env, p.Client, 99, "window owner")
}

func testWindowRebind(t *testing.T, env Env) {
	p := NewPair(t, env, PairConfig{})
	cb, mw, sb := windowSetup(t, p, 16<<10)
	c, s := cb.Bytes(), sb.Bytes()
	k1 := bind(t, env, p.Client, mw, cb, 8192, 4096, verbs.AccessRemoteWrite)
	fill(s[:4096], 11)
	expectWC(t, rdma(t, env, p.Server, verbs.OpRDMAWrite, 1, sb.SGE(0, 4096), cb.Addr(8192), k1), 1, verbs.StatusSuccess, "WRITE with the first key")
	localInv(t, env, p.Client, k1)

	k2 := bind(t, env, p.Client, mw, cb, 0, 4096, verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	if k2 == k1 || k2>>8 != k1>>8 {
		t.Errorf("re-bound rkey %#x after %#x: want the same index and another key byte", k2, k1)
	}
	fill(s[4096:8192], 12)
	expectWC(t, rdma(t, env, p.Server, verbs.OpRDMAWrite, 2, sb.SGE(4096, 4096), cb.Addr(0), k2), 2, verbs.StatusSuccess, "WRITE with the new key")
	expectWC(t, rdma(t, env, p.Server, verbs.OpRDMARead, 3, sb.SGE(8192, 4096), cb.Addr(0), k2), 3, verbs.StatusSuccess, "READ with the new key")
	if !bytes.Equal(c[8192:12288], s[:4096]) || !bytes.Equal(c[:4096], s[4096:8192]) || !bytes.Equal(s[8192:12288], s[4096:8192]) {
		t.Error("bytes moved through the windows differ")
	}
	localInv(t, env, p.Client, k2)
	expectState(t, p.Client, verbs.QPRTS, "client")
	expectState(t, p.Server, verbs.QPRTS, "server")
}

func testWindowBindErrors(t *testing.T, env Env) {
	for _, c := range []struct {
		name   string
		access verbs.Access // of the MR
		setup  func(t *testing.T, env Env, p *Pair, mw verbs.MW, b *Buffer)
		wr     func(mw verbs.MW, b *Buffer) verbs.SendWR
	}{
		{"StillValid", verbs.AccessLocalWrite | verbs.AccessMWBind,
			func(t *testing.T, env Env, p *Pair, mw verbs.MW, b *Buffer) {
				bind(t, env, p.Client, mw, b, 0, 4096, verbs.AccessRemoteWrite)
			},
			func(mw verbs.MW, b *Buffer) verbs.SendWR {
				return bindWR(1, true, mw, b, 4096, 4096, verbs.AccessRemoteWrite)
			}},
		{"BeyondMREnd", verbs.AccessLocalWrite | verbs.AccessMWBind, nil,
			func(mw verbs.MW, b *Buffer) verbs.SendWR {
				return bindWR(1, true, mw, b, 12<<10, 8<<10, verbs.AccessRemoteWrite)
			}},
		{"MRWithoutBindAccess", verbs.AccessLocalWrite, nil,
			func(mw verbs.MW, b *Buffer) verbs.SendWR {
				return bindWR(1, true, mw, b, 0, 4096, verbs.AccessRemoteRead)
			}},
		{"RemoteWriteNeedsLocalWrite", verbs.AccessMWBind, nil,
			func(mw verbs.MW, b *Buffer) verbs.SendWR {
				return bindWR(1, true, mw, b, 0, 4096, verbs.AccessRemoteWrite)
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := NewPair(t, env, PairConfig{})
			requireWindows(t, p)
			b := MustBuffer(t, p.Client.PD, 16<<10, c.access)
			rb := MustBuffer(t, p.Client.PD, 4096, verbs.AccessLocalWrite)
			mw := allocMW(t, p.Client.PD)
			if c.setup != nil {
				c.setup(t, env, p, mw, b)
			}
			postRecv(t, p.Client, 99, rb.SGE(0, 64))
			postSend(t, p.Client, c.wr(mw, b))
			expectWC(t, reap(t, env, p.Client.SendCQ, 1, "bind")[0], 1, verbs.StatusMWBindErr, "bind")
			expectErrored(t, env, p.Client, 99, "binder")
		})
	}
}

func testWindowTiedToQP(t *testing.T, env Env) {
	p1 := NewPair(t, env, PairConfig{})
	requireWindows(t, p1)
	p2 := NewPair(t, env, PairConfig{ClientPD: p1.Client.PD})
	cb := MustBuffer(t, p1.Client.PD, 16<<10, verbs.AccessLocalWrite|verbs.AccessMWBind)
	rb := MustBuffer(t, p1.Client.PD, 4096, verbs.AccessLocalWrite)
	sb1 := MustBuffer(t, p1.Server.PD, 4096, verbs.AccessLocalWrite)
	sb2 := MustBuffer(t, p2.Server.PD, 4096, verbs.AccessLocalWrite)
	mw := allocMW(t, p1.Client.PD)
	rkey := bind(t, env, p1.Client, mw, cb, 0, 4096, verbs.AccessRemoteWrite)

	fill(sb1.Bytes(), 13)
	expectWC(t, rdma(t, env, p1.Server, verbs.OpRDMAWrite, 1, sb1.SGE(0, 4096), cb.Addr(0), rkey), 1, verbs.StatusSuccess, "WRITE on the window's QP")

	postRecv(t, p2.Client, 99, rb.SGE(0, 64))
	before := slices.Clone(cb.Bytes())
	fill(sb2.Bytes(), 14)
	wc := rdma(t, env, p2.Server, verbs.OpRDMAWrite, 2, sb2.SGE(0, 4096), cb.Addr(0), rkey)
	expectWC(t, wc, 2, verbs.StatusRemAccessErr, "WRITE through another QP of the same PD")
	if !bytes.Equal(cb.Bytes(), before) {
		t.Error("a WRITE through another QP changed the memory")
	}
	expectErrored(t, env, p2.Client, 99, "other QP")

	fill(sb1.Bytes(), 15)
	expectWC(t, rdma(t, env, p1.Server, verbs.OpRDMAWrite, 3, sb1.SGE(0, 4096), cb.Addr(0), rkey), 3, verbs.StatusSuccess, "WRITE on the window's QP, again")
	if !bytes.Equal(cb.Bytes()[:4096], sb1.Bytes()) {
		t.Error("WRITE on the window's QP: bytes differ")
	}
	localInv(t, env, p1.Client, rkey)
}

func testDoubleInvalidation(t *testing.T, env Env) {
	t.Skipf("never run here: a LOCAL_INV of an rkey that is not valid panics some kernels (Quirks.DoubleLocalInvPanics=%v); verbs/sim tests that it is flagged", env.Quirks.DoubleLocalInvPanics)
}

// stuckSendsConfig connects with infinite RNR retry both ways: a SEND to a
// peer with no receive waits forever at the head of the send queue, so
// everything behind it stays outstanding. (Which side's value applies
// depends on the CM; both are set.)
func stuckSendsConfig(cfg PairConfig) PairConfig {
	cp, sp := DefaultConnParam(), DefaultConnParam()
	cp.RNRRetryCount, sp.RNRRetryCount = 7, 7
	cfg.ClientParam, cfg.ServerParam = &cp, &sp
	return cfg
}

func testFlushOrder(t *testing.T, env Env) {
	p := NewPair(t, env, stuckSendsConfig(PairConfig{}))
	cb := MustBuffer(t, p.Client.PD, 4096, verbs.AccessLocalWrite)
	for id := uint64(1); id <= 3; id++ {
		postRecv(t, p.Client, id, cb.SGE(id*64, 64))
	}
	postSend(t, p.Client, send(10, true, cb.SGE(0, 8)), send(11, false, cb.SGE(0, 8)), send(12, false, cb.SGE(0, 8)), send(13, true, cb.SGE(0, 8)))
	time.Sleep(20 * time.Millisecond) // the first SEND is now retrying against the missing receive
	if err := p.Client.QP.SetError(); err != nil {
		t.Fatalf("SetError: %v", err)
	}
	postSend(t, p.Client, send(14, false, cb.SGE(0, 8)))
	postRecv(t, p.Client, 4, cb.SGE(0, 64))

	sends := reap(t, env, p.Client.SendCQ, 5, "flushed sends")
	for i, wc := range sends {
		id := uint64(10 + i)
		if i == 0 && wc.ID == id && wc.Status != verbs.StatusSuccess && wc.Status != verbs.StatusWRFlushErr {
			t.Logf("the SEND in RNR retry completed with %s", wc.Status)
			continue
		}
		expectWC(t, wc, id, verbs.StatusWRFlushErr, "flushed send (signaled or not, in order)")
	}
	for i, wc := range reap(t, env, p.Client.RecvCQ, 4, "flushed receives") {
		expectWC(t, wc, uint64(i+1), verbs.StatusWRFlushErr, "flushed receive (in order)")
	}
	expectState(t, p.Client, verbs.QPError, "client")
	expectNoCompletion(t, p.Client.SendCQ, "after the flush")
}

// overflow posts single WRs with post until one fails; it returns how many
// succeeded and the error.
func overflow(t *testing.T, depth int, post func(i int) error) (int, error) {
	for i := 0; i < 2*depth+16; i++ {
		if err := post(i); err != nil {
			return i, err
		}
	}
	t.Fatalf("posted %d WRs to a queue of %d without an error", 2*depth+16, depth)
	return 0, nil
}

func testSendQueueOverflow(t *testing.T, env Env) {
	p := NewPair(t, env, stuckSendsConfig(PairConfig{SendDepth: 8, SendCQDepth: 64}))
	cb := MustBuffer(t, p.Client.PD, 4096, verbs.AccessLocalWrite)
	depth := p.Client.QP.Caps().MaxSendWR
	for i := 0; i < depth-1; i++ {
		postSend(t, p.Client, send(uint64(i), false, cb.SGE(0, 8)))
	}
	// The last free slot and one more, in one chain.
	bad, err := p.Client.QP.PostSend([]verbs.SendWR{send(uint64(depth-1), false, cb.SGE(0, 8)), send(uint64(depth), false, cb.SGE(0, 8))})
	posted := depth - 1 + bad
	if err == nil {
		posted = depth + 1
		var n int
		n, err = overflow(t, depth, func(i int) error {
			_, err := p.Client.QP.PostSend([]verbs.SendWR{send(uint64(depth+1+i), false, cb.SGE(0, 8))})
			return err
		})
		posted += n
		t.Logf("DEPARTURE: the send queue reported as %d deep took %d WRs", depth, posted)
	} else if bad != 1 {
		t.Errorf("chain overflowing the send queue: bad index %d, want 1", bad)
	}
	if !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("posting to a full send queue: %v, want ENOMEM", err)
	}
	t.Logf("full send queue: %v", err)

	if err := p.Client.QP.SetError(); err != nil {
		t.Fatalf("SetError: %v", err)
	}
	for i, wc := range reap(t, env, p.Client.SendCQ, posted, "flushed sends") {
		if wc.ID != uint64(i) || (wc.Status != verbs.StatusWRFlushErr && i > 0) {
			t.Fatalf("flushed send %d: %+v", i, wc)
		}
	}
	// Reaping the completions freed the slots.
	postSend(t, p.Client, send(1000, true, cb.SGE(0, 8)))
	expectWC(t, reap(t, env, p.Client.SendCQ, 1, "send after the flush")[0], 1000, verbs.StatusWRFlushErr, "send posted in the error state")
}

func testRecvQueueOverflow(t *testing.T, env Env) {
	p := NewPair(t, env, PairConfig{RecvDepth: 8, RecvCQDepth: 64})
	cb := MustBuffer(t, p.Client.PD, 4096, verbs.AccessLocalWrite)
	depth := p.Client.QP.Caps().MaxRecvWR
	for i := 0; i < depth; i++ {
		postRecv(t, p.Client, uint64(i), cb.SGE(0, 64))
	}
	_, err := p.Client.QP.PostRecv([]verbs.RecvWR{{ID: uint64(depth), SGL: []verbs.SGE{cb.SGE(0, 64)}}})
	if err == nil {
		var n int
		n, err = overflow(t, depth, func(i int) error {
			_, err := p.Client.QP.PostRecv([]verbs.RecvWR{{ID: uint64(depth + 1 + i), SGL: []verbs.SGE{cb.SGE(0, 64)}}})
			return err
		})
		t.Logf("DEPARTURE: the receive queue reported as %d deep took %d WRs", depth, depth+1+n)
	}
	if !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("posting to a full receive queue: %v, want ENOMEM", err)
	}
}

func testWaitWoken(t *testing.T, env Env) {
	p := NewPair(t, env, PairConfig{})
	cb := MustBuffer(t, p.Client.PD, 4096, verbs.AccessLocalWrite)
	sb := MustBuffer(t, p.Server.PD, 4096, verbs.AccessLocalWrite)
	postRecv(t, p.Client, 1, cb.SGE(0, 64))
	ctx := testCtx(t, env)
	woken := make(chan error, 1)
	go func() { woken <- p.Client.RecvCQ.Wait(ctx) }()
	select {
	case err := <-woken:
		t.Fatalf("Wait on an empty CQ returned before any completion: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	postSend(t, p.Server, send(2, true, sb.SGE(0, 64)))
	if err := <-woken; err != nil {
		t.Fatalf("Wait: %v", err)
	}
	expectWC(t, reap(t, env, p.Client.RecvCQ, 1, "receive")[0], 1, verbs.StatusSuccess, "receive after Wait")
	reap(t, env, p.Server.SendCQ, 1, "send")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func testIdleWait(t *testing.T, env Env) {
	p := NewPair(t, env, PairConfig{})
	const idle = 300 * time.Millisecond
	// The process's CPU time also counts whatever else the process (or a
	// driver working in its context) does meanwhile; a spinning wait would
	// burn CPU in every try, so the least of three tries is the measure.
	best := time.Hour
	for try := 0; try < 3; try++ {
		runtime.GC()
		ctx, cancel := context.WithTimeout(t.Context(), idle)
		cpu0, start := cpuTime(), time.Now()
		err := p.Client.RecvCQ.Wait(ctx)
		elapsed, cpu := time.Since(start), cpuTime()-cpu0
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("idle Wait returned %v, want the context's deadline error", err)
		}
		if elapsed < idle-10*time.Millisecond {
			t.Errorf("idle Wait returned after %v, before its %v deadline", elapsed, idle)
		}
		t.Logf("idle Wait for %v used %v of CPU", elapsed, cpu)
		best = min(best, cpu)
	}
	if best > 50*time.Millisecond {
		t.Errorf("idle Wait used at least %v of CPU per %v, want < 50ms", best, idle)
	}
}

func testDisconnect(t *testing.T, env Env) {
	p := NewPair(t, env, PairConfig{})
	cb := MustBuffer(t, p.Client.PD, 4096, verbs.AccessLocalWrite)
	sb := MustBuffer(t, p.Server.PD, 4096, verbs.AccessLocalWrite)
	postRecv(t, p.Client, 1, cb.SGE(0, 64))
	postRecv(t, p.Server, 2, sb.SGE(0, 64))
	if err := p.Client.Endpoint.Disconnect(); err != nil {
		t.Fatalf("Disconnect: %v", err)
	}
	for _, s := range []struct {
		who  string
		side *Side
		id   uint64
	}{{"server", p.Server, 2}, {"client", p.Client, 1}} {
		select {
		case ev, ok := <-s.side.Endpoint.Events():
			if !ok || ev.Type != verbs.CMDisconnected {
				t.Errorf("%s event %v (channel open %v), want DISCONNECTED", s.who, ev.Type, ok)
			}
		case <-time.After(env.timeout()):
			t.Fatalf("%s got no DISCONNECTED event", s.who)
		}
		expectErrored(t, env, s.side, s.id, s.who)
	}
}
