package xprt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nfsrdma/nfsrdma/flowctl"
	"github.com/nfsrdma/nfsrdma/rpcrdma"
	"github.com/nfsrdma/nfsrdma/verbs"
)

// sentinelID marks the drain sentinels (rule 5 of the package doc). Ring wrids never
// reach it.
const sentinelID = 1 << 63

// maxReadSegments is the most segments the Read list of one call may have
// (rpcrdma's decoding limit, which servers share). Config.MaxSegment must
// let the largest call fit it.
const maxReadSegments = rpcrdma.MaxReadSegments

// segmentLimit is the most segments one chunk of a call may have: enough
// for a whole I/O buffer split at MaxSegment, plus the pieces a
// position-zero Read chunk adds (head, pad and tail are segments of their
// own).
func segmentLimit(cfg Config) int {
	return min((cfg.MaxIO+4096+cfg.MaxSegment-1)/cfg.MaxSegment+3, maxReadSegments)
}

// maxChain is the longest WR chain the transport posts: the binds of one
// call (a Read chunk and a Write or Reply chunk) plus its SEND, or one
// reply's LOCAL_INVs.
func maxChain(segs int) int { return 2*segs + 1 }

// maxCompound is the most send-queue room one call reserves: its binds,
// its SEND, and a LOCAL_INV per window. The send queue must hold one.
func maxCompound(segs int) int { return 2*(2*segs) + 1 }

// extraRecvs are receives kept beyond the credit grant.
const extraRecvs = 8

type wrKind uint8

const (
	wrBind wrKind = iota + 1
	wrSend
	wrLocalInv
)

// sendMeta is what the send-context ring keeps for each posted send WR.
type sendMeta struct {
	kind    wrKind
	sendBuf int   // send buffer index of a SEND
	call    *call // the SEND's call, or the call whose last LOCAL_INV this is
	last    bool  // the last LOCAL_INV of its chain
}

// conn is one connection: the endpoint, its queues and the buffers whose
// life is the QP's. The PD and the registry outlive it.
//
// Locking: conn.mu guards the connection's queues and accounting (the
// fields marked below, and a call's fields marked "the attempt's
// conn.mu"), and is the only lock held across ibv_post_recv and a
// LOCAL_INV chain's ibv_post_send. A call's chain is posted with mu
// released, by the combined posting of sendq.go (rxe runs the whole send
// inside ibv_post_send). Lock order: Transport.mu, then conn.mu; never
// the reverse.
type conn struct {
	t   *Transport
	ep  verbs.Endpoint
	scq verbs.CQ
	rcq verbs.CQ
	qp  verbs.QP

	sendMem  *verbs.Mapping
	sendMR   verbs.MR
	sendSize int

	// Scratch for building WR chains, used under mu (PostSend does not
	// keep them): a chain per call would be a heap allocation each.
	wrs      []verbs.SendWR // maxChain(t.segs) long
	sendSGEs []verbs.SGE    // per send buffer: its SEND's gather list, kept until the post
	recvMem  *verbs.Mapping
	recvMR   verbs.MR
	recvSize int
	recvBufs [][]byte // recvMem carved into receive buffers

	// The queue sizes, clamped to the device's limits.
	sendQueue, recvQueue, slots int

	// Negotiated (RFC 8797): the largest Send we may post, and the largest
	// reply the server sends inline.
	inlineSend, inlineRecv int

	mu       sync.Mutex
	ring     *flowctl.SendContextRing[sendMeta] // mu
	gate     *flowctl.CongestionGate[*call]     // mu
	credits  *flowctl.Credits                   // mu
	creditQ  []*call                            // mu: calls waiting for a credit, FIFO
	recvs    *flowctl.Receives                  // mu
	recvFree []int                              // mu
	sendFree []int                              // mu
	// The combined posting (sendq.go).
	pend     []verbs.SendWR // mu: chains reserved in the ring, not yet posted, in wrid order
	pendFree []verbs.SendWR // mu: the spare of pend, swapped with it by the poster
	posting  bool           // mu: a goroutine posts pend with mu released
	postIdle *sync.Cond     // on mu: posting ended
	// broken is set once, under Transport.mu and mu both: either lock
	// suffices to read it.
	broken bool

	pollCtx   context.Context
	stopPoll  context.CancelFunc
	pollers   sync.WaitGroup
	watcher   sync.WaitGroup
	stopAsync func() // ends the device's asynchronous-event subscription
	rqDrained chan struct{}
	sqDrained chan struct{}

	// The receive CQ's reaper (reap.go).
	reaper     reaperKind         // mu
	reaperCall *call              // mu: the caller reaping, when reaper is reapCaller
	reapCtx    context.Context    // mu: a caller reaper's wait; a child of pollCtx
	reapStop   context.CancelFunc // mu: ends reapCtx (the reaping caller gave up)
	reapKick   chan struct{}      // buffered 1: the reply loop's turn to reap
	scratch    reapScratch        // the reaper's
	recvWRs    []verbs.RecvWR
	recvSGEs   []verbs.SGE
}

