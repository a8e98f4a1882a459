package xprt

// Rule tests for invalidations a hostile server makes behind the
// client's back (rules 3, 6 and 8): an invalidation is recorded wherever
// it comes from, a connection being reset completes no reply whose
// windows are still valid, and no LOCAL_INV ever names a window the
// device has already invalidated. On the simulated fabric, which panics
// on a second invalidation as rxe does.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/frwr"
	"github.com/nfsrdma/nfsrdma/rpcrdma"
	"github.com/nfsrdma/nfsrdma/sunrpc/sunrpctest"
	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/sim"
	"github.com/nfsrdma/nfsrdma/xprt/xprttest"
)

// heldTwoSegmentRead starts a held READ of 64 KiB whose Write chunk has
// two segments (Config.MaxSegment 32 KiB) and returns its xid, tag, the
// two segments and where its result arrives.
func (r *rig) heldTwoSegmentRead(ctx context.Context, seed uint32) (xid, tag uint32, segs []rpcrdma.Segment, done chan error) {
	r.t.Helper()
	xid, tag, _, done = r.heldRead(ctx, seed)
	h := r.header(xid, 0)
	if len(h.Writes) != 1 || len(h.Writes[0]) != 2 {
		r.t.Fatalf("want one Write chunk of two segments, got %+v", h.Writes)
	}
	return xid, tag, h.Writes[0], done
}

// Rule 8: a Send With Invalidate whose xid matches no call still
// invalidated the window its rkey names: the client records that window
// invalid at once, so the teardown that follows knows it (and keeps it)
// instead of treating it as unknown. Only the call's other window, still
// valid, is destroyed.
func TestRuleInvalidationRecordedWhateverTheXID(t *testing.T) {
	r := newRig(t, Config{MaxSegment: 32 << 10}, xprttest.Config{})
	ctx := r.ctx(30 * time.Second)
	r.mustNull(ctx)
	xid, tag, segs, done := r.heldTwoSegmentRead(ctx, 11)
	replaced0 := r.tr.Counters().WindowsReplaced
	if st := r.serverQP().RogueSend(rogueReply(t, xid^0x80000000, []byte("rogue")), true, segs[1].Handle); st != verbs.StatusSuccess {
		t.Fatalf("rogue send: %v", st)
	}
	waitFor(t, "the connection reset", func() bool { return r.tr.Counters().Disconnects > 0 })
	if err := r.h.WaitArrival(ctx, tag, 2); err != nil { // sent again: the teardown is over
		t.Fatal(err)
	}
	if n := r.tr.Counters().WindowsReplaced - replaced0; n != 1 {
		t.Fatalf("%d windows destroyed as unknown at the reset, want 1: the window the peer invalidated was not recorded invalid", n)
	}
	r.h.Release(tag)
	if err := <-done; err != nil {
		t.Fatalf("the READ whose window was invalidated: %v", err)
	}
}

// Rules 3, 6 and 8: a receive batch that resets the connection (here: a
// Send With Invalidate with an unknown xid naming the second window of a
// two-segment READ) also holds a reply matched to that READ. The client
// neither posts LOCAL_INV on the connection it is resetting (on rxe a
// LOCAL_INV of the invalidated window panics the kernel) nor completes the
// matched reply: the teardown destroys the READ's windows and sends it
// again. In both orders within the batch.
func TestRuleResetBatchInvalidatesNothing(t *testing.T) {
	for _, tc := range []struct {
		name         string
		rogueInFirst bool
	}{{"invalidate-then-reply", true}, {"reply-then-invalidate", false}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, Config{MaxSegment: 32 << 10}, xprttest.Config{})
			ctx := r.ctx(30 * time.Second)
			r.mustNull(ctx)
			xid, tag, segs, done := r.heldTwoSegmentRead(ctx, 12)
			inv0 := r.tr.Counters().LocalInvalidations
			srv := r.serverQP()
			client := srv.Peer()
			client.HoldRecvCompletions()
			rogue := func() {
				if st := srv.RogueSend(rogueReply(t, xid^0x80000000, []byte("rogue")), true, segs[1].Handle); st != verbs.StatusSuccess {
					t.Fatalf("rogue send: %v", st)
				}
			}
			if tc.rogueInFirst {
				rogue()
			}
			// A reply with the READ's xid: matched, and (if it were
			// settled) its windows would be invalidated locally.
			if st := srv.RogueSend(rogueReply(t, xid, []byte("not the data")), false, 0); st != verbs.StatusSuccess {
				t.Fatalf("reply: %v", st)
			}
			if !tc.rogueInFirst {
				rogue()
			}
			if n := client.HeldRecvCompletions(); n != 2 {
				t.Fatalf("%d receive completions held, want 2", n)
			}
			client.ReleaseRecvCompletions() // one batch
			waitFor(t, "the connection reset", func() bool { return r.tr.Counters().Disconnects > 0 })
			if err := r.h.WaitArrival(ctx, tag, 2); err != nil { // sent again: the teardown is over
				t.Fatal(err)
			}
			if n := r.tr.Counters().LocalInvalidations - inv0; n != 0 {
				t.Fatalf("%d LOCAL_INV posted on the connection the batch reset", n)
			}
			if n := r.fab.DoubleInvalidations(); n != 0 {
				t.Fatalf("%d double invalidations", n)
			}
			r.h.Release(tag)
			if err := <-done; err != nil {
				t.Fatalf("the READ (its matched reply must not complete it): %v", err)
			}
			if c := r.tr.Counters(); c.Retransmits == 0 {
				t.Fatalf("the READ was not sent again: %s", c)
			}
		})
	}
}

