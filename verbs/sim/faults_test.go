package sim_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/sim"
	"github.com/nfsrdma/nfsrdma/verbs/verbstest"
)

const (
	lw   = verbs.AccessLocalWrite
	bind = verbs.AccessLocalWrite | verbs.AccessMWBind
)

func TestDoubleInvalidationIsFlagged(t *testing.T) {
	t.Run("LocalInvTwice", func(t *testing.T) {
		f := sim.NewFabric()
		defer f.Close()
		p := newPair(t, f, verbstest.PairConfig{})
		cb := verbstest.MustBuffer(t, p.Client.PD, 8192, bind)
		_, rkey := bindWindow(t, f, p.Client, cb, 0, 4096, verbs.AccessRemoteWrite)
		inv := verbs.SendWR{Opcode: verbs.OpLocalInv, Flags: verbs.SendSignaled, InvalidateRKey: rkey}
		inv.ID = 1
		post(t, p.Client.QP, inv)
		want(t, reapN(t, p.Client.SendCQ, 1, "first LOCAL_INV")[0], 1, verbs.StatusSuccess)
		if n := f.DoubleInvalidations(); n != 0 {
			t.Fatalf("DoubleInvalidations after one LOCAL_INV: %d", n)
		}
		inv.ID = 2
		post(t, p.Client.QP, inv)
		wc := reapN(t, p.Client.SendCQ, 1, "second LOCAL_INV")[0]
		if wc.ID != 2 || wc.Status == verbs.StatusSuccess {
			t.Fatalf("second LOCAL_INV of the same rkey: %+v, want an error completion", wc)
		}
		if n := f.DoubleInvalidations(); n != 1 {
			t.Fatalf("DoubleInvalidations: %d, want 1", n)
		}
		if state(t, p.Client.QP) != verbs.QPError {
			t.Error("QP not in error after a failed LOCAL_INV")
		}
	})
	t.Run("LocalInvAfterRemoteInvalidation", func(t *testing.T) {
		f := sim.NewFabric()
		defer f.Close()
		p := newPair(t, f, verbstest.PairConfig{})
		cb := verbstest.MustBuffer(t, p.Client.PD, 8192, bind)
		_, rkey := bindWindow(t, f, p.Client, cb, 0, 4096, verbs.AccessRemoteWrite)
		recv(t, p.Client.QP, 1, cb.SGE(4096, 64))
		if st := simQP(p.Server).RogueSend([]byte("reply"), true, rkey); st != verbs.StatusSuccess {
			t.Fatalf("Send With Invalidate: %s", st)
		}
		wc := reapN(t, p.Client.RecvCQ, 1, "reply")[0]
		if wc.Flags&verbs.WCWithInv == 0 || wc.InvalidatedRKey != rkey {
			t.Fatalf("reply %+v: want WCWithInv of %#x", wc, rkey)
		}
		post(t, p.Client.QP, verbs.SendWR{ID: 2, Opcode: verbs.OpLocalInv, Flags: verbs.SendSignaled, InvalidateRKey: rkey})
		if wc := reapN(t, p.Client.SendCQ, 1, "LOCAL_INV")[0]; wc.Status == verbs.StatusSuccess {
			t.Fatal("LOCAL_INV of a remotely invalidated rkey succeeded")
		}
		if a := f.Anomalies(); a.DoubleInvalidations != 1 {
			t.Fatalf("anomalies %+v, want one double invalidation", a)
		}
	})
	t.Run("Panics", func(t *testing.T) {
		f := sim.NewFabric(sim.Manual(), sim.PanicOnDoubleInvalidation())
		defer f.Close()
		p := newPair(t, f, verbstest.PairConfig{})
		post(t, p.Client.QP, verbs.SendWR{ID: 1, Opcode: verbs.OpLocalInv, InvalidateRKey: 0x12345678})
		defer func() {
			if r := recover(); r == nil || !strings.Contains(r.(string), "0x12345678") {
				t.Fatalf("recovered %v, want a panic naming the rkey", r)
			}
		}()
		f.Step()
	})
}

