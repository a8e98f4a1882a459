//go:build linux && cgo

package ibv

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// pollFD waits for a library-owned file descriptor (a completion channel
// or an rdma_cm event channel) on Go's netpoller, so an idle wait uses no
// CPU. It waits on a dup of the descriptor; the library keeps and closes
// the original. One goroutine waits on a pollFD at a time.
type pollFD struct {
	f  *os.File
	rc syscall.RawConn

	closed atomic.Bool

	mu   sync.Mutex
	ctx  context.Context // the context whose end wakes a wait (see watch)
	stop func() bool     // unregisters the hook on ctx
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
	if err := p.watch(ctx); err != nil {
		return err
	}
	err := p.rc.Read(func(uintptr) bool { return try() })
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		// A wait that close cut short fails with the poller's "use of
		// closed file", which is not os.ErrClosed.
		if p.closed.Load() || errors.Is(err, os.ErrClosed) {
			return errClosedWait
		}
		return err
	}
	return nil
}

// watch makes the end of ctx wake a wait: a hook on ctx moves the read
// deadline into the past. The hook is installed once per context, not per
// wait: the transport's reapers wait once per reply, with one context per
// connection (the callers waiting for their replies share it), and a hook
// per wait cost 3% of the mount's CPU on the bed.
// A hook left from an earlier context checks that its context is still the
// watched one, so it never cuts short a wait on a later context.
func (p *pollFD) watch(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if ctx == p.ctx {
		return nil
	}
	if p.stop != nil {
		p.stop()
		p.stop = nil
	}
	p.ctx = ctx
	p.f.SetReadDeadline(time.Time{})
	if ctx.Done() != nil {
		p.stop = context.AfterFunc(ctx, func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.ctx == ctx {
				p.f.SetReadDeadline(time.Unix(1, 0))
			}
		})
	}
	return nil
}

var errClosedWait = errors.New("ibv: wait ended by close")

func (p *pollFD) close() error {
	p.closed.Store(true)
	p.mu.Lock()
	if p.stop != nil {
		p.stop()
		p.stop = nil
	}
	p.ctx = nil
	p.mu.Unlock()
	return p.f.Close()
}