// Forcing memory windows on a device whose windows a hostile server can
// abuse (rxe: unbounded windows, a stale Send With Invalidate panics the
// kernel) fails Dial with frwr.ErrUnsafeWindows unless UnsafeWindows is
// set; the default picks per-segment registration there.
func TestForcedWindowsRefusedOnUnsafeDevice(t *testing.T) {
	attr := sim.DefaultDeviceAttr("sim0")
	attr.WindowsUnbounded, attr.StaleInvalidatePanics = true, true
	fab := sim.NewFabric(sim.WithDevice(attr))
	defer fab.Close()
	srv, err := xprttest.Start(xprttest.Config{Fabric: fab})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	if tr, err := Dial(ctx, Config{Fabric: fab, Addr: srv.Addr(), Registration: frwr.ModeWindows}); !errors.Is(err, frwr.ErrUnsafeWindows) {
		if tr != nil {
			tr.Close()
		}
		t.Fatalf("Dial with windows forced on an rxe-like device: %v, want ErrUnsafeWindows", err)
	}
	for _, cfg := range []Config{{}, {Registration: frwr.ModeWindows, UnsafeWindows: true}} {
		cfg.Fabric, cfg.Addr = fab, srv.Addr()
		tr, err := Dial(ctx, cfg)
		if err != nil {
			t.Fatalf("Dial %+v: %v", cfg.Registration, err)
		}
		want := frwr.ModeRegister
		if cfg.UnsafeWindows {
			want = frwr.ModeWindows
		}
		if m := tr.RegistrationMode(); m != want {
			t.Errorf("mode %v, want %v", m, want)
		}
		tr.Close()
	}
}

