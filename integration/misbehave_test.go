//go:build integration

package integration

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/frwr"
	"github.com/nfsrdma/nfsrdma/rpcrdma"
	"github.com/nfsrdma/nfsrdma/sunrpc/sunrpctest"
	"github.com/nfsrdma/nfsrdma/verbs/ibv"
	"github.com/nfsrdma/nfsrdma/xprt"
	"github.com/nfsrdma/nfsrdma/xprt/xprttest"
)

// A misbehaving server on the real device: the in-process server over
// verbs/ibv on rxe, each of its misbehaviours against the real client
// transport, with the registration rxe gets by default (per-segment MRs:
// its windows reach their whole MR) and with memory windows forced through
// xprt.Config.UnsafeWindows (then allocated per segment and retired after
// each use: a Send With Invalidate naming a window already invalid panics
// this rxe). The client fails the one call cleanly or goes
// on, no late access lands in its memory, a stale Send With Invalidate
// does not bring the guest down, and with the default registration no
// access outside a segment lands.
func TestXprtMisbehavingServerRXE(t *testing.T) {
	for _, mode := range []frwr.Mode{frwr.ModeAuto, frwr.ModeWindows} {
		t.Run(mode.String(), func(t *testing.T) { misbehavingServer(t, mode) })
	}
}

