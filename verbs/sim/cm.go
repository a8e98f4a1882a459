package sim

import (
	"context"
	"net/netip"
	"syscall"

	"github.com/nfsrdma/nfsrdma/verbs"
)

type epState int

const (
	epIdle       epState = iota // resolved, not connected
	epConnecting                // Connect waiting for the peer
	epRequested                 // server side: a request not yet accepted or rejected
	epConnected
	epDisconnected
	epRejected
)

// Endpoint is a simulated rdma_cm id.
type Endpoint struct {
	f        *Fabric
	dev      *Device
	local    netip.AddrPort
	remote   netip.AddrPort
	server   bool
	state    epState
	qp       *QP
	peer     *Endpoint
	req      *connRequest
	privData []byte // server side: the private data of the request
	events   chan verbs.CMEvent
	closed   bool
}

// connRequest is a connection request on its way from Connect to a
// listener's Accept and the server endpoint's Accept or Reject.
type connRequest struct {
	client, server *Endpoint
	param          verbs.ConnParam
	done           chan struct{} // closed when decided
	decided        bool
	accepted       bool
	reply          []byte // accept or reject private data
	canceled       bool   // the client gave up
}

var _ verbs.Endpoint = (*Endpoint)(nil)

const eventBuffer = 8

// Resolve returns an unconnected endpoint toward addr through the first
// device. It succeeds whether or not anything listens there (address
// resolution does not ask the peer); Connect finds out.
func (f *Fabric) Resolve(ctx context.Context, addr netip.AddrPort) (verbs.Endpoint, error) {
	if err := ctx.Err(); err != nil {
		return nil, opErr("rdma_resolve_addr", addr.String(), err, "")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, verbs.ErrClosed
	}
	if !addr.IsValid() || addr.Port() == 0 || addr.Addr().IsUnspecified() {
		return nil, opErr("rdma_resolve_addr", addr.String(), syscall.EINVAL, "need a specific address and port")
	}
	ep := f.newEndpointLocked(netip.AddrPortFrom(addr.Addr(), f.freePortLocked(addr.Addr())), addr, false)
	return ep, nil
}

func (f *Fabric) newEndpointLocked(local, remote netip.AddrPort, server bool) *Endpoint {
	ep := &Endpoint{f: f, dev: f.hw[0].cmCtx, local: local, remote: remote, server: server,
		events: make(chan verbs.CMEvent, eventBuffer)}
	if server {
		ep.state = epRequested
	}
	f.live.Endpoints++
	f.addLocked(ep)
	return ep
}

// freePortLocked picks a port no listener uses on ip.
func (f *Fabric) freePortLocked(ip netip.Addr) uint16 {
	for {
		f.nextPort++
		if f.nextPort < 20000 {
			f.nextPort = 20000
		}
		p := f.nextPort
		if f.listeners[netip.AddrPortFrom(ip, p)] == nil && f.listeners[netip.AddrPortFrom(netip.IPv4Unspecified(), p)] == nil &&
			f.listeners[netip.AddrPortFrom(netip.IPv6Unspecified(), p)] == nil {
			return p
		}
	}
}

// Listen binds a listener to addr; port 0 picks a free port; an
// unspecified address listens on every address.
func (f *Fabric) Listen(addr netip.AddrPort) (verbs.Listener, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, verbs.ErrClosed
	}
	if !addr.IsValid() {
		return nil, opErr("rdma_bind_addr", addr.String(), syscall.EINVAL, "invalid address")
	}
	if addr.Port() == 0 {
		addr = netip.AddrPortFrom(addr.Addr(), f.freePortLocked(addr.Addr()))
	}
	if f.listeners[addr] != nil {
		return nil, opErr("rdma_bind_addr", addr.String(), syscall.EADDRINUSE, "another listener has this address")
	}
	l := &Listener{f: f, addr: addr, done: make(chan struct{})}
	f.listeners[addr] = l
	f.live.Endpoints++ // a listening rdma_cm id
	f.addLocked(l)
	return l, nil
}

// listenerForLocked finds the listener a connection to addr reaches.
func (f *Fabric) listenerForLocked(addr netip.AddrPort) *Listener {
	if l := f.listeners[addr]; l != nil {
		return l
	}
	unspec := netip.IPv4Unspecified()
	if addr.Addr().Is6() && !addr.Addr().Is4In6() {
		unspec = netip.IPv6Unspecified()
	}
	return f.listeners[netip.AddrPortFrom(unspec, addr.Port())]
}

func (ep *Endpoint) Device() verbs.Device       { return ep.dev }
func (ep *Endpoint) LocalAddr() netip.AddrPort  { return ep.local }
func (ep *Endpoint) RemoteAddr() netip.AddrPort { return ep.remote }
func (ep *Endpoint) Events() <-chan verbs.CMEvent {
	return ep.events
}
func (ep *Endpoint) isClosed() bool { return ep.closed }

