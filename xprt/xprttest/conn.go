package xprttest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nfsrdma/nfsrdma/rpcrdma"
	"github.com/nfsrdma/nfsrdma/verbs"
)

// conn is one accepted connection: its queues, its receive buffers and the
// goroutines that serve it.
type conn struct {
	s   *Server
	log *slog.Logger
	ep  verbs.Endpoint
	pd  verbs.PD
	scq verbs.CQ
	rcq verbs.CQ
	qp  verbs.QP

	recv     *scratch // Receives × Inline bytes
	recvSize int

	// From the client's RFC 8797 private data.
	remoteInv bool // the client accepts Send With Invalidate
	sendMax   int  // the largest Send the client can receive

	// Calls outstanding (received, not answered) and whether any reply
	// was sent: the credit check.
	outstanding atomic.Int64
	replied     atomic.Bool
	callSeq     atomic.Uint64
	connSeq     uint64 // numbers the server's connections, from 1 (Server.mu)
	// lastRKey is the first rkey of the last call answered: stale for
	// the next ones (Misbehavior.StaleInvalidate).
	lastRKey atomic.Uint32

	gate sendGate

	mu      sync.Mutex
	waiters map[uint64]chan<- verbs.Completion
	nextID  uint64

	done     chan struct{} // closed by fail
	abandon  chan struct{} // closed when the teardown stops waiting for completions
	failOnce sync.Once
	failErr  error

	recvCtx, sendCtx   context.Context
	stopRecv, stopSend context.CancelFunc
	recvDone, sendDone chan struct{}
	calls              sync.WaitGroup
}

// newConn builds the connection's resources and posts its receives before
// the accept. On error the endpoint is rejected and everything released.
func newConn(s *Server, ep verbs.Endpoint) (c *conn, err error) {
	cfg := s.cfg
	c = &conn{s: s, log: s.log.With("peer", ep.RemoteAddr()), ep: ep, recvSize: cfg.Inline,
		waiters: make(map[uint64]chan<- verbs.Completion), done: make(chan struct{}), abandon: make(chan struct{}),
		recvDone: make(chan struct{}), sendDone: make(chan struct{})}
	c.gate.init(sendQueueDepth)
	defer func() {
		if err != nil {
			ep.Reject(nil)
			c.release()
			c = nil
		}
	}()
	dev := ep.Device()
	if c.pd, err = dev.AllocPD(); err != nil {
		return c, err
	}
	if c.scq, err = dev.CreateCQ(sendQueueDepth + 1); err != nil {
		return c, err
	}
	if c.rcq, err = dev.CreateCQ(cfg.Receives + 1); err != nil {
		return c, err
	}
	c.qp, err = ep.CreateQP(c.pd, verbs.QPConfig{SendCQ: c.scq, RecvCQ: c.rcq,
		MaxSendWR: sendQueueDepth, MaxRecvWR: cfg.Receives, MaxSendSGE: 1, MaxRecvSGE: 1})
	if err != nil {
		return c, err
	}
	if c.recv, err = newScratch(c.pd, cfg.Receives*c.recvSize); err != nil {
		return c, err
	}
	if err = c.postInitialRecvs(cfg.Receives); err != nil {
		return c, err
	}

	var client rpcrdma.PrivateData
	client.Decode(ep.PrivateData()) // none or foreign: RFC 8797 §5 defaults
	c.remoteInv = client.RemoteInvalidation
	c.sendMax = min(cfg.Inline, int(client.RecvSize))
	return c, nil
}

// accept accepts the connection with the server's private data. The
// accept offers no responder resources (knfsd neither): the client never
// reads from the server.
func (c *conn) accept() error {
	cfg := c.s.cfg
	param := verbs.ConnParam{InitiatorDepth: 16, RetryCount: 6}
	if !cfg.NoPrivateData {
		param.PrivateData = rpcrdma.PrivateData{SendSize: uint32(cfg.Inline), RecvSize: uint32(cfg.Inline)}.Append(nil)
	}
	ctx, cancel := context.WithTimeout(c.s.ctx, 10*time.Second)
	defer cancel()
	if err := c.ep.Accept(ctx, param); err != nil {
		return err
	}
	c.log.Debug("accepted", "remote_invalidation", c.remoteInv, "send_max", c.sendMax)
	return nil
}

// maxRecvChain is the most receive WRs posted in one PostRecv: the ibv
// binding takes at most 64 per post, and real providers' queues fill in
// smaller steps too.
const maxRecvChain = 32

// postInitialRecvs posts receives 0..n-1 in chains of at most
// maxRecvChain WRs.
func (c *conn) postInitialRecvs(n int) error {
	wrs := make([]verbs.RecvWR, 0, maxRecvChain)
	for first := 0; first < n; first += maxRecvChain {
		wrs = wrs[:0]
		for i := first; i < min(n, first+maxRecvChain); i++ {
			wrs = append(wrs, c.recvWR(i))
		}
		if posted, err := c.qp.PostRecv(wrs); err != nil {
			return fmt.Errorf("xprttest: posting receives %d..%d (%d posted): %w", first, first+len(wrs)-1, posted, err)
		}
	}
	return nil
}