// TestReplyBeforeSendCompletion holds the send completion of a call so its
// reply arrives first, and checks that a send buffer reused before its
// completion is polled is counted.
func TestReplyBeforeSendCompletion(t *testing.T) {
	f := sim.NewFabric(sim.Manual())
	defer f.Close()
	p := newPair(t, f, verbstest.PairConfig{})
	cb := verbstest.MustBuffer(t, p.Client.PD, 4096, lw)
	sb := verbstest.MustBuffer(t, p.Server.PD, 4096, lw)
	client := simQP(p.Client)
	client.HoldSendCompletions()

	recv(t, p.Server.QP, 1, sb.SGE(0, 64))
	recv(t, p.Client.QP, 2, cb.SGE(1024, 64))
	copy(cb.Bytes(), "call")
	post(t, p.Client.QP, sendWR(10, true, cb.SGE(0, 4)))
	if n := f.RunUntilIdle(); n != 1 {
		t.Fatalf("steps: %d, want 1", n)
	}
	want(t, pollN(t, p.Server.RecvCQ, 1, "call")[0], 1, verbs.StatusSuccess)
	post(t, p.Server.QP, sendWR(20, true, sb.SGE(0, 4)))
	f.RunUntilIdle()
	want(t, pollN(t, p.Client.RecvCQ, 1, "reply")[0], 2, verbs.StatusSuccess)
	pollN(t, p.Client.SendCQ, 0, "send completion while held")
	if n := client.HeldSendCompletions(); n != 1 {
		t.Fatalf("held send completions: %d", n)
	}
	if used := client.SendQueueUsed(); used != 1 {
		t.Fatalf("send queue slots used: %d, want 1 until the completion is polled", used)
	}

	copy(cb.Bytes(), "oops") // reusing the send buffer before its completion: a bug
	client.ReleaseSendCompletions()
	want(t, pollN(t, p.Client.SendCQ, 1, "released")[0], 10, verbs.StatusSuccess)
	if a := f.Anomalies(); a.SendBuffersReusedEarly != 1 {
		t.Fatalf("anomalies %+v, want one send buffer reused early", a)
	}
	if used := client.SendQueueUsed(); used != 0 {
		t.Fatalf("send queue slots used after polling: %d", used)
	}
	want(t, pollN(t, p.Server.SendCQ, 1, "server send")[0], 20, verbs.StatusSuccess)
}

// TestManualOrder: nothing runs until stepped; steps follow posting order
// across QPs.
func TestManualOrder(t *testing.T) {
	f := sim.NewFabric(sim.Manual())
	defer f.Close()
	p := newPair(t, f, verbstest.PairConfig{})
	cb := verbstest.MustBuffer(t, p.Client.PD, 4096, lw)
	sb := verbstest.MustBuffer(t, p.Server.PD, 4096, lw)
	recv(t, p.Server.QP, 1, sb.SGE(0, 64))
	recv(t, p.Client.QP, 2, cb.SGE(0, 64))
	post(t, p.Server.QP, sendWR(20, true, sb.SGE(64, 8))) // posted first
	post(t, p.Client.QP, sendWR(10, true, cb.SGE(64, 8)))
	pollN(t, p.Client.RecvCQ, 0, "before any step")
	pollN(t, p.Server.RecvCQ, 0, "before any step")
	if !f.Step() {
		t.Fatal("Step did nothing")
	}
	want(t, pollN(t, p.Client.RecvCQ, 1, "first step")[0], 2, verbs.StatusSuccess)
	pollN(t, p.Server.RecvCQ, 0, "first step")
	f.Step()
	want(t, pollN(t, p.Server.RecvCQ, 1, "second step")[0], 1, verbs.StatusSuccess)
	if f.Step() {
		t.Fatal("Step found work after both sends")
	}
}