// dial makes a new connection: resolve, queues, receives posted before
// connecting, then rdma_connect with RFC 8797 private data.
func (t *Transport) dial(ctx context.Context) (*conn, error) {
	cfg := t.cfg
	ctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	ep, err := cfg.Fabric.Resolve(ctx, cfg.Addr)
	if err != nil {
		return nil, err
	}
	c := &conn{t: t, ep: ep, rqDrained: make(chan struct{}), sqDrained: make(chan struct{})}
	c.postIdle = sync.NewCond(&c.mu)
	ok := false
	defer func() {
		if !ok {
			c.release()
		}
	}()
	dev := ep.Device()
	if err := t.ensureRegistry(dev); err != nil {
		return nil, err
	}
	if err := c.sizeQueues(dev.Attr()); err != nil {
		return nil, err
	}
	rqDepth := c.recvQueue
	if c.scq, err = dev.CreateCQ(c.sendQueue + 1); err != nil {
		return nil, err
	}
	if c.rcq, err = dev.CreateCQ(rqDepth + 1); err != nil {
		return nil, err
	}
	c.qp, err = ep.CreateQP(t.pd, verbs.QPConfig{SendCQ: c.scq, RecvCQ: c.rcq,
		MaxSendWR: c.sendQueue + 1, MaxRecvWR: rqDepth + 1, MaxSendSGE: 2, MaxRecvSGE: 1})
	if err != nil {
		return nil, err
	}
	// Send and receive buffers: one registered mapping each, carved into
	// inline-sized slots. They are never remotely accessible.
	c.sendSize, c.recvSize = cfg.Inline, cfg.Inline
	if c.sendMem, err = verbs.Map(c.sendQueue * c.sendSize); err != nil {
		return nil, err
	}
	if c.sendMR, err = t.pd.RegMR(c.sendMem.Bytes(), verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	if c.recvMem, err = verbs.Map(rqDepth * c.recvSize); err != nil {
		return nil, err
	}
	if c.recvMR, err = t.pd.RegMR(c.recvMem.Bytes(), verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	c.sendFree = make([]int, 0, c.sendQueue)
	for i := c.sendQueue - 1; i >= 0; i-- {
		c.sendFree = append(c.sendFree, i)
	}
	c.recvFree = make([]int, 0, rqDepth)
	c.recvBufs = make([][]byte, rqDepth)
	for i := rqDepth - 1; i >= 0; i-- {
		c.recvFree = append(c.recvFree, i)
		c.recvBufs[i] = c.recvMem.Bytes()[i*c.recvSize : (i+1)*c.recvSize : (i+1)*c.recvSize]
	}
	c.wrs = make([]verbs.SendWR, maxChain(t.segs))
	c.sendSGEs = make([]verbs.SGE, c.sendQueue)
	c.ring = flowctl.NewSendContextRing[sendMeta](c.sendQueue, maxChain(t.segs))
	c.gate = flowctl.NewCongestionGate[*call](c.sendQueue)
	c.credits = flowctl.NewCredits(c.slots)
	c.recvs = flowctl.NewReceives(rqDepth, extraRecvs, 8)
	// Post receives before connecting: the first reply may come at once.
	c.mu.Lock()
	err = c.postRecvsLocked()
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	priv := rpcrdma.PrivateData{RemoteInvalidation: t.reg.RemoteInvalidationOK(), SendSize: uint32(cfg.Inline), RecvSize: uint32(cfg.Inline)}
	peer, err := ep.Connect(ctx, verbs.ConnParam{PrivateData: priv.Append(nil),
		// The server RDMA-READs Read chunks from us: offer all the
		// responder resources the device has (rxe needs > 0). They bound
		// the server's RDMA READs in flight on the connection, and a
		// 1 MiB WRITE alone is 8 of them with knfsd on rxe (128 KiB
		// each): 16 would let only two WRITEs' data move at once.
		// The client itself never RDMA-READs.
		ResponderResources: min(255, max(dev.Attr().MaxQPRdAtom, 1)), InitiatorDepth: 0,
		RetryCount: 7, RNRRetryCount: 7})
	if err != nil {
		return nil, err
	}
	var sp rpcrdma.PrivateData
	sp.Decode(peer) // absent: 1024-byte defaults
	c.inlineSend = min(cfg.Inline, int(sp.RecvSize))
	c.inlineRecv = min(cfg.Inline, int(sp.SendSize))
	c.pollCtx, c.stopPoll = context.WithCancel(context.Background())
	c.reapCtx, c.reapStop = context.WithCancel(c.pollCtx)
	c.reapKick = make(chan struct{}, 1)
	c.scratch.wcs = make([]verbs.Completion, 32)
	c.pollers.Add(2)
	go c.recvLoop()
	go c.sendLoop()
	c.watcher.Add(1)
	go c.watchEvents()
	if src, ok := dev.(verbs.AsyncEventSource); ok {
		events, stop := src.AsyncEvents()
		c.stopAsync = stop
		c.watcher.Add(1)
		go c.watchAsync(events, c.qp.Num())
	}
	ok = true
	return c, nil
}

// sizeQueues clamps the configured queue sizes to the device's limits
// (max_qp_wr, max_cqe): the send queue, and the receive queue with the
// credit limit it bounds.
func (c *conn) sizeQueues(a verbs.DeviceAttr) error {
	cfg := c.t.cfg
	limit := func(n int) int {
		if a.MaxQPWR > 0 {
			n = min(n, a.MaxQPWR-1)
		}
		if a.MaxCQE > 0 {
			n = min(n, a.MaxCQE-1)
		}
		return n
	}
	c.sendQueue = limit(cfg.SendQueue)
	c.recvQueue = limit(cfg.Slots + extraRecvs)
	c.slots = c.recvQueue - extraRecvs
	if c.sendQueue < maxCompound(c.t.segs) || c.slots < 1 {
		return fmt.Errorf("xprt: device %s allows queues of %d WRs and %d CQEs: too small (send queue %d, at least %d)",
			a.Name, a.MaxQPWR, a.MaxCQE, c.sendQueue, maxCompound(c.t.segs))
	}
	if c.sendQueue < cfg.SendQueue || c.slots < cfg.Slots {
		c.t.log.Info("queues clamped to the device's limits", "device", a.Name, "send_queue", c.sendQueue, "slots", c.slots)
	}
	return nil
}

// grantCreditsLocked hands free credits to waiting calls in FIFO order
// (c.mu held).
func (c *conn) grantCreditsLocked() {
	for len(c.creditQ) > 0 && c.credits.TryAcquire() {
		w := c.creditQ[0]
		c.creditQ[0] = nil
		c.creditQ = c.creditQ[1:]
		w.inCreditQ, w.hasCredit = false, true
		w.wake()
	}
	c.noteOutstandingLocked()
}

// noteOutstandingLocked records the high-water mark of calls outstanding.
func (c *conn) noteOutstandingLocked() {
	ctr := &c.t.ctr
	if out := uint64(c.credits.Outstanding()); out > ctr[ctrMaxOutstanding].Load() {
		ctr[ctrMaxOutstanding].Store(out)
	}
}

// postRecvsLocked posts the receives flowctl asks for (c.mu held).
func (c *conn) postRecvsLocked() error {
	n := min(c.recvs.Need(), len(c.recvFree))
	for n > 0 {
		batch := min(n, 32)
		c.recvWRs = c.recvWRs[:0]
		c.recvSGEs = c.recvSGEs[:0]
		for i := 0; i < batch; i++ {
			idx := c.recvFree[len(c.recvFree)-1-i]
			c.recvSGEs = append(c.recvSGEs, verbs.SGE{MR: c.recvMR, Offset: uint64(idx * c.recvSize), Length: uint32(c.recvSize)})
		}
		for i := 0; i < batch; i++ {
			idx := c.recvFree[len(c.recvFree)-1-i]
			c.recvWRs = append(c.recvWRs, verbs.RecvWR{ID: uint64(idx), SGL: c.recvSGEs[i : i+1]})
		}
		posted, err := c.qp.PostRecv(c.recvWRs)
		c.recvFree = c.recvFree[:len(c.recvFree)-posted]
		c.recvs.Post(posted)
		if err != nil {
			return err
		}
		n -= batch
	}
	return nil
}

// watchEvents turns a DISCONNECTED, a DEVICE_REMOVAL or an ADDR_CHANGE
// (the route to the server may now go through another device) into a
// connection loss: the teardown drains the QP and releases everything of
// the device before the next connection is made.
func (c *conn) watchEvents() {
	defer c.watcher.Done()
	for ev := range c.ep.Events() {
		switch ev.Type {
		case verbs.CMDisconnected:
			c.t.connLost(c, fmt.Errorf("xprt: %s from the server", ev.Type))
		case verbs.CMDeviceRemoval:
			c.t.ctr[ctrDeviceRemovals].Add(1)
			c.t.connLost(c, fmt.Errorf("xprt: %s: %w", ev.Type, errDeviceGone))
		case verbs.CMAddrChange:
			c.t.connLost(c, fmt.Errorf("xprt: %s", ev.Type))
		}
	}
}

// watchAsync turns the device's asynchronous events that concern this
// connection into a connection loss: the device failed, a port went down,
// or this QP or a CQ broke outside any work request (such errors complete
// no WR, so nothing else would notice them).
func (c *conn) watchAsync(events <-chan verbs.AsyncEvent, qpNum uint32) {
	defer c.watcher.Done()
	for ev := range events {
		c.t.ctr[ctrAsyncEvents].Add(1)
		switch ev.Type {
		case verbs.AsyncDeviceFatal:
			c.t.connLost(c, fmt.Errorf("xprt: %s: %w", ev.Type, errDeviceGone))
		case verbs.AsyncPortError, verbs.AsyncCQError:
			c.t.connLost(c, fmt.Errorf("xprt: device event %s (port %d)", ev.Type, ev.Port))
		case verbs.AsyncQPFatal, verbs.AsyncQPRequestError, verbs.AsyncQPAccessError:
			if ev.QPNum == qpNum {
				c.t.connLost(c, fmt.Errorf("xprt: device event %s on the connection's QP %#x", ev.Type, qpNum))
			}
		default:
			c.t.log.Info("device event", "event", ev.Type, "port", ev.Port)
		}
	}
}

// drain moves the QP to error and waits for the flush completions of a
// receive sentinel and then a send sentinel: after them the device has
// finished with every WR posted before (rule 5 of the package doc).
func (c *conn) drain() error {
	if c.qp == nil {
		return nil
	}
	if err := c.qp.SetError(); err != nil {
		return err
	}
	if _, err := c.qp.PostRecv([]verbs.RecvWR{{ID: sentinelID}}); err != nil {
		return fmt.Errorf("posting the receive sentinel: %w", err)
	}
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	select {
	case <-c.rqDrained:
	case <-timeout.C:
		return errors.New("the receive queue did not flush")
	}
	// The sentinel goes after every chain: wait for a poster posting
	// with conn.mu released (it posts nothing more once broken is set).
	c.mu.Lock()
	for c.posting {
		c.postIdle.Wait()
	}
	c.mu.Unlock()
	if _, err := c.qp.PostSend([]verbs.SendWR{{ID: sentinelID, Opcode: verbs.OpSend, Flags: verbs.SendSignaled}}); err != nil {
		return fmt.Errorf("posting the send sentinel: %w", err)
	}
	select {
	case <-c.sqDrained:
	case <-timeout.C:
		return errors.New("the send queue did not flush")
	}
	return nil
}

// closeQP destroys the QP (once).
func (c *conn) closeQP() {
	if c.qp != nil {
		c.qp.Close()
		c.qp = nil
	}
}

// release frees the connection's resources in reverse order. The QP must
// be drained (or never connected) and the registry's windows settled.
func (c *conn) release() { c.releaseWith(nil) }

// releaseWith is release with beforeEndpoint run after every object of the
// connection is gone and before its endpoint (the RDMA CM id) is: the
// moment a removed device's other objects must go too, because closing the
// last id on a removed device lets the binding close the device itself.
func (c *conn) releaseWith(beforeEndpoint func()) {
	if c.stopPoll != nil {
		c.stopPoll()
		c.pollers.Wait()
	}
	c.closeQP()
	if c.recvMR != nil {
		c.recvMR.Close()
	}
	if c.recvMem != nil {
		c.recvMem.Close()
	}
	if c.sendMR != nil {
		c.sendMR.Close()
	}
	if c.sendMem != nil {
		c.sendMem.Close()
	}
	if c.rcq != nil {
		c.rcq.Close()
	}
	if c.scq != nil {
		c.scq.Close()
	}
	if c.stopAsync != nil {
		c.stopAsync() // closes the events: watchAsync returns
	}
	if beforeEndpoint != nil {
		beforeEndpoint()
	}
	if c.ep != nil {
		c.ep.Close() // closes Events: watchEvents returns
	}
	c.watcher.Wait()
}

// isBroken reports whether c has been torn down (connLost).
func (c *conn) isBroken() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.broken
}
