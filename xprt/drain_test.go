package xprt

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/sunrpc/sunrpctest"
	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/sim"
	"github.com/nfsrdma/nfsrdma/xprt/xprttest"
)

// drainCheck wraps a fabric for the client and checks the drain rule (5) at
// every QP destruction: each receive ever posted on the QP has completed
// (received or flushed) and been reaped, and so has the last send WR
// posted (a signaled sentinel after which every earlier WR is done).
type drainCheck struct {
	verbs.Fabric
	mu         sync.Mutex
	closed     int
	violations []string
}

type dcEndpoint struct {
	verbs.Endpoint
	d *drainCheck
}

type dcDevice struct {
	verbs.Device
}

type dcCQ struct {
	verbs.CQ
	mu sync.Mutex
	qp *dcQP
	rq bool // the QP's receive CQ
}

type dcQP struct {
	verbs.QP
	d          *drainCheck
	mu         sync.Mutex
	recvPosted int
	recvReaped int
	lastSend   uint64
	sentAny    bool
	lastReaped bool
}

func (d *drainCheck) Resolve(ctx context.Context, addr netip.AddrPort) (verbs.Endpoint, error) {
	ep, err := d.Fabric.Resolve(ctx, addr)
	if err != nil {
		return nil, err
	}
	return dcEndpoint{ep, d}, nil
}

func (ep dcEndpoint) Device() verbs.Device { return dcDevice{ep.Endpoint.Device()} }

func (dev dcDevice) CreateCQ(depth int) (verbs.CQ, error) {
	cq, err := dev.Device.CreateCQ(depth)
	if err != nil {
		return nil, err
	}
	return &dcCQ{CQ: cq}, nil
}

func (ep dcEndpoint) CreateQP(pd verbs.PD, cfg verbs.QPConfig) (verbs.QP, error) {
	scq, rcq := cfg.SendCQ.(*dcCQ), cfg.RecvCQ.(*dcCQ)
	cfg.SendCQ, cfg.RecvCQ = scq.CQ, rcq.CQ
	qp, err := ep.Endpoint.CreateQP(pd, cfg)
	if err != nil {
		return nil, err
	}
	q := &dcQP{QP: qp, d: ep.d}
	scq.mu.Lock()
	scq.qp = q
	scq.mu.Unlock()
	rcq.mu.Lock()
	rcq.qp, rcq.rq = q, true
	rcq.mu.Unlock()
	return q, nil
}

func (c *dcCQ) Poll(wcs []verbs.Completion) (int, error) {
	n, err := c.CQ.Poll(wcs)
	c.mu.Lock()
	q, rq := c.qp, c.rq
	c.mu.Unlock()
	if q == nil {
		return n, err
	}
	q.mu.Lock()
	for _, wc := range wcs[:n] {
		if rq {
			q.recvReaped++
		} else if wc.ID == q.lastSend {
			q.lastReaped = true
		}
	}
	q.mu.Unlock()
	return n, err
}

func (q *dcQP) PostRecv(wrs []verbs.RecvWR) (int, error) {
	n, err := q.QP.PostRecv(wrs)
	if err == nil {
		n = len(wrs)
	}
	q.mu.Lock()
	q.recvPosted += n
	q.mu.Unlock()
	return n, err
}

func (q *dcQP) PostSend(wrs []verbs.SendWR) (int, error) {
	n, err := q.QP.PostSend(wrs)
	if err == nil {
		n = len(wrs)
	}
	if n > 0 {
		q.mu.Lock()
		q.lastSend, q.sentAny, q.lastReaped = wrs[n-1].ID, true, false
		q.mu.Unlock()
	}
	return n, err
}

