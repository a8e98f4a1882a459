package xprt

import (
	"context"
	"fmt"
	"runtime"

	"github.com/nfsrdma/nfsrdma/rpcrdma"
	"github.com/nfsrdma/nfsrdma/verbs"
)

// The receive CQ's reaper. One goroutine at a time polls the receive CQ,
// waits on its completion channel and runs the reply handler (reply.go) on
// what it finds: the reaper. It is either the connection's reply loop or a
// caller waiting for its own reply.
//
// A caller whose call is posted becomes the reaper when nobody is: it
// sleeps on the completion channel itself, so the completion wakes the
// goroutine that wants the reply, and the reply handler completes the call
// on that goroutine. Handing each reply from a reply loop to its caller
// costs a second wake-up per call (on the 2-vCPU test bed, 2–3x the CPU of
// the library's 4 KiB READs at queue depth 16). The caller stays the
// reaper while its call is posted, settling every reply it finds on the
// way, and leaves when its reply is matched, its context ends, or the
// connection breaks.
//
// The reply loop is the fallback: it reaps when a leaving reaper leaves
// calls outstanding, and while the connection is broken (the drain's
// flushes and its sentinel must be reaped). It gives the CQ up when no
// call holds a credit. The invariant, kept under conn.mu: while a call
// holds a credit or the connection is broken, somebody is, or is about to
// be, the reaper. A caller reaper counts in conn.pollers, so the teardown
// waits for it as for the loops before it settles calls.

type reaperKind uint8

const (
	reapNone   reaperKind = iota // nobody: no call outstanding, the CQ is quiet
	reapLoop                     // the reply loop (recvLoop)
	reapCaller                   // a caller waiting for its reply (conn.reaperCall)
)

// reapScratch is the reaper's working memory: used only by the goroutine
// that is the reaper, so one per connection.
type reapScratch struct {
	wcs   []verbs.Completion
	hdr   rpcrdma.Header
	batch []received
}

// reapOnce polls the receive CQ once (spinning first when Config.BusyPoll
// asks and calls wait) and runs the reply handler on the batch it finds.
// It returns how many completions it handled; an error means the poll
// failed and the connection must be reported lost.
func (c *conn) reapOnce(s *reapScratch) (int, error) {
	t := c.t
	n, err := c.rcq.Poll(s.wcs)
	if err != nil {
		return 0, err
	}
	if n == 0 && t.cfg.BusyPoll > 0 && c.awaitingReplies() {
		if sp, ok := c.rcq.(verbs.SpinPoller); ok {
			if n, err = sp.PollSpin(s.wcs, t.cfg.BusyPoll); err != nil {
				return 0, err
			}
			t.ctr[ctrBusyPolls].Add(1)
			if n > 0 {
				t.ctr[ctrBusyPollHits].Add(1)
			}
		}
	}
	if n == 0 {
		return 0, nil
	}
	c.handleBatch(s, s.wcs[:n])
	return n, nil
}

// handleBatch is the reply handler for one batch of receive completions.
func (c *conn) handleBatch(s *reapScratch, wcs []verbs.Completion) {
	t := c.t
	s.batch = s.batch[:0]
	var lost error
	// 1–2.
	for _, wc := range wcs {
		r, err := c.receive(wc, &s.hdr)
		if err != nil && lost == nil {
			lost = err
		}
		if r.cl != nil {
			s.batch = append(s.batch, r)
		}
	}
	// 3. repost.
	c.mu.Lock()
	if !c.broken && lost == nil {
		if err := c.postRecvsLocked(); err != nil {
			lost = fmt.Errorf("xprt: reposting receives: %w", err)
		}
	}
	c.mu.Unlock()
	// A batch that loses the connection breaks it before settling its
	// replies: none of them then posts a LOCAL_INV or completes while a
	// window of its call is still valid (the teardown, which waits for
	// this reaper, settles those).
	if lost != nil {
		t.connLost(c, lost)
	}
	// 4–7.
	for _, r := range s.batch {
		if err := c.settle(r); err != nil {
			t.connLost(c, err)
		}
	}
	clear(s.batch) // no call stays reachable from the scratch
}

// recvLoop is the reply loop: the fallback reaper (see above).
func (c *conn) recvLoop() {
	defer c.pollers.Done()
	for {
		select {
		case <-c.reapKick:
		case <-c.pollCtx.Done():
			return
		}
		if !c.reapAsLoop() {
			return
		}
	}
}

