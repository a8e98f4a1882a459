package sunrpctest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// Server is the far end of a transport under test, serving a Handler.
type Server interface {
	// WaitIdle waits until every call the server has received so far has
	// been served: its reply sent (and, over RDMA, its data placed), or
	// dropped.
	WaitIdle(ctx context.Context) error
	// Disconnect drops the server's live connections.
	Disconnect()
}

// Target is one transport connected to one server that runs the suite's
// Handler.
type Target struct {
	Transport sunrpc.Transport
	Server    Server
	// MaxBulk is the largest bulk item (Request.Bulk, Request.ReplyBulk)
	// the transport takes.
	MaxBulk int
}

// NewTarget makes a fresh Target whose server serves h. It registers its
// own cleanups (closing the transport and the server).
type NewTarget func(t *testing.T, h *Handler) Target

// prompt bounds how long a call may take to return once its outcome is
// decided (a cancel, a close), and every wait on the server.
const prompt = 5 * time.Second

// RunTransportSuite runs the transport conformance suite: one subtest per
// property of the sunrpc.Transport contract, each on a fresh Target.
func RunTransportSuite(t *testing.T, newTarget NewTarget) {
	for _, tc := range []struct {
		name string
		f    func(*testing.T, *env)
	}{
		{"Null", testNull},
		{"Echo", testEcho},
		{"Read", testRead},
		{"Write", testWrite},
		{"LongCallWithBulk", testLongCallWithBulk},
		{"Concurrent", testConcurrent},
		{"CloseIdempotent", testCloseIdempotent},
		{"CloseFailsOutstanding", testCloseFailsOutstanding},
		{"CancelBeforeReply", testCancelBeforeReply},
		{"TimeoutBeforeReply", testTimeoutBeforeReply},
		{"CanceledBeforeCall", testCanceledBeforeCall},
		{"DroppedCallTimesOut", testDroppedCallTimesOut},
		{"XIDInUse", testXIDInUse},
		{"RetrySameXIDLateFirstReply", testRetrySameXIDLateFirstReply},
		{"RetrySameXIDFirstNeverAnswered", testRetrySameXIDFirstNeverAnswered},
		{"GiveUpManyThenWork", testGiveUpManyThenWork},
		{"ServerDisconnect", testServerDisconnect},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHandler()
			tg := newTarget(t, h)
			// Registered after the target's cleanups, so it runs first:
			// held calls end before the server waits for them.
			t.Cleanup(h.Close)
			e := &env{t: t, h: h, Target: tg, xid: rand.Uint32() &^ 0xff}
			tc.f(t, e)
		})
	}
}

type env struct {
	Target
	t   *testing.T
	h   *Handler
	mu  sync.Mutex
	xid uint32
	tag uint32
}

func (e *env) nextXID() uint32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.xid++
	return e.xid
}

func (e *env) nextTag() uint32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.tag++
	return e.tag
}

func (e *env) ctx(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	e.t.Cleanup(cancel)
	return ctx
}

// roundTrip is Transport.RoundTrip, with a panic turned into an error.
func (e *env) roundTrip(ctx context.Context, req *sunrpc.Request) (rep *sunrpc.Reply, err error) {
	defer func() {
		if p := recover(); p != nil {
			rep, err = nil, fmt.Errorf("RoundTrip panicked: %v", p)
		}
	}()
	return e.Transport.RoundTrip(ctx, req)
}

// async runs a RoundTrip on its own goroutine.
func (e *env) async(ctx context.Context, req *sunrpc.Request) <-chan result {
	ch := make(chan result, 1)
	go func() {
		rep, err := e.roundTrip(ctx, req)
		ch <- result{rep, err, time.Now()}
	}()
	return ch
}

type result struct {
	rep *sunrpc.Reply
	err error
	at  time.Time
}

// await waits (at most prompt) for an async RoundTrip.
func (e *env) await(ch <-chan result, what string) result {
	e.t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(prompt):
		e.t.Fatalf("%s: RoundTrip did not return within %v", what, prompt)
		return result{}
	}
}

func (e *env) check(err error, format string, args ...any) {
	e.t.Helper()
	if err != nil {
		e.t.Fatalf("%s: %v", fmt.Sprintf(format, args...), err)
	}
}

