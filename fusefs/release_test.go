package fusefs

import (
	"testing"
	"time"
)

// An unlink or rename over a file that stays open waits releaseWait for a
// RELEASE that may be on its way, then gives up: the wait must end even
// when no RELEASE ever comes (the caller may hold the file open itself),
// however the timer's wake-up falls against the clock.
func TestWaitClosedEndsWithoutRelease(t *testing.T) {
	n := &fileState{opens: 1}
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

// A RELEASE during the wait ends it at once, reporting the file closed.
func TestWaitClosedSeesRelease(t *testing.T) {
	n := &fileState{opens: 1}
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
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("waitClosed took %v after the RELEASE", d)
	}
}
