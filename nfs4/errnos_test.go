package nfs4

import "syscall"

var (
	errAgain = syscall.EAGAIN
	errStale = syscall.ESTALE
)
