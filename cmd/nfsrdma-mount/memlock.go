package main

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/xprt/memlock"
)

// Locked memory: before dialing, the mount sizes its transports' registered
// memory to the process's RLIMIT_MEMLOCK, or refuses at once naming the fix
// (package xprt/memlock, which the library's nfsrdma.Mount uses too).

// memlockLimit is the process's locked-memory limit (a variable for tests).
var memlockLimit = memlock.Limit

// errDeviceAccess is an RDMA device that refused this process.
var errDeviceAccess = errors.New("the RDMA device refused this user")

// localRDMAError returns the explanation of a failure to connect over RDMA
// that this machine caused and that trying again cannot repair: memory
// registration refused (ENOMEM: the locked-memory limit, a *memlock.Error)
// or the device not opened (EACCES, EPERM). nil for anything else.
func localRDMAError(err error, nconnect, maxIO int) error {
	if merr := memlock.FromRegistration(err, nconnect, maxIO); merr != nil {
		return merr
	}
	var oe *verbs.OpError
	if !errors.As(err, &oe) {
		return nil
	}
	if errors.Is(oe.Err, syscall.EACCES) || errors.Is(oe.Err, syscall.EPERM) {
		return fmt.Errorf("%w (%w): it needs read and write access to /dev/infiniband/uverbs* and /dev/infiniband/rdma_cm (rdma-core's udev rules make them 0666), or mount as root", errDeviceAccess, err)
	}
	return nil
}
