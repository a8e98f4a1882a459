package xprt

// One test per rule of the package doc ("The rules the code keeps"), on the
// simulated fabric against xprttest: go test -run '^TestRule' ./...

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/rpcrdma"
	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/sim"
	"github.com/nfsrdma/nfsrdma/xprt/xprttest"
)

// parallel runs n calls of f concurrently and returns their errors.
func parallel(n int, f func(i int) error) []error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if err := f(i); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	return errs
}

func noErrors(t *testing.T, errs []error) {
	t.Helper()
	for i, err := range errs {
		if i > 5 {
			t.Fatalf("... %d errors in all", len(errs))
		}
		t.Error(err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// Rule 1: send-queue room comes only from send completions. With the
// client's send completions held back, the calls that do not fit wait
// (they are not failed, and ibv_post_send never overflows); releasing the
// completions lets them all through.
func TestRuleSQAccountingFromCompletions(t *testing.T) {
	s := newStack(t, stackOpts{client: Config{SendQueue: 32, Slots: 64}, server: xprttest.Config{Credits: 64}})
	ctx := s.ctx(20 * time.Second)
	qp := s.clientQP()
	qp.HoldSendCompletions()
	done := make(chan []error, 1)
	go func() { done <- parallel(48, func(int) error { return s.c.Null(ctx) }) }()
	waitFor(t, "calls waiting for send-queue room", func() bool { return s.tr.Counters().CongestionWaits > 0 })
	if used := qp.SendQueueUsed(); used > 32 {
		t.Fatalf("%d WRs in a 32-deep send queue", used)
	}
	select {
	case errs := <-done:
		t.Fatalf("all calls completed with send completions held: %v", errs)
	case <-time.After(50 * time.Millisecond):
	}
	qp.ReleaseSendCompletions()
	noErrors(t, <-done)
	if c := s.tr.Counters(); c.Disconnects != 0 || c.ErrorCompletions != 0 {
		t.Fatalf("the send queue overflowed into errors: %s", c)
	}
}

// Rule 1: signal about every half send queue; one signaled completion
// retires the unsignaled WRs before it.
func TestRuleSignalAboutHalfSQ(t *testing.T) {
	const depth, calls = 64, 640
	s := newStack(t, stackOpts{client: Config{SendQueue: depth, Slots: 16}})
	ctx := s.ctx(30 * time.Second)
	before := s.tr.Counters()
	for i := 0; i < calls; i++ {
		if err := s.c.Null(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c := s.tr.Counters()
	sig, sends := c.SignaledSends-before.SignaledSends, c.Sends-before.Sends
	// One signal per half queue: calls/(depth/2) = 20.
	if lo, hi := uint64(calls/depth), uint64(calls/(depth/4)); sig < lo || sig > hi {
		t.Fatalf("%d of %d SENDs signaled, want about %d (one per half queue)", sig, sends, calls/(depth/2))
	}
	if used := s.clientQP().SendQueueUsed(); used > depth/2+1 {
		t.Errorf("%d WRs still occupy the send queue after the calls", used)
	}
}

// Rule 2: a call is admitted only when the send queue has room for its
// whole compound (binds + SEND + LOCAL_INVs); otherwise it waits and is
// woken by the completions that free room.
func TestRuleCongestionWaitsForCompoundRoom(t *testing.T) {
	s := newStack(t, stackOpts{client: Config{SendQueue: 36, Slots: 64, MaxIO: 64 << 10, MaxSegment: 16 << 10}})
	fh, data := s.file("big", 64<<10)
	ctx := s.ctx(30 * time.Second)
	qp := s.clientQP()
	qp.HoldSendCompletions()
	done := make(chan []error, 1)
	go func() {
		done <- parallel(12, func(int) error {
			buf := make([]byte, len(data))
			r, err := s.c.Read(ctx, fh, 0, buf)
			if err == nil && (r.Count != len(data) || !bytes.Equal(buf, data)) {
				err = errors.New("wrong READ data")
			}
			return err
		})
	}()
	waitFor(t, "a congestion wait", func() bool { return s.tr.Counters().CongestionWaits > 0 })
	// Each READ is 4 binds + SEND + 4 LOCAL_INVs = 9 WRs: three fit.
	if used := qp.SendQueueUsed(); used > 36 {
		t.Fatalf("%d WRs in a 36-deep send queue", used)
	}
	qp.ReleaseSendCompletions()
	noErrors(t, <-done)
	c := s.tr.Counters()
	if c.LocalInvalidations == 0 || c.Disconnects != 0 {
		t.Fatalf("counters: %s", c)
	}
}

// Rule 3: the reply handler completes a call only after every window it
// exposed is invalid; a late write with the old rkey fails at the device
// and never changes the returned data — through remote invalidation (one
// rkey) and through local invalidation (several).
func TestRuleInvalidateBeforeComplete(t *testing.T) {
	for _, tc := range []struct {
		name    string
		segment int
		reads   int
		fabric  []sim.Option
	}{
		{"remote", 0, 1, nil},
		{"local", 16 << 10, 1, nil},
		// Per-I/O registration: the later READs land in registrations
		// made ahead (frwr.Registry.TakeReady), deregistered before the
		// READ returns as any other.
		{"registered-ahead", 0, 4, []sim.Option{sim.WithoutMemWindows()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStack(t, stackOpts{client: Config{MaxSegment: tc.segment}, fabric: tc.fabric, server: xprttest.Config{
				Misbehave: xprttest.Misbehavior{Select: func(ci xprttest.CallInfo) bool { return ci.Proc == 6 },
					LateWrite: true, LateWriteDelay: 200 * time.Millisecond}}})
			fh, data := s.file("f", 64<<10)
			ctx := s.ctx(30 * time.Second)
			for i := range tc.reads {
				buf := make([]byte, len(data))
				r, err := s.c.Read(ctx, fh, 0, buf)
				if err != nil {
					t.Fatal(err)
				}
				if r.Count != len(data) || !bytes.Equal(buf, data) {
					t.Fatal("READ returned wrong data")
				}
				waitFor(t, "the late write", func() bool { return s.srv.Stats().LateWrites > uint64(i) })
				waitFor(t, "the late write's outcome", func() bool {
					st := s.srv.Stats()
					return st.LateWritesFailed+st.LateWritesLanded > uint64(i)
				})
				if st := s.srv.Stats(); st.LateWritesLanded != 0 || st.LateWritesFailed == 0 {
					t.Fatalf("late write landed: %+v", st)
				}
				if !bytes.Equal(buf, data) {
					t.Fatal("the late write changed the returned data")
				}
			}
			if tc.segment != 0 && s.tr.Counters().LocalInvalidations == 0 {
				t.Fatal("no local invalidation")
			}
			if tc.fabric != nil && s.tr.Counters().ReadyRegistrations == 0 {
				t.Fatalf("no registration made ahead was used: %s", s.tr.Counters())
			}
		})
	}
}

// Rule 3: remote invalidation is honoured: a single-rkey reply invalidated
// by the server's Send With Invalidate needs no LOCAL_INV; without
// windows (per-I/O registration) the client does not offer it.
func TestRuleRemoteInvalidationHonoured(t *testing.T) {
	s := newStack(t, stackOpts{})
	fh, data := s.file("f", 100<<10)
	ctx := s.ctx(30 * time.Second)
	for i := 0; i < 20; i++ {
		buf := make([]byte, len(data))
		if _, err := s.c.Read(ctx, fh, 0, buf); err != nil || !bytes.Equal(buf, data) {
			t.Fatalf("READ %d: %v", i, err)
		}
	}
	c := s.tr.Counters()
	if c.RemoteInvalidations < 20 || c.LocalInvalidations != 0 {
		t.Fatalf("want 20 remote and no local invalidations: %s", c)
	}
	if st := s.srv.Stats(); st.SendWithInv < 20 {
		t.Fatalf("server used Send With Invalidate %d times", st.SendWithInv)
	}

	r := newStack(t, stackOpts{fabric: []sim.Option{sim.WithoutMemWindows()}})
	fh, data = r.file("f", 100<<10)
	buf := make([]byte, len(data))
	if _, err := r.c.Read(r.ctx(10*time.Second), fh, 0, buf); err != nil || !bytes.Equal(buf, data) {
		t.Fatalf("READ with per-I/O registration: %v", err)
	}
	if r.tr.RegistrationMode().String() != "register" || r.srv.Stats().SendWithInv != 0 || r.tr.Counters().Registrations == 0 {
		t.Fatalf("per-I/O registration: mode %v, send-with-inv %d, %s", r.tr.RegistrationMode(), r.srv.Stats().SendWithInv, r.tr.Counters())
	}
}

// Rule 4: a send buffer belongs to the device until its send completion,
// even when the reply arrived first.
func TestRuleSendBufferHeldUntilSendCompletion(t *testing.T) {
	s := newStack(t, stackOpts{client: Config{SendQueue: 64}})
	ctx := s.ctx(20 * time.Second)
	qp := s.clientQP()
	qp.HoldSendCompletions()
	for i := 0; i < 20; i++ {
		if err := s.c.Null(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c := s.tr.Counters()
	if c.ReplyBeforeSend < 20 {
		t.Fatalf("replies before send completion: %d", c.ReplyBeforeSend)
	}
	s.tr.mu.Lock()
	free := len(s.tr.cn.sendFree)
	s.tr.mu.Unlock()
	if free > 64-20 {
		t.Fatalf("%d send buffers free with 20 sends not completed", free)
	}
	qp.ReleaseSendCompletions()
	for i := 0; i < 200; i++ {
		if err := s.c.Null(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if a := s.fab.Anomalies(); a.SendBuffersReusedEarly != 0 {
		t.Fatalf("send buffers reused before their completion: %+v", a)
	}
}

// Rule 5: teardown moves the QP to error, posts sentinels and waits for
// their flush before freeing anything: closing with calls in flight leaves
// no resource and no window bound.
func TestRuleDrainWithSentinel(t *testing.T) {
	s := newStack(t, stackOpts{server: xprttest.Config{Misbehave: xprttest.Misbehavior{
		Select: func(ci xprttest.CallInfo) bool { return ci.Proc == 6 }, Delay: 500 * time.Millisecond}}})
	fh, _ := s.file("f", 64<<10)
	ctx := s.ctx(20 * time.Second)
	done := make(chan []error, 1)
	go func() {
		done <- parallel(8, func(int) error {
			_, err := s.c.Read(ctx, fh, 0, make([]byte, 64<<10))
			return err
		})
	}()
	waitFor(t, "READs in flight", func() bool { return s.srv.Stats().Calls >= 9 })
	qp := s.clientQP()
	if err := s.tr.Close(); err != nil {
		t.Fatal(err)
	}
	errs := <-done
	if len(errs) != 8 {
		t.Fatalf("%d of 8 calls failed on close", len(errs))
	}
	for _, err := range errs {
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("call failed with %v, want ErrClosed", err)
		}
	}
	if live := s.fab.Live(); live.QPs > 1 || live.MWs != 0 {
		t.Fatalf("after Close, live: %+v (at most the server's QP may remain)", live)
	}
	if a := s.fab.Anomalies(); a.QPClosedWithBoundWindows != 0 {
		t.Fatalf("a QP was closed with windows bound: %+v", a)
	}
	if qp.ClosedUndrained() {
		t.Fatal("the client's QP was closed with work requests not flushed or completions not reaped: no drain")
	}
}

// Rule 6: an error completion disconnects once; windows of unknown state
// are destroyed; calls are retransmitted only on the new connection.
func TestRuleErrorDisconnectsOnceRetransmitsOnNewConnection(t *testing.T) {
	// A call timeout far beyond the test's: the error completion, not a
	// timeout, must end the connection.
	s := newStack(t, stackOpts{client: Config{Timeout: 5 * time.Minute}})
	fh, data := s.file("f", 64<<10)
	ctx := s.ctx(30 * time.Second)
	s.clientQP().FailSend(3, verbs.StatusGeneralErr)
	noErrors(t, parallel(16, func(int) error {
		buf := make([]byte, len(data))
		r, err := s.c.Read(ctx, fh, 0, buf)
		if err == nil && (r.Count != len(data) || !bytes.Equal(buf, data)) {
			err = errors.New("wrong data after the reconnect")
		}
		return err
	}))
	c := s.tr.Counters()
	if c.Disconnects != 1 || c.Reconnects != 1 || c.Retransmits == 0 || c.ErrorCompletions == 0 {
		t.Fatalf("want one disconnect, one reconnect and retransmits: %s", c)
	}
	if st := s.srv.Stats(); st.Connections != 2 {
		t.Fatalf("server saw %d connections", st.Connections)
	}
}

// Rule 6: credits restart at 1 and the grant is clamped to [1, slots];
// never more calls outstanding than granted.
func TestRuleCreditsNeverExceeded(t *testing.T) {
	for _, tc := range []struct {
		name    string
		server  xprttest.Config
		slots   int
		wantMax uint64
	}{
		{"grant4", xprttest.Config{Credits: 4}, 64, 4},
		{"grant0", xprttest.Config{GrantZeroCredits: true}, 64, 1},
		{"grant100000", xprttest.Config{Credits: 100000}, 16, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.server.Misbehave = xprttest.Misbehavior{Delay: 2 * time.Millisecond}
			s := newStack(t, stackOpts{server: tc.server, client: Config{Slots: tc.slots}})
			ctx := s.ctx(60 * time.Second)
			noErrors(t, parallel(64, func(int) error { return s.c.Null(ctx) }))
			st := s.srv.Stats()
			if st.OverCredit != 0 {
				t.Fatalf("%d calls beyond the grant", st.OverCredit)
			}
			if st.MaxOutstanding > tc.wantMax {
				t.Fatalf("%d calls outstanding at once, grant clamps to %d", st.MaxOutstanding, tc.wantMax)
			}
			if c := s.tr.Counters(); c.Credits != tc.wantMax {
				t.Fatalf("clamped grant %d, want %d", c.Credits, tc.wantMax)
			}
		})
	}
}

// Rule 7: every receive completion gives its buffer back: malformed
// replies, unknown xids and bad versions included. With a receive queue of
// 24, 100 calls after them still work.
func TestRuleEveryReceiveReposted(t *testing.T) {
	bad := map[uint64]xprttest.Misbehavior{
		2: {TruncateHeader: 10},
		3: {UnknownXID: true, ThenReply: true},
		4: {ReplyVersion: 7},
		5: {UnknownXID: true, ThenReply: true},
	}
	s := newStack(t, stackOpts{client: Config{Slots: 16, Timeout: 300 * time.Millisecond}})
	s.srv.SetMisbehavior(xprttest.Misbehavior{Select: func(ci xprttest.CallInfo) bool {
		_, ok := bad[ci.Seq]
		return ok
	}})
	// One misbehavior per selected call: apply by sequence.
	var mu sync.Mutex
	applied := map[uint64]bool{}
	_ = applied
	_ = &mu
	ctx := s.ctx(60 * time.Second)
	for seq := uint64(2); seq <= 5; seq++ {
		m := bad[seq]
		m.OnCall = s.srv.Stats().Calls + 1
		s.srv.SetMisbehavior(m)
		if err := s.c.Null(ctx); err != nil {
			t.Fatalf("call with misbehavior %d: %v", seq, err)
		}
	}
	s.srv.SetMisbehavior(xprttest.Misbehavior{})
	for i := 0; i < 100; i++ {
		if err := s.c.Null(ctx); err != nil {
			t.Fatalf("call %d after the bad replies: %v", i, err)
		}
	}
	c := s.tr.Counters()
	if c.MalformedReplies < 2 || c.BadXIDs < 2 {
		t.Fatalf("want malformed and unknown-xid replies counted: %s", c)
	}
}

// Rule 8: rkeys are bumped on every bind and unpredictable; windows cover
// exactly the chunk's bytes with only the access its direction needs.
func TestRuleRkeysBumpedAndScoped(t *testing.T) {
	s := newStack(t, stackOpts{observe: true, client: Config{IOBuffers: 1}})
	fh, data := s.file("f", 8<<10)
	ctx := s.ctx(30 * time.Second)
	// With one I/O buffer and reads one at a time, windows are reused:
	// each bind must give a new key byte, not the next one.
	for i := 0; i < 64; i++ {
		buf := make([]byte, len(data))
		if _, err := s.c.Read(ctx, fh, 0, buf); err != nil {
			t.Fatal(err)
		}
	}
	perWindow := map[uint32][]uint32{}
	for _, h := range s.headers() {
		for _, w := range h.Writes {
			for _, seg := range w {
				if seg.Length != 8<<10 {
					t.Fatalf("write segment of %d bytes for an 8 KiB READ", seg.Length)
				}
				perWindow[seg.Handle>>8] = append(perWindow[seg.Handle>>8], seg.Handle)
			}
		}
	}
	sequential, reused := 0, 0
	for _, keys := range perWindow {
		for i := 1; i < len(keys); i++ {
			reused++
			if keys[i] == keys[i-1] {
				t.Fatalf("rkey %#x bound twice in a row", keys[i])
			}
			if uint8(keys[i]) == uint8(keys[i-1])+1 {
				sequential++
			}
		}
	}
	if reused < 32 {
		t.Fatalf("windows reused only %d times", reused)
	}
	if sequential > reused/4 {
		t.Fatalf("%d of %d rebinds just incremented the key byte", sequential, reused)
	}

	// Scope: while a READ is outstanding, its Write-chunk window refuses
	// an RDMA READ (it grants REMOTE_WRITE only) and bytes past its end.
	s.srv.SetMisbehavior(xprttest.Misbehavior{Select: func(ci xprttest.CallInfo) bool { return ci.Proc == 6 }, Delay: 300 * time.Millisecond})
	n0 := len(s.headers())
	errc := make(chan error, 1)
	go func() {
		buf := make([]byte, len(data))
		_, err := s.c.Read(ctx, fh, 0, buf)
		if err == nil && !bytes.Equal(buf, data) {
			err = errors.New("wrong data")
		}
		errc <- err
	}()
	waitFor(t, "the delayed READ", func() bool { return len(s.headers()) > n0 })
	seg := s.headers()[n0].Writes[0][0]
	srvQP := s.srv.QPs()[len(s.srv.QPs())-1]
	if _, st := srvQP.RogueRead(seg.Offset, seg.Handle, 16); st != verbs.StatusRemAccessErr {
		t.Fatalf("RDMA READ through a write-only window: %v", st)
	}
	// The access error broke the connection; the READ is sent again on a
	// new one and completes.
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if c := s.tr.Counters(); c.Reconnects == 0 {
		t.Fatalf("no reconnect after the access error: %s", c)
	}
}

// Rule 8 / rxe defect 3: no rkey is ever invalidated twice, through remote
// and local invalidation, errors, reconnects and late writes (the fabric
// panics on a double invalidation).
func TestRuleNeverInvalidateTwice(t *testing.T) {
	s := newStack(t, stackOpts{client: Config{MaxSegment: 32 << 10, Timeout: 2 * time.Second}, server: xprttest.Config{
		Misbehave: xprttest.Misbehavior{Select: func(ci xprttest.CallInfo) bool { return ci.Seq%7 == 0 }, LateWrite: true, LateWriteDelay: 200 * time.Millisecond}}})
	small, sdata := s.file("small", 16<<10)
	big, bdata := s.file("big", 128<<10)
	ctx := s.ctx(60 * time.Second)
	for round := 0; round < 3; round++ {
		if round == 1 {
			s.clientQP().FailSend(5, verbs.StatusGeneralErr)
		}
		noErrors(t, parallel(24, func(i int) error {
			fh, data := small, sdata
			if i%2 == 1 {
				fh, data = big, bdata
			}
			buf := make([]byte, len(data))
			r, err := s.c.Read(ctx, fh, 0, buf)
			if err == nil && (r.Count != len(data) || !bytes.Equal(buf, data)) {
				err = fmt.Errorf("round %d read %d: wrong data", round, i)
			}
			return err
		}))
	}
	if n := s.fab.DoubleInvalidations(); n != 0 {
		t.Fatalf("%d double invalidations", n)
	}
	c := s.tr.Counters()
	if c.RemoteInvalidations == 0 || c.LocalInvalidations == 0 || c.Reconnects == 0 {
		t.Fatalf("want remote and local invalidations and a reconnect: %s", c)
	}
}

var _ = nfs3.FileSync
var _ = rpcrdma.Version
var _ = context.Background