// QP returns the endpoint's QP, or nil.
func (ep *Endpoint) QP() *QP {
	ep.f.mu.Lock()
	defer ep.f.mu.Unlock()
	if ep.qp == nil || ep.qp.closed {
		return nil
	}
	return ep.qp
}

// PrivateData is the private data of the peer's connection request.
func (ep *Endpoint) PrivateData() []byte {
	ep.f.mu.Lock()
	defer ep.f.mu.Unlock()
	return append([]byte(nil), ep.privData...)
}

// CreateQP creates the endpoint's RC QP in state INIT. pd and the CQs must
// be on the endpoint's device.
func (ep *Endpoint) CreateQP(pd verbs.PD, cfg verbs.QPConfig) (verbs.QP, error) {
	f := ep.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || ep.closed {
		return nil, verbs.ErrClosed
	}
	obj := ep.local.String()
	if ep.qp != nil && !ep.qp.closed {
		return nil, opErr("rdma_create_qp", obj, syscall.EEXIST, "the endpoint already has a QP")
	}
	if ep.state != epIdle && ep.state != epRequested {
		return nil, opErr("rdma_create_qp", obj, syscall.EINVAL, "the endpoint is past connecting")
	}
	p, ok := pd.(*PD)
	if !ok || p == nil || p.f != f || p.closed || p.dev.hw != ep.dev.hw {
		return nil, opErr("rdma_create_qp", obj, syscall.EINVAL, "the PD must be a live PD of the endpoint's device")
	}
	scq, ok1 := cfg.SendCQ.(*CQ)
	rcq, ok2 := cfg.RecvCQ.(*CQ)
	if !ok1 || !ok2 || scq == nil || rcq == nil || scq.f != f || rcq.f != f || scq.closed || rcq.closed ||
		scq.dev.hw != ep.dev.hw || rcq.dev.hw != ep.dev.hw {
		return nil, opErr("rdma_create_qp", obj, syscall.EINVAL, "the CQs must be live CQs of the endpoint's device")
	}
	attr := ep.dev.hw.attr
	switch {
	case cfg.MaxSendWR < 1 || cfg.MaxSendWR > attr.MaxQPWR, cfg.MaxRecvWR < 0 || cfg.MaxRecvWR > attr.MaxQPWR:
		return nil, opErr("rdma_create_qp", obj, syscall.EINVAL, "queue depths %d/%d not in [1, %d]", cfg.MaxSendWR, cfg.MaxRecvWR, attr.MaxQPWR)
	case cfg.MaxSendSGE < 0 || cfg.MaxSendSGE > attr.MaxSGE, cfg.MaxRecvSGE < 0 || cfg.MaxRecvSGE > attr.MaxSGE:
		return nil, opErr("rdma_create_qp", obj, syscall.EINVAL, "SGE counts %d/%d not in [0, %d]", cfg.MaxSendSGE, cfg.MaxRecvSGE, attr.MaxSGE)
	case cfg.MaxInlineData < 0 || cfg.MaxInlineData > MaxInlineData:
		return nil, opErr("rdma_create_qp", obj, syscall.EINVAL, "inline size %d not in [0, %d]", cfg.MaxInlineData, MaxInlineData)
	}
	q := &QP{f: f, ep: ep, pd: p, scq: scq, rcq: rcq, num: f.nextQPN, signalAll: cfg.SignalAll, state: verbs.QPInit,
		caps: verbs.QPCaps{MaxSendWR: cfg.MaxSendWR, MaxRecvWR: cfg.MaxRecvWR, MaxSendSGE: cfg.MaxSendSGE,
			MaxRecvSGE: cfg.MaxRecvSGE, MaxInlineData: cfg.MaxInlineData}}
	q.faults.corrupt = -1
	f.nextQPN++
	scq.refs++
	rcq.refs++
	p.children++
	ep.qp = q
	f.qps = append(f.qps, q)
	f.live.QPs++
	f.addLocked(q)
	return q, nil
}

