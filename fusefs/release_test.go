package fusefs

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/nfsrdma/nfsrdma/nfs3"
)

// openState returns the file state of a regular file with one open
// handle, on an FS with the usual clock and timers.
func openState() *fileState {
	s := newNode(&FS{now: time.Now}, nil, nfs3.TypeReg).file
	s.opens = 1
	return s
}

// An unlink or rename over a file that stays open waits releaseWait for a
// RELEASE that may be on its way, then gives up: the wait must end even
// when no RELEASE ever comes (the caller may hold the file open itself),
// however the timer's wake-up falls against the clock.
func TestWaitClosedEndsWithoutRelease(t *testing.T) {
	n := openState()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 5000 {
			if n.waitClosed(time.Microsecond) {
				t.Error("waitClosed reported an open file closed")
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("waitClosed did not return without a RELEASE")
	}
}

// A RELEASE during the wait ends it at once, reporting the file closed
// (in a bubble: the wait's timer and the RELEASE's delay are on its
// clock).
func TestWaitClosedSeesRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := openState()
		go func() {
			time.Sleep(10 * time.Millisecond)
			n.mu.Lock()
			n.opens--
			if n.closed != nil { // as Release does
				n.closed.Broadcast()
			}
			n.mu.Unlock()
		}()
		start := time.Now()
		if !n.waitClosed(time.Minute) {
			t.Fatal("waitClosed missed the RELEASE")
		}
		if d := time.Since(start); d != 10*time.Millisecond {
			t.Fatalf("waitClosed returned %v after it began, want at the RELEASE, 10ms", d)
		}
	})
}
