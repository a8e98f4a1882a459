//go:build linux && cgo

package ibv

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"sync"
	"unsafe"

	"github.com/nfsrdma/nfsrdma/verbs"
)

// asyncHub reads one ibv_context's asynchronous events (its async fd, on
// Go's netpoller) and hands each to every subscriber. librdmacm shares one
// context among all the rdma_cm ids on a device, so the Fabric keeps one
// hub per context; it runs while it has subscribers.
type asyncHub struct {
	f    *Fabric
	key  uintptr
	ctx  *C.struct_ibv_context
	stop context.CancelFunc
	done chan struct{}

	mu   sync.Mutex
	subs map[int]chan verbs.AsyncEvent
	next int
}

var _ verbs.AsyncEventSource = (*device)(nil)

// AsyncEvents subscribes to the device's asynchronous events.
func (d *device) AsyncEvents() (<-chan verbs.AsyncEvent, func()) {
	f := d.f
	key := uintptr(unsafe.Pointer(d.ctx))
	f.asyncMu.Lock()
	defer f.asyncMu.Unlock()
	if f.hubs == nil {
		f.hubs = make(map[uintptr]*asyncHub)
	}
	h := f.hubs[key]
	ch := make(chan verbs.AsyncEvent, 16)
	if h == nil {
		pfd, err := newPollFD(int(d.ctx.async_fd), "ibv-async-"+d.attr.Name)
		if err != nil {
			close(ch) // no events can be read: the subscriber sees none
			return ch, func() {}
		}
		ctx, cancel := context.WithCancel(context.Background())
		h = &asyncHub{f: f, key: key, ctx: d.ctx, stop: cancel, done: make(chan struct{}), subs: make(map[int]chan verbs.AsyncEvent)}
		f.hubs[key] = h
		go h.run(ctx, pfd)
	}
	h.mu.Lock()
	id := h.next
	h.next++
	h.subs[id] = ch
	h.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			f.asyncMu.Lock()
			h.mu.Lock()
			delete(h.subs, id)
			last := len(h.subs) == 0
			h.mu.Unlock()
			if last && f.hubs[key] == h {
				delete(f.hubs, key)
			}
			f.asyncMu.Unlock()
			if last {
				h.stop()
				<-h.done
			}
			close(ch)
		})
	}
}

func (h *asyncHub) run(ctx context.Context, pfd *pollFD) {
	defer close(h.done)
	defer pfd.close()
	for {
		var typ, port C.int
		var qpn C.uint32_t
		var got C.int
		err := pfd.wait(ctx, func() bool {
			got = C.nr_get_async_event(h.ctx, &typ, &port, &qpn)
			return got != 0
		})
		if err != nil || got < 0 {
			return
		}
		ev := verbs.AsyncEvent{Type: asyncType(typ), Port: int(port), QPNum: uint32(qpn)}
		h.mu.Lock()
		for _, ch := range h.subs {
			select {
			case ch <- ev:
			default:
			}
		}
		h.mu.Unlock()
	}
}

func asyncType(t C.int) verbs.AsyncEventType {
	switch t {
	case C.IBV_EVENT_DEVICE_FATAL:
		return verbs.AsyncDeviceFatal
	case C.IBV_EVENT_PORT_ERR:
		return verbs.AsyncPortError
	case C.IBV_EVENT_PORT_ACTIVE:
		return verbs.AsyncPortActive
	case C.IBV_EVENT_QP_FATAL:
		return verbs.AsyncQPFatal
	case C.IBV_EVENT_QP_REQ_ERR:
		return verbs.AsyncQPRequestError
	case C.IBV_EVENT_QP_ACCESS_ERR:
		return verbs.AsyncQPAccessError
	case C.IBV_EVENT_CQ_ERR:
		return verbs.AsyncCQError
	}
	return verbs.AsyncOther
}
