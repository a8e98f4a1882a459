package verbs

import (
	"errors"
	"fmt"
	"syscall"
)

// ErrNoRDMA is returned by every constructor of a build without RDMA
// support (no cgo, or not Linux).
var ErrNoRDMA = errors.New("verbs: no RDMA support in this build (build on Linux with cgo and rdma-core's libibverbs-dev and librdmacm-dev)")

// ErrClosed is returned by operations on a closed resource.
var ErrClosed = errors.New("verbs: resource closed")

// OpError is a failed verb: which verb, on what, and the errno it returned.
type OpError struct {
	Verb   string // e.g. "ibv_post_send", "rdma_resolve_addr"
	Object string // the device, address or resource it acted on
	Err    error  // usually a syscall.Errno
	Hint   string // what to do about it, when known
}

func (e *OpError) Error() string {
	s := e.Verb
	if e.Object != "" {
		s += " " + e.Object
	}
	if e.Err != nil {
		if errno, ok := e.Err.(syscall.Errno); ok {
			s += fmt.Sprintf(": %s (%s)", errnoName(errno), errno.Error())
		} else {
			s += ": " + e.Err.Error()
		}
	}
	if e.Hint != "" {
		s += "; " + e.Hint
	}
	return s
}

func (e *OpError) Unwrap() error { return e.Err }

var errnoNames = map[syscall.Errno]string{
	syscall.EPERM: "EPERM", syscall.ENOENT: "ENOENT", syscall.EINTR: "EINTR", syscall.EIO: "EIO",
	syscall.ENXIO: "ENXIO", syscall.EAGAIN: "EAGAIN", syscall.ENOMEM: "ENOMEM", syscall.EACCES: "EACCES",
	syscall.EFAULT: "EFAULT", syscall.EBUSY: "EBUSY", syscall.EEXIST: "EEXIST", syscall.ENODEV: "ENODEV",
	syscall.EINVAL: "EINVAL", syscall.ENOSPC: "ENOSPC", syscall.ENOSYS: "ENOSYS", syscall.EOPNOTSUPP: "EOPNOTSUPP",
	syscall.EADDRINUSE: "EADDRINUSE", syscall.EADDRNOTAVAIL: "EADDRNOTAVAIL", syscall.ENETUNREACH: "ENETUNREACH",
	syscall.ECONNABORTED: "ECONNABORTED", syscall.ECONNRESET: "ECONNRESET", syscall.ENOTCONN: "ENOTCONN",
	syscall.ETIMEDOUT: "ETIMEDOUT", syscall.ECONNREFUSED: "ECONNREFUSED", syscall.EHOSTUNREACH: "EHOSTUNREACH",
	syscall.E2BIG: "E2BIG", syscall.EPROTO: "EPROTO",
}

func errnoName(e syscall.Errno) string {
	if n, ok := errnoNames[e]; ok {
		return n
	}
	return fmt.Sprintf("errno %d", int(e))
}

// CompletionError is a work completion that did not succeed.
type CompletionError struct {
	Completion Completion
	Opcode     Opcode // the WR's opcode when known to the caller
}

func (e *CompletionError) Error() string {
	return fmt.Sprintf("verbs: work request %d completed with %s (vendor error %#x)", e.Completion.ID, e.Completion.Status, e.Completion.VendorErr)
}
