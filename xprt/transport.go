// Package xprt is the RPC-over-RDMA version 1 client transport (RFC 8166,
// RFC 8797; NFS binding RFC 8267). It implements sunrpc.Transport.
//
// One call's path: plan the chunks (package chunks), copy the bulk item
// into a registered I/O buffer and bind a memory window per chunk segment
// (package frwr), admit the whole compound through the congestion gate and
// the credit limit (package flowctl), post BIND…BIND,SEND as one chain. The
// reply handler decodes the transport header, matches the xid, clamps the
// credit grant, reposts the receive, honours the server's remote
// invalidation, locally invalidates the rest and waits for those
// completions, syncs, and only then completes the call (DESIGN.md rules
// 1–8).
package xprt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/nfsrdma/nfsrdma/frwr"
	"github.com/nfsrdma/nfsrdma/rpcrdma"
	"github.com/nfsrdma/nfsrdma/sunrpc"
	"github.com/nfsrdma/nfsrdma/verbs"
)

// Transport is an RPC-over-RDMA client connection to one server, with
// reconnection. It is safe for concurrent use.
type Transport struct {
	cfg Config
	log *slog.Logger
	ctr counters

	mu       sync.Mutex
	closed   bool
	cn       *conn         // nil while reconnecting
	connUp   chan struct{} // closed when cn is set or the transport closes
	gen      uint64
	pd       verbs.PD
	devName  string
	reg      *frwr.Registry
	calls    map[uint32]*call
	orphans  map[*call]struct{} // abandoned calls whose xid was reused
	borrowed map[*byte]*frwr.Buffer
	lastErr  error
	bgN      int        // background teardowns/reconnects running (mu)
	bgIdle   *sync.Cond // signalled when bgN drops to 0
	closeCh  chan struct{}
	regCtrs0 frwr.Counters
}

var _ sunrpc.Transport = (*Transport)(nil)

// Dial connects to cfg.Addr. A connection that cannot be made is an error
// here; later losses are repaired by reconnecting in the background.
func Dial(ctx context.Context, cfg Config) (*Transport, error) {
	if cfg.Fabric == nil {
		return nil, errors.New("xprt: Config.Fabric is nil")
	}
	if !cfg.Addr.IsValid() {
		return nil, errors.New("xprt: Config.Addr is not set")
	}
	cfg = cfg.withDefaults()
	if cfg.Inline < 1024 || cfg.Inline > rpcrdma.MaxInlineSize {
		return nil, fmt.Errorf("xprt: inline size %d out of range [1024, %d]", cfg.Inline, rpcrdma.MaxInlineSize)
	}
	if cfg.SendQueue < 2*maxChain {
		return nil, fmt.Errorf("xprt: send queue of %d WRs is below the minimum %d", cfg.SendQueue, 2*maxChain)
	}
	t := &Transport{cfg: cfg, log: cfg.Logger, calls: make(map[uint32]*call), orphans: make(map[*call]struct{}), borrowed: make(map[*byte]*frwr.Buffer), connUp: make(chan struct{}), closeCh: make(chan struct{})}
	t.gen = 1
	t.bgIdle = sync.NewCond(&t.mu)
	c, err := t.dial(ctx, t.gen)
	if err != nil {
		t.releaseRegistry()
		return nil, &ConnectError{Addr: cfg.Addr.String(), Err: err}
	}
	t.cn = c
	close(t.connUp)
	t.log.Info("connected", "addr", cfg.Addr, "inline_send", c.inlineSend, "inline_recv", c.inlineRecv, "registration", t.reg.Mode())
	return t, nil
}

// ensureRegistry creates the PD and the registry on the first connection's
// device; later connections must reach the server through the same device.
func (t *Transport) ensureRegistry(dev verbs.Device) error {
	if t.pd != nil {
		if dev.Name() != t.devName {
			return fmt.Errorf("xprt: the route to %s moved from device %s to %s", t.cfg.Addr, t.devName, dev.Name())
		}
		return nil
	}
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	bufSize := t.cfg.MaxIO + 4096
	reg, err := frwr.New(frwr.Config{PD: pd, Attr: dev.Attr(), Mode: t.cfg.Registration, BufferSize: bufSize,
		Buffers: t.cfg.IOBuffers, Windows: 4 * t.cfg.IOBuffers})
	if err != nil {
		pd.Close()
		return err
	}
	t.pd, t.reg, t.devName = pd, reg, dev.Name()
	return nil
}

func (t *Transport) releaseRegistry() {
	if t.reg != nil {
		t.reg.Close()
		t.reg = nil
	}
	if t.pd != nil {
		t.pd.Close()
		t.pd = nil
	}
}