// Connect sends a connection request to the endpoint's address and waits
// for the peer's Accept (returning its private data) or Reject
// (ECONNREFUSED, with the reject's private data). No listener there:
// ECONNREFUSED at once.
func (ep *Endpoint) Connect(ctx context.Context, p verbs.ConnParam) ([]byte, error) {
	f := ep.f
	obj := ep.remote.String()
	f.mu.Lock()
	switch {
	case f.closed || ep.closed:
		f.mu.Unlock()
		return nil, verbs.ErrClosed
	case ep.server || ep.state != epIdle:
		f.mu.Unlock()
		return nil, opErr("rdma_connect", obj, syscall.EINVAL, "only a resolved, unconnected endpoint connects")
	case ep.qp == nil || ep.qp.closed:
		f.mu.Unlock()
		return nil, opErr("rdma_connect", obj, syscall.EINVAL, "create the QP before connecting")
	case len(p.PrivateData) > maxConnectPrivateData:
		f.mu.Unlock()
		return nil, opErr("rdma_connect", obj, syscall.EINVAL, "%d bytes of private data; at most %d", len(p.PrivateData), maxConnectPrivateData)
	}
	l := f.listenerForLocked(ep.remote)
	if l == nil || l.closed || len(l.backlog) >= 1024 {
		f.mu.Unlock()
		return nil, opErr("rdma_connect", obj, syscall.ECONNREFUSED, "no listener at this address (connection rejected)")
	}
	p.PrivateData = append([]byte(nil), p.PrivateData...)
	req := &connRequest{client: ep, param: p, done: make(chan struct{})}
	l.backlog = append(l.backlog, req)
	l.wakeLocked()
	ep.state = epConnecting
	ep.req = req
	f.mu.Unlock()

	err := waitCtx(ctx, req.done)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil && !req.decided {
		req.canceled = true
		ep.state = epIdle
		ep.req = nil
		return nil, opErr("rdma_connect", obj, err, "")
	}
	ep.req = nil
	if !req.accepted {
		ep.state = epIdle
		if ep.closed {
			return nil, verbs.ErrClosed
		}
		return append([]byte(nil), req.reply...), opErr("rdma_connect", obj, syscall.ECONNREFUSED, "the peer rejected the connection")
	}
	return append([]byte(nil), req.reply...), nil
}

// Accept accepts the connection request the endpoint came with, connecting
// both QPs (RTS), and returns at ESTABLISHED.
func (ep *Endpoint) Accept(ctx context.Context, p verbs.ConnParam) error {
	f := ep.f
	obj := ep.remote.String()
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.closed || ep.closed:
		return verbs.ErrClosed
	case !ep.server || ep.state != epRequested:
		return opErr("rdma_accept", obj, syscall.EINVAL, "only an endpoint from Listener.Accept, not yet accepted or rejected, accepts")
	case ep.qp == nil || ep.qp.closed:
		return opErr("rdma_accept", obj, syscall.EINVAL, "create the QP before accepting")
	case len(p.PrivateData) > maxAcceptPrivateData:
		return opErr("rdma_accept", obj, syscall.EINVAL, "%d bytes of private data; at most %d", len(p.PrivateData), maxAcceptPrivateData)
	case ctx.Err() != nil:
		return opErr("rdma_accept", obj, ctx.Err(), "")
	}
	req := ep.req
	c := req.client
	if req.canceled || req.decided || c.closed || c.qp == nil || c.qp.closed {
		ep.state = epDisconnected
		return opErr("rdma_accept", obj, syscall.ECONNABORTED, "the peer gave up connecting")
	}
	cq, sq := c.qp, ep.qp
	if cq.state != verbs.QPInit || sq.state != verbs.QPInit {
		return opErr("rdma_accept", obj, syscall.EINVAL, "a QP is in state %s/%s, not INIT", cq.state, sq.state)
	}
	cq.peer, sq.peer = sq, cq
	cq.state, sq.state = verbs.QPRTS, verbs.QPRTS
	// As the IB CM negotiates them: each side's RNR retry count and
	// responder resources are what its peer offered.
	cq.rnrRetry, sq.rnrRetry = p.RNRRetryCount, req.param.RNRRetryCount
	cq.readOK, sq.readOK = p.ResponderResources > 0, req.param.ResponderResources > 0
	c.peer, ep.peer = ep, c
	c.state, ep.state = epConnected, epConnected
	req.decided, req.accepted = true, true
	req.reply = append([]byte(nil), p.PrivateData...)
	close(req.done)
	ep.req = nil
	f.kickLocked()
	return nil
}

// Reject rejects the connection request with private data.
func (ep *Endpoint) Reject(privateData []byte) error {
	f := ep.f
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.closed || ep.closed:
		return verbs.ErrClosed
	case !ep.server || ep.state != epRequested:
		return opErr("rdma_reject", ep.remote.String(), syscall.EINVAL, "only an endpoint from Listener.Accept, not yet accepted or rejected, rejects")
	case len(privateData) > maxRejectPrivateData:
		return opErr("rdma_reject", ep.remote.String(), syscall.EINVAL, "%d bytes of private data; at most %d", len(privateData), maxRejectPrivateData)
	}
	ep.rejectLocked(privateData)
	return nil
}

func (ep *Endpoint) rejectLocked(privateData []byte) {
	ep.state = epRejected
	if req := ep.req; req != nil && !req.decided {
		req.decided = true
		req.reply = append([]byte(nil), privateData...)
		close(req.done)
	}
	ep.req = nil
}

