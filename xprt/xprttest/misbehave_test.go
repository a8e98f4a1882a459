package xprttest

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/rpcrdma"
	"github.com/nfsrdma/nfsrdma/verbs"
)

func nullCall(xid uint32) rawCall { return rawCall{XID: xid, Inline: rpcCall(xid, 400000, 1, 0)} }

// expectNothing checks that no message arrives for a while.
func expectNothing(t *testing.T, c *rawClient) {
	t.Helper()
	if rep, err := c.Recv(100 * time.Millisecond); err == nil {
		t.Fatalf("unexpected message: xid %#x, % x", rep.Hdr.XID, rep.Raw)
	}
}

func TestMisbehaveDrop(t *testing.T) {
	e := newEnv(t, Config{Handler: NullHandler(), Misbehave: Misbehavior{OnCall: 2, Drop: true}})
	c := e.dial(t, rawOptions{})
	c.RoundTrip(nullCall(1))
	p, err := c.Start(nullCall(2))
	if err != nil {
		t.Fatal(err)
	}
	expectNothing(t, c)
	c.RoundTrip(nullCall(3))
	c.Finish(p, nil)
	st := e.srv.Stats()
	if st.Dropped != 1 || st.Replies != 2 || st.MaxOutstanding != 2 {
		t.Errorf("stats %+v: want 1 dropped, 2 replies, the dropped call still outstanding", st)
	}
}