// read does a READ of n bytes of seed into a buffer of its own and checks it.
func (e *env) read(ctx context.Context, seed uint32, n int) error {
	xid := e.nextXID()
	buf := make([]byte, n)
	rep, err := e.roundTrip(ctx, ReadRequest(xid, Control{Tag: e.nextTag()}, seed, n, buf))
	if err != nil {
		return fmt.Errorf("READ of %d bytes: %w", n, err)
	}
	defer rep.Release()
	return CheckRead(rep, xid, seed, n)
}

func (e *env) write(ctx context.Context, pad int, seed uint32, n int) error {
	xid := e.nextXID()
	tail := xid ^ 0xabcdef
	rep, err := e.roundTrip(ctx, WriteRequest(xid, Control{Tag: e.nextTag()}, pad, seed, Pattern(seed, n), tail))
	if err != nil {
		return fmt.Errorf("WRITE of %d bytes (%d bytes of padding before): %w", n, pad, err)
	}
	defer rep.Release()
	return CheckWrite(rep, xid, n, tail)
}

func (e *env) echo(ctx context.Context, data []byte) error {
	xid := e.nextXID()
	rep, err := e.roundTrip(ctx, EchoRequest(xid, Control{Tag: e.nextTag()}, data))
	if err != nil {
		return fmt.Errorf("ECHO of %d bytes: %w", len(data), err)
	}
	defer rep.Release()
	return CheckEcho(rep, xid, data)
}

func (e *env) null(ctx context.Context) error {
	xid := e.nextXID()
	rep, err := e.roundTrip(ctx, NullRequest(xid))
	if err != nil {
		return fmt.Errorf("NULL: %w", err)
	}
	defer rep.Release()
	return CheckNull(rep, xid)
}

// sizes are bulk sizes up to max: small, around common inline sizes, odd
// (XDR padding), and max.
func sizes(max int) []int {
	var out []int
	for _, n := range []int{1, 3, 1024, 4093, 4096, 4099, 16 << 10, 64<<10 - 1, 64 << 10, max - 1, max} {
		if n >= 1 && n <= max && (len(out) == 0 || out[len(out)-1] < n) {
			out = append(out, n)
		}
	}
	return out
}

func testNull(t *testing.T, e *env) {
	ctx := e.ctx(30 * time.Second)
	for range 10 {
		e.check(e.null(ctx), "NULL")
	}
}

func testEcho(t *testing.T, e *env) {
	ctx := e.ctx(30 * time.Second)
	for _, n := range []int{0, 1, 100, 3000, 5000, 20000, 100000} {
		if n > e.MaxBulk {
			continue
		}
		e.check(e.echo(ctx, Pattern(uint32(n), n)), "ECHO")
	}
}

func testRead(t *testing.T, e *env) {
	ctx := e.ctx(60 * time.Second)
	for _, n := range sizes(e.MaxBulk) {
		e.check(e.read(ctx, uint32(n)+1, n), "READ")
	}
	// The caller's buffer may be longer than the data.
	xid := e.nextXID()
	buf := bytes.Repeat([]byte{0x5a}, 8192)
	rep, err := e.roundTrip(ctx, ReadRequest(xid, Control{Tag: e.nextTag()}, 77, 1000, buf))
	e.check(err, "short READ")
	e.check(CheckRead(rep, xid, 77, 1000), "short READ")
	rep.Release()
}

func testWrite(t *testing.T, e *env) {
	ctx := e.ctx(60 * time.Second)
	for _, n := range sizes(e.MaxBulk) {
		e.check(e.write(ctx, 0, uint32(n)+3, n), "WRITE")
	}
}

// A call whose header is large (a long call, sent whole by RDMA in a
// position-zero Read chunk) with a large bulk item too.
func testLongCallWithBulk(t *testing.T, e *env) {
	ctx := e.ctx(60 * time.Second)
	for _, n := range []int{64<<10 - 1, 64 << 10, e.MaxBulk - 1, e.MaxBulk} {
		if n < 1 || n > e.MaxBulk {
			continue
		}
		e.check(e.write(ctx, 8192, uint32(n), n), "long WRITE")
	}
}