func misbehavingServer(t *testing.T, mode frwr.Mode) {
	fab, err := ibv.Open()
	if err != nil {
		t.Fatal(err)
	}
	h := sunrpctest.NewHandler()
	defer h.Close()
	var armed atomic.Bool
	srv, err := xprttest.Start(xprttest.Config{Fabric: fab, Handler: h, Addr: netip.AddrPortFrom(serverAddr, 22049)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := ctxT(t, 5*time.Minute)
	tr, err := xprt.Dial(ctx, xprt.Config{Fabric: fab, Addr: srv.Addr(), MaxIO: 256 << 10, MaxSegment: 64 << 10, IOBuffers: 16, Timeout: 3 * time.Second, Registration: mode,
		UnsafeWindows: mode == frwr.ModeWindows})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		t.Logf("client: %s", tr.Counters())
		t.Logf("server: %+v", srv.Stats())
		tr.Close()
	}()
	xid := uint32(0x7000)
	read := func(ctx context.Context, n int, buf []byte) error {
		xid++
		rep, err := tr.RoundTrip(ctx, sunrpctest.ReadRequest(xid, sunrpctest.Control{}, xid, n, buf))
		if err != nil {
			return err
		}
		defer rep.Release()
		return sunrpctest.CheckRead(rep, xid, xid, n)
	}
	once := func(m xprttest.Misbehavior) {
		m.Select = func(xprttest.CallInfo) bool { return armed.Swap(false) }
		srv.SetMisbehavior(m)
		armed.Store(true)
	}
	for _, tc := range []struct {
		name    string
		m       xprttest.Misbehavior
		failure func(error) bool // nil: the call must succeed
	}{
		{"drop", xprttest.Misbehavior{Drop: true}, nil},
		{"unknown-xid-then-reply", xprttest.Misbehavior{UnknownXID: true, ThenReply: true}, nil},
		{"bad-version", xprttest.Misbehavior{ReplyVersion: 7}, nil},
		{"truncated-header", xprttest.Misbehavior{TruncateHeader: 10}, nil},
		{"err-chunk", xprttest.Misbehavior{Error: rpcrdma.ErrCodeChunk}, func(err error) bool { return err != nil }},
		{"err-vers", xprttest.Misbehavior{Error: rpcrdma.ErrCodeVers}, func(err error) bool { return err != nil }},
		{"oversized-write-chunk", xprttest.Misbehavior{OverstateWrite: 4096}, func(err error) bool {
			var pe *xprt.ProtocolError
			return errors.As(err, &pe)
		}},
		{"late-write", xprttest.Misbehavior{LateWrite: true, LateWriteDelay: 100 * time.Millisecond}, nil},
		// A foreign invalidation resets the connection; the call is sent
		// again and succeeds.
		{"stale-invalidate", xprttest.Misbehavior{StaleInvalidate: true}, nil},
		// A Send With Invalidate with an unknown xid naming the second
		// window of the READ (two segments), right before its reply: the
		// client records that window invalid and never invalidates it
		// again (a second invalidation panics rxe); it resets and sends
		// the READ again.
		{"foreign-invalidate", xprttest.Misbehavior{UnknownXID: true, ThenReply: true, InvalidateUnknownXID: true}, nil},
		{"out-of-bounds-write", xprttest.Misbehavior{OutOfBounds: 64}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := srv.Stats()
			once(tc.m)
			buf := make([]byte, 128<<10)
			err := read(ctxT(t, 60*time.Second), len(buf), buf)
			switch {
			case tc.failure == nil && err != nil:
				t.Fatalf("READ: %v", err)
			case tc.failure != nil && !tc.failure(err):
				t.Fatalf("READ: %v, want the call to fail cleanly", err)
			}
			if tc.m.LateWrite {
				deadline := time.Now().Add(20 * time.Second)
				for {
					st := srv.Stats()
					if st.LateWritesFailed+st.LateWritesLanded > before.LateWritesFailed+before.LateWritesLanded || time.Now().After(deadline) {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				st := srv.Stats()
				if st.LateWritesLanded != before.LateWritesLanded || st.LateWritesFailed == before.LateWritesFailed {
					t.Fatalf("late write: %+v", st)
				}
				if !bytes.Equal(buf, sunrpctest.Pattern(xid, len(buf))) {
					t.Fatal("the late write changed the returned data")
				}
			}
			if tc.m.OutOfBounds > 0 {
				st := srv.Stats()
				landed := st.OutOfBoundsLanded - before.OutOfBoundsLanded
				if st.OutOfBoundsTried == before.OutOfBoundsTried {
					t.Fatalf("no access past the segment was tried: %+v", st)
				}
				switch tr.RegistrationMode() {
				case frwr.ModeRegister:
					if landed != 0 {
						t.Fatalf("%d accesses past the segment landed with per-segment MRs", landed)
					}
				case frwr.ModeWindows:
					// rxe's quirk table says windows reach their whole
					// MR; this keeps it honest.
					if landed == 0 {
						t.Fatalf("rxe refused an access past a window: its quirk table (WindowBoundsEnforced false) is out of date")
					}
				}
				if !bytes.Equal(buf, sunrpctest.Pattern(xid, len(buf))) {
					t.Fatal("the returned data is wrong")
				}
			}
			if tc.m.InvalidateUnknownXID {
				if st := srv.Stats(); st.ForeignInvalidates == before.ForeignInvalidates {
					t.Fatalf("no foreign Send With Invalidate was sent: %+v", st)
				}
			}
			if tc.m.StaleInvalidate {
				if st := srv.Stats(); st.StaleInvalidates == before.StaleInvalidates {
					t.Fatalf("no stale Send With Invalidate was sent: %+v", st)
				}
			}
			// The transport goes on.
			if err := read(ctxT(t, 60*time.Second), 64<<10, make([]byte, 64<<10)); err != nil {
				t.Fatalf("READ after %s: %v", tc.name, err)
			}
		})
	}
	// A WRITE whose Read chunk the server reads past its end.
	t.Run("out-of-bounds-read", func(t *testing.T) {
		before := srv.Stats()
		once(xprttest.Misbehavior{OutOfBounds: 64})
		data := sunrpctest.Pattern(0x51, 96<<10)
		xid++
		rep, err := tr.RoundTrip(ctxT(t, 60*time.Second), sunrpctest.WriteRequest(xid, sunrpctest.Control{}, 0, 0x51, data, 0xfeed))
		if err != nil {
			t.Fatalf("WRITE: %v", err)
		}
		err = sunrpctest.CheckWrite(rep, xid, len(data), 0xfeed)
		rep.Release()
		if err != nil {
			t.Fatal(err)
		}
		st := srv.Stats()
		landed := st.OutOfBoundsLanded - before.OutOfBoundsLanded
		if st.OutOfBoundsTried == before.OutOfBoundsTried {
			t.Fatalf("no access past the segment was tried: %+v", st)
		}
		if tr.RegistrationMode() == frwr.ModeRegister && landed != 0 {
			t.Fatalf("%d RDMA READs past the Read chunk landed with per-segment MRs", landed)
		}
	})
	c := tr.Counters()
	if c.RefusedTransitions != 0 {
		t.Fatalf("refused transitions: %s", c)
	}
	if mode == frwr.ModeAuto && tr.RegistrationMode() != frwr.ModeRegister {
		t.Fatalf("rxe got %v by default, want per-segment registration (its windows reach their whole MR)", tr.RegistrationMode())
	}
	if mode == frwr.ModeWindows && c.WindowsRetired == 0 {
		t.Fatalf("windows not retired on rxe: %s", c)
	}
}