// reapAsLoop reaps until no call is outstanding (true: the CQ is given up)
// or the connection's pollers stop (false).
func (c *conn) reapAsLoop() bool {
	t := c.t
	for {
		n, err := c.reapOnce(&c.scratch)
		if err != nil {
			t.connLost(c, err)
			return false
		}
		if n > 0 {
			// The callers whose replies this batch completed are
			// runnable on this goroutine's P, and would otherwise wait
			// for it to arm the CQ and block (a system call or two:
			// about 0.2 ms per call in the bed's guest, measured): let
			// them run first.
			runtime.Gosched()
			continue
		}
		c.mu.Lock()
		if !c.broken && c.credits.Outstanding() == 0 {
			c.reaper = reapNone
			c.mu.Unlock()
			return true
		}
		c.mu.Unlock()
		if err := c.rcq.Wait(c.pollCtx); err != nil {
			if c.pollCtx.Err() == nil {
				t.connLost(c, err)
			}
			return false
		}
	}
}

// kickLoopLocked makes the reply loop the reaper (c.mu held, nobody
// reaping).
func (c *conn) kickLoopLocked() {
	c.reaper, c.reaperCall = reapLoop, nil
	select {
	case c.reapKick <- struct{}{}:
	default:
	}
}

// leaveReaperLocked gives the CQ up (c.mu held): to the reply loop if a
// call still holds a credit or the connection is broken, else to nobody.
func (c *conn) leaveReaperLocked() {
	if c.broken || c.credits.Outstanding() > 0 {
		c.kickLoopLocked()
		return
	}
	c.reaper, c.reaperCall = reapNone, nil
}

// reapOwn is a posted call's caller reaping the receive CQ while nobody
// else does, until the call is no longer posted (its reply matched), ctx
// ends, or c breaks. It returns at once when another goroutine reaps.
func (cl *call) reapOwn(ctx context.Context, c *conn) {
	t := cl.t
	c.mu.Lock()
	if c.broken || c.reaper != reapNone {
		c.mu.Unlock()
		return
	}
	c.reaper, c.reaperCall = reapCaller, cl
	c.pollers.Add(1) // !broken: the reply loop still counts, so Wait has not begun
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.leaveReaperLocked()
		c.mu.Unlock()
		c.pollers.Done()
	}()
	// The hook that wakes the wait below when ctx ends is installed before
	// the first wait, not up front: a caller whose reply is already there
	// when it first reaps (at queue depth 1 on the bed, nearly every one:
	// the reply arrives while the call is posted and the next registration
	// made) never waits, and the hook (three allocations and a child of
	// ctx's parent) would be wasted.
	var stop func() bool
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	reaped := false
	for {
		t.mu.Lock()
		posted := cl.state == stPosted
		t.mu.Unlock()
		if !posted {
			if reaped {
				t.ctr[ctrOwnReplies].Add(1)
			}
			return
		}
		n, err := c.reapOnce(&c.scratch)
		if err != nil {
			t.connLost(c, err)
			return
		}
		if n > 0 {
			reaped = true
			continue
		}
		c.mu.Lock()
		if c.broken {
			c.mu.Unlock()
			return
		}
		if c.reapCtx.Err() != nil {
			// Cancelled for an earlier reaper whose caller gave up.
			c.reapCtx, c.reapStop = context.WithCancel(c.pollCtx)
		}
		rctx := c.reapCtx
		c.mu.Unlock()
		if stop == nil && ctx.Done() != nil {
			// Installed after rctx was read: an end of ctx from here on
			// cancels rctx (interruptReaper), and one before it is seen
			// just below, or runs the hook at once.
			stop = context.AfterFunc(ctx, func() { c.interruptReaper(cl) })
		}
		if ctx.Err() != nil {
			return // the caller gave up: await abandons the call
		}
		if err := c.rcq.Wait(rctx); err != nil {
			if rctx.Err() == nil {
				t.connLost(c, err)
			}
			return
		}
	}
}

// interruptReaper wakes cl's caller from its wait on the receive CQ when
// it is the reaper (its context ended).
func (c *conn) interruptReaper(cl *call) {
	c.mu.Lock()
	if c.reaper == reapCaller && c.reaperCall == cl {
		c.reapStop()
	}
	c.mu.Unlock()
}
