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

// Bytes is the lent memory, Config.MaxIO bytes long. It is unmapped when
// the Transport is closed: do not touch it after Close.
func (b *Buffer) Bytes() []byte { return b.b.Bytes()[:b.t.cfg.MaxIO] }

// Release gives the memory back. A buffer still exposed by a call its
// caller abandoned returns to the pool only once that call is settled.
func (b *Buffer) Release() {
	t := b.t
	t.mu.Lock()
	_, ok := t.borrowed[&b.b.Bytes()[0]]
	delete(t.borrowed, &b.b.Bytes()[0])
	reg := t.reg
	t.mu.Unlock()
	if ok && reg != nil {
		reg.PutBuffer(b.b)
	}
}

// Borrow lends one of the transport's registered I/O buffers, waiting for
// one to be free.
func (t *Transport) Borrow(ctx context.Context) (*Buffer, error) {
	t.mu.Lock()
	reg, closed := t.reg, t.closed
	t.mu.Unlock()
	if closed || reg == nil {
		return nil, ErrClosed
	}
	fb, err := reg.GetBuffer(ctx)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		reg.PutBuffer(fb)
		return nil, ErrClosed
	}
	t.borrowed[&fb.Bytes()[0]] = fb
	return &Buffer{t: t, b: fb}, nil
}

// lentBuffer returns the borrowed buffer p starts at, if any.
func (t *Transport) lentBuffer(p []byte) *frwr.Buffer {
	if len(p) == 0 {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.borrowed[&p[0]]
}