// Counters returns a snapshot of the transport's counters.
func (t *Transport) Counters() Counters {
	c := Counters{
		Calls: t.ctr.calls.Load(), Sends: t.ctr.sends.Load(), SignaledSends: t.ctr.signaled.Load(), Receives: t.ctr.receives.Load(), BadXIDs: t.ctr.badXIDs.Load(),
		MalformedReplies: t.ctr.malformed.Load(), ReadChunks: t.ctr.readChunks.Load(), PositionZero: t.ctr.pos0.Load(),
		WriteChunks: t.ctr.writeChunks.Load(), ReplyChunks: t.ctr.replyChunks.Load(), PullUps: t.ctr.pullUps.Load(),
		PullUpBytes: t.ctr.pullUpBytes.Load(), CongestionWaits: t.ctr.congestionWaits.Load(), CreditWaits: t.ctr.creditWaits.Load(),
		ReplyBeforeSend: t.ctr.replyBeforeSend.Load(), Reconnects: t.ctr.reconnects.Load(), Retransmits: t.ctr.retransmits.Load(),
		Timeouts: t.ctr.timeouts.Load(), RDMAErrors: t.ctr.rdmaErrors.Load(), ErrorCompletions: t.ctr.errorCompletions.Load(),
		Disconnects: t.ctr.disconnects.Load(), Credits: t.ctr.credits.Load(), MaxOutstanding: t.ctr.maxOut.Load(), ZeroCopyReads: t.ctr.zeroCopy.Load(), ZeroCopyWrites: t.ctr.zeroCopyWrites.Load(), BusyPolls: t.ctr.busyPolls.Load(), BusyPollHits: t.ctr.busyPollHits.Load(),
	}
	t.mu.Lock()
	reg := t.reg
	t.mu.Unlock()
	if reg != nil {
		rc := reg.Counters()
		c.Binds, c.LocalInvalidations, c.RemoteInvalidations = rc.Binds, rc.LocalInvalidations, rc.RemoteInvalidations
		c.WindowsReplaced, c.Registrations = rc.WindowsReplaced, rc.Registrations
	}
	return c
}

// RegistrationMode reports whether the transport registers with memory
// windows or per I/O.
func (t *Transport) RegistrationMode() frwr.Mode {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.reg == nil {
		return frwr.ModeAuto
	}
	return t.reg.Mode()
}

// InlineSizes are the negotiated inline sizes of the current connection.
func (t *Transport) InlineSizes() (send, recv int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cn == nil {
		return 0, 0
	}
	return t.cn.inlineSend, t.cn.inlineRecv
}

// Close fails the outstanding calls, drains the connection and releases
// everything. It is idempotent.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	close(t.closeCh)
	c := t.cn
	select {
	case <-t.connUp:
	default:
		close(t.connUp)
	}
	t.mu.Unlock()
	if c != nil {
		t.connLost(c, ErrClosed)
	}
	t.mu.Lock()
	for t.bgN > 0 {
		t.bgIdle.Wait()
	}
	for _, cl := range t.calls {
		cl.finish(nil, ErrClosed)
	}
	t.calls = map[uint32]*call{}
	t.orphans = map[*call]struct{}{}
	t.releaseRegistry()
	t.mu.Unlock()
	return nil
}

