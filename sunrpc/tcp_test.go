package sunrpc

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nfsrdma/nfsrdma/sunrpc/internal/accept"
)

// fakeServer is a tiny RPC server on 127.0.0.1 whose behaviour each test writes.
type fakeServer struct {
	ln    net.Listener
	conns accept.Conns
	count atomic.Int32
}

type fakeConn struct {
	net.Conn
	br *bufio.Reader
	n  int // 0 for the first connection accepted, 1 for the next...
}

func startFake(t *testing.T, serve func(c *fakeConn)) *fakeServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeServer{ln: ln}
	s.conns.Serve(countingListener{ln, &s.count}, func(c net.Conn) {
		fc := c.(*fakeConn)
		fc.br = bufio.NewReader(fc)
		serve(fc)
	})
	t.Cleanup(s.conns.Close)
	return s
}

// countingListener numbers the connections it accepts, in their order.
type countingListener struct {
	net.Listener
	count *atomic.Int32
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &fakeConn{Conn: c, n: int(l.count.Add(1)) - 1}, nil
}

func (s *fakeServer) addr() string { return s.ln.Addr().String() }

func (c *fakeConn) readCall() (CallHeader, []byte, error) {
	rec, err := ReadRecord(c.br, 1<<24)
	if err != nil {
		return CallHeader{}, nil, err
	}
	d := NewDecoder(rec)
	h, err := DecodeCall(d)
	if err != nil {
		return CallHeader{}, nil, err
	}
	return h, d.Rest(), nil
}

func (c *fakeConn) writeRecord(rec []byte, frag int) error {
	if frag <= 0 {
		frag = maxFragmentLen
	}
	bufs := frameRecord([][]byte{rec}, frag)
	_, err := bufs.WriteTo(c)
	return err
}

func successReply(xid uint32, results []byte) []byte {
	return append(AppendReply(nil, &ReplyHeader{XID: xid, Stat: MsgAccepted}), results...)
}

func echo(c *fakeConn) {
	for {
		h, args, err := c.readCall()
		if err != nil {
			return
		}
		if c.writeRecord(successReply(h.XID, args), 0) != nil {
			return
		}
	}
}