func testConcurrent(t *testing.T, e *env) {
	ctx := e.ctx(120 * time.Second)
	const workers, each = 16, 24
	maxN := min(e.MaxBulk, 128<<10)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range each {
				var err error
				seed := uint32(w*1000 + i)
				switch i % 4 {
				case 0:
					err = e.read(ctx, seed, 1+r.IntN(maxN))
				case 1:
					err = e.write(ctx, 0, seed, 1+r.IntN(maxN))
				case 2:
					err = e.echo(ctx, Pattern(seed, r.IntN(6000)))
				default:
					err = e.null(ctx)
				}
				if err != nil {
					errs <- fmt.Errorf("worker %d call %d: %w", w, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func testCloseIdempotent(t *testing.T, e *env) {
	e.check(e.null(e.ctx(10*time.Second)), "NULL")
	if err := e.Transport.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := e.Transport.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	_, err := e.roundTrip(e.ctx(prompt), NullRequest(e.nextXID()))
	if !errors.Is(err, sunrpc.ErrClosed) {
		t.Fatalf("RoundTrip after Close: %v; want an error matching sunrpc.ErrClosed", err)
	}
}

func testCloseFailsOutstanding(t *testing.T, e *env) {
	ctx := e.ctx(30 * time.Second)
	tag := e.nextTag()
	done := e.async(ctx, ReadRequest(e.nextXID(), Control{Tag: tag, Action: Hold}, 1, 8192, make([]byte, 8192)))
	e.check(e.h.WaitArrival(ctx, tag, 1), "held READ")
	closed := make(chan error, 1)
	go func() { closed <- e.Transport.Close() }()
	r := e.await(done, "outstanding READ at Close")
	if !errors.Is(r.err, sunrpc.ErrClosed) {
		t.Errorf("outstanding call ended with %v at Close; want an error matching sunrpc.ErrClosed", r.err)
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(prompt):
		t.Fatalf("Close did not return within %v with a call outstanding", prompt)
	}
}

// giveUp starts a held READ of n bytes into a buffer filled with 0x5a,
// ends it with cancel (or its deadline) once the server has it, and checks
// RoundTrip returns promptly with want. Then the server answers it late;
// nothing may touch the buffer after RoundTrip returned.
func (e *env) giveUp(ctx context.Context, cancel context.CancelFunc, want error, n int) {
	t := e.t
	t.Helper()
	tag := e.nextTag()
	xid := e.nextXID()
	buf := bytes.Repeat([]byte{0x5a}, min(n, e.MaxBulk))
	done := e.async(ctx, ReadRequest(xid, Control{Tag: tag, Action: Hold}, 9, len(buf), buf))
	wctx := e.ctx(prompt)
	e.check(e.h.WaitArrival(wctx, tag, 1), "held READ")
	start := time.Now()
	if cancel != nil {
		cancel()
	}
	r := e.await(done, "given-up READ")
	if !errors.Is(r.err, want) {
		t.Fatalf("given-up call ended with %v; want %v", r.err, want)
	}
	if r.rep != nil {
		t.Fatalf("given-up call returned a reply too")
	}
	if cancel != nil && r.at.Sub(start) > 2*time.Second {
		t.Errorf("RoundTrip took %v to return after the cancel", r.at.Sub(start))
	}
	// The late reply: the server answers, its data goes wherever the
	// transport lets it.
	e.h.Release(tag)
	e.check(e.Server.WaitIdle(wctx), "server idle after the late reply")
	e.check(e.null(wctx), "NULL after the late reply")
	for i := range 5 {
		if j := bytes.IndexFunc(buf, func(r rune) bool { return r != 0x5a }); j >= 0 || !bytes.Equal(buf, bytes.Repeat([]byte{0x5a}, len(buf))) {
			t.Fatalf("the caller's ReplyBulk changed after RoundTrip returned (check %d): %d of %d bytes differ",
				i, len(buf)-bytes.Count(buf, []byte{0x5a}), len(buf))
		}
		time.Sleep(10 * time.Millisecond) // a window for a late copy to show
	}
	// The transport still works.
	e.check(e.read(wctx, 3, 4096), "READ after the given-up call")
}

// giveUpSizes are READ sizes for the give-up tests: one whose result
// comes inline (RDMA: no window) and one in a Write chunk.
var giveUpSizes = []int{100, 64 << 10}

func testCancelBeforeReply(t *testing.T, e *env) {
	for _, n := range giveUpSizes {
		ctx, cancel := context.WithCancel(context.Background())
		e.giveUp(ctx, cancel, context.Canceled, n)
		cancel()
	}
}

func testTimeoutBeforeReply(t *testing.T, e *env) {
	for _, n := range giveUpSizes {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		e.giveUp(ctx, nil, context.DeadlineExceeded, n)
		cancel()
	}
}

func testCanceledBeforeCall(t *testing.T, e *env) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := e.roundTrip(ctx, NullRequest(e.nextXID()))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("RoundTrip with a canceled context: %v", err)
	}
	e.check(e.null(e.ctx(prompt)), "NULL after")
}

func testDroppedCallTimesOut(t *testing.T, e *env) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	tag := e.nextTag()
	_, err := e.roundTrip(ctx, ReadRequest(e.nextXID(), Control{Tag: tag, Action: Drop}, 1, 4096, make([]byte, 4096)))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("dropped call: %v", err)
	}
	if n := e.h.Arrivals(tag); n < 1 {
		t.Fatalf("the server never saw the dropped call")
	}
	e.check(e.read(e.ctx(prompt), 2, 4096), "READ after the dropped call")
}