func (c *conn) recvWR(i int) verbs.RecvWR {
	return verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{{MR: c.recv.mr, Offset: uint64(i * c.recvSize), Length: uint32(c.recvSize)}}}
}

// run serves the connection until it fails, then tears it down.
func (c *conn) run() {
	c.recvCtx, c.stopRecv = context.WithCancel(context.Background())
	c.sendCtx, c.stopSend = context.WithCancel(context.Background())
	go c.recvLoop()
	go c.sendLoop()
	go c.watchEvents()
	<-c.done
	c.log.Debug("disconnecting", "err", c.failErr)

	// The QP is in the error state (fail disconnected it): every WR still
	// queued completes with WR_FLUSH_ERR. Stop taking calls, let the calls
	// in progress see their completions, then stop reaping them.
	c.stopRecv()
	<-c.recvDone
	callsDone := make(chan struct{})
	go func() {
		c.calls.Wait()
		close(callsDone)
	}()
	t := time.NewTimer(abandonAfter)
	select {
	case <-callsDone:
	case <-t.C:
		// Completions withheld by fault injection never came: stop
		// waiting for them. The QP is closed below, before the buffers.
		c.log.Warn("abandoning calls waiting for completions")
		close(c.abandon)
		<-callsDone
	}
	t.Stop()
	c.stopSend()
	<-c.sendDone
	c.release()
}

// fail disconnects the connection once; run tears it down.
func (c *conn) fail(err error) {
	c.failOnce.Do(func() {
		c.failErr = err
		close(c.done)
		c.gate.close()
		if derr := c.ep.Disconnect(); derr != nil && c.qp != nil {
			c.qp.SetError()
		}
	})
}

func (c *conn) failed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// release frees the resources in reverse order of creation: QP, CQs,
// buffers, PD, endpoint.
func (c *conn) release() {
	if c.qp != nil {
		c.qp.Close()
	}
	if c.rcq != nil {
		c.rcq.Close()
	}
	if c.scq != nil {
		c.scq.Close()
	}
	if c.recv != nil {
		c.recv.close()
	}
	if c.pd != nil {
		c.pd.Close()
	}
	c.ep.Close()
}

// watchEvents fails the connection when the peer disconnects.
func (c *conn) watchEvents() {
	select {
	case ev, ok := <-c.ep.Events():
		if ok {
			c.fail(fmt.Errorf("xprttest: connection event %s", ev.Type))
		}
	case <-c.done:
	}
}

// recvLoop reaps receive completions: each successful one is a call, copied
// out of its buffer, the buffer reposted at once, and the call served on
// its own goroutine.
func (c *conn) recvLoop() {
	defer close(c.recvDone)
	wcs := make([]verbs.Completion, 32)
	for {
		n, err := c.rcq.Poll(wcs)
		if err != nil {
			c.fail(fmt.Errorf("xprttest: polling receives: %w", err))
			return
		}
		if n == 0 {
			if err := c.rcq.Wait(c.recvCtx); err != nil {
				if c.recvCtx.Err() == nil {
					c.fail(fmt.Errorf("xprttest: waiting for receives: %w", err))
				}
				return
			}
			continue
		}
		for _, wc := range wcs[:n] {
			c.handleRecv(wc)
		}
	}
}

func (c *conn) handleRecv(wc verbs.Completion) {
	if wc.Status != verbs.StatusSuccess {
		// A flush too: the QP is in the error state, by our fail or by
		// the peer's error.
		c.fail(&verbs.CompletionError{Completion: wc})
		return
	}
	i := int(wc.ID)
	buf := c.recv.bytes[i*c.recvSize : i*c.recvSize+min(int(wc.ByteLen), c.recvSize)]
	msg := append([]byte(nil), buf...)
	if _, err := c.qp.PostRecv([]verbs.RecvWR{c.recvWR(i)}); err != nil {
		c.fail(fmt.Errorf("xprttest: reposting a receive: %w", err))
		return
	}
	if c.failed() {
		return
	}
	st := &c.s.st
	st.calls.Add(1)
	ci := CallInfo{Seq: c.s.seq.Add(1), ConnSeq: c.callSeq.Add(1)}

	// Credit accounting: the grant is 1 until the first reply.
	out := c.outstanding.Add(1)
	limit := int64(1)
	if c.replied.Load() {
		limit = int64(max(c.s.cfg.Credits, 1))
	}
	if out > limit {
		st.overCredit.Add(1)
		c.log.Warn("call beyond the granted credits", "outstanding", out, "granted", limit)
	}
	st.noteOutstanding(uint64(out))

	if after := c.s.misbehavior().DisconnectAfter; after > 0 && ci.ConnSeq > uint64(after) {
		c.fail(fmt.Errorf("xprttest: disconnecting after %d calls (misbehaviour)", after))
		return
	}
	c.calls.Add(1)
	c.s.busy.Begin()
	go func() {
		defer c.calls.Done()
		defer c.s.busy.End()
		c.serveCall(msg, ci)
	}()
}

