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
// let go as letRemovedDeviceGo does. The watch stops when an id is made
// again or every device it watched is gone.
var cmIdle struct {
	mu       sync.Mutex
	ids      int                // live rdma_cm ids (endpoints and listeners)
	devs     map[uintptr][2]int // device → its context's command and async fds
	watching bool
}

// idleWatchPeriod is how often an idle process checks its devices.
const idleWatchPeriod = time.Second

func cmIDMade() {
	cmIdle.mu.Lock()
	cmIdle.ids++
	cmIdle.mu.Unlock()
}

// cmIDGone is called before rdma_destroy_id of an id that cmIDMade counted.
func cmIDGone(id *C.struct_rdma_cm_id) {
	dev := uintptr(C.nr_cm_dev(id))
	var cmdFD, asyncFD C.int
	C.nr_cm_dev_fds(id, &cmdFD, &asyncFD)
	cmIdle.mu.Lock()
	defer cmIdle.mu.Unlock()
	cmIdle.ids--
	if dev != 0 {
		if cmIdle.devs == nil {
			cmIdle.devs = make(map[uintptr][2]int)
		}
		cmIdle.devs[dev] = [2]int{int(cmdFD), int(asyncFD)}
	}
	if cmIdle.ids == 0 && len(cmIdle.devs) > 0 && !cmIdle.watching {
		cmIdle.watching = true
		go watchIdleDevices()
	}
}

func watchIdleDevices() {
	for {
		time.Sleep(idleWatchPeriod)
		cmIdle.mu.Lock()
		if cmIdle.ids > 0 || len(cmIdle.devs) == 0 {
			// Ids again: their events (DEVICE_REMOVAL) take over; the
			// devices are watched again when the last one goes.
			cmIdle.watching = false
			cmIdle.mu.Unlock()
			return
		}
		devs := maps.Clone(cmIdle.devs)
		cmIdle.mu.Unlock()
		for dev, fds := range devs {
			if C.nr_dev_listed(C.uintptr_t(dev)) != 0 {
				continue
			}
			C.nr_sync_cm_devices()
			if fds[0] >= 0 {
				C.nr_release_removed_fds(C.int(fds[0]), C.int(fds[1]))
			}
			cmIdle.mu.Lock()
			delete(cmIdle.devs, dev)
			cmIdle.mu.Unlock()
		}
	}
}
