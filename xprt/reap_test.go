package xprt

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/xprt/xprttest"
)

// A caller alone on its connection reaps its own reply: every call of a
// sequential workload is counted in OwnReplies, and the data is right.
func TestCallerReapsOwnReply(t *testing.T) {
	s := newStack(t, stackOpts{})
	fh, data := s.file("f", 64<<10)
	before := s.tr.Counters()
	buf := make([]byte, 4096)
	const n = 50
	for i := range n {
		off := (i * 4096) % len(data)
		if r, err := s.c.Read(s.ctx(10*time.Second), fh, uint64(off), buf); err != nil || !bytes.Equal(buf[:r.Count], data[off:off+4096]) {
			t.Fatalf("READ %d: %v", i, err)
		}
	}
	c := s.tr.Counters()
	if calls, own := c.Calls-before.Calls, c.OwnReplies-before.OwnReplies; own != calls || calls != n {
		t.Fatalf("%d sequential calls, %d reaped by their own caller: want all", calls, own)
	}
}

// While one caller reaps, the replies of other calls it finds are settled
// by it; when it gives up (its context ends) it leaves at once, although
// its own reply has not come, and the reply loop takes over the calls
// still outstanding.
func TestReaperGivesUpToReplyLoop(t *testing.T) {
	var armed atomic.Bool
	const delay = 2 * time.Second
	s := newStack(t, stackOpts{server: xprttest.Config{Misbehave: xprttest.Misbehavior{
		Select: func(ci xprttest.CallInfo) bool { return ci.Proc == 1 && armed.Load() }, Delay: delay}}})
	fh, _ := s.file("f", 10)
	armed.Store(true)
	conn := func() *conn {
		s.tr.mu.Lock()
		defer s.tr.mu.Unlock()
		return s.tr.cn
	}()
	reaper := func() (reaperKind, *call) {
		conn.mu.Lock()
		defer conn.mu.Unlock()
		return conn.reaper, conn.reaperCall
	}

	// A: a GETATTR whose caller gives up long before its reply.
	ctxA, cancelA := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancelA()
	start := time.Now()
	var wg sync.WaitGroup
	var errA error
	var tookA time.Duration
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, errA = s.c.Getattr(ctxA, fh)
		tookA = time.Since(start)
	}()
	waitFor(t, "A's caller to reap", func() bool { k, _ := reaper(); return k == reapCaller })
	_, callA := reaper()

	// B: a GETATTR posted while A's caller reaps; its reply comes after
	// A has given up.
	var errB error
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, errB = s.c.Getattr(s.ctx(10*time.Second), fh)
	}()
	waitFor(t, "B to be posted", func() bool {
		s.tr.mu.Lock()
		defer s.tr.mu.Unlock()
		return len(s.tr.calls) == 2
	})
	if k, cl := reaper(); k != reapCaller || cl != callA {
		t.Fatalf("B's caller took the CQ from A's (reaper %d)", k)
	}
	wg.Wait()
	if !errors.Is(errA, context.DeadlineExceeded) {
		t.Fatalf("A: %v, want the deadline", errA)
	}
	if tookA > delay/2 {
		t.Errorf("A's caller returned after %v: it waited on the CQ past its context (reply due at %v)", tookA, delay)
	}
	if errB != nil {
		t.Fatalf("B after A's caller gave up the CQ: %v", errB)
	}
	c := s.tr.Counters()
	if c.Abandoned != 1 || c.Disconnects != 0 {
		t.Fatalf("want A abandoned and no reset: %s", c)
	}
	waitFor(t, "A's late reply to settle it and the CQ to be given up", func() bool {
		s.tr.mu.Lock()
		n := len(s.tr.calls)
		s.tr.mu.Unlock()
		k, _ := reaper()
		return n == 0 && k == reapNone
	})
}

// A caller reaping when its call's connection is lost (the server drops
// the reply; the call times out) leaves the CQ to the reply loop, which
// reaps the drain's flushes; the call is sent again on the next
// connection and its caller gets the reply.
func TestReaperOnLostConnection(t *testing.T) {
	var armed atomic.Bool
	s := newStack(t, stackOpts{
		client: Config{Timeout: 200 * time.Millisecond},
		server: xprttest.Config{Misbehave: xprttest.Misbehavior{
			Select: func(ci xprttest.CallInfo) bool { return ci.Proc == 1 && armed.Swap(false) }, Drop: true}}})
	fh, _ := s.file("f", 10)
	armed.Store(true)
	if _, err := s.c.Getattr(s.ctx(10*time.Second), fh); err != nil {
		t.Fatalf("GETATTR retransmitted after the timeout: %v", err)
	}
	c := s.tr.Counters()
	if c.Timeouts != 1 || c.Retransmits != 1 {
		t.Fatalf("want one timeout and one retransmission: %s", c)
	}
}
