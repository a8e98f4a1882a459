package xprt

import (
	"context"

	"github.com/nfsrdma/nfsrdma/frwr"
)

// Buffer is registered memory the transport lends to a caller, for I/O with
// no copy:
//
//   - a READ (or READLINK) whose reply buffer (sunrpc.Request.ReplyBulk)
//     starts at the start of Bytes lands its data there directly: the
//     Write chunk's window is bound on this memory;
//   - a WRITE whose data (sunrpc.Request.Bulk) starts at the start of
//     Bytes is read by the server from there: the Read chunk's window is
//     bound on this memory, for remote reading only.
//
// The memory must not change while such a call is in flight. nfs3.Client's
// Read and Write pass the caller's slice through, so a program that fills
// (or consumes) borrowed buffers of up to rsize (wsize) bytes moves its data
// with no copy at the client.
type Buffer struct {
	t *Transport
	b *frwr.Buffer
}

// borrowedBuffer is a lent I/O buffer and the budget it holds.
type borrowedBuffer struct {
	b *frwr.Buffer
	w budgetWaiter
}

// Bytes is the lent memory, Config.MaxIO bytes long. It is unmapped when
// the Transport is closed: do not touch it after Close.
func (b *Buffer) Bytes() []byte { return b.b.Bytes()[:b.t.cfg.MaxIO] }

// Release gives the memory back. Calls that used it have completed (their
// RoundTrip returned, and with it every window on this memory is invalid).
func (b *Buffer) Release() {
	t := b.t
	t.mu.Lock()
	defer t.mu.Unlock()
	key := &b.b.Bytes()[0]
	bb, ok := t.borrowed[key]
	if !ok {
		return
	}
	delete(t.borrowed, key)
	if t.reg != nil {
		t.reg.PutBuffer(bb.b)
	}
	t.budget.put(&bb.w)
}

// Borrow lends one of the transport's registered I/O buffers, waiting for
// one to be free.
func (t *Transport) Borrow(ctx context.Context) (*Buffer, error) {
	bb := &borrowedBuffer{}
	if err := t.wait(ctx, &bb.w, need{bufs: 1}); err != nil {
		return nil, err
	}
	t.mu.Lock()
	reg := t.reg
	t.mu.Unlock()
	var fb *frwr.Buffer
	var err error
	if reg != nil {
		fb, err = reg.GetBuffer(ctx)
	} else {
		err = ErrClosed
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err == nil && t.closed {
		reg.PutBuffer(fb)
		err = ErrClosed
	}
	if err != nil {
		t.budget.put(&bb.w)
		return nil, err
	}
	bb.b = fb
	t.borrowed[&fb.Bytes()[0]] = bb
	return &Buffer{t: t, b: fb}, nil
}

// lentBuffer returns the borrowed buffer p starts at, if any.
func (t *Transport) lentBuffer(p []byte) *frwr.Buffer {
	if len(p) == 0 {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if bb := t.borrowed[&p[0]]; bb != nil {
		return bb.b
	}
	return nil
}