func TestMisbehaveUnknownXID(t *testing.T) {
	for _, then := range []bool{false, true} {
		e := newEnv(t, Config{Handler: NullHandler(), Misbehave: Misbehavior{UnknownXID: true, ThenReply: then}})
		c := e.dial(t, rawOptions{})
		p, err := c.Start(nullCall(0x42))
		if err != nil {
			t.Fatal(err)
		}
		rep, err := c.Recv(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Hdr.XID != 0x80000042 {
			t.Fatalf("first reply xid %#x, want the top bit flipped", rep.Hdr.XID)
		}
		if then {
			rep, err = c.Recv(5 * time.Second)
			if err != nil || rep.Hdr.XID != 0x42 {
				t.Fatalf("second reply %v, %v: want xid 0x42", rep, err)
			}
			decodeAccepted(t, rep.Inline, 0x42)
		} else {
			expectNothing(t, c)
		}
		c.Finish(p, rep)
		if st := e.srv.Stats(); st.UnknownXIDReplies != 1 {
			t.Errorf("UnknownXIDReplies %d", st.UnknownXIDReplies)
		}
	}
}

func TestMisbehaveErrors(t *testing.T) {
	for _, code := range []rpcrdma.ErrorCode{rpcrdma.ErrCodeChunk, rpcrdma.ErrCodeVers} {
		e := newEnv(t, Config{Handler: NullHandler(), Misbehave: Misbehavior{Error: code}})
		c := e.dial(t, rawOptions{})
		rep := c.RoundTrip(nullCall(5))
		if rep.Hdr.Proc != rpcrdma.ProcError || rep.Hdr.ErrCode != code {
			t.Fatalf("reply %+v, want %v", rep.Hdr, code)
		}
		if code == rpcrdma.ErrCodeVers && (rep.Hdr.VersLow != 1 || rep.Hdr.VersHigh != 1) {
			t.Errorf("ERR_VERS range %d-%d", rep.Hdr.VersLow, rep.Hdr.VersHigh)
		}
	}
}

func TestMisbehaveBadHeaders(t *testing.T) {
	e := newEnv(t, Config{Handler: NullHandler()})
	c := e.dial(t, rawOptions{})

	e.srv.SetMisbehavior(Misbehavior{TruncateHeader: 10})
	rep := c.RoundTrip(rawCall{XID: 1, Inline: rpcCall(1, 400000, 1, 0), Write: 64})
	if len(rep.Raw) != 10 || !errors.Is(rep.HdrErr, rpcrdma.ErrTruncated) {
		t.Fatalf("truncated reply % x (%v)", rep.Raw, rep.HdrErr)
	}
	if rep.WC.Flags&verbs.WCWithInv != 0 {
		t.Error("a truncated reply used Send With Invalidate")
	}

	e.srv.SetMisbehavior(Misbehavior{ReplyVersion: 7})
	p, err := c.Start(nullCall(2))
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Recv(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var ve *rpcrdma.VersionError
	if !errors.As(got.HdrErr, &ve) || ve.Vers != 7 {
		t.Fatalf("reply header error %v, want version 7", got.HdrErr)
	}
	c.Finish(p, got)
	if st := e.srv.Stats(); st.Replies != 0 {
		t.Errorf("undecodable replies counted as replies: %d", st.Replies)
	}
}

func TestMisbehaveDelay(t *testing.T) {
	const d = 150 * time.Millisecond
	e := newEnv(t, Config{Handler: NullHandler(), Misbehave: Misbehavior{Delay: d}})
	c := e.dial(t, rawOptions{})
	start := time.Now()
	c.RoundTrip(nullCall(1))
	if el := time.Since(start); el < d {
		t.Fatalf("reply after %v, want at least %v", el, d)
	}
}

// readFileCall starts an NFS READ of the whole file name through a Write
// chunk.
func startRead(t *testing.T, c *rawClient, xid uint32, fh []byte, n int) *pending {
	t.Helper()
	p, err := c.Start(rawCall{XID: xid, Inline: nfsCall(xid, nfsProcRead, opaque(fh), u64(0), u32(uint32(n))), Write: n})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMisbehaveOverstateWrite(t *testing.T) {
	e := newEnv(t, Config{Misbehave: Misbehavior{Select: func(ci CallInfo) bool { return ci.Proc == nfsProcRead }, OverstateWrite: 16}})
	data := randomBytes(5000, 1)
	e.writeFile(t, "f", data)
	c := e.dial(t, rawOptions{})
	fh := lookup(t, c, 2, mount(t, c, 1), "f")
	p := startRead(t, c, 3, fh, len(data))
	rep, err := c.Recv(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Finish(p, rep)
	if got := rep.Hdr.Writes[0][0].Length; got != uint32(len(data))+16 {
		t.Fatalf("returned segment length %d, want %d (offered + 16)", got, len(data)+16)
	}
}

func TestMisbehaveLateWrite(t *testing.T) {
	for _, tc := range []struct {
		name       string
		remoteInv  bool // the reply invalidates the Write chunk's window
		invalidate bool // the client invalidates locally before the late write
		wantLanded bool
	}{
		{"remote invalidation", true, false, false},
		{"local invalidation", false, true, false},
		{"client forgets to invalidate", false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Config{Misbehave: Misbehavior{Select: func(ci CallInfo) bool { return ci.Proc == nfsProcRead },
				LateWrite: true, LateWriteDelay: 100 * time.Millisecond}})
			data := randomBytes(4000, 2)
			e.writeFile(t, "f", data)
			c := e.dial(t, rawOptions{RemoteInv: tc.remoteInv})
			fh := lookup(t, c, 2, mount(t, c, 1), "f")
			p := startRead(t, c, 3, fh, len(data))
			rep, err := c.Recv(5 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if tc.remoteInv != (rep.WC.Flags&verbs.WCWithInv != 0) {
				t.Fatalf("reply flags %#x", rep.WC.Flags)
			}
			if tc.invalidate {
				if err := c.Invalidate(p, rep); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, func() bool { st := e.srv.Stats(); return st.LateWritesFailed+st.LateWritesLanded == 1 })
			buf := append([]byte(nil), p.write.buf.Bytes()...)
			c.Finish(p, rep) // the QP may be in error now: the LOCAL_INV flushes
			st := e.srv.Stats()
			if tc.wantLanded {
				if st.LateWritesLanded != 1 || buf[0] != LateWriteByte {
					t.Fatalf("stats %+v, buffer starts % x: want the late write landed", st, buf[:4])
				}
				return
			}
			if st.LateWritesFailed != 1 || !bytes.Equal(buf, data) {
				t.Fatalf("stats %+v; data unchanged %v", st, bytes.Equal(buf, data))
			}
			// REM_ACCESS_ERR breaks the connection on both sides.
			waitFor(t, func() bool { return e.srv.Stats().Disconnects == 1 })
		})
	}
}

func TestMisbehaveDisconnectAfter(t *testing.T) {
	e := newEnv(t, Config{Handler: NullHandler(), Misbehave: Misbehavior{DisconnectAfter: 2}})
	c := e.dial(t, rawOptions{})
	c.RoundTrip(nullCall(1))
	c.RoundTrip(nullCall(2))
	p, err := c.Start(nullCall(3))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Recv(5 * time.Second); err == nil {
		t.Fatal("the third call was answered")
	}
	c.Finish(p, nil)
	select {
	case ev := <-c.ep.Events():
		if ev.Type != verbs.CMDisconnected {
			t.Errorf("event %v", ev.Type)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no disconnect")
	}
	// A new connection is served again.
	c2 := e.dial(t, rawOptions{})
	c2.RoundTrip(nullCall(4))
	waitFor(t, func() bool { return e.srv.Stats().Disconnects == 1 })
	if st := e.srv.Stats(); st.Connections != 2 {
		t.Errorf("stats %+v", st)
	}
}

func TestMisbehaveDisconnectOnCall(t *testing.T) {
	e := newEnv(t, Config{Handler: NullHandler(), Misbehave: Misbehavior{OnCall: 1, Disconnect: true}})
	c := e.dial(t, rawOptions{})
	p, err := c.Start(nullCall(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Recv(5 * time.Second); err == nil {
		t.Fatal("the call was answered")
	}
	c.Finish(p, nil)
	c2 := e.dial(t, rawOptions{})
	c2.RoundTrip(nullCall(1)) // the retransmission, on a new connection
}

func TestFaultInjectionThroughQPs(t *testing.T) {
	e := newEnv(t, Config{Handler: NullHandler()})
	c := e.dial(t, rawOptions{})
	qps := e.srv.QPs()
	if len(qps) != 1 {
		t.Fatalf("%d QPs", len(qps))
	}
	qps[0].HoldSendQueue()
	p, err := c.Start(nullCall(1))
	if err != nil {
		t.Fatal(err)
	}
	expectNothing(t, c)
	qps[0].ReleaseSendQueue()
	rep, err := c.Recv(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Finish(p, rep)
	decodeAccepted(t, rep.Inline, 1)
}