// TestDelays uses the virtual clock of a manual fabric.
func TestDelays(t *testing.T) {
	f := sim.NewFabric(sim.Manual())
	defer f.Close()
	p := newPair(t, f, verbstest.PairConfig{})
	cb := verbstest.MustBuffer(t, p.Client.PD, 4096, lw)
	sb := verbstest.MustBuffer(t, p.Server.PD, 4096, lw)
	client := simQP(p.Client)
	client.DelaySendQueue(10 * time.Millisecond)
	client.DelaySendCompletions(5 * time.Millisecond)
	recv(t, p.Server.QP, 1, sb.SGE(0, 64))
	post(t, p.Client.QP, sendWR(10, true, cb.SGE(0, 8)))
	if n := f.RunUntilIdle(); n != 0 {
		t.Fatalf("%d steps before the delay passed", n)
	}
	f.Advance(9 * time.Millisecond)
	pollN(t, p.Server.RecvCQ, 0, "delivery at 9ms")
	f.Advance(time.Millisecond)
	want(t, pollN(t, p.Server.RecvCQ, 1, "delivery at 10ms")[0], 1, verbs.StatusSuccess)
	pollN(t, p.Client.SendCQ, 0, "completion at 10ms")
	f.Advance(5 * time.Millisecond)
	want(t, pollN(t, p.Client.SendCQ, 1, "completion at 15ms")[0], 10, verbs.StatusSuccess)

	// A held send queue: the peer sees nothing until released.
	client.DelaySendQueue(0)
	client.DelaySendCompletions(0)
	client.HoldSendQueue()
	recv(t, p.Server.QP, 2, sb.SGE(0, 64))
	post(t, p.Client.QP, sendWR(11, true, cb.SGE(0, 8)))
	f.Advance(time.Hour)
	pollN(t, p.Server.RecvCQ, 0, "held send queue")
	client.ReleaseSendQueue()
	f.RunUntilIdle()
	want(t, pollN(t, p.Server.RecvCQ, 1, "released send queue")[0], 2, verbs.StatusSuccess)
}

// TestDelayedCompletion: on an asynchronous fabric a delayed completion
// arrives after the delay and Wait sleeps until then. The fabric works in
// a synctest bubble: its engine sleeps on the bubble's fake clock.
func TestDelayedCompletion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := sim.NewFabric()
		defer f.Close()
		p := newPair(t, f, verbstest.PairConfig{})
		cb := verbstest.MustBuffer(t, p.Client.PD, 4096, lw)
		sb := verbstest.MustBuffer(t, p.Server.PD, 4096, lw)
		simQP(p.Client).DelaySendCompletions(50 * time.Millisecond)
		recv(t, p.Server.QP, 1, sb.SGE(0, 64))
		start := time.Now()
		post(t, p.Client.QP, sendWR(10, true, cb.SGE(0, 8)))
		want(t, reapN(t, p.Server.RecvCQ, 1, "delivery")[0], 1, verbs.StatusSuccess)
		if d := time.Since(start); d != 0 {
			t.Fatalf("delivery after %v of fake time, want at once", d)
		}
		want(t, reapN(t, p.Client.SendCQ, 1, "delayed completion")[0], 10, verbs.StatusSuccess)
		if d := time.Since(start); d != 50*time.Millisecond {
			t.Fatalf("delayed completion after %v, want 50ms", d)
		}
	})
}

func TestFailSend(t *testing.T) {
	f := sim.NewFabric()
	defer f.Close()
	p := newPair(t, f, verbstest.PairConfig{})
	cb := verbstest.MustBuffer(t, p.Client.PD, 4096, lw)
	sb := verbstest.MustBuffer(t, p.Server.PD, 4096, lw)
	for i := uint64(1); i <= 3; i++ {
		recv(t, p.Server.QP, i, sb.SGE(i*64, 64))
	}
	simQP(p.Client).FailSend(2, verbs.StatusRemAccessErr)
	post(t, p.Client.QP, sendWR(10, true, cb.SGE(0, 8)), sendWR(11, false, cb.SGE(0, 8)), sendWR(12, false, cb.SGE(0, 8)))
	wcs := reapN(t, p.Client.SendCQ, 3, "sends")
	want(t, wcs[0], 10, verbs.StatusSuccess)
	want(t, wcs[1], 11, verbs.StatusRemAccessErr)
	want(t, wcs[2], 12, verbs.StatusWRFlushErr)
	wcs = reapN(t, p.Server.RecvCQ, 3, "receives")
	want(t, wcs[0], 1, verbs.StatusSuccess)
	want(t, wcs[1], 2, verbs.StatusWRFlushErr) // a remote error: the peer goes to error too
	want(t, wcs[2], 3, verbs.StatusWRFlushErr)
}