// waitConn returns the current connection, waiting for a reconnect.
func (t *Transport) waitConn(ctx context.Context) (*conn, error) {
	for {
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return nil, ErrClosed
		}
		if t.cn != nil && !t.cn.broken {
			c := t.cn
			t.mu.Unlock()
			return c, nil
		}
		up := t.connUp
		t.mu.Unlock()
		select {
		case <-up:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// connLost tears a connection down once: the QP goes to error and is
// drained with sentinels, windows whose state is unknown are destroyed,
// and the calls it carried are sent again on a new connection (DESIGN.md
// rules 5 and 6).
func (t *Transport) connLost(c *conn, why error) {
	t.mu.Lock()
	if c.broken {
		t.mu.Unlock()
		return
	}
	c.broken, c.brokenAt = true, why
	t.ctr.disconnects.Add(1)
	if t.cn == c {
		t.cn = nil
		if !t.closed {
			t.connUp = make(chan struct{})
		}
	}
	// Wake calls waiting for credit or room on this connection: they start
	// over on the next one.
	for _, cl := range c.creditQ {
		cl.wake()
	}
	c.creditQ = nil
	c.gate.Reset(admitLocked)
	closed := t.closed
	t.bgN++
	t.mu.Unlock()
	if !errors.Is(why, ErrClosed) {
		t.log.Warn("connection lost", "addr", t.cfg.Addr, "err", why)
	}
	go func() {
		defer func() {
			t.mu.Lock()
			if t.bgN--; t.bgN == 0 {
				t.bgIdle.Broadcast()
			}
			t.mu.Unlock()
		}()
		t.teardown(c)
		if !closed {
			t.reconnect()
		}
	}()
}

// teardown drains c and settles every call and window it carried.
func (t *Transport) teardown(c *conn) {
	if err := c.drain(); err != nil {
		t.log.Warn("drain", "err", err)
	}
	c.stopPoll()
	c.pollers.Wait()
	t.mu.Lock()
	// The device is done with every WR: retire them all.
	c.ring.Flush(func(_ uint64, m *sendMeta) { t.retireLocked(c, m, nil) })
	var lost []*call
	// Calls posted on c are settled here; calls not yet posted undo their
	// own attempt (they see c.broken).
	for _, cl := range t.calls {
		if cl.conn == c && cl.posted && !cl.done {
			lost = append(lost, cl)
		}
	}
	for cl := range t.orphans {
		if cl.conn == c && cl.posted && !cl.done {
			lost = append(lost, cl)
		}
	}
	t.mu.Unlock()
	// Windows of these calls are in an unknown state: destroy them (never
	// LOCAL_INV them: that could invalidate an rkey twice), before the QP.
	var regs [][]*frwr.Registration
	for _, cl := range lost {
		regs = append(regs, cl.regs)
	}
	t.reg.ConnectionLost(regs...)
	for _, cl := range lost {
		cl.releaseAttempt()
		t.mu.Lock()
		if cl.abandoned {
			// Nobody waits for it: settle it here.
			if t.calls[cl.req.XID] == cl {
				delete(t.calls, cl.req.XID)
			}
			delete(t.orphans, cl)
			cl.finish(nil, errAbandoned)
			t.mu.Unlock()
			continue
		}
		t.mu.Unlock()
		cl.retry()
	}
	c.release()
}

// reconnect makes a new connection with exponential backoff.
func (t *Transport) reconnect() {
	delay := 50 * time.Millisecond
	for {
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return
		}
		t.gen++
		gen := t.gen
		t.mu.Unlock()
		c, err := t.dial(context.Background(), gen)
		if err == nil {
			t.mu.Lock()
			if t.closed {
				t.mu.Unlock()
				t.closeConnNow(c)
				return
			}
			t.cn = c
			close(t.connUp)
			t.lastErr = nil
			t.mu.Unlock()
			t.ctr.reconnects.Add(1)
			t.log.Info("reconnected", "addr", t.cfg.Addr, "generation", gen)
			return
		}
		t.mu.Lock()
		t.lastErr = err
		t.mu.Unlock()
		t.log.Warn("reconnect failed", "addr", t.cfg.Addr, "err", err, "retry_in", delay)
		select {
		case <-time.After(delay):
		case <-t.closeCh:
			return
		}
		delay = min(2*delay, t.cfg.MaxReconnectDelay)
	}
}

// closeConnNow drains and releases a connection that carried no call.
func (t *Transport) closeConnNow(c *conn) {
	t.mu.Lock()
	c.broken = true
	t.mu.Unlock()
	c.drain()
	c.stopPoll()
	c.pollers.Wait()
	c.release()
}

// retireLocked handles one retired send WR: its send buffer returns to the
// pool, and the congestion gate gets its room back (waking admitted calls
// is the gate's callback). done collects calls whose last LOCAL_INV
// completed.
func (t *Transport) retireLocked(c *conn, m *sendMeta, done *[]*call) {
	switch m.kind {
	case wrSend:
		c.sendFree = append(c.sendFree, m.sendBuf)
		if m.call != nil {
			m.call.sendDone = true
		}
	case wrLocalInv:
		if m.last && m.call != nil && done != nil {
			*done = append(*done, m.call)
		}
	}
	if !c.broken {
		c.gate.Free(1, admitLocked)
	}
}

// sendLoop reaps send completions: they alone free send-queue room
// (DESIGN.md rule 1).
func (c *conn) sendLoop() {
	defer c.pollers.Done()
	t := c.t
	wcs := make([]verbs.Completion, 32)
	var done []*call
	for {
		n, err := c.scq.Poll(wcs)
		if err != nil {
			t.connLost(c, err)
			return
		}
		if n == 0 {
			if err := c.scq.Wait(c.pollCtx); err != nil {
				if c.pollCtx.Err() == nil {
					t.connLost(c, err)
				}
				return
			}
			continue
		}
		done = done[:0]
		t.mu.Lock()
		for _, wc := range wcs[:n] {
			if wc.ID == sentinelID {
				close(c.sqDrained)
				continue
			}
			if wc.Status != verbs.StatusSuccess {
				if wc.Status != verbs.StatusWRFlushErr {
					t.ctr.errorCompletions.Add(1)
				}
				if !c.broken {
					t.mu.Unlock()
					t.connLost(c, &verbs.CompletionError{Completion: wc})
					t.mu.Lock()
				}
				// Retired with the rest by the drain's Flush.
				continue
			}
			if _, err := c.ring.Complete(wc.ID, func(_ uint64, m *sendMeta) { t.retireLocked(c, m, &done) }); err != nil {
				t.log.Error("send completion for an unknown wrid", "wrid", wc.ID)
			}
		}
		t.mu.Unlock()
		for _, cl := range done {
			t.finishReply(cl)
		}
		if len(done) > 0 {
			runtime.Gosched() // as in recvLoop: the completed callers first
		}
	}
}
