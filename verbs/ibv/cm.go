//go:build linux && cgo

package ibv

/*
#include <stdlib.h>
#include <errno.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/nfsrdma/nfsrdma/verbs"
)

// cmChannel is an rdma_event_channel waited on through the netpoller.
type cmChannel struct {
	ch *C.struct_rdma_event_channel
	fd *pollFD
	mu sync.Mutex
}

func newCMChannel() (*cmChannel, error) {
	ch, err := C.rdma_create_event_channel()
	if ch == nil {
		hint := ""
		if err == syscall.ENOENT || err == syscall.ENODEV {
			hint = "no rdma_cm: load rdma_ucm and create an RDMA device ('rdma link add rxe0 type rxe netdev IFACE')"
		}
		return nil, &verbs.OpError{Verb: "rdma_create_event_channel", Err: err, Hint: hint}
	}
	fd, perr := newPollFD(int(ch.fd), "rdma_cm")
	if perr != nil {
		C.rdma_destroy_event_channel(ch)
		return nil, &verbs.OpError{Verb: "rdma_cm event fd", Err: perr}
	}
	return &cmChannel{ch: ch, fd: fd}, nil
}

func (c *cmChannel) close() {
	c.fd.close()
	C.rdma_destroy_event_channel(c.ch)
}

// next waits for the next CM event.
func (c *cmChannel) next(ctx context.Context) (C.struct_nr_cm_event, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ev C.struct_nr_cm_event
	var gerr error
	err := c.fd.wait(ctx, func() bool {
		r := C.nr_get_cm_event(c.ch, &ev)
		switch r {
		case 0:
			return true
		case C.EAGAIN:
			return false
		}
		gerr = &verbs.OpError{Verb: "rdma_get_cm_event", Err: syscall.Errno(r)}
		return true
	})
	if err != nil {
		return ev, err
	}
	return ev, gerr
}

var cmEventNames = map[C.int]string{
	C.RDMA_CM_EVENT_ADDR_RESOLVED: "ADDR_RESOLVED", C.RDMA_CM_EVENT_ADDR_ERROR: "ADDR_ERROR",
	C.RDMA_CM_EVENT_ROUTE_RESOLVED: "ROUTE_RESOLVED", C.RDMA_CM_EVENT_ROUTE_ERROR: "ROUTE_ERROR",
	C.RDMA_CM_EVENT_CONNECT_REQUEST: "CONNECT_REQUEST", C.RDMA_CM_EVENT_CONNECT_ERROR: "CONNECT_ERROR",
	C.RDMA_CM_EVENT_UNREACHABLE: "UNREACHABLE", C.RDMA_CM_EVENT_REJECTED: "REJECTED",
	C.RDMA_CM_EVENT_ESTABLISHED: "ESTABLISHED", C.RDMA_CM_EVENT_DISCONNECTED: "DISCONNECTED",
	C.RDMA_CM_EVENT_DEVICE_REMOVAL: "DEVICE_REMOVAL", C.RDMA_CM_EVENT_ADDR_CHANGE: "ADDR_CHANGE",
	C.RDMA_CM_EVENT_TIMEWAIT_EXIT: "TIMEWAIT_EXIT",
}

func cmEventName(e C.int) string {
	if n, ok := cmEventNames[e]; ok {
		return n
	}
	return fmt.Sprintf("event %d", int(e))
}

// endpoint is an rdma_cm_id with its own event channel.
type endpoint struct {
	f       *Fabric
	ch      *cmChannel
	id      *C.struct_rdma_cm_id
	dev     *device
	qp      atomic.Pointer[queuePair]
	peerPD  []byte
	events  chan verbs.CMEvent
	stop    chan struct{}
	mu      sync.Mutex // serializes the event loop's actions with QP destruction
	started bool
	loop    sync.WaitGroup
	closed  atomic.Bool
	// removedDev is the address of the libibverbs device a
	// DEVICE_REMOVAL named (0: none), only ever compared.
	removedDev   atomic.Uintptr
	removedFiles atomic.Pointer[C.struct_nr_dev_files] // its context's files
}

func newEndpoint(f *Fabric, ch *cmChannel, id *C.struct_rdma_cm_id) *endpoint {
	f.live.endpoints.Add(1)
	cmIDMade()
	return &endpoint{f: f, ch: ch, id: id, events: make(chan verbs.CMEvent, 8), stop: make(chan struct{})}
}

func ipBytes(a netip.Addr) []byte {
	if a.Is4() || a.Is4In6() {
		b := a.Unmap().As4()
		return b[:]
	}
	b := a.As16()
	return b[:]
}

// Resolve resolves the address and route to addr.
func (f *Fabric) Resolve(ctx context.Context, addr netip.AddrPort) (verbs.Endpoint, error) {
	ch, err := newCMChannel()
	if err != nil {
		return nil, err
	}
	var id *C.struct_rdma_cm_id
	if r, err := C.rdma_create_id(ch.ch, &id, nil, C.RDMA_PS_TCP); r != 0 {
		ch.close()
		return nil, &verbs.OpError{Verb: "rdma_create_id", Object: addr.String(), Err: err}
	}
	ep := newEndpoint(f, ch, id)
	fail := func(e error) (verbs.Endpoint, error) { ep.Close(); return nil, e }
	ip := ipBytes(addr.Addr())
	timeout := 5000
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(100, min(timeout, int(time.Until(dl)/time.Millisecond)))
	}
	if r := C.nr_resolve_addr(id, (*C.uint8_t)(unsafe.Pointer(&ip[0])), C.int(len(ip)), C.uint16_t(addr.Port()), C.int(timeout)); r != 0 {
		return fail(&verbs.OpError{Verb: "rdma_resolve_addr", Object: addr.String(), Err: syscall.Errno(r), Hint: "is there an RDMA device on a network that reaches it?"})
	}
	if err := ep.expect(ctx, "rdma_resolve_addr", addr, C.RDMA_CM_EVENT_ADDR_RESOLVED); err != nil {
		return fail(err)
	}
	if r, err := C.rdma_resolve_route(id, C.int(timeout)); r != 0 {
		return fail(&verbs.OpError{Verb: "rdma_resolve_route", Object: addr.String(), Err: err})
	}
	if err := ep.expect(ctx, "rdma_resolve_route", addr, C.RDMA_CM_EVENT_ROUTE_RESOLVED); err != nil {
		return fail(err)
	}
	if id.verbs == nil {
		return fail(&verbs.OpError{Verb: "rdma_resolve_addr", Object: addr.String(), Err: syscall.ENODEV, Hint: "the route does not go through an RDMA device"})
	}
	dev, err := newDevice(f, id.verbs, false)
	if err != nil {
		return fail(err)
	}
	ep.dev = dev
	return ep, nil
}

// expect waits for the event want; any other event is an error naming it.
func (ep *endpoint) expect(ctx context.Context, verb string, addr netip.AddrPort, want C.int) error {
	ev, err := ep.ch.next(ctx)
	if err != nil {
		return &verbs.OpError{Verb: verb, Object: addr.String(), Err: err}
	}
	if ev.event == want {
		if want == C.RDMA_CM_EVENT_ESTABLISHED {
			ep.peerPD = C.GoBytes(unsafe.Pointer(&ev.pd[0]), ev.pd_len)
		}
		return nil
	}
	oe := &verbs.OpError{Verb: verb, Object: addr.String()}
	switch ev.event {
	case C.RDMA_CM_EVENT_REJECTED:
		oe.Err = syscall.ECONNREFUSED
		oe.Hint = fmt.Sprintf("the peer rejected the connection (reason %d); is the server listening on this port over RDMA?", int(ev.status))
	case C.RDMA_CM_EVENT_UNREACHABLE:
		oe.Err = syscall.EHOSTUNREACH
		oe.Hint = "the peer is unreachable"
	case C.RDMA_CM_EVENT_ADDR_ERROR, C.RDMA_CM_EVENT_ROUTE_ERROR, C.RDMA_CM_EVENT_CONNECT_ERROR:
		oe.Err = syscall.Errno(-ev.status)
		if ev.status >= 0 {
			oe.Err = syscall.EIO
		}
		oe.Hint = cmEventName(ev.event)
	default:
		oe.Err = syscall.EPROTO
		oe.Hint = "unexpected rdma_cm event " + cmEventName(ev.event)
	}
	return oe
}

func (ep *endpoint) Device() verbs.Device { return ep.dev }

func (ep *endpoint) CreateQP(pd verbs.PD, cfg verbs.QPConfig) (verbs.QP, error) {
	p, ok := pd.(*protDomain)
	scq, ok2 := cfg.SendCQ.(*compQueue)
	rcq, ok3 := cfg.RecvCQ.(*compQueue)
	if !ok || !ok2 || !ok3 {
		return nil, &verbs.OpError{Verb: "rdma_create_qp", Err: syscall.EINVAL, Hint: "PD and CQs must come from verbs/ibv"}
	}
	if ep.qp.Load() != nil {
		return nil, &verbs.OpError{Verb: "rdma_create_qp", Err: syscall.EEXIST, Hint: "the endpoint already has a QP"}
	}
	sig := 0
	if cfg.SignalAll {
		sig = 1
	}
	var caps [5]C.int
	qp, err := C.nr_create_qp(ep.id, p.pd, scq.cq, rcq.cq, C.int(cfg.MaxSendWR), C.int(cfg.MaxRecvWR),
		C.int(max(cfg.MaxSendSGE, 1)), C.int(max(cfg.MaxRecvSGE, 1)), C.int(cfg.MaxInlineData), C.int(sig), &caps[0])
	if qp == nil {
		return nil, &verbs.OpError{Verb: "rdma_create_qp", Object: fmt.Sprintf("%s sq %d rq %d", ep.dev.attr.Name, cfg.MaxSendWR, cfg.MaxRecvWR), Err: err}
	}
	q := &queuePair{ep: ep, qp: qp, caps: verbs.QPCaps{
		MaxSendWR: int(caps[0]), MaxRecvWR: int(caps[1]), MaxSendSGE: int(caps[2]), MaxRecvSGE: int(caps[3]), MaxInlineData: int(caps[4]),
	}}
	q.swr = (*C.struct_nr_swr)(C.calloc(maxChain, C.size_t(unsafe.Sizeof(C.struct_nr_swr{}))))
	q.rwr = (*C.struct_nr_rwr)(C.calloc(maxChain, C.size_t(unsafe.Sizeof(C.struct_nr_rwr{}))))
	q.ssge = (*C.struct_nr_sge)(C.calloc(maxSGEs, C.size_t(unsafe.Sizeof(C.struct_nr_sge{}))))
	q.rsge = (*C.struct_nr_sge)(C.calloc(maxSGEs, C.size_t(unsafe.Sizeof(C.struct_nr_sge{}))))
	ep.qp.Store(q)
	ep.f.live.qps.Add(1)
	return q, nil
}

func connParam(p verbs.ConnParam) (unsafe.Pointer, C.int, func()) {
	if len(p.PrivateData) == 0 {
		return nil, 0, func() {}
	}
	cp := C.CBytes(p.PrivateData)
	return cp, C.int(len(p.PrivateData)), func() { C.free(cp) }
}

func (ep *endpoint) Connect(ctx context.Context, p verbs.ConnParam) ([]byte, error) {
	addr := ep.RemoteAddr()
	pd, n, free := connParam(p)
	defer free()
	if r := C.nr_connect(ep.id, pd, n, C.int(p.ResponderResources), C.int(p.InitiatorDepth), C.int(p.RetryCount), C.int(p.RNRRetryCount)); r != 0 {
		return nil, &verbs.OpError{Verb: "rdma_connect", Object: addr.String(), Err: syscall.Errno(r)}
	}
	if err := ep.expect(ctx, "rdma_connect", addr, C.RDMA_CM_EVENT_ESTABLISHED); err != nil {
		return nil, err
	}
	ep.startEvents()
	return ep.peerPD, nil
}

func (ep *endpoint) PrivateData() []byte { return ep.peerPD }

func (ep *endpoint) Accept(ctx context.Context, p verbs.ConnParam) error {
	addr := ep.RemoteAddr()
	pd, n, free := connParam(p)
	defer free()
	if r := C.nr_accept(ep.id, pd, n, C.int(p.ResponderResources), C.int(p.InitiatorDepth), C.int(p.RetryCount), C.int(p.RNRRetryCount)); r != 0 {
		return &verbs.OpError{Verb: "rdma_accept", Object: addr.String(), Err: syscall.Errno(r)}
	}
	saved := ep.peerPD
	if err := ep.expect(ctx, "rdma_accept", addr, C.RDMA_CM_EVENT_ESTABLISHED); err != nil {
		return err
	}
	ep.peerPD = saved
	ep.startEvents()
	return nil
}

func (ep *endpoint) Reject(privateData []byte) error {
	var pd unsafe.Pointer
	if len(privateData) > 0 {
		pd = C.CBytes(privateData)
		defer C.free(pd)
	}
	if r, err := C.rdma_reject(ep.id, pd, C.uint8_t(len(privateData))); r != 0 {
		return &verbs.OpError{Verb: "rdma_reject", Object: ep.RemoteAddr().String(), Err: err}
	}
	return nil
}

// startEvents delivers the events after ESTABLISHED to Events.
func (ep *endpoint) startEvents() {
	ep.started = true
	ep.loop.Add(1)
	go func() {
		defer ep.loop.Done()
		defer close(ep.events)
		for {
			ev, err := ep.ch.next(context.Background())
			if err != nil {
				return
			}
			var t verbs.CMEventType
			switch ev.event {
			case C.RDMA_CM_EVENT_DISCONNECTED:
				t = verbs.CMDisconnected
				// Answer the peer's disconnect request (the IB CM's DREP),
				// so its side completes too, and normalize: after
				// DISCONNECTED the QP is in the error state, its
				// outstanding WRs flushed.
				ep.mu.Lock()
				if !ep.closed.Load() {
					C.rdma_disconnect(ep.id)
					if q := ep.qp.Load(); q != nil {
						q.SetError()
					}
				}
				ep.mu.Unlock()
			case C.RDMA_CM_EVENT_DEVICE_REMOVAL:
				t = verbs.CMDeviceRemoval
				ep.removedDev.Store(uintptr(C.nr_cm_dev(ep.id)))
				var files C.struct_nr_dev_files
				C.nr_cm_dev_files(ep.id, &files)
				ep.removedFiles.Store(&files)
			case C.RDMA_CM_EVENT_TIMEWAIT_EXIT:
				t = verbs.CMTimewaitExit
			case C.RDMA_CM_EVENT_ADDR_CHANGE:
				t = verbs.CMAddrChange
			case C.RDMA_CM_EVENT_CONNECT_ERROR:
				t = verbs.CMConnectError
			case C.RDMA_CM_EVENT_UNREACHABLE:
				t = verbs.CMUnreachable
			case C.RDMA_CM_EVENT_REJECTED:
				t = verbs.CMRejected
			default:
				continue
			}
			select {
			case ep.events <- verbs.CMEvent{Type: t, At: time.Now()}:
			case <-ep.stop:
				return
			default: // nobody listening and the buffer is full: drop
			}
		}
	}()
}

func (ep *endpoint) Events() <-chan verbs.CMEvent { return ep.events }

func (ep *endpoint) Disconnect() error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.closed.Load() {
		return verbs.ErrClosed
	}
	if r, err := C.rdma_disconnect(ep.id); r != 0 {
		return &verbs.OpError{Verb: "rdma_disconnect", Object: ep.RemoteAddr().String(), Err: err}
	}
	if q := ep.qp.Load(); q != nil {
		q.SetError()
	}
	return nil
}

func (ep *endpoint) addr(peer int) netip.AddrPort {
	var ip [16]byte
	var n C.int
	var port C.uint16_t
	C.nr_addr_of(ep.id, C.int(peer), (*C.uint8_t)(unsafe.Pointer(&ip[0])), &n, &port)
	switch n {
	case 4:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[:4])), uint16(port))
	case 16:
		return netip.AddrPortFrom(netip.AddrFrom16(ip), uint16(port))
	}
	return netip.AddrPort{}
}

func (ep *endpoint) LocalAddr() netip.AddrPort  { return ep.addr(0) }
func (ep *endpoint) RemoteAddr() netip.AddrPort { return ep.addr(1) }

// Close destroys the QP (if the caller has not), the id and its channel.
func (ep *endpoint) Close() error {
	if ep.closed.Swap(true) {
		return nil
	}
	if q := ep.qp.Load(); q != nil {
		q.Close()
	}
	close(ep.stop)
	ep.ch.fd.close() // ends the event loop's wait
	ep.loop.Wait()
	if !ep.started {
		close(ep.events)
	}
	ep.f.live.endpoints.Add(-1)
	cmIDGone(ep.id)
	C.rdma_destroy_id(ep.id)
	C.rdma_destroy_event_channel(ep.ch.ch)
	if dev := ep.removedDev.Load(); dev != 0 {
		files := ep.removedFiles.Load()
		if files == nil {
			files = &C.struct_nr_dev_files{cmd_fd: -1, async_fd: -1}
		}
		ep.f.letRemovedDeviceGo(dev, *files)
	}
	return nil
}

// letRemovedDeviceGo makes librdmacm close its context of a removed device
// once the device has left the device list and no id uses it: the kernel
// cannot finish removing a device (rxe has no way to take it from under a
// process) while any process has it open, and librdmacm notices a removal
// only when it lists its devices — and not at all when no device is left,
// in which case the context's descriptors are released under it. It
// retries in the background until that is done, for at most a minute.
func (f *Fabric) letRemovedDeviceGo(dev uintptr, files C.struct_nr_dev_files) {
	go func() {
		for i := 0; i < 600; i++ {
			if C.nr_dev_listed(C.uintptr_t(dev)) != 0 {
				C.nr_sync_cm_devices()
			} else if releaseRemovedDevice(&files) { // it syncs itself
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
}

// releaseMu serializes the releases of removed devices' files: each one
// looks at descriptors that librdmacm may close while another lists its
// devices.
var releaseMu sync.Mutex

// releaseRemovedDevice is the last step of letting a device that has left
// the device list go: librdmacm lists the devices again (and closes its
// context of the removed one), and when it cannot (no device is left) the
// context's command and async descriptors are released under it. It
// reports whether that is done; not yet when the kernel has still to
// unlink the device's node (nr_release_removed_files), which it does on
// its way to waiting for the device's users: then it is tried again.
func releaseRemovedDevice(files *C.struct_nr_dev_files) bool {
	releaseMu.Lock()
	defer releaseMu.Unlock()
	C.nr_sync_cm_devices()
	return C.nr_release_removed_files(files) != 2
}

// listener is a listening rdma_cm id.
type listener struct {
	f      *Fabric
	ch     *cmChannel
	id     *C.struct_rdma_cm_id
	closed atomic.Bool
}

func (f *Fabric) Listen(addr netip.AddrPort) (verbs.Listener, error) {
	ch, err := newCMChannel()
	if err != nil {
		return nil, err
	}
	var id *C.struct_rdma_cm_id
	if r, err := C.rdma_create_id(ch.ch, &id, nil, C.RDMA_PS_TCP); r != 0 {
		ch.close()
		return nil, &verbs.OpError{Verb: "rdma_create_id", Object: addr.String(), Err: err}
	}
	ip := ipBytes(addr.Addr())
	if r := C.nr_bind_addr(id, (*C.uint8_t)(unsafe.Pointer(&ip[0])), C.int(len(ip)), C.uint16_t(addr.Port())); r != 0 {
		C.rdma_destroy_id(id)
		ch.close()
		return nil, &verbs.OpError{Verb: "rdma_bind_addr", Object: addr.String(), Err: syscall.Errno(r), Hint: "is the address on an RDMA-capable interface?"}
	}
	if r, err := C.rdma_listen(id, 64); r != 0 {
		C.rdma_destroy_id(id)
		ch.close()
		return nil, &verbs.OpError{Verb: "rdma_listen", Object: addr.String(), Err: err}
	}
	f.live.endpoints.Add(1)
	cmIDMade()
	return &listener{f: f, ch: ch, id: id}, nil
}

func (l *listener) Accept(ctx context.Context) (verbs.Endpoint, error) {
	for {
		ev, err := l.ch.next(ctx)
		if err != nil {
			if err == errClosedWait {
				err = verbs.ErrClosed
			}
			return nil, err
		}
		if ev.event != C.RDMA_CM_EVENT_CONNECT_REQUEST {
			continue
		}
		id := ev.id
		ch, err := newCMChannel()
		if err != nil {
			C.rdma_reject(id, nil, 0)
			C.rdma_destroy_id(id)
			return nil, err
		}
		if r, err := C.rdma_migrate_id(id, ch.ch); r != 0 {
			C.rdma_reject(id, nil, 0)
			C.rdma_destroy_id(id)
			ch.close()
			return nil, &verbs.OpError{Verb: "rdma_migrate_id", Err: err}
		}
		ep := newEndpoint(l.f, ch, id)
		ep.peerPD = C.GoBytes(unsafe.Pointer(&ev.pd[0]), ev.pd_len)
		dev, err := newDevice(l.f, id.verbs, false)
		if err != nil {
			ep.Close()
			return nil, err
		}
		ep.dev = dev
		return ep, nil
	}
}

func (l *listener) Addr() netip.AddrPort {
	ep := endpoint{id: l.id}
	return ep.addr(0)
}

func (l *listener) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	l.ch.fd.close()
	l.ch.mu.Lock() // wait for an Accept in progress to leave
	l.ch.mu.Unlock()
	l.f.live.endpoints.Add(-1)
	cmIDGone(l.id)
	C.rdma_destroy_id(l.id)
	C.rdma_destroy_event_channel(l.ch.ch)
	return nil
}
