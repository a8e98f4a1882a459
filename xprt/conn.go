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

// sentinelID marks the drain sentinels (DESIGN.md rule 5). Ring wrids never
// reach it.
const sentinelID = 1 << 63

// maxChain is the longest WR chain the transport posts: the binds of one
// call plus its SEND, or one reply's LOCAL_INVs.
const maxChain = 16

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
type conn struct {
	t   *Transport
	gen uint64
	ep  verbs.Endpoint
	scq verbs.CQ
	rcq verbs.CQ
	qp  verbs.QP

	sendMem  *verbs.Mapping
	sendMR   verbs.MR
	sendSize int
	sendFree []int

	// Scratch for building WR chains, used under t.mu (PostSend does
	// not keep them): a chain per call would be a heap allocation each.
	wrs      [maxChain]verbs.SendWR
	sendSGE  [1]verbs.SGE
	recvMem  *verbs.Mapping
	recvMR   verbs.MR
	recvSize int
	recvFree []int

	// Negotiated (RFC 8797): the largest Send we may post, and the largest
	// reply the server sends inline.
	inlineSend, inlineRecv int

	// Guarded by Transport.mu.
	ring     *flowctl.SendContextRing[sendMeta]
	gate     *flowctl.CongestionGate[*call]
	credits  *flowctl.Credits
	creditQ  []*call
	recvs    *flowctl.Receives
	broken   bool
	brokenAt error

	pollCtx   context.Context
	stopPoll  context.CancelFunc
	pollers   sync.WaitGroup
	watcher   sync.WaitGroup
	rqDrained chan struct{}
	sqDrained chan struct{}
	recvWRs   []verbs.RecvWR
	recvSGEs  []verbs.SGE
}

// dial makes a new connection: resolve, queues, receives posted before
// connecting, then rdma_connect with RFC 8797 private data.
func (t *Transport) dial(ctx context.Context, gen uint64) (*conn, error) {
	cfg := t.cfg
	ctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	ep, err := cfg.Fabric.Resolve(ctx, cfg.Addr)
	if err != nil {
		return nil, err
	}
	c := &conn{t: t, gen: gen, ep: ep, rqDrained: make(chan struct{}), sqDrained: make(chan struct{})}
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
	rqDepth := cfg.Slots + extraRecvs
	if c.scq, err = dev.CreateCQ(cfg.SendQueue + 1); err != nil {
		return nil, err
	}
	if c.rcq, err = dev.CreateCQ(rqDepth + 1); err != nil {
		return nil, err
	}
	c.qp, err = ep.CreateQP(t.pd, verbs.QPConfig{SendCQ: c.scq, RecvCQ: c.rcq,
		MaxSendWR: cfg.SendQueue + 1, MaxRecvWR: rqDepth + 1, MaxSendSGE: 2, MaxRecvSGE: 1})
	if err != nil {
		return nil, err
	}
	// Send and receive buffers: one registered mapping each, carved into
	// inline-sized slots. They are never remotely accessible.
	c.sendSize, c.recvSize = cfg.Inline, cfg.Inline
	if c.sendMem, err = verbs.Map(cfg.SendQueue * c.sendSize); err != nil {
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
	c.sendFree = make([]int, 0, cfg.SendQueue)
	for i := cfg.SendQueue - 1; i >= 0; i-- {
		c.sendFree = append(c.sendFree, i)
	}
	c.recvFree = make([]int, 0, rqDepth)
	for i := rqDepth - 1; i >= 0; i-- {
		c.recvFree = append(c.recvFree, i)
	}
	c.ring = flowctl.NewSendContextRing[sendMeta](cfg.SendQueue, maxChain)
	c.gate = flowctl.NewCongestionGate[*call](cfg.SendQueue)
	c.credits = flowctl.NewCredits(cfg.Slots)
	c.recvs = flowctl.NewReceives(rqDepth, extraRecvs, 8)
	// Post receives before connecting: the first reply may come at once.
	if err := c.postRecvsLocked(); err != nil {
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
	c.pollers.Add(2)
	go c.recvLoop()
	go c.sendLoop()
	c.watcher.Add(1)
	go c.watchEvents()
	ok = true
	return c, nil
}

// postRecvsLocked posts the receives flowctl asks for.
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

// watchEvents turns a DISCONNECTED (or device removal) into a connection
// loss.
func (c *conn) watchEvents() {
	defer c.watcher.Done()
	for ev := range c.ep.Events() {
		switch ev.Type {
		case verbs.CMDisconnected, verbs.CMDeviceRemoval:
			c.t.connLost(c, fmt.Errorf("xprt: %s from the server", ev.Type))
		}
	}
}

// drain moves the QP to error and waits for the flush completions of a
// receive sentinel and then a send sentinel: after them the device has
// finished with every WR posted before (DESIGN.md rule 5).
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

// release frees the connection's resources in reverse order. The QP must
// be drained (or never connected) and the registry's windows settled.
func (c *conn) release() {
	if c.stopPoll != nil {
		c.stopPoll()
		c.pollers.Wait()
	}
	if c.qp != nil {
		c.qp.Close()
	}
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
	if c.ep != nil {
		c.ep.Close() // closes Events: the watcher returns
		c.watcher.Wait()
	}
}
