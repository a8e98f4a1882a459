package xprt

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/xprt/xprttest"
)

// Reply timeouts share one timer (timeouts.go). A call posted after
// another still times out at its own deadline when the first, for which
// the timer was set, is answered: the timer finds nothing due at the
// first deadline and sets itself for the next. The answered call never
// times out.
func TestReplyTimeoutsInPostOrder(t *testing.T) {
	const timeout = 300 * time.Millisecond
	var drop atomic.Bool
	s := newStack(t, stackOpts{
		client: Config{Timeout: timeout},
		server: xprttest.Config{Misbehave: xprttest.Misbehavior{
			Select: func(ci xprttest.CallInfo) bool { return ci.Proc == 1 && drop.Swap(false) }, Drop: true}}})
	fh, _ := s.file("f", 10)
	if _, err := s.c.Getattr(s.ctx(10*time.Second), fh); err != nil { // sets the timer
		t.Fatal(err)
	}
	time.Sleep(timeout / 3)
	drop.Store(true)
	start := time.Now()
	if _, err := s.c.Getattr(s.ctx(10*time.Second), fh); err != nil {
		t.Fatalf("GETATTR whose reply was dropped, after its timeout and retransmission: %v", err)
	}
	if took := time.Since(start); took < timeout {
		t.Errorf("the dropped call was sent again after %v, before its timeout of %v", took, timeout)
	}
	c := s.tr.Counters()
	if c.Timeouts != 1 || c.Retransmits != 1 {
		t.Fatalf("want one timeout and one retransmission: %s", c)
	}
	// An answered call leaves the queue at once (the queue holds no done
	// call until its deadline), and a wait past the deadlines times
	// nothing out.
	for range 3 {
		if _, err := s.c.Getattr(s.ctx(10*time.Second), fh); err != nil {
			t.Fatal(err)
		}
		s.tr.mu.Lock()
		left := s.tr.timeouts.head != nil || s.tr.timeouts.tail != nil
		s.tr.mu.Unlock()
		if left {
			t.Fatalf("an answered call is still on the timeout queue")
		}
	}
	time.Sleep(2 * timeout)
	if c := s.tr.Counters(); c.Timeouts != 1 {
		t.Fatalf("answered calls timed out: %s", c)
	}
}