func TestFailRecv(t *testing.T) {
	f := sim.NewFabric()
	defer f.Close()
	p := newPair(t, f, verbstest.PairConfig{})
	cb := verbstest.MustBuffer(t, p.Client.PD, 4096, lw)
	sb := verbstest.MustBuffer(t, p.Server.PD, 4096, lw)
	recv(t, p.Server.QP, 1, sb.SGE(0, 64))
	recv(t, p.Server.QP, 2, sb.SGE(64, 64))
	simQP(p.Server).FailRecv(1, verbs.StatusLocLenErr)
	post(t, p.Client.QP, sendWR(10, true, cb.SGE(0, 8)))
	wcs := reapN(t, p.Server.RecvCQ, 2, "receives")
	want(t, wcs[0], 1, verbs.StatusLocLenErr)
	want(t, wcs[1], 2, verbs.StatusWRFlushErr)
	want(t, reapN(t, p.Client.SendCQ, 1, "send")[0], 10, verbs.StatusRemOpErr)
}

func TestCorruptNextSend(t *testing.T) {
	f := sim.NewFabric()
	defer f.Close()
	p := newPair(t, f, verbstest.PairConfig{})
	cb := verbstest.MustBuffer(t, p.Client.PD, 4096, lw)
	sb := verbstest.MustBuffer(t, p.Server.PD, 4096, lw)
	copy(cb.Bytes(), "abcdefgh")
	recv(t, p.Server.QP, 1, sb.SGE(0, 64))
	recv(t, p.Server.QP, 2, sb.SGE(64, 64))
	simQP(p.Client).CorruptNextSend(3)
	post(t, p.Client.QP, sendWR(10, false, cb.SGE(0, 8)), sendWR(11, true, cb.SGE(0, 8)))
	reapN(t, p.Server.RecvCQ, 2, "receives")
	reapN(t, p.Client.SendCQ, 1, "sends")
	if got := sb.Bytes()[:8]; !bytes.Equal(got, []byte{'a', 'b', 'c', 'd' ^ 0xff, 'e', 'f', 'g', 'h'}) {
		t.Errorf("first message %q, want byte 3 flipped", got)
	}
	if got := string(sb.Bytes()[64:72]); got != "abcdefgh" {
		t.Errorf("second message %q, want it intact", got)
	}
	if string(cb.Bytes()[:8]) != "abcdefgh" {
		t.Error("the sender's buffer changed")
	}
	if a := f.Anomalies(); a != (sim.Anomalies{}) {
		t.Errorf("anomalies %+v", a)
	}
}

