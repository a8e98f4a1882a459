//go:build linux && cgo

package ibv

/*
#include "shim.h"
*/
import "C"

import (
	"maps"
	"sync"
	"time"
)

// A process that has no rdma_cm id left still has librdmacm's context of
// every device it used open, and rxe cannot take a device from under a
// process (it has no way to disassociate a context): `rdma link delete`
// then waits until the process exits. With no id, no DEVICE_REMOVAL event
// comes to tell this binding (letRemovedDeviceGo handles the case with
// ids). So while the process has no id, the devices its ids used are
// watched, once a second, and a device that has left the device list is
// let go as letRemovedDeviceGo does (releaseRemovedDevice). The watch
// stops when an id is made again or every device it watched is gone.
var cmIdle struct {
	mu   sync.Mutex
	ids  int                               // live rdma_cm ids (endpoints and listeners)
	devs map[uintptr]C.struct_nr_dev_files // device → its context's files
	// The watcher, while it runs: closing stop ends it, done is closed
	// when it has ended.
	stop, done chan struct{}
	// due is when the watch looks next (zero: no watch). It is kept when
	// an id stops the watcher and the next one starts it again, so that
	// ids made and destroyed more often than idleWatchPeriod (a client
	// trying to reconnect) do not put the look off for ever.
	due time.Time
}

// idleWatchPeriod is how often an idle process checks its devices.
const idleWatchPeriod = time.Second

// cmIDMade counts a new id; a watcher still running is ended first (and
// waited for: it is not left behind an application's new connection).
func cmIDMade() {
	cmIdle.mu.Lock()
	cmIdle.ids++
	stop, done := cmIdle.stop, cmIdle.done
	cmIdle.stop, cmIdle.done = nil, nil
	cmIdle.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}

// cmIDGone is called before rdma_destroy_id of an id that cmIDMade counted.
func cmIDGone(id *C.struct_rdma_cm_id) {
	dev := uintptr(C.nr_cm_dev(id))
	var files C.struct_nr_dev_files
	C.nr_cm_dev_files(id, &files)
	cmIdle.mu.Lock()
	defer cmIdle.mu.Unlock()
	cmIdle.ids--
	if dev != 0 {
		if cmIdle.devs == nil {
			cmIdle.devs = make(map[uintptr]C.struct_nr_dev_files)
		}
		cmIdle.devs[dev] = files
	}
	if cmIdle.ids == 0 && len(cmIdle.devs) > 0 && cmIdle.stop == nil {
		if cmIdle.due.IsZero() {
			cmIdle.due = time.Now().Add(idleWatchPeriod)
		}
		cmIdle.stop, cmIdle.done = make(chan struct{}), make(chan struct{})
		go watchIdleDevices(cmIdle.stop, cmIdle.done, cmIdle.due)
	}
}

// watchIdleDevices looks at the watched devices at due and every
// idleWatchPeriod after, until stop is closed or none is left.
func watchIdleDevices(stop <-chan struct{}, done chan<- struct{}, due time.Time) {
	defer close(done)
	t := time.NewTimer(time.Until(due))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return // an id again: its events (DEVICE_REMOVAL) take over
		case <-t.C:
		}
		cmIdle.mu.Lock()
		devs := maps.Clone(cmIdle.devs)
		cmIdle.mu.Unlock()
		for dev, files := range devs {
			if C.nr_dev_listed(C.uintptr_t(dev)) != 0 || !releaseRemovedDevice(&files) {
				continue
			}
			cmIdle.mu.Lock()
			delete(cmIdle.devs, dev)
			cmIdle.mu.Unlock()
		}
		cmIdle.mu.Lock()
		if len(cmIdle.devs) == 0 && cmIdle.stop != nil {
			// Nothing left to watch: this watcher is done (unless an id
			// already took it over and is waiting for done).
			cmIdle.stop, cmIdle.done, cmIdle.due = nil, nil, time.Time{}
			cmIdle.mu.Unlock()
			return
		}
		cmIdle.due = time.Now().Add(idleWatchPeriod)
		t.Reset(idleWatchPeriod)
		cmIdle.mu.Unlock()
	}
}
