package caller

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"
)

// watchAfter is how often the requests in flight are looked at for an
// interrupt: a caller killed while its call waits is released within
// about that much more.
const watchAfter = 20 * time.Millisecond

// fatalPoll is how often a caller interrupted by a signal that did not
// kill it is checked again for a fatal one.
const fatalPoll = 100 * time.Millisecond

// Watches is a mount's requests in flight and their sweeper: a timer armed
// while any request is in flight, so that a request costs no goroutine
// wake-up of its own (most end long before watchAfter), and the request's
// context need not be a child of the mount's (a child costs the parent's
// lock and an entry in its map, made and deleted per request). The zero
// Watches is ready to use; Log and Fatal are set before the first Start.
// mu guards reqs, each request's idx and stop, armed and closed.
type Watches struct {
	// Log gets a line for each call cancelled by a fatal signal (nil:
	// none).
	Log *slog.Logger
	// Fatal reports whether thread pid has a fatal signal pending or is
	// gone (nil: FatalSignalPending).
	Fatal func(pid uint32) bool

	mu     sync.Mutex
	reqs   []*watch
	armed  bool // a sweep is due within watchAfter
	closed bool // Close was called: every Start is cancelled at once
}

// watch is one request in flight.
type watch struct {
	intr   context.Context // done when the kernel interrupted the request
	ctx    context.Context // its NFS calls'
	cancel context.CancelFunc
	pid    uint32
	l      *Watches
	idx    int         // in Watches.reqs; -1 once removed
	stop   func() bool // the watch started on the interrupt; nil before
}

// Start registers a request of thread pid whose interrupt ends intr, and
// returns the context of its NFS calls, made under parent (which carries
// its credential, see Credentials.For), and the function to call when the
// request is done. The context ends when done is called, when pid gets a
// fatal signal after intr ended, or at Close.
func (l *Watches) Start(intr, parent context.Context, pid uint32) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	w := &watch{intr: intr, ctx: ctx, cancel: cancel, pid: pid, l: l}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		cancel()
		return ctx, cancel
	}
	w.idx = len(l.reqs)
	l.reqs = append(l.reqs, w)
	if !l.armed {
		l.armed = true
		time.AfterFunc(watchAfter, l.sweep)
	}
	l.mu.Unlock()
	return ctx, w.done
}

// Close cancels the NFS calls of every request in flight and of every one
// started after.
func (l *Watches) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for _, w := range l.reqs {
		w.cancel()
	}
}

// InFlight returns how many requests are in flight.
func (l *Watches) InFlight() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.reqs)
}

// done ends the request: it leaves the list and its calls' context ends.
func (w *watch) done() {
	l := w.l
	l.mu.Lock()
	if i := w.idx; i >= 0 {
		last := len(l.reqs) - 1
		l.reqs[i] = l.reqs[last]
		l.reqs[i].idx = i
		l.reqs[last] = nil
		l.reqs = l.reqs[:last]
		w.idx = -1
	}
	stop := w.stop
	l.mu.Unlock()
	if stop != nil {
		stop()
	}
	w.cancel()
}

// sweep starts the watch of each request in flight that was interrupted,
// and comes back after watchAfter while any is in flight: a request
// interrupted while it waits is looked at within two watchAfter.
func (l *Watches) sweep() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, w := range l.reqs {
		if w.stop != nil {
			continue
		}
		select {
		case <-w.intr.Done():
			w.stop = context.AfterFunc(w.intr, w.watch)
		default:
		}
	}
	if len(l.reqs) > 0 {
		time.AfterFunc(watchAfter, l.sweep)
	} else {
		l.armed = false
	}
}

// watch runs once the request is interrupted: it cancels the request's
// calls now if the signal is fatal, else watches the caller until one is
// or the request ends.
func (w *watch) watch() {
	fatal := w.l.Fatal
	if fatal == nil {
		fatal = FatalSignalPending
	}
	for {
		if fatal(w.pid) {
			if w.l.Log != nil {
				w.l.Log.Debug("caller killed: cancelling its NFS call", "pid", w.pid)
			}
			w.cancel()
			return
		}
		t := time.NewTimer(fatalPoll)
		select {
		case <-w.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// FatalSignalPending reports whether thread pid has SIGKILL pending (a
// fatal signal: the kernel queues SIGKILL to every thread of a process it
// is killing) or is gone. Pid 0 (the kernel itself) never is.
func FatalSignalPending(pid uint32) bool {
	if pid == 0 {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/status")
	if err != nil {
		return os.IsNotExist(err)
	}
	return fatalInStatus(b)
}

// fatalInStatus reports whether the /proc status b shows SIGKILL pending
// (for the thread or its process) or a zombie or dead task.
func fatalInStatus(b []byte) bool {
	const sigkill = 1 << (9 - 1)
	for line := range bytes.Lines(b) {
		for _, key := range []string{"SigPnd:", "ShdPnd:"} {
			if v, ok := bytes.CutPrefix(line, []byte(key)); ok {
				m, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 16, 64)
				if err == nil && m&sigkill != 0 {
					return true
				}
			}
		}
		if v, ok := bytes.CutPrefix(line, []byte("State:")); ok {
			// Zombie or dead: the caller is gone.
			s := bytes.TrimSpace(v)
			if len(s) > 0 && (s[0] == 'Z' || s[0] == 'X') {
				return true
			}
		}
	}
	return false
}