func TestRogueAccessAfterInvalidation(t *testing.T) {
	for _, read := range []bool{false, true} {
		name := map[bool]string{false: "Write", true: "Read"}[read]
		t.Run(name, func(t *testing.T) {
			f := sim.NewFabric()
			defer f.Close()
			p := newPair(t, f, verbstest.PairConfig{})
			cb := verbstest.MustBuffer(t, p.Client.PD, 8192, bind)
			rogue := simQP(p.Server)
			_, rkey := bindWindow(t, f, p.Client, cb, 0, 4096, verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
			if st := rogue.RogueWrite(cb.Addr(0), rkey, []byte("valid")); st != verbs.StatusSuccess {
				t.Fatalf("write with a valid rkey: %s", st)
			}
			if string(cb.Bytes()[:5]) != "valid" {
				t.Fatal("write with a valid rkey did not land")
			}
			recv(t, p.Client.QP, 1, cb.SGE(4096, 64))
			post(t, p.Client.QP, verbs.SendWR{ID: 2, Opcode: verbs.OpLocalInv, Flags: verbs.SendSignaled, InvalidateRKey: rkey})
			want(t, reapN(t, p.Client.SendCQ, 1, "LOCAL_INV")[0], 2, verbs.StatusSuccess)
			before := slices.Clone(cb.Bytes())
			var st verbs.Status
			if read {
				var data []byte
				data, st = rogue.RogueRead(cb.Addr(0), rkey, 5)
				if data != nil {
					t.Errorf("read with an old rkey returned %q", data)
				}
			} else {
				st = rogue.RogueWrite(cb.Addr(0), rkey, []byte("LATE!"))
			}
			if st != verbs.StatusRemAccessErr {
				t.Fatalf("%s with an invalidated rkey: %s, want REM_ACCESS_ERR", name, st)
			}
			if !bytes.Equal(cb.Bytes(), before) {
				t.Fatal("memory changed")
			}
			want(t, reapN(t, p.Client.RecvCQ, 1, "flush")[0], 1, verbs.StatusWRFlushErr)
			if state(t, p.Client.QP) != verbs.QPError || state(t, p.Server.QP) != verbs.QPError {
				t.Fatal("both QPs must be in error")
			}
			if f.DoubleInvalidations() != 0 {
				t.Fatal("double invalidation counted")
			}
		})
	}
}

// TestReceiverOverrun: a peer sending more messages than receives posted
// fails with RNR_RETRY_EXC_ERR and both QPs go to error.
func TestReceiverOverrun(t *testing.T) {
	f := sim.NewFabric()
	defer f.Close()
	p := newPair(t, f, verbstest.PairConfig{})
	cb := verbstest.MustBuffer(t, p.Client.PD, 4096, lw)
	recv(t, p.Client.QP, 1, cb.SGE(0, 64))
	recv(t, p.Client.QP, 2, cb.SGE(64, 64))
	rogue := simQP(p.Server)
	if st := rogue.RogueSend([]byte("one"), false, 0); st != verbs.StatusSuccess {
		t.Fatal(st)
	}
	if st := rogue.RogueSend([]byte("two"), false, 0); st != verbs.StatusSuccess {
		t.Fatal(st)
	}
	if st := rogue.RogueSend([]byte("three"), false, 0); st != verbs.StatusRNRRetryExcErr {
		t.Fatalf("third send with two receives: %s, want RNR_RETRY_EXC_ERR", st)
	}
	wcs := reapN(t, p.Client.RecvCQ, 2, "receives")
	want(t, wcs[0], 1, verbs.StatusSuccess)
	want(t, wcs[1], 2, verbs.StatusSuccess)
	if state(t, p.Client.QP) != verbs.QPError || state(t, p.Server.QP) != verbs.QPError {
		t.Fatal("both QPs must be in error")
	}

	// Through the send queue, the same.
	p = newPair(t, f, verbstest.PairConfig{})
	sb := verbstest.MustBuffer(t, p.Server.PD, 4096, lw)
	post(t, p.Server.QP, sendWR(10, true, sb.SGE(0, 8)))
	want(t, reapN(t, p.Server.SendCQ, 1, "send without receive")[0], 10, verbs.StatusRNRRetryExcErr)
}

// TestRNRRetryForever: with RNRRetryCount 7 from the peer, a SEND waits
// for a receive instead of failing.
func TestRNRRetryForever(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := sim.NewFabric()
		defer f.Close()
		sp := verbstest.DefaultConnParam()
		sp.RNRRetryCount = 7 // the server's value governs the client's QP
		p := newPair(t, f, verbstest.PairConfig{ServerParam: &sp})
		cb := verbstest.MustBuffer(t, p.Client.PD, 4096, lw)
		sb := verbstest.MustBuffer(t, p.Server.PD, 4096, lw)
		post(t, p.Client.QP, sendWR(10, true, cb.SGE(0, 8)))
		synctest.Wait() // the engine ran and found the SEND blocked
		pollN(t, p.Client.SendCQ, 0, "send waiting for a receive")
		recv(t, p.Server.QP, 1, sb.SGE(0, 64))
		want(t, reapN(t, p.Server.RecvCQ, 1, "receive")[0], 1, verbs.StatusSuccess)
		want(t, reapN(t, p.Client.SendCQ, 1, "send")[0], 10, verbs.StatusSuccess)
	})
}