// sendLoop reaps send completions and hands each to the call waiting for
// it. Every server WR is signaled.
func (c *conn) sendLoop() {
	defer close(c.sendDone)
	wcs := make([]verbs.Completion, 64)
	for {
		n, err := c.scq.Poll(wcs)
		if err != nil {
			c.fail(fmt.Errorf("xprttest: polling sends: %w", err))
			return
		}
		if n == 0 {
			if err := c.scq.Wait(c.sendCtx); err != nil {
				if c.sendCtx.Err() == nil {
					c.fail(fmt.Errorf("xprttest: waiting for sends: %w", err))
				}
				return
			}
			continue
		}
		c.mu.Lock()
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.StatusSuccess {
				c.fail(&verbs.CompletionError{Completion: wc})
			}
			if ch, ok := c.waiters[wc.ID]; ok {
				delete(c.waiters, wc.ID)
				ch <- wc
			}
		}
		c.mu.Unlock()
		c.gate.release(n)
	}
}

// post posts a chain of send WRs, all signaled, and returns the channel
// their completions arrive on (one per WR posted) and how many were
// posted. On error, the WRs before the failed one were posted and will
// complete.
func (c *conn) post(wrs []verbs.SendWR) (<-chan verbs.Completion, int, error) {
	ch := make(chan verbs.Completion, len(wrs))
	if len(wrs) == 0 {
		return ch, 0, nil
	}
	if !c.gate.acquire(len(wrs)) {
		return ch, 0, c.failErrOr()
	}
	c.mu.Lock()
	for i := range wrs {
		c.nextID++
		wrs[i].ID = c.nextID
		wrs[i].Flags |= verbs.SendSignaled
		c.waiters[wrs[i].ID] = ch
	}
	bad, err := c.qp.PostSend(wrs)
	if err != nil {
		for _, wr := range wrs[bad:] {
			delete(c.waiters, wr.ID)
		}
	}
	c.mu.Unlock()
	if err != nil {
		c.gate.release(len(wrs) - bad)
		return ch, bad, err
	}
	return ch, len(wrs), nil
}

// complete waits for n completions on ch and returns them, with an error
// for the first that failed. It collects all n (the buffers the WRs use
// stay the device's until then) unless the teardown gives up waiting.
func (c *conn) complete(ch <-chan verbs.Completion, n int) ([]verbs.Completion, error) {
	wcs := make([]verbs.Completion, 0, n)
	for len(wcs) < n {
		select {
		case wc := <-ch:
			wcs = append(wcs, wc)
		case <-c.abandon:
			return wcs, errAbandoned
		}
	}
	for _, wc := range wcs {
		if wc.Status != verbs.StatusSuccess {
			return wcs, &verbs.CompletionError{Completion: wc}
		}
	}
	return wcs, nil
}

var errAbandoned = errors.New("xprttest: completions abandoned by the teardown")

// postAndWait posts wrs and waits for all their completions.
func (c *conn) postAndWait(wrs []verbs.SendWR) error {
	ch, n, err := c.post(wrs)
	if _, cerr := c.complete(ch, n); cerr != nil && err == nil {
		err = cerr
	}
	return err
}

func (c *conn) failErrOr() error {
	if c.failErr != nil {
		return c.failErr
	}
	return errors.New("xprttest: connection closed")
}

// sendGate admits WRs into the send queue: a WR holds its slot until its
// completion is polled (rule 1 of xprt's package doc), never relying on PostSend
// failing for flow control.
type sendGate struct {
	mu     sync.Mutex
	cond   *sync.Cond
	free   int
	closed bool
}

func (g *sendGate) init(n int) {
	g.free = n
	g.cond = sync.NewCond(&g.mu)
}

// acquire takes n slots, waiting for them; false once the gate is closed.
func (g *sendGate) acquire(n int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.free < n && !g.closed {
		g.cond.Wait()
	}
	if g.closed {
		return false
	}
	g.free -= n
	return true
}

func (g *sendGate) release(n int) {
	g.mu.Lock()
	g.free += n
	g.mu.Unlock()
	g.cond.Broadcast()
}

func (g *sendGate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.cond.Broadcast()
}

// scratch is registered memory from verbs.Map: the server's buffers are
// mmap'd as a real device requires.
type scratch struct {
	m     *verbs.Mapping
	mr    verbs.MR
	bytes []byte
}

func newScratch(pd verbs.PD, n int) (*scratch, error) {
	m, err := verbs.Map(max(n, 1))
	if err != nil {
		return nil, err
	}
	b := m.Bytes()[:max(n, 1)]
	mr, err := pd.RegMR(b, verbs.AccessLocalWrite)
	if err != nil {
		m.Close()
		return nil, err
	}
	return &scratch{m: m, mr: mr, bytes: b}, nil
}

// sge is n bytes at off.
func (s *scratch) sge(off, n int) verbs.SGE {
	return verbs.SGE{MR: s.mr, Offset: uint64(off), Length: uint32(n)}
}

// close deregisters, then unmaps: once the MR is gone the device no longer
// touches the memory.
func (s *scratch) close() {
	if s == nil || s.mr == nil {
		return
	}
	s.mr.Close()
	s.mr = nil
	s.m.Close()
}
