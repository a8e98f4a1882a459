package frwr

import (
	"context"

	"github.com/nfsrdma/nfsrdma/verbs"
)

// Buffer is one I/O buffer of the pool: its own mmap'd memory (never the
// Go heap) registered as its own MR, so a window bound on it reaches only
// it, even on a device that checks only an MR's end (rxe). Its MR has
// LOCAL_WRITE (and MW_BIND in windows mode) and no remote access: the peer
// reaches it only through a registration.
type Buffer struct {
	r       *Registry
	mapping *verbs.Mapping
	mr      verbs.MR
	mem     []byte
	stock   *readyStock // the stock of registrations made ahead it belongs to (ready.go); nil for a pool buffer

	// Guarded by r.mu.
	state   bufState
	exposed int // registrations of it in Bound, LocalInvPosted or Registered
}

type bufState int

const (
	bufFree       bufState = iota // in the pool
	bufOut                        // held by a caller
	bufPutPending                 // put back while exposed: returns to the pool when the last registration is released
	bufReady                      // covered by a registration made ahead, not taken (ready.go)
)

// Bytes is the buffer's memory, Config.BufferSize bytes.
func (b *Buffer) Bytes() []byte { return b.mem }

// MR is the buffer's memory region (for local SGEs: its LKey, and Addr
// as the base of remote addresses). A buffer from TakeReady has none: nil.
func (b *Buffer) MR() verbs.MR { return b.mr }

// GetBuffer takes a buffer from the pool, waiting in FIFO order while the
// pool is empty; it returns ctx's error if ctx ends first, and ErrClosed
// if the registry is closed.
func (r *Registry) GetBuffer(ctx context.Context) (*Buffer, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, ErrClosed
	}
	if n := len(r.freeBufs); n > 0 {
		b := r.freeBufs[n-1]
		r.freeBufs[n-1] = nil
		r.freeBufs = r.freeBufs[:n-1]
		b.state = bufOut
		r.mu.Unlock()
		return b, nil
	}
	if err := ctx.Err(); err != nil {
		r.mu.Unlock()
		return nil, err
	}
	ch := r.bufWaiters.addLocked()
	r.c.BufferWaits++
	r.mu.Unlock()
	b, ok, err := wait(ctx, &r.bufWaiters, ch, r.mu.Lock, r.mu.Unlock, r.putBufferLocked)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, ErrClosed
	}
	return b, nil
}

// PutBuffer returns a buffer to the pool. A buffer one of whose
// registrations is still exposed (not yet released) is held back, and
// counted, until the last one is released: memory the peer may still
// reach is never handed to another RPC. PutBuffer panics for a buffer
// that is not this registry's or not held by a caller (put twice), as
// reusing it would hand one buffer to two RPCs.
func (r *Registry) PutBuffer(b *Buffer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b == nil || b.r != r || b.state != bufOut {
		panic("frwr: PutBuffer of a buffer not held from this registry (put twice?)")
	}
	if r.closed {
		return
	}
	if b.exposed > 0 {
		b.state = bufPutPending
		r.c.BuffersPutWhileExposed++
		return
	}
	r.putBufferLocked(b)
}

// putBufferLocked hands b to the first waiter or puts it in the pool.
func (r *Registry) putBufferLocked(b *Buffer) {
	if b.stock != nil {
		r.putReadyLocked(b)
		return
	}
	if r.closed {
		b.state = bufFree
		return
	}
	if r.bufWaiters.handLocked(b) {
		b.state = bufOut
		return
	}
	b.state = bufFree
	r.freeBufs = append(r.freeBufs, b)
}

// unexposeLocked drops one exposure of b, returning a put-back buffer to
// the pool when it was the last.
func (r *Registry) unexposeLocked(b *Buffer) {
	b.exposed--
	if b.exposed == 0 && b.state == bufPutPending {
		r.putBufferLocked(b)
	}
}
