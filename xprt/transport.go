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
// completions, syncs, and only then completes the call.
//
// The files follow that path: call.go (RoundTrip and the call's attempts),
// state.go (the call's states, their transitions, and who may touch the
// caller's memory in each), budget.go (buffers and windows taken all at
// once), register.go, marshal.go (the transport header and the inline
// message, a pure step), sendq.go (posting chains, send completions, the
// send-context ring), reply.go (the reply handler's named steps), reap.go
// (who runs the reply handler: the caller waiting for its reply, else the
// connection's reply loop), conn.go
// (one connection's resources, its drain and release) and this file
// (dial, connection loss, teardown, reconnect, close).
//
// The rules the code keeps, each stated where it is enforced:
//  1. send-queue room comes only from send completions (a ring of send
//     contexts indexed by wrid; about every half queue signaled);
//  2. a call is admitted only when the send queue has room for its whole
//     compound (binds, SEND, the LOCAL_INVs its reply may need), else it
//     waits in FIFO order;
//  3. a call completes only after every window it exposed is invalid
//     (remotely or by reaped LOCAL_INV completions) and its buffers are
//     synced;
//  4. a send buffer is reused only after its send completion;
//  5. teardown moves the QP to error and waits for the flush of a receive
//     sentinel and then a send sentinel before freeing anything;
//  6. any error completion disconnects once; windows in an unknown state
//     are destroyed, never reused; calls are retransmitted only on a new
//     connection; credits restart at 1 and grants are clamped to
//     [1, slots];
//  7. every receive completion's buffer is reposted, whatever the reply;
//  8. every bind bumps the rkey unpredictably, and a window covers exactly
//     its segment with only the access its direction needs (per-I/O
//     registration: an MR over exactly the segment, made for the call or
//     made ahead over zeroed memory of its own that no peer was told of
//     before the call took it, frwr.Registry.TakeReady);
//  9. after RoundTrip returns nothing touches the caller's memory (see
//     callState).
package xprt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	cfg  Config
	segs int // the most segments of one chunk (segmentLimit)
	log  *slog.Logger
	ctr  counters

	// mu guards the fields below and each call's state (the fields of
	// call marked "Transport.mu"). Lock order: mu, then a conn's mu.
	// Neither is held across a wait; only conn.mu is held across a post.
	mu        sync.Mutex
	closed    bool
	cn        *conn         // nil while reconnecting
	connUp    chan struct{} // closed when cn is set or the transport closes
	pd        verbs.PD
	devName   string
	reg       *frwr.Registry
	calls     map[uint32]*call
	borrowed  map[*byte]*borrowedBuffer
	budget    budget     // buffers and windows not taken
	budgetCap need       // the registry's buffers and windows
	bgN       int        // background teardowns/reconnects running
	bgIdle    *sync.Cond // signalled when bgN drops to 0
	closeCh   chan struct{}
	timeouts  replyTimeouts // the posted calls' reply timeouts (timeouts.go)
}

// errDeviceGone marks a connection lost with its device.
var errDeviceGone = errors.New("the RDMA device was removed")

// bufSize is the size of one registered I/O buffer.
func (t *Transport) bufSize() int { return t.cfg.MaxIO + 4096 }

var _ sunrpc.Transport = (*Transport)(nil)

// Dial connects to cfg.Addr. A connection that cannot be made is an error
// here; later losses are repaired by reconnecting in the background.
//
// What it registers is locked memory, counted against RLIMIT_MEMLOCK unless
// the process has CAP_IPC_LOCK; memlock.Fit (package xprt/memlock) sizes
// cfg to the limit before Dial, or says what to raise.
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
	segs := segmentLimit(cfg)
	if need := (cfg.MaxIO + cfg.MaxSegment - 1) / cfg.MaxSegment; need > maxReadSegments {
		return nil, fmt.Errorf("xprt: MaxSegment %d splits a %d-byte I/O into %d segments; at most %d fit a chunk (raise MaxSegment or lower MaxIO)",
			cfg.MaxSegment, cfg.MaxIO, need, maxReadSegments)
	}
	if cfg.SendQueue < maxCompound(segs) {
		return nil, fmt.Errorf("xprt: send queue of %d WRs is below the minimum %d", cfg.SendQueue, maxCompound(segs))
	}
	t := &Transport{cfg: cfg, segs: segs, log: cfg.Logger, calls: make(map[uint32]*call), borrowed: make(map[*byte]*borrowedBuffer), connUp: make(chan struct{}), closeCh: make(chan struct{})}
	t.bgIdle = sync.NewCond(&t.mu)
	c, err := t.dial(ctx)
	if err != nil {
		t.releaseRegistry()
		return nil, &ConnectError{Addr: cfg.Addr.String(), Err: err}
	}
	t.cn = c
	close(t.connUp)
	t.log.Info("connected", "addr", cfg.Addr, "inline_send", c.inlineSend, "inline_recv", c.inlineRecv, "registration", t.reg.Mode())
	return t, nil
}