// The same defect driven by the test server: a Send With Invalidate with
// an unknown xid naming the second window of a two-segment READ, right
// before the READ's real reply. The client resets, sends the READ again,
// and never invalidates the dead window a second time (the fabric panics
// if it does).
func TestForeignInvalidationBeforeReply(t *testing.T) {
	h := sunrpctest.NewHandler()
	tr, srv, fab := simTarget(t, h, Config{Timeout: 5 * time.Second, MaxSegment: 32 << 10}, xprttest.Config{
		Misbehave: xprttest.Misbehavior{OnCall: 2, UnknownXID: true, ThenReply: true, InvalidateUnknownXID: true}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	readsVerified(ctx, t, tr, 3)
	if st := srv.Stats(); st.ForeignInvalidates != 1 {
		t.Fatalf("server: %+v", st)
	}
	if c := tr.Counters(); c.Disconnects != 1 || c.Retransmits != 1 {
		t.Fatalf("want one reset and the READ sent again: %s", c)
	}
	if n := fab.DoubleInvalidations(); n != 0 {
		t.Fatalf("%d double invalidations", n)
	}
}

// Two servers on one device through one process: a server can never reach
// memory the client registered for a call to the other one, even knowing
// the segment's address and rkey exactly (each transport registers on a
// protection domain of its own), in each registration mode, registrations
// made ahead included.
func TestTwoServersCannotReachEachOther(t *testing.T) {
	for _, cfg := range []Config{{Registration: frwr.ModeWindows}, {Registration: frwr.ModeRegister}, {Registration: frwr.ModeRegister, RegisterAhead: -1}} {
		t.Run(fmt.Sprintf("%v-ahead%d", cfg.Registration, cfg.RegisterAhead), func(t *testing.T) {
			fab := sim.NewFabric(sim.PanicOnDoubleInvalidation())
			defer fab.Close()
			type side struct {
				h   *sunrpctest.Handler
				srv *xprttest.Server
				tr  *Transport
				hdr chan rpcrdma.Header
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var sides [2]*side
			for i := range sides {
				s := &side{h: sunrpctest.NewHandler(), hdr: make(chan rpcrdma.Header, 16)}
				var err error
				s.srv, err = xprttest.Start(xprttest.Config{Fabric: fab, Handler: s.h, Observe: func(_ xprttest.CallInfo, h *rpcrdma.Header) {
					c := rpcrdma.Header{XID: h.XID}
					for _, w := range h.Writes {
						c.Writes = append(c.Writes, append(rpcrdma.WriteChunk(nil), w...))
					}
					select {
					case s.hdr <- c:
					default:
					}
				}})
				if err != nil {
					t.Fatal(err)
				}
				c := cfg
				c.Fabric, c.Addr, c.Timeout = fab, s.srv.Addr(), 10*time.Second
				if s.tr, err = Dial(ctx, c); err != nil {
					t.Fatal(err)
				}
				sides[i] = s
			}
			defer func() {
				for _, s := range sides {
					s.tr.Close()
					s.h.Close()
					s.srv.Close()
				}
			}()
			a, b := sides[0], sides[1]
			// Several READs to B so that registrations made ahead are in
			// use, then one held: its segment is exposed to B.
			for xid := uint32(1); xid <= 4; xid++ {
				rep, err := b.tr.RoundTrip(ctx, sunrpctest.ReadRequest(xid, sunrpctest.Control{}, xid, 4096, make([]byte, 4096)))
				if err != nil {
					t.Fatal(err)
				}
				rep.Release()
			}
			buf := make([]byte, 4096)
			done := make(chan error, 1)
			go func() {
				rep, err := b.tr.RoundTrip(ctx, sunrpctest.ReadRequest(9, sunrpctest.Control{Tag: 1, Action: sunrpctest.Hold}, 9, 4096, buf))
				if err == nil {
					err = sunrpctest.CheckRead(rep, 9, 9, 4096)
					rep.Release()
				}
				done <- err
			}()
			if err := b.h.WaitArrival(ctx, 1, 1); err != nil {
				t.Fatal(err)
			}
			var seg rpcrdma.Segment
			for h := range b.hdr {
				if h.XID == 9 {
					seg = h.Writes[0][0]
					break
				}
			}
			qps := a.srv.QPs()
			if st := qps[len(qps)-1].RogueWrite(seg.Offset, seg.Handle, []byte("from A")); st == verbs.StatusSuccess {
				t.Fatalf("server A wrote into a segment the client registered for a call to server B (rkey %#x)", seg.Handle)
			}
			b.h.Release(1)
			if err := <-done; err != nil {
				t.Fatalf("B's READ: %v", err)
			}
			// A's connection broke; A's transport recovers.
			rep, err := a.tr.RoundTrip(ctx, sunrpctest.ReadRequest(20, sunrpctest.Control{}, 20, 4096, make([]byte, 4096)))
			if err != nil {
				t.Fatalf("A after its rogue access: %v", err)
			}
			rep.Release()
			if n := fab.DoubleInvalidations(); n != 0 {
				t.Fatalf("%d double invalidations", n)
			}
		})
	}
}

// On a device that cannot add remote access to an MR in place, nothing is
// made ahead: small segments are registered at use, and the calls work.
func TestRegisterAheadRefusedRegistersAtUse(t *testing.T) {
	h := sunrpctest.NewHandler()
	tr, _, _ := simTarget(t, h, Config{Registration: frwr.ModeRegister}, xprttest.Config{}, sim.WithoutRereg())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for xid := uint32(1); xid <= 20; xid++ {
		rep, err := tr.RoundTrip(ctx, sunrpctest.ReadRequest(xid, sunrpctest.Control{}, xid, 4096, make([]byte, 4096)))
		if err != nil {
			t.Fatalf("READ %d: %v", xid, err)
		}
		err = sunrpctest.CheckRead(rep, xid, xid, 4096)
		rep.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
	c := tr.Counters()
	if c.RegisterAheadRefused != 1 || c.ReadyRegistrations != 0 || c.RegisteredAhead != 0 || c.Registrations < 20 {
		t.Fatalf("counters: %s", c)
	}
}

// readsVerified makes n READs of 64 KiB (xids 1..n) one after another and
// checks each reply's data.
func readsVerified(ctx context.Context, t *testing.T, tr *Transport, n uint32) {
	t.Helper()
	for xid := uint32(1); xid <= n; xid++ {
		rep, err := tr.RoundTrip(ctx, sunrpctest.ReadRequest(xid, sunrpctest.Control{}, xid, 64<<10, make([]byte, 64<<10)))
		if err != nil {
			t.Fatalf("READ %d: %v", xid, err)
		}
		err = sunrpctest.CheckRead(rep, xid, xid, 64<<10)
		rep.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
}
