package xprt

// More rule tests (rules 3, 6, 8 and 9 of the package doc): what happens to a call
// whose caller gives up, and to replies that invalidate what they must
// not. On the simulated fabric, with the conformance suite's handler.

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/rpcrdma"
	"github.com/nfsrdma/nfsrdma/sunrpc"
	"github.com/nfsrdma/nfsrdma/sunrpc/sunrpctest"
	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/sim"
	"github.com/nfsrdma/nfsrdma/xprt/xprttest"
)

// heldCallsArrive checks that n held ECHO calls reach the server at once:
// n credits are free. It releases them and waits for their replies.
func (r *rig) heldCallsArrive(n int) {
	r.t.Helper()
	ctx := r.ctx(10 * time.Second)
	var tags []uint32
	var dones []chan error
	for range n {
		xid, tag := r.next()
		tags = append(tags, tag)
		done := make(chan error, 1)
		dones = append(dones, done)
		go func() {
			rep, err := r.tr.RoundTrip(ctx, sunrpctest.EchoRequest(xid, sunrpctest.Control{Tag: tag, Action: sunrpctest.Hold}, []byte("x")))
			if err == nil {
				err = sunrpctest.CheckEcho(rep, xid, []byte("x"))
				rep.Release()
			}
			done <- err
		}()
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for i, tag := range tags {
		if err := r.h.WaitArrival(wctx, tag, 1); err != nil {
			r.t.Errorf("held call %d of %d never reached the server: a credit is lost (%v)", i+1, n, err)
		}
	}
	for _, tag := range tags {
		r.h.Release(tag)
	}
	for _, d := range dones {
		if err := <-d; err != nil {
			r.t.Error(err)
		}
	}
	if r.t.Failed() {
		r.t.FailNow()
	}
}

// Rule 9 / RFC 8166 §3.3: a caller that gives up before its call is
// posted — waiting for a credit, or holding one while it waits for an I/O
// buffer — gives its credit back.
func TestRuleCreditReturnedWhenCallerGivesUpBeforePost(t *testing.T) {
	r := newRig(t, Config{Slots: 2, SendQueue: 64, IOBuffers: 1}, xprttest.Config{Credits: 2})
	ctx := r.ctx(30 * time.Second)
	if err := r.null(ctx); err != nil { // the grant of 2
		t.Fatal(err)
	}
	for round := range 5 {
		// A holds the only I/O buffer and a credit; B gets the other
		// credit and waits for the buffer; C.. wait for a credit.
		xa, ta := r.next()
		adone := make(chan error, 1)
		go func() {
			rep, err := r.tr.RoundTrip(ctx, sunrpctest.ReadRequest(xa, sunrpctest.Control{Tag: ta, Action: sunrpctest.Hold}, 1, 4096, make([]byte, 4096)))
			if err == nil {
				err = sunrpctest.CheckRead(rep, xa, 1, 4096)
				rep.Release()
			}
			adone <- err
		}()
		if err := r.h.WaitArrival(ctx, ta, 1); err != nil {
			t.Fatal(err)
		}
		waits := r.tr.Counters().CreditWaits
		gctx, giveUp := context.WithCancel(ctx)
		var dones []chan error
		for i := range 6 {
			xid, tag := r.next()
			d := make(chan error, 1)
			dones = append(dones, d)
			go func() {
				_, err := r.tr.RoundTrip(gctx, sunrpctest.ReadRequest(xid, sunrpctest.Control{Tag: tag}, uint32(i), 4096, make([]byte, 4096)))
				d <- err
			}()
		}
		waitFor(t, "calls waiting for a credit", func() bool { return r.tr.Counters().CreditWaits >= waits+5 })
		giveUp()
		for _, d := range dones {
			if err := <-d; !errors.Is(err, context.Canceled) {
				t.Fatalf("round %d: a given-up call ended with %v", round, err)
			}
		}
		r.h.Release(ta)
		if err := <-adone; err != nil {
			t.Fatal(err)
		}
		r.heldCallsArrive(2)
	}
}

// Rules 3 and 9: a call whose caller gave up keeps its windows and its
// I/O buffer until its windows are invalid: the next call waits for the
// buffer, the late reply lands only in the given-up call's own memory,
// and afterwards its rkey is dead.
func TestRuleGivenUpCallKeepsWindowsUntilInvalid(t *testing.T) {
	r := newRig(t, Config{IOBuffers: 1}, xprttest.Config{})
	ctx := r.ctx(30 * time.Second)
	r.mustNull(ctx)
	buf := bytes.Repeat([]byte{0x5a}, 64<<10)
	xa, ta := r.giveUpHeld(1, buf)
	segA := r.header(xa, 0).Writes[0][0]
	bdone := make(chan error, 1)
	go func() { bdone <- r.read(ctx, 2, 64<<10) }()
	r.h.Release(ta) // A's late reply
	if err := <-bdone; err != nil {
		t.Fatalf("the READ after the given-up one: %v", err)
	}
	if err := r.srv.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if st := r.serverQP().RogueWrite(segA.Offset, segA.Handle, []byte{1, 2, 3, 4}); st == verbs.StatusSuccess {
		t.Fatalf("the given-up call's rkey %#x still works after it was settled", segA.Handle)
	}
	if err := r.read(ctx, 3, 64<<10); err != nil {
		t.Fatal(err)
	}
	c := r.tr.Counters()
	if c.ErrorCompletions != 0 && c.Disconnects > 1 {
		t.Fatalf("windows or buffers reused in an unknown state: %s", c)
	}
	if rc := r.tr.reg.Counters(); rc.BuffersPutWhileExposed != 0 {
		t.Fatalf("an I/O buffer was put back while a window still exposed it: %+v", rc)
	}
}

// rogueReply is an RDMA_MSG reply to xid with no chunks carrying an
// accepted ECHO result of data.
func rogueReply(t *testing.T, xid uint32, data []byte) []byte {
	h := rpcrdma.Header{XID: xid, Credits: 64, Proc: rpcrdma.ProcMsg}
	b, err := h.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	b = sunrpc.AppendReply(b, &sunrpc.ReplyHeader{XID: xid, Stat: sunrpc.MsgAccepted, Verf: sunrpc.AuthNone, Accept: sunrpc.Success})
	b = sunrpc.AppendUint32(b, 0)
	return sunrpc.AppendOpaque(b, data)
}

// heldRead starts a held READ of 64 KiB and returns its xid, tag, the
// rkey of its one window, and where its result arrives.
func (r *rig) heldRead(ctx context.Context, seed uint32) (xid, tag, rkey uint32, done chan error) {
	r.t.Helper()
	xid, tag = r.next()
	done = make(chan error, 1)
	go func() {
		rep, err := r.tr.RoundTrip(ctx, sunrpctest.ReadRequest(xid, sunrpctest.Control{Tag: tag, Action: sunrpctest.Hold}, seed, 64<<10, make([]byte, 64<<10)))
		if err == nil {
			err = sunrpctest.CheckRead(rep, xid, seed, 64<<10)
			rep.Release()
		}
		done <- err
	}()
	if err := r.h.WaitArrival(ctx, tag, 1); err != nil {
		r.t.Fatal(err)
	}
	return xid, tag, r.header(xid, 0).Writes[0][0].Handle, done
}

// Rule 8: a Send With Invalidate on a reply whose xid matches no call
// invalidated one of our windows behind our back: its state is unknown,
// so the connection is reset (never ignored: the window would later be
// invalidated twice, which panics rxe).
func TestRuleUnknownXIDSendWithInvalidateResets(t *testing.T) {
	r := newRig(t, Config{}, xprttest.Config{})
	ctx := r.ctx(30 * time.Second)
	r.mustNull(ctx)
	xid, tag, rkey, done := r.heldRead(ctx, 8)
	if st := r.serverQP().RogueSend(rogueReply(t, xid^0x80000000, []byte("rogue")), true, rkey); st != verbs.StatusSuccess {
		t.Fatalf("rogue send: %v", st)
	}
	waitFor(t, "the connection reset", func() bool { return r.tr.Counters().Disconnects > 0 })
	r.h.Release(tag)
	if err := <-done; err != nil {
		t.Fatalf("the READ whose window was invalidated: %v", err)
	}
	if c := r.tr.Counters(); c.BadXIDs == 0 || c.Retransmits == 0 {
		t.Fatalf("want the unknown xid counted and the READ sent again: %s", c)
	}
}

// Rules 3 and 8: a reply that invalidates an rkey that is not one of its
// own call's (here: another outstanding call's) is a protocol error: the
// connection is reset and both calls are sent again.
func TestRuleRemoteInvalidationOfAnotherCallsRkeyResets(t *testing.T) {
	r := newRig(t, Config{}, xprttest.Config{})
	ctx := r.ctx(30 * time.Second)
	r.mustNull(ctx)
	xa, ta := r.next()
	adone := make(chan error, 1)
	go func() {
		rep, err := r.tr.RoundTrip(ctx, sunrpctest.EchoRequest(xa, sunrpctest.Control{Tag: ta, Action: sunrpctest.Hold}, []byte("echo")))
		if err == nil {
			err = sunrpctest.CheckEcho(rep, xa, []byte("echo"))
			rep.Release()
		}
		adone <- err
	}()
	if err := r.h.WaitArrival(ctx, ta, 1); err != nil {
		t.Fatal(err)
	}
	_, tb, rkeyB, bdone := r.heldRead(ctx, 9)
	// A's reply, well formed, but invalidating B's window.
	if st := r.serverQP().RogueSend(rogueReply(t, xa, []byte("echo")), true, rkeyB); st != verbs.StatusSuccess {
		t.Fatalf("rogue send: %v", st)
	}
	waitFor(t, "the connection reset", func() bool { return r.tr.Counters().Disconnects > 0 })
	r.h.Release(ta)
	r.h.Release(tb)
	if err := <-bdone; err != nil {
		t.Fatalf("B: %v", err)
	}
	if err := <-adone; err != nil {
		t.Fatalf("A: %v", err)
	}
}

// Rule 7: replies matching no call consume receives like any other; each
// is given back and reposted, so any number of them leaves the queue
// whole: no stall, no reconnect to build a fresh queue.
func TestRuleReceivesRepostedAfterUnknownXIDs(t *testing.T) {
	r := newRig(t, Config{Slots: 16, Timeout: 30 * time.Second},
		xprttest.Config{Misbehave: xprttest.Misbehavior{UnknownXID: true, ThenReply: true}})
	ctx := r.ctx(20 * time.Second)
	for i := range 100 { // four times the 24-deep receive queue
		if err := r.null(ctx); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	c := r.tr.Counters()
	if c.BadXIDs < 100 || c.Disconnects != 0 || c.Timeouts != 0 {
		t.Fatalf("want 100 unknown xids and no reconnect: %s", c)
	}
}

// Rule 3: with several windows, a call completes only after the
// completion of its LOCAL_INV chain has been reaped, not when the chain is
// posted.
func TestRuleLocalInvalidationReapedBeforeComplete(t *testing.T) {
	r := newRig(t, Config{MaxSegment: 16 << 10}, xprttest.Config{})
	ctx := r.ctx(20 * time.Second)
	r.mustNull(ctx)
	qp := r.serverQP().Peer()
	inv0 := r.tr.Counters().LocalInvalidations
	qp.HoldSendCompletions()
	done := make(chan error, 1)
	go func() { done <- r.read(ctx, 6, 64<<10) }()
	waitFor(t, "the LOCAL_INVs", func() bool { return r.tr.Counters().LocalInvalidations >= inv0+4 })
	select {
	case err := <-done:
		qp.ReleaseSendCompletions()
		t.Fatalf("the READ completed (%v) before its LOCAL_INV completion was reaped", err)
	case <-time.After(100 * time.Millisecond):
	}
	qp.ReleaseSendCompletions()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Rule 6: an error completion disconnects at once (not when a call's
// timer fires), once, and the calls go again on the new connection.
func TestRuleErrorCompletionDisconnectsAtOnce(t *testing.T) {
	r := newRig(t, Config{Timeout: 60 * time.Second}, xprttest.Config{})
	ctx := r.ctx(20 * time.Second)
	r.mustNull(ctx)
	// A lone call whose first WR fails: nothing reaches the server, so no
	// reply and no disconnect from its side can stand in for the error
	// completion.
	r.serverQP().Peer().FailSend(1, verbs.StatusGeneralErr)
	if err := r.read(ctx, 99, 64<<10); err != nil {
		t.Fatal(err)
	}
	if c := r.tr.Counters(); c.ErrorCompletions == 0 || c.Disconnects != 1 || c.Reconnects != 1 || c.Timeouts != 0 {
		t.Fatalf("want one error completion, one disconnect, one reconnect, no timeout: %s", c)
	}
	// Among many calls in flight.
	r.serverQP().Peer().FailSend(3, verbs.StatusGeneralErr)
	noErrors(t, parallel(16, func(i int) error { return r.read(ctx, uint32(i), 64<<10) }))
	if c := r.tr.Counters(); c.Disconnects != 2 || c.Reconnects != 2 || c.Timeouts != 0 {
		t.Fatalf("want a second disconnect and reconnect, no timeout: %s", c)
	}
}

// Rule 6 / RFC 8166 §3.3: the grant is 1 until the first reply of every
// connection, the first one and each after a reconnect (with calls to
// retransmit at once).
func TestRuleCreditsRestartAtOneOnEveryConnection(t *testing.T) {
	r := newRig(t, Config{Slots: 64}, xprttest.Config{Credits: 64,
		Misbehave: xprttest.Misbehavior{Delay: 5 * time.Millisecond}})
	ctx := r.ctx(30 * time.Second)
	// The first calls of the first connection, all at once.
	noErrors(t, parallel(16, func(int) error { return r.null(ctx) }))
	if st := r.srv.Stats(); st.OverCredit != 0 {
		t.Fatalf("%d calls beyond the grant of 1 on a new connection", st.OverCredit)
	}
	// Sixteen calls wait when the connection drops; they go again at once.
	var tags []uint32
	var dones []chan error
	for range 16 {
		xid, tag := r.next()
		tags = append(tags, tag)
		d := make(chan error, 1)
		dones = append(dones, d)
		go func() {
			rep, err := r.tr.RoundTrip(ctx, sunrpctest.EchoRequest(xid, sunrpctest.Control{Tag: tag, Action: sunrpctest.Hold}, []byte("e")))
			if err == nil {
				rep.Release()
			}
			d <- err
		}()
	}
	for _, tag := range tags {
		if err := r.h.WaitArrival(ctx, tag, 1); err != nil {
			t.Fatal(err)
		}
	}
	r.srv.Disconnect()
	for _, tag := range tags {
		r.h.Release(tag)
	}
	for _, d := range dones {
		if err := <-d; err != nil {
			t.Fatal(err)
		}
	}
	if st := r.srv.Stats(); st.OverCredit != 0 || st.Connections != 2 {
		t.Fatalf("%d calls beyond the grant after the reconnect (connections %d)", st.OverCredit, st.Connections)
	}
}

// Rule 8: a window covers exactly its segment: one byte past it is out of
// reach, and the segment advertised is the one asked for. So does a
// registration made ahead (per-I/O registration, after two READs of the
// size have stocked it).
func TestRuleWindowCoversOnlyItsSegment(t *testing.T) {
	for _, tc := range []struct {
		name   string
		warm   int
		fabric []sim.Option
	}{{"window", 0, nil}, {"registered-ahead", 2, []sim.Option{sim.WithoutMemWindows()}}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, Config{}, xprttest.Config{}, tc.fabric...)
			ctx := r.ctx(20 * time.Second)
			r.mustNull(ctx)
			const n = 8 << 10
			read := func(action sunrpctest.Action, xid, tag uint32) error {
				rep, err := r.tr.RoundTrip(ctx, sunrpctest.ReadRequest(xid, sunrpctest.Control{Tag: tag, Action: action}, 4, n, make([]byte, n)))
				if err == nil {
					err = sunrpctest.CheckRead(rep, xid, 4, n)
					rep.Release()
				}
				return err
			}
			for range tc.warm {
				xid, tag := r.next()
				if err := read(sunrpctest.Answer, xid, tag); err != nil {
					t.Fatal(err)
				}
			}
			ahead := r.tr.Counters().ReadyRegistrations
			xid, tag := r.next()
			done := make(chan error, 1)
			go func() { done <- read(sunrpctest.Hold, xid, tag) }()
			if err := r.h.WaitArrival(ctx, tag, 1); err != nil {
				t.Fatal(err)
			}
			if tc.warm > 0 && r.tr.Counters().ReadyRegistrations != ahead+1 {
				t.Fatalf("the READ did not use a registration made ahead: %s", r.tr.Counters())
			}
			seg := r.header(xid, 0).Writes[0][0]
			if seg.Length != n {
				t.Fatalf("a Write chunk segment of %d bytes for a READ of %d", seg.Length, n)
			}
			if st := r.serverQP().RogueWrite(seg.Offset+uint64(seg.Length), seg.Handle, []byte{1, 2, 3, 4}); st != verbs.StatusRemAccessErr {
				t.Fatalf("an RDMA WRITE just past the segment: %v, want REM_ACCESS_ERR", st)
			}
			r.h.Release(tag) // the access error broke the connection: the READ goes again
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Rule 1: one signaled SEND per half send queue, exactly: not fewer (the
// queue would fill with WRs nobody retires), not many more.
func TestRuleSignalingInterval(t *testing.T) {
	const depth, calls = 64, 640
	r := newRig(t, Config{SendQueue: depth, Slots: 16}, xprttest.Config{})
	ctx := r.ctx(30 * time.Second)
	r.mustNull(ctx)
	before := r.tr.Counters()
	for i := range calls {
		if err := r.null(ctx); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	c := r.tr.Counters()
	sig := c.SignaledSends - before.SignaledSends
	if want := uint64(calls / (depth / 2)); sig+1 < want || sig > want+1 {
		t.Fatalf("%d of %d SENDs signaled, want %d (one per half queue)", sig, calls, want)
	}
}

// RFC 8166 §4.5 / rule 6: a call sent again with the xid of a call whose
// caller gave up goes on a new connection, never on the one that may still
// carry the first attempt's reply.
func TestRuleRetryOfAbandonedXIDOnNewConnection(t *testing.T) {
	r := newRig(t, Config{}, xprttest.Config{})
	ctx := r.ctx(20 * time.Second)
	r.mustNull(ctx)
	xid, tag := r.next()
	req := func() *sunrpc.Request {
		return sunrpctest.EchoRequest(xid, sunrpctest.Control{Tag: tag, Action: sunrpctest.Hold}, []byte("again"))
	}
	c1, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := r.tr.RoundTrip(c1, req()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first attempt: %v", err)
	}
	r.h.ReleaseArrival(tag, 2)
	rep, err := r.tr.RoundTrip(ctx, req())
	if err != nil {
		t.Fatal(err)
	}
	if err := sunrpctest.CheckEcho(rep, xid, []byte("again")); err != nil {
		t.Fatal(err)
	}
	rep.Release()
	if st := r.srv.Stats(); st.Connections != 2 {
		t.Fatalf("the retransmission went on connection %d of the server's; want a new one", st.Connections)
	}
}
