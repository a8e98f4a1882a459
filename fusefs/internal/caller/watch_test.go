package caller

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestFatalInStatus(t *testing.T) {
	for _, tc := range []struct {
		status string
		want   bool
	}{
		{"State:\tS (sleeping)\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\n", false},
		{"State:\tS (sleeping)\nSigPnd:\t0000000000000002\nShdPnd:\t0000000000004000\n", false}, // SIGINT, SIGTERM
		{"State:\tS (sleeping)\nSigPnd:\t0000000000000100\nShdPnd:\t0000000000000000\n", true},  // SIGKILL to the thread
		{"State:\tS (sleeping)\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000100\n", true},  // to the process
		{"State:\tZ (zombie)\nSigPnd:\t0000000000000000\n", true},
		{"State:\tX (dead)\n", true},
		{"SigPnd:\tnot hex\n", false},
		{"", false},
	} {
		if got := fatalInStatus([]byte(tc.status)); got != tc.want {
			t.Errorf("fatalInStatus(%q) = %v, want %v", tc.status, got, tc.want)
		}
	}
	if FatalSignalPending(0) {
		t.Error("pid 0 (the kernel) reported killed")
	}
	if FatalSignalPending(uint32(os.Getpid())) {
		t.Error("this process reported killed")
	}
	if !FatalSignalPending(1 << 30) { // above pid_max: no such process
		t.Error("a process that does not exist is not reported gone")
	}
}

// TestWatches runs on synctest's fake clock with an injected predicate for
// "a fatal signal is pending".
func TestWatches(t *testing.T) {
	t.Run("not interrupted", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var asked atomic.Int32
			l := &Watches{Fatal: func(uint32) bool { asked.Add(1); return true }}
			ctx, done := l.Start(context.Background(), context.Background(), 7)
			time.Sleep(10 * watchAfter)
			synctest.Wait()
			if ctx.Err() != nil || asked.Load() != 0 {
				t.Fatalf("a request never interrupted: context %v, predicate asked %d times", ctx.Err(), asked.Load())
			}
			done()
			if ctx.Err() == nil || l.InFlight() != 0 {
				t.Fatalf("done: context %v, %d in flight", ctx.Err(), l.InFlight())
			}
			time.Sleep(2 * watchAfter)
			synctest.Wait()
			if l.armed {
				t.Error("the sweeper is still armed with nothing in flight")
			}
		})
	})
	t.Run("interrupted, killed later", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var killed atomic.Bool
			var asked atomic.Int32
			l := &Watches{Fatal: func(pid uint32) bool { asked.Add(1); return pid == 7 && killed.Load() }}
			intr, interrupt := context.WithCancel(context.Background())
			ctx, done := l.Start(intr, context.Background(), 7)
			defer done()
			interrupt() // a signal that does not kill: the call goes on
			time.Sleep(2*watchAfter + 5*fatalPoll)
			synctest.Wait()
			if ctx.Err() != nil {
				t.Fatal("a signal that does not kill cancelled the call")
			}
			if n := asked.Load(); n < 5 || n > 7 {
				t.Errorf("the caller was looked at %d times in 5 fatalPoll, want about 6", n)
			}
			killed.Store(true)
			time.Sleep(fatalPoll)
			synctest.Wait()
			if ctx.Err() == nil {
				t.Fatal("the call outlived its caller's fatal signal by fatalPoll")
			}
			n := asked.Load()
			time.Sleep(5 * fatalPoll)
			synctest.Wait()
			if asked.Load() != n {
				t.Error("the caller is still looked at after its call was cancelled")
			}
		})
	})
	t.Run("killed while waiting", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := &Watches{Fatal: func(uint32) bool { return true }}
			intr, interrupt := context.WithCancel(context.Background())
			other, otherDone := l.Start(context.Background(), context.Background(), 8)
			defer otherDone()
			start := time.Now()
			ctx, done := l.Start(intr, context.Background(), 7)
			defer done()
			time.Sleep(3 * watchAfter)
			interrupt()
			<-ctx.Done()
			if d := time.Since(start) - 3*watchAfter; d > 2*watchAfter {
				t.Errorf("a killed caller's call was cancelled %v after the interrupt, want within 2 watchAfter", d)
			}
			if other.Err() != nil {
				t.Error("another request's call was cancelled")
			}
		})
	})
	t.Run("done before the interrupt is seen", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var asked atomic.Int32
			l := &Watches{Fatal: func(uint32) bool { asked.Add(1); return false }}
			intr, interrupt := context.WithCancel(context.Background())
			_, done := l.Start(intr, context.Background(), 7)
			time.Sleep(2 * watchAfter)
			interrupt()
			time.Sleep(2 * watchAfter) // the watch started, polling
			done()
			n := asked.Load()
			time.Sleep(3 * fatalPoll)
			synctest.Wait()
			if n == 0 || asked.Load() != n {
				t.Errorf("predicate asked %d times before done, %d after: the watch must start, then stop at done", n, asked.Load())
			}
		})
	})
	t.Run("close", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := &Watches{}
			parent := context.WithValue(context.Background(), struct{}{}, "cred")
			a, doneA := l.Start(context.Background(), parent, 0)
			b, doneB := l.Start(context.Background(), parent, 0)
			defer doneA()
			defer doneB()
			if a.Value(struct{}{}) != "cred" {
				t.Error("the call's context is not made under parent")
			}
			l.Close()
			if a.Err() == nil || b.Err() == nil {
				t.Error("Close left a call running")
			}
			c, doneC := l.Start(context.Background(), parent, 0)
			defer doneC()
			if c.Err() == nil {
				t.Error("a request started after Close runs")
			}
		})
	})
}
