package xprt

import (
	"context"

	"github.com/nfsrdma/nfsrdma/chunks"
	"github.com/nfsrdma/nfsrdma/frwr"
)

// need is what one call takes from the Transport's registered memory: I/O
// buffers and memory windows.
type need struct{ bufs, wins int }

// budgetWaiter is one taker of the budget: a call, or a Borrow.
type budgetWaiter struct {
	n       need
	held    bool          // n is taken
	waiting bool          // in the budget's queue
	granted chan struct{} // buffered 1: signalled when held becomes true
}

// budget hands out the Transport's I/O buffers and windows, each taker's
// whole need at once or not at all, in FIFO order (a taker never holds
// part of its need while waiting for the rest, so no two takers can wait
// for each other). frwr's pools then never make a budget holder wait.
// Guarded by Transport.mu.
type budget struct {
	free    need
	waiters []*budgetWaiter
}

func (b *budget) fits(n need) bool { return n.bufs <= b.free.bufs && n.wins <= b.free.wins }

// take takes w.n now if no one waits before it and it fits; otherwise w
// joins the queue.
func (b *budget) take(w *budgetWaiter) bool {
	if len(b.waiters) == 0 && b.fits(w.n) {
		b.free.bufs -= w.n.bufs
		b.free.wins -= w.n.wins
		w.held = true
		return true
	}
	w.waiting = true
	b.waiters = append(b.waiters, w)
	return false
}

// put gives back w's need and hands the budget to the waiters at the head
// of the queue that now fit.
func (b *budget) put(w *budgetWaiter) {
	if !w.held {
		return
	}
	w.held = false
	b.free.bufs += w.n.bufs
	b.free.wins += w.n.wins
	b.admit()
}

func (b *budget) admit() {
	for len(b.waiters) > 0 && b.fits(b.waiters[0].n) {
		h := b.waiters[0]
		b.waiters[0] = nil
		b.waiters = b.waiters[1:]
		b.free.bufs -= h.n.bufs
		b.free.wins -= h.n.wins
		h.waiting, h.held = false, true
		select {
		case h.granted <- struct{}{}:
		default:
		}
	}
}

// cancel removes a waiter that gave up.
func (b *budget) cancel(w *budgetWaiter) {
	if !w.waiting {
		return
	}
	for i, x := range b.waiters {
		if x == w {
			b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
			break
		}
	}
	w.waiting = false
	b.admit()
}

// wait takes n for w, waiting in FIFO order until it fits or ctx ends.
func (t *Transport) wait(ctx context.Context, w *budgetWaiter, n need) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return ErrClosed
	}
	if w.granted == nil {
		w.granted = make(chan struct{}, 1)
	}
	w.n = n
	if n.wins > t.budgetCap.wins || n.bufs > t.budgetCap.bufs {
		t.mu.Unlock()
		return ErrTooLarge
	}
	if t.budget.take(w) {
		t.mu.Unlock()
		return nil
	}
	t.ctr[ctrBudgetWaits].Add(1)
	t.mu.Unlock()
	for {
		select {
		case <-w.granted:
		case <-ctx.Done():
		case <-t.closeCh:
		}
		t.mu.Lock()
		switch {
		case w.held:
			t.mu.Unlock()
			return nil
		case ctx.Err() != nil || t.closed:
			t.budget.cancel(w)
			err := ctx.Err()
			if err == nil {
				err = ErrClosed
			}
			t.mu.Unlock()
			return err
		}
		t.mu.Unlock()
	}
}

// budgetNeed picks the call's buffers the caller lent (zero copy) and
// returns what else its plan takes: a buffer for the Read chunk, one for
// the Write or Reply chunk, and a window per segment (windows mode).
func (cl *call) budgetNeed() need {
	t, p := cl.t, &cl.plan
	var n need
	if len(p.ReadSegments) > 0 {
		// WRITE data the caller placed in a borrowed buffer is read by
		// the server from there (not at position zero: the whole
		// message must be contiguous).
		if b := t.lentBuffer(cl.req.Bulk); b != nil && p.Call != chunks.CallPositionZero {
			cl.readBufs, cl.readLent = append(cl.readBufs[:0], b), true
		} else {
			n.bufs += packSegments(p.ReadSegments, t.bufSize(), nil)
		}
		n.wins += len(p.ReadSegments)
	}
	switch {
	case len(p.WriteSegments) > 0:
		// READ data lands straight in the caller's borrowed buffer.
		if b := t.lentBuffer(cl.req.ReplyBulk); b != nil {
			cl.replyBuf, cl.replyLent = b, true
		} else {
			n.bufs++
		}
		n.wins += len(p.WriteSegments)
	case len(p.ReplySegments) > 0:
		n.bufs++
		n.wins += len(p.ReplySegments)
	}
	if cl.reg.Mode() != frwr.ModeWindows {
		n.wins = 0
	}
	return n
}

// packSegments lays Read-chunk segments out back to back in buffers of
// size bytes, starting a new buffer when the next segment does not fit the
// current one (the pieces of a position-zero message need not be
// contiguous: the server concatenates the segments). It returns the number
// of buffers, and calls at, when non-nil, with each segment's buffer index
// and offset.
func packSegments(segs []chunks.Range, size int, at func(i, buf, off int)) int {
	buf, off := 0, 0
	for i, s := range segs {
		if off > 0 && s.Len > size-off {
			buf, off = buf+1, 0
		}
		if at != nil {
			at(i, buf, off)
		}
		off += s.Len
	}
	if len(segs) == 0 {
		return 0
	}
	return buf + 1
}

// takeBudget takes the call's need (zero needs take nothing).
func (t *Transport) takeBudget(ctx context.Context, cl *call, n need) error {
	if n == (need{}) {
		return nil
	}
	return t.wait(ctx, &cl.budget, n)
}

// putBudgetLocked gives back what the call holds (Transport.mu held).
func (t *Transport) putBudgetLocked(cl *call) {
	t.budget.cancel(&cl.budget)
	t.budget.put(&cl.budget)
}
