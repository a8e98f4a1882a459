package sim

import (
	"sync"

	"github.com/nfsrdma/nfsrdma/verbs"
)

// asyncSubs are the subscribers to one simulated device's asynchronous
// events.
type asyncSubs struct {
	mu   sync.Mutex
	subs map[int]chan verbs.AsyncEvent
	next int
}

var _ verbs.AsyncEventSource = (*Device)(nil)

// AsyncEvents subscribes to the device's asynchronous events, which tests
// raise with Fabric.InjectAsyncEvent.
func (d *Device) AsyncEvents() (<-chan verbs.AsyncEvent, func()) {
	a := &d.hw.async
	ch := make(chan verbs.AsyncEvent, 16)
	a.mu.Lock()
	if a.subs == nil {
		a.subs = make(map[int]chan verbs.AsyncEvent)
	}
	id := a.next
	a.next++
	a.subs[id] = ch
	a.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			a.mu.Lock()
			delete(a.subs, id)
			a.mu.Unlock()
			close(ch)
		})
	}
}

// InjectAsyncEvent raises an asynchronous event on the named device (as a
// port going down or a device fault would), for every subscriber. It
// reports whether the device exists.
func (f *Fabric) InjectAsyncEvent(device string, ev verbs.AsyncEvent) bool {
	f.mu.Lock()
	var hw *hwDevice
	for _, d := range f.hw {
		if d.attr.Name == device {
			hw = d
		}
	}
	f.mu.Unlock()
	if hw == nil {
		return false
	}
	a := &hw.async
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ch := range a.subs {
		select {
		case ch <- ev:
		default:
		}
	}
	return true
}
