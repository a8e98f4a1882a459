package fusefs

import (
	"sync"
	"time"
)

// manualTimers are an FS's timers (FS.afterFunc) that run when the test
// fires them, not when time passes: a test of what a timer does waits for
// no clock, and nothing runs early on a slow machine. An unlink's
// releaseWait, which stands for a RELEASE the kernel may still send,
// stays on the clock.
type manualTimers struct {
	mu      sync.Mutex
	pending []*manualTimer
}

// manualTimer is one timer of manualTimers.
type manualTimer struct {
	ts   *manualTimers
	d    time.Duration
	fn   func()
	done bool // fired or stopped
}

// Stop implements stopper.
func (t *manualTimer) Stop() bool {
	t.ts.mu.Lock()
	defer t.ts.mu.Unlock()
	was := !t.done
	t.done = true
	return was
}

// afterFunc is FS.afterFunc.
func (ts *manualTimers) afterFunc(d time.Duration, fn func()) stopper {
	if d == releaseWait {
		return time.AfterFunc(d, fn)
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := &manualTimer{ts: ts, d: d, fn: fn}
	ts.pending = append(ts.pending, t)
	return t
}

// fire runs, in the caller's goroutine, every timer of duration d neither
// fired nor stopped, as if d had passed since each was set; it returns
// how many ran.
func (ts *manualTimers) fire(d time.Duration) int {
	ts.mu.Lock()
	var run []func()
	keep := ts.pending[:0]
	for _, t := range ts.pending {
		switch {
		case t.done:
		case t.d == d:
			t.done = true
			run = append(run, t.fn)
		default:
			keep = append(keep, t)
		}
	}
	clear(ts.pending[len(keep):])
	ts.pending = keep
	ts.mu.Unlock()
	for _, fn := range run {
		fn()
	}
	return len(run)
}