// ensureRegistry readies the registry on the device of a new connection:
// it creates the PD and the registry on the first connection's device, and
// moves the registry (re-registering the same buffer memory, so borrowed
// buffers stay valid) when a later connection reaches the server through
// another device — after a DEVICE_REMOVAL the registry was already
// detached from the old device by detachRegistry.
func (t *Transport) ensureRegistry(dev verbs.Device) error {
	t.mu.Lock()
	have, reg := t.devName, t.reg
	attached := t.pd != nil
	t.mu.Unlock()
	if reg != nil && attached && dev.Name() == have {
		return nil
	}
	if reg != nil {
		if attached {
			// The route moved while the old device stays: leave it.
			if err := t.detachRegistry(); err != nil {
				return fmt.Errorf("xprt: the route to %s moved from device %s to %s: %w", t.cfg.Addr, have, dev.Name(), err)
			}
		}
		pd, err := dev.AllocPD()
		if err != nil {
			return err
		}
		if err := reg.Attach(pd, dev.Attr()); err != nil {
			pd.Close()
			return err
		}
		t.mu.Lock()
		t.pd, t.devName = pd, dev.Name()
		t.mu.Unlock()
		t.ctr[ctrDeviceMoves].Add(1)
		t.log.Info("I/O buffers registered on a new device", "device", dev.Name(), "was", have)
		return nil
	}
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	wins := 4 * t.cfg.IOBuffers
	attr := dev.Attr()
	reg, err = frwr.New(frwr.Config{PD: pd, Attr: attr, Mode: t.cfg.Registration, BufferSize: t.bufSize(),
		Buffers: t.cfg.IOBuffers, Windows: wins, RetireWindows: attr.StaleInvalidatePanics, UnsafeWindows: t.cfg.UnsafeWindows,
		Ready: max(t.cfg.RegisterAhead, 0)})
	if err != nil {
		pd.Close()
		return err
	}
	t.mu.Lock()
	t.pd, t.reg, t.devName = pd, reg, dev.Name()
	t.budgetCap = need{bufs: t.cfg.IOBuffers, wins: wins}
	t.budget.free = t.budgetCap
	t.mu.Unlock()
	return nil
}

// releaseDevice lets a removed device go: everything of it is released
// before a new connection is tried (the kernel cannot remove a device
// while a process holds it).
func (t *Transport) releaseDevice() {
	if err := t.detachRegistry(); err != nil {
		t.log.Error("releasing the removed device's registrations", "err", err)
	}
}