func testXIDInUse(t *testing.T, e *env) {
	ctx := e.ctx(30 * time.Second)
	tag := e.nextTag()
	xid := e.nextXID()
	buf := make([]byte, 4096)
	done := e.async(ctx, ReadRequest(xid, Control{Tag: tag, Action: Hold}, 5, 4096, buf))
	e.check(e.h.WaitArrival(ctx, tag, 1), "held READ")
	_, err := e.roundTrip(e.ctx(prompt), NullRequest(xid))
	if !errors.Is(err, sunrpc.ErrXIDInUse) {
		t.Errorf("a second call with an outstanding xid: %v; want sunrpc.ErrXIDInUse", err)
	}
	e.h.Release(tag)
	r := e.await(done, "held READ")
	e.check(r.err, "held READ")
	e.check(CheckRead(r.rep, xid, 5, 4096), "held READ")
	r.rep.Release()
}

// fillPools runs READs of other data, so that buffers a transport pools
// hold bytes that are not the next call's.
func (e *env) fillPools(ctx context.Context) {
	for i := range 8 {
		e.check(e.read(ctx, 1000+uint32(i), min(e.MaxBulk, 64<<10)), "READ")
	}
}

// A retry with the same XID (what a soft mount's retry policy sends after
// a timeout) while the first attempt's reply is still to come: the first
// reply arrives while the retry is outstanding, then the retry's own. The
// retry must return the right data, never another call's stale bytes.
func testRetrySameXIDLateFirstReply(t *testing.T, e *env) {
	for _, n := range giveUpSizes {
		e.retrySameXIDLateFirstReply(min(n, e.MaxBulk))
	}
}

func (e *env) retrySameXIDLateFirstReply(n int) {
	t := e.t
	ctx := e.ctx(60 * time.Second)
	e.fillPools(ctx)
	tag, xid := e.nextTag(), e.nextXID()
	const seed = 4242
	c1, cancel1 := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel1()
	buf1 := make([]byte, n)
	_, err := e.roundTrip(c1, ReadRequest(xid, Control{Tag: tag, Action: Hold}, seed, n, buf1))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first attempt: %v", err)
	}
	e.check(e.h.WaitArrival(ctx, tag, 1), "first attempt at the server")
	buf2 := make([]byte, n)
	done := e.async(ctx, ReadRequest(xid, Control{Tag: tag, Action: Hold}, seed, n, buf2))
	e.check(e.h.WaitArrival(ctx, tag, 2), "retry at the server")
	// The first attempt's reply arrives now, while the retry waits.
	e.h.ReleaseArrival(tag, 1)
	e.check(e.h.WaitServed(ctx, tag, 1), "first attempt served")
	// No call can serve as a barrier here: a transport that reconnected
	// for the retry has a credit of one, which the held retry holds.
	var r result
	select {
	case r = <-done:
		// Completed by the first attempt's reply: acceptable only with
		// the right data.
	case <-time.After(100 * time.Millisecond):
		// The retry's own reply (or its retransmission's, should the
		// transport have reconnected).
		e.h.Release(tag)
		r = e.await(done, "retry")
	}
	e.check(r.err, "retry")
	if err := CheckRead(r.rep, xid, seed, n); err != nil {
		t.Fatalf("retry with the same xid returned wrong data: %v", err)
	}
	r.rep.Release()
	e.h.Release(tag)
	e.check(e.Server.WaitIdle(ctx), "server idle")
	e.check(e.read(ctx, 7, n), "READ after the retry")
}