// TestSendQueueSlots: a WR holds its slot until the completion retiring it
// is polled; unsignaled WRs are retired by a later signaled one.
func TestSendQueueSlots(t *testing.T) {
	f := sim.NewFabric(sim.Manual())
	defer f.Close()
	p := newPair(t, f, verbstest.PairConfig{SendDepth: 4})
	cb := verbstest.MustBuffer(t, p.Client.PD, 4096, lw)
	sb := verbstest.MustBuffer(t, p.Server.PD, 4096, lw)
	q := simQP(p.Client)
	for i := uint64(0); i < 8; i++ {
		recv(t, p.Server.QP, i, sb.SGE(0, 64))
	}
	post(t, q, sendWR(1, false, cb.SGE(0, 8)), sendWR(2, false, cb.SGE(0, 8)))
	f.RunUntilIdle()
	if q.SendQueueUsed() != 2 {
		t.Fatalf("after two unsignaled sends executed: %d slots used, want 2", q.SendQueueUsed())
	}
	post(t, q, sendWR(3, false, cb.SGE(0, 8)), sendWR(4, true, cb.SGE(0, 8)))
	if bad, err := q.PostSend([]verbs.SendWR{sendWR(5, true, cb.SGE(0, 8))}); !errors.Is(err, syscall.ENOMEM) || bad != 0 {
		t.Fatalf("fifth WR on a 4-deep queue: bad %d, %v; want ENOMEM", bad, err)
	}
	f.RunUntilIdle()
	if _, err := q.PostSend([]verbs.SendWR{sendWR(5, true, cb.SGE(0, 8))}); !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("a completion generated but not polled freed slots: %v", err)
	}
	want(t, pollN(t, p.Client.SendCQ, 1, "signaled")[0], 4, verbs.StatusSuccess)
	if q.SendQueueUsed() != 0 {
		t.Fatalf("after polling the signaled completion: %d slots used, want 0", q.SendQueueUsed())
	}
	post(t, q, sendWR(5, true, cb.SGE(0, 8)))
}

func TestCQOverflow(t *testing.T) {
	f := sim.NewFabric()
	defer f.Close()
	p := newPair(t, f, verbstest.PairConfig{SendDepth: 4, SendCQDepth: 2})
	cb := verbstest.MustBuffer(t, p.Client.PD, 4096, lw)
	sb := verbstest.MustBuffer(t, p.Server.PD, 4096, lw)
	for i := uint64(0); i < 3; i++ {
		recv(t, p.Server.QP, i, sb.SGE(0, 64))
	}
	post(t, p.Client.QP, sendWR(1, true, cb.SGE(0, 8)), sendWR(2, true, cb.SGE(0, 8)), sendWR(3, true, cb.SGE(0, 8)))
	f.RunUntilIdle() // on the caller's goroutine: all three have run when it returns
	if err := p.Client.SendCQ.Wait(context.Background()); !errors.Is(err, syscall.EOVERFLOW) {
		t.Fatalf("Wait on an overflowed CQ: %v, want EOVERFLOW", err)
	}
	if _, err := p.Client.SendCQ.Poll(make([]verbs.Completion, 4)); !errors.Is(err, syscall.EOVERFLOW) {
		t.Fatalf("Poll of an overflowed CQ: %v, want EOVERFLOW", err)
	}
	if state(t, p.Client.QP) != verbs.QPError {
		t.Fatal("QP of an overflowed CQ not in error")
	}
	if f.Anomalies().CQOverflows != 1 {
		t.Fatalf("anomalies %+v", f.Anomalies())
	}
}