// detachRegistry releases everything the registry holds on its device (its
// windows and MRs, then the PD), keeping the buffers' memory, once no call
// holds a registration: called after the connection on that device is torn
// down, so that the device can go. Calls that were between registering
// and posting undo their attempt when they see their connection broken;
// it waits for them, bounded.
func (t *Transport) detachRegistry() error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		t.mu.Lock()
		reg, pd := t.reg, t.pd
		if reg == nil || pd == nil {
			t.mu.Unlock()
			return nil
		}
		err := reg.Detach()
		if err == nil {
			t.pd = nil
			t.mu.Unlock()
			return pd.Close()
		}
		t.mu.Unlock()
		if !errors.Is(err, frwr.ErrBusy) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
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
	c := t.ctr.snapshot()
	t.mu.Lock()
	reg := t.reg
	t.mu.Unlock()
	if reg != nil {
		rc := reg.Counters()
		c.Binds, c.LocalInvalidations, c.RemoteInvalidations = rc.Binds, rc.LocalInvalidations, rc.RemoteInvalidations
		c.WindowsReplaced, c.Registrations, c.WindowsRetired = rc.WindowsReplaced, rc.Registrations, rc.WindowsRetired
		c.RegisteredAhead = uint64(rc.ReadyStocked)
		if rc.ReadyUnsupported {
			c.RegisterAheadRefused = 1
		}
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

// Credits returns the credit grant in force on the current connection
// (RFC 8166 §3.3.1): how many calls may be outstanding at once, at most
// Config.Slots; 0 while reconnecting. A session layer above with flow
// control of its own (NFSv4.1 slots) sizes itself by it.
func (t *Transport) Credits() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cn == nil {
		return 0
	}
	t.cn.mu.Lock()
	defer t.cn.mu.Unlock()
	return t.cn.credits.Granted()
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
	t.stopReplyTimeoutsLocked()
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
	// What is left was never posted (or was settled by the teardown):
	// wake the callers; they find the transport closed.
	for _, cl := range t.calls {
		cl.wake()
	}
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
// and the calls it carried are sent again on a new connection (rules 5
// and 6).
func (t *Transport) connLost(c *conn, why error) {
	t.mu.Lock()
	c.mu.Lock()
	if c.broken {
		c.mu.Unlock()
		t.mu.Unlock()
		return
	}
	c.broken = true
	// Wake calls waiting on this connection for a credit or for room:
	// they undo their attempt and start over on the next one.
	for _, cl := range c.creditQ {
		cl.wake()
	}
	c.gate.Reset(admitLocked)
	if c.reaper == reapNone {
		// The drain's flushes and its sentinel must be reaped.
		c.kickLoopLocked()
	}
	c.mu.Unlock()
	t.ctr[ctrDisconnects].Add(1)
	if t.cn == c {
		t.cn = nil
		if !t.closed {
			t.connUp = make(chan struct{})
		}
	}
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
		t.teardown(c, errors.Is(why, errDeviceGone))
		if !closed {
			t.reconnect()
		}
	}()
}

// teardown drains c and settles every call and window it carried. When
// its device is gone, everything of the device goes with it.
func (t *Transport) teardown(c *conn, deviceGone bool) {
	drained := true
	if err := c.drain(); err != nil {
		drained = false
		t.log.Error("drain failed: the QP is destroyed before its memory is freed", "err", err)
	}
	c.stopPoll()
	c.pollers.Wait()
	c.mu.Lock()
	// The device is done with every WR: retire them all.
	c.ring.Flush(func(_ uint64, m *sendMeta) { c.retireLocked(m, nil) })
	c.mu.Unlock()
	if !drained {
		// The flush could not be proven: destroy the QP first, so that
		// nothing can reach the memory released below.
		c.closeQP()
	}
	t.mu.Lock()
	// Calls posted on c are settled here; calls not yet posted undo their
	// own attempt (they see c.broken).
	var lost []*call
	for _, cl := range t.calls {
		if cl.conn == c && (cl.state.exposesWindows() || cl.state == stAbandoned) {
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
	t.mu.Lock()
	for _, cl := range lost {
		cl.regs = cl.regs[:0]
		cl.releaseMemoryLocked()
		c.mu.Lock()
		cl.hasCredit, cl.roomHeld = false, 0
		c.mu.Unlock()
		switch {
		case cl.state == stAbandoned:
			cl.finishLocked(nil, errAbandoned)
		case cl.giveUp != nil:
			cl.finishLocked(nil, cl.giveUp)
		case t.closed:
			cl.finishLocked(nil, ErrClosed)
		default:
			cl.to(stQueued) // wakes the caller: retransmit on the next connection
		}
	}
	t.mu.Unlock()
	if deviceGone {
		c.releaseWith(t.releaseDevice)
	} else {
		c.release()
	}
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
		t.mu.Unlock()
		c, err := t.dial(context.Background())
		if err == nil {
			t.mu.Lock()
			if t.closed {
				t.mu.Unlock()
				t.closeConnNow(c)
				return
			}
			t.cn = c
			close(t.connUp)
			t.mu.Unlock()
			t.ctr[ctrReconnects].Add(1)
			t.log.Info("reconnected", "addr", t.cfg.Addr)
			return
		}
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
	c.mu.Lock()
	c.broken = true
	c.mu.Unlock()
	t.mu.Unlock()
	c.drain()
	c.stopPoll()
	c.pollers.Wait()
	c.release()
}