func newTestClient(t *testing.T, tr Transport) *Client {
	t.Helper()
	c, err := NewClient(tr, ClientConfig{Prog: 400000, Vers: 1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func dial(t *testing.T, addr string, opts *TCPOptions) *TCPTransport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if opts == nil {
		opts = &TCPOptions{ReconnectDelay: time.Millisecond}
	}
	tr, err := DialTCP(ctx, addr, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func callEcho(ctx context.Context, c *Client, v uint32) error {
	res, err := c.Call(ctx, 1, &Args{Head: AppendUint32(nil, v), MaxResults: 4})
	if err != nil {
		return err
	}
	defer res.Release()
	if got := res.Uint32(); got != v || res.Err() != nil {
		return fmt.Errorf("echo %d: got %d (%v)", v, got, res.Err())
	}
	return nil
}

// echoConcurrently makes n ECHO calls at once on c, each of its own value.
func echoConcurrently(t *testing.T, c *Client, n int) {
	t.Helper()
	ctx := testCtx(t)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() { errs <- callEcho(ctx, c, uint32(i)) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestTCPEcho(t *testing.T) {
	s := startFake(t, echo)
	c := newTestClient(t, dial(t, s.addr(), nil))
	echoConcurrently(t, c, 64)
}

func TestTCPBulkRequest(t *testing.T) {
	// Head/Bulk/Tail are sent as one message with Bulk's pad inserted.
	s := startFake(t, echo)
	c := newTestClient(t, dial(t, s.addr(), &TCPOptions{MaxFragmentSize: 3}))
	head := AppendUint32(AppendUint32(nil, 77), 5)
	tail := AppendUint32(nil, 88)
	res, err := c.Call(testCtx(t), 1, &Args{Head: head, Bulk: []byte("hello"), Tail: tail, MaxResults: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Release()
	if res.Uint32() != 77 || string(res.Bulk(10)) != "hello" || res.Uint32() != 88 || res.Len() != 0 || res.Err() != nil {
		t.Fatalf("bad echo (err %v)", res.Err())
	}
}

func TestTCPOutOfOrderAndFragmented(t *testing.T) {
	const n = 8
	s := startFake(t, func(c *fakeConn) {
		var xids []uint32
		for range n {
			h, _, err := c.readCall()
			if err != nil {
				return
			}
			xids = append(xids, h.XID)
		}
		for i := n - 1; i >= 0; i-- {
			results := AppendUint32(nil, xids[i])
			if c.writeRecord(successReply(xids[i], results), 1+i%5) != nil {
				return
			}
		}
	})
	xids := NewXIDSource()
	c, _ := NewClient(dial(t, s.addr(), nil), ClientConfig{Prog: 1, Vers: 1, XIDs: xids})
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			res, err := c.Call(ctx, 1, &Args{})
			if err != nil {
				t.Error(err)
				return
			}
			defer res.Release()
			if got := res.Uint32(); got != res.Header.XID {
				t.Errorf("reply for xid %#x carries %#x", res.Header.XID, got)
			}
		})
	}
	wg.Wait()
}

func TestTCPGarbageReplies(t *testing.T) {
	s := startFake(t, func(c *fakeConn) {
		for {
			h, args, err := c.readCall()
			if err != nil {
				return
			}
			// Noise first: a short record, a CALL, a reply for nobody.
			c.writeRecord([]byte{1, 2}, 0)
			c.writeRecord(AppendCall(nil, &CallHeader{XID: h.XID}), 0)
			c.writeRecord(successReply(h.XID+1000, nil), 0)
			if binary.BigEndian.Uint32(args) == 1 {
				// A reply for the caller whose header is cut short.
				c.writeRecord(successReply(h.XID, nil)[:14], 0)
				continue
			}
			c.writeRecord(successReply(h.XID, args), 0)
		}
	})
	tr := dial(t, s.addr(), nil)
	c := newTestClient(t, tr)
	ctx := testCtx(t)
	if err := callEcho(ctx, c, 7); err != nil {
		t.Fatal(err)
	}
	err := callEcho(ctx, c, 1)
	var ce *CallError
	if !errors.As(err, &ce) || !errors.Is(err, ErrTruncated) {
		t.Fatalf("malformed reply: err = %v", err)
	}
	st := tr.Stats()
	if st.MalformedRecords != 4 || st.UnmatchedReplies != 2 {
		t.Errorf("stats %+v", st)
	}
	if err := callEcho(ctx, c, 9); err != nil {
		t.Fatal(err)
	}
}

func TestTCPRejections(t *testing.T) {
	s := startFake(t, func(c *fakeConn) {
		for {
			h, _, err := c.readCall()
			if err != nil {
				return
			}
			rh := ReplyHeader{XID: h.XID}
			switch h.Proc {
			case 1:
				rh.Stat, rh.Reject, rh.Low, rh.High = MsgDenied, RPCMismatch, 3, 4
			case 2:
				rh.Stat, rh.Reject, rh.Auth = MsgDenied, AuthErr, AuthRejectedCred
			default:
				rh.Stat, rh.Accept = MsgAccepted, AcceptStat(h.Proc-3)
				rh.Low, rh.High = 1, 2
			}
			c.writeRecord(AppendReply(nil, &rh), 0)
		}
	})
	c := newTestClient(t, dial(t, s.addr(), nil))
	ctx := testCtx(t)
	check := func(proc uint32, ok func(error) bool) {
		t.Helper()
		res, err := c.Call(ctx, proc, &Args{})
		if err == nil {
			res.Release()
		}
		if !ok(err) {
			t.Errorf("proc %d: unexpected err %v", proc, err)
		}
	}
	check(1, func(err error) bool {
		var e *RPCMismatchError
		return errors.As(err, &e) && e.Low == 3 && e.High == 4
	})
	check(2, func(err error) bool {
		var e *AuthError
		return errors.As(err, &e) && e.Stat == AuthRejectedCred
	})
	check(3, func(err error) bool { return err == nil })
	check(4, func(err error) bool { return errors.Is(err, ErrProgUnavail) })
	check(5, func(err error) bool {
		var e *AcceptError
		return errors.As(err, &e) && e.Stat == ProgMismatch && e.Low == 1 && e.High == 2
	})
	check(6, func(err error) bool { return errors.Is(err, ErrProcUnavail) })
	check(7, func(err error) bool { return errors.Is(err, ErrGarbageArgs) })
	check(8, func(err error) bool { return errors.Is(err, ErrSystemErr) })
	check(9, func(err error) bool {
		var e *HeaderError
		return errors.As(err, &e)
	})
}

func TestTCPReconnectRetransmits(t *testing.T) {
	// The first connection swallows the call and drops; the second answers.
	var firstXID, secondXID atomic.Uint32
	s := startFake(t, func(c *fakeConn) {
		if c.n == 0 {
			h, _, err := c.readCall()
			if err == nil {
				firstXID.Store(h.XID)
			}
			return // closes the connection
		}
		h, args, err := c.readCall()
		if err != nil {
			return
		}
		secondXID.Store(h.XID)
		c.writeRecord(successReply(h.XID, args), 0)
		echo(c)
	})
	tr := dial(t, s.addr(), nil)
	c := newTestClient(t, tr)
	if err := callEcho(testCtx(t), c, 5); err != nil {
		t.Fatal(err)
	}
	if firstXID.Load() != secondXID.Load() || firstXID.Load() == 0 {
		t.Errorf("retransmission changed xid: %#x then %#x", firstXID.Load(), secondXID.Load())
	}
	st := tr.Stats()
	if st.Connects != 2 || st.ConnectionLosses != 1 || st.Retransmits != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestTCPRecordTooLarge(t *testing.T) {
	s := startFake(t, func(c *fakeConn) {
		h, _, err := c.readCall()
		if err != nil {
			return
		}
		if c.n == 0 {
			c.writeRecord(successReply(h.XID, make([]byte, 4096)), 0)
			c.br.ReadByte() // wait for the client to hang up
			return
		}
		c.writeRecord(successReply(h.XID, AppendUint32(nil, 3)), 0)
		echo(c)
	})
	tr := dial(t, s.addr(), &TCPOptions{MaxRecordSize: 1024, ReconnectDelay: time.Millisecond})
	c := newTestClient(t, tr)
	// The oversized reply drops the connection; the call is resent and answered.
	if err := callEcho(testCtx(t), c, 3); err != nil {
		t.Fatal(err)
	}
	if st := tr.Stats(); st.ConnectionLosses != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestTCPContextCancel(t *testing.T) {
	s := startFake(t, func(c *fakeConn) {
		for {
			h, args, err := c.readCall()
			if err != nil {
				return
			}
			if binary.BigEndian.Uint32(args) == 0 {
				continue // never answered
			}
			c.writeRecord(successReply(h.XID, args), 0)
		}
	})
	c := newTestClient(t, dial(t, s.addr(), nil))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := callEcho(ctx, c, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if err := callEcho(testCtx(t), c, 1); err != nil {
		t.Fatal(err)
	}
}

func TestTCPCloseNoLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	s := startFake(t, func(c *fakeConn) {
		for {
			if _, _, err := c.readCall(); err != nil {
				return
			}
		}
	})
	tr, err := DialTCP(testCtx(t), s.addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	c := newTestClient(t, tr)
	done := make(chan error, 4)
	for range 4 {
		go func() { done <- callEcho(context.Background(), c, 1) }()
	}
	time.Sleep(20 * time.Millisecond)
	tr.Close()
	for range 4 {
		if err := <-done; !errors.Is(err, ErrClosed) {
			t.Errorf("pending call: err = %v", err)
		}
	}
	if err := tr.Close(); err != nil {
		t.Error(err)
	}
	if err := callEcho(context.Background(), c, 1); !errors.Is(err, ErrClosed) {
		t.Errorf("after close: err = %v", err)
	}
	s.ln.Close()
	waitGoroutines(t, before+3) // the fake server's own goroutines end at cleanup
}

func waitGoroutines(t *testing.T, max int) {
	t.Helper()
	for range 100 {
		if runtime.NumGoroutine() <= max {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	buf := make([]byte, 1<<16)
	t.Errorf("goroutines: %d > %d\n%s", runtime.NumGoroutine(), max, buf[:runtime.Stack(buf, true)])
}

func TestDialTCPFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if _, err := DialTCP(testCtx(t), addr, nil); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("err = %v", err)
	}
}

// lossyTransport loses the first drops transmissions of every call.
type lossyTransport struct {
	mu    sync.Mutex
	drops int
	xids  []uint32
}

func (l *lossyTransport) RoundTrip(ctx context.Context, req *Request) (*Reply, error) {
	l.mu.Lock()
	l.xids = append(l.xids, req.XID)
	drop := len(l.xids) <= l.drops
	l.mu.Unlock()
	if drop {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return NewReply(successReply(req.XID, nil), nil, nil), nil
}

func (l *lossyTransport) Close() error { return nil }

func TestRetryPolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Soft: 1 try + 2 retransmissions, then ETIMEDOUT after 1+2+3 timeouts.
		lt := &lossyTransport{drops: 100}
		c, _ := NewClient(lt, ClientConfig{Prog: 1, Vers: 1, Retry: RetryPolicy{Timeout: time.Second, Retrans: 2}})
		start := time.Now()
		_, err := c.Call(context.Background(), 1, &Args{})
		var te *TimeoutError
		if !errors.As(err, &te) || te.Tries != 3 || !errors.Is(err, syscall.ETIMEDOUT) {
			t.Fatalf("soft: err = %v", err)
		}
		if el := time.Since(start); el != 6*time.Second {
			t.Errorf("soft: gave up after %v, want 6s (linear backoff)", el)
		}
		if len(lt.xids) != 3 || lt.xids[0] != lt.xids[1] || lt.xids[1] != lt.xids[2] {
			t.Errorf("retransmissions %x: want 3 with one xid", lt.xids)
		}

		// Hard: keeps going past Retrans and succeeds.
		lt = &lossyTransport{drops: 5}
		c, _ = NewClient(lt, ClientConfig{Prog: 1, Vers: 1, Retry: RetryPolicy{Timeout: time.Second, Retrans: 1, Hard: true, MaxTimeout: 2 * time.Second}})
		res, err := c.Call(context.Background(), 1, &Args{})
		if err != nil {
			t.Fatalf("hard: %v", err)
		}
		res.Release()
		if len(lt.xids) != 6 {
			t.Errorf("hard: %d transmissions, want 6", len(lt.xids))
		}

		// Hard: stops when the caller's context is done.
		lt = &lossyTransport{drops: 1 << 30}
		c, _ = NewClient(lt, ClientConfig{Prog: 1, Vers: 1, Retry: RetryPolicy{Timeout: time.Second, Hard: true}})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := c.Call(ctx, 1, &Args{}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("hard with deadline: err = %v", err)
		}
	})
}

func TestPortmapGetPort(t *testing.T) {
	s := startFake(t, func(c *fakeConn) {
		for {
			h, args, err := c.readCall()
			if err != nil {
				return
			}
			var res []byte
			switch h.Proc {
			case PmapProcGetPort:
				d := NewDecoder(args)
				m := DecodeMapping(d)
				if h.Prog != PortmapProg || h.Vers != PortmapVers || d.Err() != nil {
					return
				}
				var port uint32
				if m.Prog == 100005 && m.Vers == 3 && m.Prot == IPProtoTCP {
					port = 20048
				}
				res = AppendUint32(nil, port)
			case PmapProcDump:
				res = AppendBool(res, true)
				res = AppendMapping(res, &Mapping{Prog: 100005, Vers: 3, Prot: IPProtoTCP, Port: 20048})
				res = AppendBool(res, false)
			}
			c.writeRecord(successReply(h.XID, res), 0)
		}
	})
	ctx := testCtx(t)
	port, err := LookupPort(ctx, s.addr(), 100005, 3, nil)
	if err != nil || port != 20048 {
		t.Fatalf("GETPORT: %d, %v", port, err)
	}
	_, err = LookupPort(ctx, s.addr(), 100003, 3, nil)
	var nr *NotRegisteredError
	if !errors.As(err, &nr) || nr.Prog != 100003 {
		t.Fatalf("unregistered: err = %v", err)
	}
	pm := NewPortmapper(dial(t, s.addr(), nil), nil)
	ms, err := pm.Dump(ctx)
	if err != nil || len(ms) != 1 || ms[0].Port != 20048 {
		t.Fatalf("DUMP: %v %v", ms, err)
	}
}

func TestTCPCancelDuringWrite(t *testing.T) {
	// The first connection never reads, so a large call blocks in write; its
	// deadline aborts the write and drops the connection, and later calls go
	// out on a new one.
	stop := make(chan struct{})
	s := startFake(t, func(c *fakeConn) {
		if c.n == 0 {
			<-stop
			return
		}
		echo(c)
	})
	t.Cleanup(func() { close(stop) }) // runs before the server's cleanup
	tr := dial(t, s.addr(), nil)
	c := newTestClient(t, tr)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := c.Call(ctx, 1, &Args{Head: AppendUint32(nil, 1), Bulk: make([]byte, 64<<20)})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if err := callEcho(testCtx(t), c, 4); err != nil {
		t.Fatal(err)
	}
	if st := tr.Stats(); st.ConnectionLosses != 1 || st.Connects != 2 {
		t.Errorf("stats %+v", st)
	}
}