// Disconnect disconnects: both QPs move to the error state and both
// endpoints get CMDisconnected. Disconnecting again does nothing.
func (ep *Endpoint) Disconnect() error {
	f := ep.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if ep.closed {
		return verbs.ErrClosed
	}
	if ep.state != epConnected && ep.state != epDisconnected {
		return opErr("rdma_disconnect", ep.remote.String(), syscall.EINVAL, "not connected")
	}
	ep.disconnectLocked()
	return nil
}

// disconnectLocked tears the connection down, from this side or the
// network's.
func (ep *Endpoint) disconnectLocked() {
	if ep.state != epConnected {
		return
	}
	for _, e := range []*Endpoint{ep, ep.peer} {
		if e == nil || e.closed || e.state != epConnected {
			continue
		}
		e.state = epDisconnected
		if e.qp != nil {
			e.qp.toErrorLocked()
		}
		e.emitLocked(verbs.CMDisconnected)
	}
}

func (ep *Endpoint) emitLocked(t verbs.CMEventType) {
	select {
	case ep.events <- verbs.CMEvent{Type: t, At: ep.f.nowLocked()}:
	default:
		ep.f.anomalies.DroppedCMEvents++
	}
}

// Close destroys the endpoint; EBUSY while its QP is live. A connected
// endpoint disconnects first (the peer gets CMDisconnected); a request not
// yet accepted is rejected. Events is closed.
func (ep *Endpoint) Close() error {
	ep.f.mu.Lock()
	defer ep.f.mu.Unlock()
	return ep.closeLocked(false)
}

func (ep *Endpoint) closeLocked(force bool) error {
	if ep.closed {
		return nil
	}
	if ep.qp != nil && !ep.qp.closed {
		if !force {
			return opErr("rdma_destroy_id", ep.local.String(), syscall.EBUSY, "close the endpoint's QP first")
		}
		ep.qp.closeLocked(true)
	}
	switch ep.state {
	case epConnected:
		ep.disconnectLocked()
	case epRequested:
		ep.rejectLocked(nil)
	case epConnecting:
		if r := ep.req; r != nil && !r.decided {
			r.canceled, r.decided = true, true
			close(r.done)
		}
	}
	ep.closed = true
	close(ep.events)
	ep.f.live.Endpoints--
	return nil
}

// Listener is a simulated listening rdma_cm id.
type Listener struct {
	f       *Fabric
	addr    netip.AddrPort
	backlog []*connRequest
	notify  chan struct{} // closed when a request arrives
	done    chan struct{} // closed by Close
	closed  bool
}

var _ verbs.Listener = (*Listener)(nil)

func (l *Listener) Addr() netip.AddrPort { return l.addr }
func (l *Listener) isClosed() bool       { return l.closed }

func (l *Listener) wakeLocked() {
	if l.notify != nil {
		close(l.notify)
		l.notify = nil
	}
}

// Accept waits for a connection request and returns its endpoint,
// unaccepted.
func (l *Listener) Accept(ctx context.Context) (verbs.Endpoint, error) {
	f := l.f
	for {
		f.mu.Lock()
		if l.closed || f.closed {
			f.mu.Unlock()
			return nil, verbs.ErrClosed
		}
		for len(l.backlog) > 0 {
			req := l.backlog[0]
			l.backlog[0] = nil
			l.backlog = l.backlog[1:]
			if req.canceled || req.decided || req.client.closed {
				continue
			}
			local := l.addr
			if local.Addr().IsUnspecified() {
				local = req.client.remote
			}
			ep := f.newEndpointLocked(local, req.client.local, true)
			ep.req = req
			ep.privData = req.param.PrivateData
			req.server = ep
			f.mu.Unlock()
			return ep, nil
		}
		if l.notify == nil {
			l.notify = make(chan struct{})
		}
		ch := l.notify
		f.mu.Unlock()
		select {
		case <-ch:
		case <-l.done:
		case <-ctx.Done():
			return nil, opErr("rdma_get_cm_event", l.addr.String(), ctx.Err(), "waiting for a connection request")
		}
	}
}

// Close stops listening; pending requests are rejected. Endpoints already
// accepted are not affected.
func (l *Listener) Close() error {
	l.f.mu.Lock()
	defer l.f.mu.Unlock()
	return l.closeLocked(false)
}

func (l *Listener) closeLocked(bool) error {
	if l.closed {
		return nil
	}
	l.closed = true
	for _, req := range l.backlog {
		if !req.decided {
			req.decided = true
			close(req.done)
		}
	}
	l.backlog = nil
	delete(l.f.listeners, l.addr)
	close(l.done)
	l.f.live.Endpoints--
	return nil
}
