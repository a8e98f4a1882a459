package sunrpc

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of TCPOptions.
const (
	DefaultMaxRecordSize     = 16 << 20
	DefaultReconnectDelay    = 50 * time.Millisecond
	DefaultMaxReconnectDelay = 5 * time.Second
)

// RecordTooLargeError reports a received record over TCPOptions.MaxRecordSize;
// the connection is dropped (the stream cannot be resynchronised without
// reading it).
type RecordTooLargeError struct{ Size, Max int }

func (e *RecordTooLargeError) Error() string {
	return fmt.Sprintf("sunrpc: record of at least %d bytes exceeds limit %d", e.Size, e.Max)
}

// TCPOptions configures a TCPTransport. The zero value is usable.
type TCPOptions struct {
	// MaxRecordSize is the largest reply record accepted (all fragments);
	// default DefaultMaxRecordSize.
	MaxRecordSize int
	// MaxFragmentSize splits sent records into fragments of at most this many
	// bytes; zero sends each record as one fragment.
	MaxFragmentSize int
	// Dial opens connections; nil dials from a reserved source port
	// (DialResvPort: below 1024, as the Linux client's default "resvport",
	// when the process may bind one; an ordinary port otherwise), reusing the
	// previous connection's port first when reconnecting, so that the
	// server's duplicate request cache recognises retransmissions.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// NoResvPort dials from an ordinary port (nfs(5) "noresvport") when
	// Dial is nil.
	NoResvPort bool
	// ReconnectDelay is the first pause before redialling after a lost
	// connection or a failed dial; it doubles up to MaxReconnectDelay and resets
	// when a reply arrives.
	ReconnectDelay    time.Duration
	MaxReconnectDelay time.Duration
	// Logger receives connection events; nil discards them.
	Logger *slog.Logger
}

// TCPStats counts a TCPTransport's unusual events.
type TCPStats struct {
	Connects         uint64 // connections established, the first included
	ConnectionLosses uint64 // connections that failed or were dropped
	Retransmits      uint64 // calls resent on a new connection
	UnmatchedReplies uint64 // replies whose XID no call awaits (late or duplicate)
	MalformedRecords uint64 // records too short or not an RPC reply
}

// TCPTransport is a Transport over one TCP connection with record marking
// (RFC 5531 §11). Any number of calls may be outstanding; replies are matched
// by XID and may arrive in any order. When the connection is lost, the next
// call (or any waiting call) redials, and waiting calls are retransmitted on
// the new connection with their XIDs unchanged.
//
// Writes are serialised by a mutex on the connection; one goroutine per
// connection reads. Cancelling a call's context while its record is being
// written drops the connection (a partial record cannot be taken back); the
// other waiting calls are retransmitted.
type TCPTransport struct {
	addr string
	opts TCPOptions
	log  *slog.Logger

	// ctx is cancelled by Close; dials and waits watch it.
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	conn    *tcpConn            // nil while disconnected
	dialing chan struct{}       // non-nil while a dial is under way; closed when it ends
	backoff time.Duration       // pause before the next dial
	pending map[uint32]*tcpCall // calls awaiting a reply, by XID
	closed  bool
	wg      sync.WaitGroup // reader goroutines

	lastPort atomic.Int32 // local port of the last connection (reserved-port dials)

	stats struct {
		connects, losses, retransmits, unmatched, malformed atomic.Uint64
	}
}

type tcpCall struct {
	ch chan *Reply // capacity 1: the reader never blocks
}

type tcpConn struct {
	c        net.Conn
	wmu      sync.Mutex // one record at a time
	dead     chan struct{}
	deadOnce sync.Once
}