func TestBreakConnection(t *testing.T) {
	f := sim.NewFabric()
	defer f.Close()
	p := newPair(t, f, verbstest.PairConfig{})
	cb := verbstest.MustBuffer(t, p.Client.PD, 4096, lw)
	sb := verbstest.MustBuffer(t, p.Server.PD, 4096, lw)
	recv(t, p.Client.QP, 1, cb.SGE(0, 64))
	recv(t, p.Server.QP, 2, sb.SGE(0, 64))
	simQP(p.Client).Break()
	for _, s := range []*verbstest.Side{p.Client, p.Server} {
		select {
		case ev := <-s.Endpoint.Events():
			if ev.Type != verbs.CMDisconnected {
				t.Fatalf("event %v", ev.Type)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no DISCONNECTED event")
		}
		if wc := reapN(t, s.RecvCQ, 1, "flush")[0]; wc.Status != verbs.StatusWRFlushErr {
			t.Fatalf("receive after connection loss: %+v", wc)
		}
	}
	// Work posted after the loss flushes.
	post(t, p.Client.QP, sendWR(3, false, cb.SGE(0, 8)))
	want(t, reapN(t, p.Client.SendCQ, 1, "send after loss")[0], 3, verbs.StatusWRFlushErr)
}

func TestRDMAReadNeedsResponderResources(t *testing.T) {
	f := sim.NewFabric()
	defer f.Close()
	cp := verbstest.DefaultConnParam()
	cp.ResponderResources = 0 // the client offers none: the server cannot READ from it
	p := newPair(t, f, verbstest.PairConfig{ClientParam: &cp})
	cb := verbstest.MustBuffer(t, p.Client.PD, 4096, lw|verbs.AccessRemoteRead)
	sb := verbstest.MustBuffer(t, p.Server.PD, 4096, lw)
	post(t, p.Server.QP, verbs.SendWR{ID: 1, Opcode: verbs.OpRDMARead, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{sb.SGE(0, 64)}, RemoteAddr: cb.Addr(0), RKey: cb.MR.RKey()})
	want(t, reapN(t, p.Server.SendCQ, 1, "READ")[0], 1, verbs.StatusRemInvReqErr)
}

// TestBindRules: the sim is strict about the rkey a bind gives.
func TestBindRules(t *testing.T) {
	for _, c := range []struct {
		name string
		key  func(old uint32) uint32
	}{
		{"SameKeyByte", func(old uint32) uint32 { return old }},
		{"OtherIndex", func(old uint32) uint32 { return old + 0x100 + 1 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := sim.NewFabric()
			defer f.Close()
			p := newPair(t, f, verbstest.PairConfig{})
			cb := verbstest.MustBuffer(t, p.Client.PD, 4096, bind)
			w, err := p.Client.PD.AllocMW()
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			post(t, p.Client.QP, verbs.SendWR{ID: 1, Opcode: verbs.OpBindMW, Flags: verbs.SendSignaled, MW: w, BindMR: cb.MR,
				BindAddr: cb.Addr(0), BindLength: 64, BindAccess: verbs.AccessRemoteWrite, BindRKey: c.key(w.RKey())})
			want(t, reapN(t, p.Client.SendCQ, 1, "bind")[0], 1, verbs.StatusMWBindErr)
		})
	}
}

// TestCloseRules: out-of-order closes fail with EBUSY, Close is idempotent,
// a QP closed with a window bound is counted, and Fabric.Close releases
// everything.
func TestCloseRules(t *testing.T) {
	base := runtime.NumGoroutine()
	f := sim.NewFabric()
	ctx := context.Background()
	p, err := verbstest.Connect(ctx, f, listenAddr, connectAddr, verbstest.PairConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cb, err := verbstest.NewBuffer(p.Client.PD, 4096, bind)
	if err != nil {
		t.Fatal(err)
	}
	_, rkey := bindWindow(t, f, p.Client, cb, 0, 64, verbs.AccessRemoteWrite)
	_ = rkey
	for _, c := range []struct {
		what string
		obj  interface{ Close() error }
	}{{"PD with an MR", p.Client.PD}, {"CQ with a QP", p.Client.SendCQ}, {"MR with a bound window", cb.MR}, {"endpoint with a QP", p.Client.Endpoint}} {
		if err := c.obj.Close(); !errors.Is(err, syscall.EBUSY) {
			t.Errorf("closing a %s: %v, want EBUSY", c.what, err)
		}
	}
	if err := p.Client.QP.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Client.QP.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if a := f.Anomalies(); a.QPClosedWithBoundWindows != 1 {
		t.Errorf("anomalies %+v, want one QP closed with a bound window", a)
	}
	if _, err := p.Client.QP.PostSend(nil); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("PostSend on a closed QP: %v", err)
	}
	// Post work that will be pending when the fabric closes.
	simQP(p.Server).DelaySendCompletions(time.Hour)
	post(t, p.Server.QP, sendWR(1, true))

	if live := f.Live(); live.Zero() {
		t.Fatal("nothing live before Fabric.Close")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if live := f.Live(); !live.Zero() {
		t.Fatalf("live after Fabric.Close: %+v", live)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("closing a pair after Fabric.Close: %v", err)
	}
	cb.Mapping.Close()
	if _, err := f.OpenDevice("sim0"); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("OpenDevice after Close: %v", err)
	}
	checkGoroutines(t, base)
}

func TestConnectErrors(t *testing.T) {
	f := sim.NewFabric()
	defer f.Close()
	if _, err := f.OpenDevice("mlx5_9"); err == nil || !strings.Contains(err.Error(), "mlx5_9") || !errors.Is(err, syscall.ENODEV) {
		t.Errorf("OpenDevice of an unknown device: %v", err)
	}
	ctx := context.Background()
	ep, err := f.Resolve(ctx, netip.MustParseAddrPort("10.99.0.1:20049"))
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	if _, err := ep.Connect(ctx, verbs.ConnParam{}); err == nil || !strings.Contains(err.Error(), "create the QP") {
		t.Errorf("Connect without a QP: %v", err)
	}
	l, err := f.Listen(netip.MustParseAddrPort("0.0.0.0:20049"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := f.Listen(netip.MustParseAddrPort("0.0.0.0:20049")); !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("second listener on a port: %v", err)
	}
	// Private data too long for the CM.
	p := verbstest.PairConfig{}
	cp := verbstest.DefaultConnParam()
	cp.PrivateData = make([]byte, 57)
	p.ClientParam = &cp
	if _, err := verbstest.Connect(ctx, f, listenAddr, connectAddr, p); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("57 bytes of connect private data: %v, want EINVAL", err)
	}
	// A Connect whose context ends while nobody accepts.
	ep2, err := f.Resolve(ctx, netip.MustParseAddrPort("10.99.0.1:20049"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := f.Devices()
	_ = s
	pd, _ := ep2.Device().AllocPD()
	cq, _ := ep2.Device().CreateCQ(4)
	qp, err := ep2.CreateQP(pd, verbs.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: 2, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := ep2.Connect(tctx, verbs.ConnParam{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Connect nobody accepts: %v, want the context's error", err)
	}
	// The abandoned request is skipped or fails to accept.
	actx, acancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer acancel()
	if sep, err := l.Accept(actx); err == nil {
		t.Errorf("Accept returned an abandoned request from %v", sep.RemoteAddr())
		sep.Close()
	}
	for _, c := range []interface{ Close() error }{qp, cq, pd, ep2} {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}
}

// TestReceiveTooSmall: the receive completes with LOC_LEN_ERR (the spec;
// the suite accepts rxe's departure), the sender with REM_INV_REQ_ERR, and
// nothing is written.
func TestReceiveTooSmall(t *testing.T) {
	f := sim.NewFabric()
	defer f.Close()
	p := newPair(t, f, verbstest.PairConfig{})
	cb := verbstest.MustBuffer(t, p.Client.PD, 4096, lw)
	sb := verbstest.MustBuffer(t, p.Server.PD, 4096, lw)
	copy(sb.Bytes(), "0123456789abcdefXYZ")
	recv(t, p.Client.QP, 1, cb.SGE(0, 8), cb.SGE(100, 8))
	post(t, p.Server.QP, sendWR(10, true, sb.SGE(0, 17)))
	want(t, reapN(t, p.Client.RecvCQ, 1, "receive")[0], 1, verbs.StatusLocLenErr)
	want(t, reapN(t, p.Server.SendCQ, 1, "send")[0], 10, verbs.StatusRemInvReqErr)
	if !bytes.Equal(cb.Bytes()[:128], make([]byte, 128)) {
		t.Error("a receive too small was written")
	}
}
