//go:build linux && cgo

package ibv

import (
	"context"
	"errors"
	"os"
	"syscall"
	"time"
)

// pollFD waits for a library-owned file descriptor (a completion channel
// or an rdma_cm event channel) on Go's netpoller, so an idle wait uses no
// CPU. It waits on a dup of the descriptor; the library keeps and closes
// the original.
type pollFD struct {
	f  *os.File
	rc syscall.RawConn
}

func newPollFD(fd int, name string) (*pollFD, error) {
	if err := syscall.SetNonblock(fd, true); err != nil {
		return nil, err
	}
	dup, err := syscall.Dup(fd)
	if err != nil {
		return nil, err
	}
	syscall.CloseOnExec(dup)
	f := os.NewFile(uintptr(dup), name)
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &pollFD{f: f, rc: rc}, nil
}

// wait calls try until it reports done, sleeping on the netpoller while the
// descriptor is not readable. ctx cancels the wait.
func (p *pollFD) wait(ctx context.Context, try func() bool) error {
	p.f.SetReadDeadline(time.Time{})
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { p.f.SetReadDeadline(time.Unix(1, 0)) })
		defer stop()
	}
	err := p.rc.Read(func(uintptr) bool { return try() })
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if errors.Is(err, os.ErrClosed) {
			return errClosedWait
		}
		return err
	}
	return nil
}

var errClosedWait = errors.New("ibv: wait ended by close")

func (p *pollFD) close() error { return p.f.Close() }