// DialTCP connects to addr ("host:port") and returns the transport. The first
// dial is not retried: its error is returned.
func DialTCP(ctx context.Context, addr string, opts *TCPOptions) (*TCPTransport, error) {
	t := newTCPTransport(addr, opts)
	if _, err := t.connection(ctx, false); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

func newTCPTransport(addr string, opts *TCPOptions) *TCPTransport {
	t := &TCPTransport{addr: addr, pending: make(map[uint32]*tcpCall)}
	if opts != nil {
		t.opts = *opts
	}
	if t.opts.MaxRecordSize <= 0 {
		t.opts.MaxRecordSize = DefaultMaxRecordSize
	}
	if t.opts.MaxFragmentSize <= 0 || t.opts.MaxFragmentSize > maxFragmentLen {
		t.opts.MaxFragmentSize = maxFragmentLen
	}
	if t.opts.ReconnectDelay <= 0 {
		t.opts.ReconnectDelay = DefaultReconnectDelay
	}
	if t.opts.MaxReconnectDelay <= 0 {
		t.opts.MaxReconnectDelay = DefaultMaxReconnectDelay
	}
	if t.opts.Dial == nil {
		if t.opts.NoResvPort {
			var d net.Dialer
			t.opts.Dial = d.DialContext
		} else {
			t.opts.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := DialResvPort(ctx, network, addr, int(t.lastPort.Load()))
				if err == nil {
					t.lastPort.Store(int32(localPort(c)))
				}
				return c, err
			}
		}
	}
	t.log = t.opts.Logger
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	return t
}

// Addr returns the server address.
func (t *TCPTransport) Addr() string { return t.addr }

// Stats returns the transport's counters.
func (t *TCPTransport) Stats() TCPStats {
	return TCPStats{
		Connects:         t.stats.connects.Load(),
		ConnectionLosses: t.stats.losses.Load(),
		Retransmits:      t.stats.retransmits.Load(),
		UnmatchedReplies: t.stats.unmatched.Load(),
		MalformedRecords: t.stats.malformed.Load(),
	}
}

// RoundTrip sends req and waits for the reply with req.XID, until ctx is done or
// the transport is closed. A lost connection is redialled (with backoff, for as
// long as ctx allows) and req resent on it.
func (t *TCPTransport) RoundTrip(ctx context.Context, req *Request) (*Reply, error) {
	call := &tcpCall{ch: make(chan *Reply, 1)}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, ErrClosed
	}
	if _, dup := t.pending[req.XID]; dup {
		t.mu.Unlock()
		return nil, ErrXIDInUse
	}
	t.pending[req.XID] = call
	t.mu.Unlock()
	defer t.forget(req.XID, call)

	for sent := 0; ; sent++ {
		conn, err := t.connection(ctx, true)
		if err != nil {
			return nil, err
		}
		if sent > 0 {
			t.stats.retransmits.Add(1)
		}
		if broken, err := t.send(ctx, conn, req); err != nil {
			if broken {
				t.fail(conn, err)
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			continue
		}
		select {
		case rep := <-call.ch:
			return rep, nil
		case <-conn.dead:
			// The reply may have been delivered just before the loss.
			select {
			case rep := <-call.ch:
				return rep, nil
			default:
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.ctx.Done():
			return nil, ErrClosed
		}
	}
}

func (t *TCPTransport) forget(xid uint32, call *tcpCall) {
	t.mu.Lock()
	if t.pending[xid] == call {
		delete(t.pending, xid)
	}
	t.mu.Unlock()
}

// connection returns the live connection, dialling one if there is none. With
// retry, failed dials are repeated (after the backoff pause) until ctx is done.
func (t *TCPTransport) connection(ctx context.Context, retry bool) (*tcpConn, error) {
	for {
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return nil, ErrClosed
		}
		if t.conn != nil {
			c := t.conn
			t.mu.Unlock()
			return c, nil
		}
		if ch := t.dialing; ch != nil {
			t.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-t.ctx.Done():
				return nil, ErrClosed
			}
		}
		ch := make(chan struct{})
		t.dialing = ch
		pause := t.backoff
		t.mu.Unlock()

		c, err := t.dial(ctx, pause)

		t.mu.Lock()
		t.dialing = nil
		close(ch)
		var tc *tcpConn
		switch {
		case err != nil:
			t.bumpBackoffLocked()
		case t.closed:
			c.Close()
			err = ErrClosed
		default:
			tc = &tcpConn{c: c, dead: make(chan struct{})}
			t.conn = tc
			t.stats.connects.Add(1)
			t.wg.Add(1)
			go t.readLoop(tc)
		}
		t.mu.Unlock()
		if err == nil {
			t.log.Debug("rpc connection established", "addr", t.addr)
			return tc, nil
		}
		if !retry || ctx.Err() != nil || errors.Is(err, ErrClosed) {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		t.log.Warn("rpc dial failed", "addr", t.addr, "err", err)
	}
}

