//go:build linux && cgo

package ibv

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"
)

// pipeFD is a pollFD over the read end of a pipe, with a try that reads
// one byte.
func pipeFD(t *testing.T) (*pollFD, *os.File, func() bool) {
	t.Helper()
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	rfd := fds[0]
	w := os.NewFile(uintptr(fds[1]), "pipe-w")
	p, err := newPollFD(rfd, "pipe")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.close(); syscall.Close(rfd); w.Close() })
	return p, w, func() bool {
		var b [1]byte
		n, err := syscall.Read(rfd, b[:])
		return n == 1 || (err != nil && err != syscall.EAGAIN)
	}
}

// TestPollFDWait: a wait returns when the descriptor has data, and the end
// of its context wakes it; a hook left on an earlier context never cuts
// short a wait on a later one, and a wait on an ended context returns at
// once.
func TestPollFDWait(t *testing.T) {
	p, w, try := pipeFD(t)

	// Data wakes a wait on a live context (the same context twice: the
	// hook is kept between waits).
	ctx1, cancel1 := context.WithCancel(context.Background())
	for i := range 2 {
		go func() { time.Sleep(20 * time.Millisecond); w.Write([]byte{1}) }()
		if err := p.wait(ctx1, try); err != nil {
			t.Fatalf("wait %d with data: %v", i, err)
		}
	}

	// The end of the context wakes a wait that has no data.
	go func() { time.Sleep(20 * time.Millisecond); cancel1() }()
	if err := p.wait(ctx1, try); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait ended by its context: %v, want context.Canceled", err)
	}
	if err := p.wait(ctx1, try); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait on an ended context: %v, want context.Canceled", err)
	}

	// A later context: the deadline the first context's end set is
	// cleared, and ending an unrelated earlier context does not wake it.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	ctx3, cancel3 := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); w.Write([]byte{1}) }()
	if err := p.wait(ctx3, try); err != nil {
		t.Fatalf("wait on a new context after an ended one: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- p.wait(ctx2, try) }()
	time.Sleep(20 * time.Millisecond)
	cancel3() // ctx3's hook was replaced by ctx2's: nothing happens
	select {
	case err := <-done:
		t.Fatalf("the end of a context no longer watched woke the wait: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	w.Write([]byte{1})
	if err := <-done; err != nil {
		t.Fatalf("wait with data: %v", err)
	}

	// A context without Done (Background) waits for data alone.
	go func() { time.Sleep(20 * time.Millisecond); w.Write([]byte{1}) }()
	if err := p.wait(context.Background(), try); err != nil {
		t.Fatalf("wait on Background: %v", err)
	}

	// Close wakes a waiter with errClosedWait.
	go func() { time.Sleep(20 * time.Millisecond); p.close() }()
	if err := p.wait(context.Background(), try); !errors.Is(err, errClosedWait) {
		t.Fatalf("wait ended by close: %v, want errClosedWait", err)
	}
}