func (q *dcQP) Close() error {
	q.mu.Lock()
	var v string
	switch {
	case q.recvReaped < q.recvPosted:
		v = fmt.Sprintf("QP %d destroyed with %d of %d posted receives not completed", q.Num(), q.recvPosted-q.recvReaped, q.recvPosted)
	case q.sentAny && !q.lastReaped:
		v = fmt.Sprintf("QP %d destroyed before the completion of its last send WR (%#x) was reaped", q.Num(), q.lastSend)
	}
	q.mu.Unlock()
	q.d.mu.Lock()
	q.d.closed++
	if v != "" {
		q.d.violations = append(q.d.violations, v)
	}
	q.d.mu.Unlock()
	return q.QP.Close()
}

// Rule 5: a connection is torn down — by the server's disconnect, by
// Close with calls in flight — only after the QP is drained: every
// receive and the last send WR completed (flushed) and reaped before the
// QP is destroyed and its buffers freed.
func TestRuleDrainBeforeDestroy(t *testing.T) {
	h := sunrpctest.NewHandler()
	fab := sim.NewFabric(sim.PanicOnDoubleInvalidation())
	defer fab.Close()
	srv, err := xprttest.Start(xprttest.Config{Fabric: fab, Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	defer h.Close()
	d := &drainCheck{Fabric: fab}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := Dial(ctx, Config{Fabric: d, Addr: srv.Addr(), MaxIO: 64 << 10, IOBuffers: 8, MaxSegment: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	// held calls whose windows and sends are outstanding when the
	// connection goes.
	held := func(base uint32) ([]uint32, []chan error) {
		var tags []uint32
		var dones []chan error
		for i := range 6 {
			xid, tag := base+uint32(i), base+uint32(i)
			tags = append(tags, tag)
			d := make(chan error, 1)
			dones = append(dones, d)
			go func() {
				rep, err := tr.RoundTrip(ctx, sunrpctest.ReadRequest(xid, sunrpctest.Control{Tag: tag, Action: sunrpctest.Hold}, tag, 64<<10, make([]byte, 64<<10)))
				if err == nil {
					err = sunrpctest.CheckRead(rep, xid, tag, 64<<10)
					rep.Release()
				}
				d <- err
			}()
		}
		for _, tag := range tags {
			if err := h.WaitArrival(ctx, tag, 1); err != nil {
				t.Fatal(err)
			}
		}
		return tags, dones
	}
	if rep, err := tr.RoundTrip(ctx, sunrpctest.NullRequest(1)); err != nil {
		t.Fatal(err)
	} else {
		rep.Release()
	}
	// Flushes that take a while to complete: a teardown that does not wait
	// for them destroys the QP first.
	slowFlush := func() {
		qps := srv.QPs()
		qps[len(qps)-1].Peer().DelaySendCompletions(30 * time.Millisecond)
	}
	tags, dones := held(100)
	slowFlush()
	srv.Disconnect()
	for _, tag := range tags {
		h.Release(tag)
	}
	for _, d := range dones {
		if err := <-d; err != nil {
			t.Fatal(err)
		}
	}
	// An idle connection (no call outstanding, nobody reaping its
	// receive CQ) lost: the teardown must still reap its flushes.
	if rep, err := tr.RoundTrip(ctx, sunrpctest.NullRequest(2)); err != nil {
		t.Fatal(err)
	} else {
		rep.Release()
	}
	waitFor(t, "nobody to reap the idle connection", func() bool {
		tr.mu.Lock()
		c := tr.cn
		tr.mu.Unlock()
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.reaper == reapNone
	})
	slowFlush()
	srv.Disconnect()
	waitFor(t, "the idle connection's teardown and a new connection", func() bool { return tr.Counters().Reconnects == 2 })
	// A first reply on the new connection grants more than one credit.
	if rep, err := tr.RoundTrip(ctx, sunrpctest.NullRequest(3)); err != nil {
		t.Fatal(err)
	} else {
		rep.Release()
	}
	_, dones = held(200)
	slowFlush()
	tr.Close()
	for _, d := range dones {
		<-d
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed < 3 {
		t.Fatalf("%d QPs destroyed, want 3", d.closed)
	}
	for _, v := range d.violations {
		t.Error(v)
	}
}