func (t *TCPTransport) bumpBackoffLocked() {
	t.backoff = min(max(t.opts.ReconnectDelay, 2*t.backoff), t.opts.MaxReconnectDelay)
}

// dial waits pause, then dials; both end early when ctx is done or the
// transport is closed.
func (t *TCPTransport) dial(ctx context.Context, pause time.Duration) (net.Conn, error) {
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(t.ctx, cancel)
	defer stop()
	if pause > 0 {
		timer := time.NewTimer(pause)
		select {
		case <-timer.C:
		case <-dctx.Done():
			timer.Stop()
			return nil, dctx.Err()
		}
	}
	return t.opts.Dial(dctx, "tcp", t.addr)
}

// fail marks conn dead and closes it; waiting calls retransmit on a new one.
func (t *TCPTransport) fail(conn *tcpConn, err error) {
	// Unpublish first, so that a call woken by conn.dead finds no dead
	// connection to resend on.
	t.mu.Lock()
	if t.conn == conn {
		t.conn = nil
		t.bumpBackoffLocked()
	}
	closed := t.closed
	t.mu.Unlock()
	first := false
	conn.deadOnce.Do(func() {
		first = true
		close(conn.dead)
		conn.c.Close()
	})
	if first && !closed {
		t.stats.losses.Add(1)
		t.log.Warn("rpc connection lost", "addr", t.addr, "err", err)
	}
}

// send writes req as one record. A ctx done mid-write aborts the write (by a
// past write deadline), which leaves the stream unusable: broken reports that
// the caller must fail the connection.
func (t *TCPTransport) send(ctx context.Context, conn *tcpConn, req *Request) (broken bool, err error) {
	bufs := frameRecord([][]byte{req.Head, req.Bulk, PadBytes(len(req.Bulk)), req.Tail}, t.opts.MaxFragmentSize)
	conn.wmu.Lock()
	defer conn.wmu.Unlock()
	if err := ctx.Err(); err != nil {
		return false, err // nothing written: the connection is intact
	}
	interrupted := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		conn.c.SetWriteDeadline(time.Unix(1, 0))
		close(interrupted)
	})
	_, err = bufs.WriteTo(conn.c)
	if !stop() {
		// The deadline was (or is being) set: clear it for the next writer.
		<-interrupted
		conn.c.SetWriteDeadline(time.Time{})
		if err == nil {
			return false, nil
		}
		return true, ctx.Err()
	}
	return err != nil, err
}

// readLoop reads reply records from conn and hands each to the call awaiting
// its XID, until the connection fails.
func (t *TCPTransport) readLoop(conn *tcpConn) {
	defer t.wg.Done()
	br := bufio.NewReaderSize(conn.c, 64<<10)
	for {
		rec, err := ReadRecord(br, t.opts.MaxRecordSize)
		if err != nil {
			t.fail(conn, err)
			return
		}
		if len(rec) < 8 || MsgType(binary.BigEndian.Uint32(rec[4:8])) != MsgReply {
			t.stats.malformed.Add(1)
			t.log.Warn("rpc record is not a reply; dropped", "addr", t.addr, "len", len(rec))
			continue
		}
		xid := binary.BigEndian.Uint32(rec[:4])
		t.mu.Lock()
		call := t.pending[xid]
		delete(t.pending, xid)
		t.backoff = 0
		t.mu.Unlock()
		if call == nil {
			t.stats.unmatched.Add(1)
			t.log.Debug("rpc reply matches no call; dropped", "addr", t.addr, "xid", xid)
			continue
		}
		call.ch <- NewReply(rec, nil, nil)
	}
}

// Close drops the connection, fails waiting calls with ErrClosed and waits for
// the transport's goroutines to end. It is idempotent.
func (t *TCPTransport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		t.wg.Wait()
		return nil
	}
	t.closed = true
	conn := t.conn
	t.conn = nil
	t.mu.Unlock()
	t.cancel()
	if conn != nil {
		t.fail(conn, ErrClosed)
	}
	t.wg.Wait()
	return nil
}