// A retry with the same XID whose first attempt is never answered.
func testRetrySameXIDFirstNeverAnswered(t *testing.T, e *env) {
	for _, n := range giveUpSizes {
		e.retrySameXIDFirstNeverAnswered(min(n, e.MaxBulk))
	}
}

func (e *env) retrySameXIDFirstNeverAnswered(n int) {
	t := e.t
	ctx := e.ctx(60 * time.Second)
	e.fillPools(ctx)
	tag, xid := e.nextTag(), e.nextXID()
	const seed = 99
	c1, cancel1 := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel1()
	_, err := e.roundTrip(c1, ReadRequest(xid, Control{Tag: tag, Action: Hold}, seed, n, make([]byte, n)))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first attempt: %v", err)
	}
	e.h.ReleaseArrival(tag, 2)
	buf := make([]byte, n)
	rep, err := e.roundTrip(ctx, ReadRequest(xid, Control{Tag: tag, Action: Hold}, seed, n, buf))
	e.check(err, "retry")
	e.check(CheckRead(rep, xid, seed, n), "retry")
	rep.Release()
}

// Many callers give up (cancel, deadline) on held and on not-yet-sent
// calls; afterwards every resource they held is back: as many calls as
// before run at once, and all complete.
func testGiveUpManyThenWork(t *testing.T, e *env) {
	ctx := e.ctx(60 * time.Second)
	e.check(e.null(ctx), "NULL") // a credit grant beyond the first call's
	calls0 := e.h.Calls()
	const n = 48
	var tags []uint32
	var dones []<-chan result
	var cancels []context.CancelFunc
	for i := range n {
		c, cancel := context.WithCancel(ctx)
		cancels = append(cancels, cancel)
		tag := e.nextTag()
		tags = append(tags, tag)
		size := 4096 << (i % 5)
		dones = append(dones, e.async(c, ReadRequest(e.nextXID(), Control{Tag: tag, Action: Hold}, uint32(i), min(size, e.MaxBulk), make([]byte, min(size, e.MaxBulk)))))
	}
	e.check(e.h.WaitCalls(ctx, calls0+1), "a held call at the server")
	for i, c := range cancels {
		c()
		r := e.await(dones[i], "canceled call")
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("canceled call %d: %v", i, r.err)
		}
	}
	for _, tag := range tags {
		e.h.Release(tag)
	}
	e.check(e.Server.WaitIdle(ctx), "server idle")
	errs := make(chan error, 32)
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- e.read(ctx, uint32(500+i), min(e.MaxBulk, 32<<10))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// The server drops the connection while a call waits; the transport
// reconnects and sends the call again; its reply is right.
func testServerDisconnect(t *testing.T, e *env) {
	ctx := e.ctx(60 * time.Second)
	e.check(e.null(ctx), "NULL")
	tag, xid := e.nextTag(), e.nextXID()
	n := min(e.MaxBulk, 64<<10)
	done := e.async(ctx, ReadRequest(xid, Control{Tag: tag, Action: Hold}, 31, n, make([]byte, n)))
	e.check(e.h.WaitArrival(ctx, tag, 1), "held READ")
	e.Server.Disconnect()
	e.h.Release(tag)
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the call did not complete after the server's disconnect")
	}
	e.check(r.err, "READ across a disconnect")
	e.check(CheckRead(r.rep, xid, 31, n), "READ across a disconnect")
	r.rep.Release()
	e.check(e.read(ctx, 32, n), "READ on the new connection")
}
