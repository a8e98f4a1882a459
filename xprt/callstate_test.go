package xprt

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/xprt/xprttest"
)

// Tests of the call lifecycle (state.go): what a caller that gives up, a
// retransmission, or a call the plan splits finely may and may not do.

func isRead(ci xprttest.CallInfo) bool { return ci.Proc == 6 }

// fill sets every byte of b to v.
func fill(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}

func allBytes(b []byte, v byte) bool {
	for _, x := range b {
		if x != v {
			return false
		}
	}
	return true
}

// A READ whose caller gives up after the call was posted: RoundTrip
// returns the context's error, and the server's RDMA WRITEs, held back
// until after that, never land in the caller's buffer — neither a buffer
// of its own (copied into at completion) nor a borrowed one (written in
// place through a window).
func TestCallGiveUpLeavesCallerMemoryAlone(t *testing.T) {
	for _, borrowed := range []bool{false, true} {
		name := map[bool]string{false: "own", true: "borrowed"}[borrowed]
		t.Run(name, func(t *testing.T) {
			s := newStack(t, stackOpts{server: xprttest.Config{Misbehave: xprttest.Misbehavior{
				Select: isRead, OnCall: 0, Delay: 300 * time.Millisecond}}})
			fh, data := s.file("f", 64<<10)
			var buf []byte
			if borrowed {
				b, err := s.tr.Borrow(s.ctx(5 * time.Second))
				if err != nil {
					t.Fatal(err)
				}
				defer b.Release()
				buf = b.Bytes()[:len(data)]
			} else {
				buf = make([]byte, len(data))
			}
			fill(buf, 0xee)
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_, err := s.c.Read(ctx, fh, 0, buf)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Read: %v, want the context's deadline", err)
			}
			time.Sleep(600 * time.Millisecond) // the held reply's writes have been tried
			if !allBytes(buf, 0xee) {
				t.Fatal("the caller's buffer changed after Read returned")
			}
			if c := s.tr.Counters(); c.AbandonResets == 0 {
				t.Fatalf("a call with windows given up without resetting its connection: %s", c)
			}
			// The transport goes on.
			r, err := s.c.Read(s.ctx(10*time.Second), fh, 0, buf)
			if err != nil || r.Count != len(data) || !bytes.Equal(buf, data) {
				t.Fatalf("READ after the reset: %v, %d bytes", err, r.Count)
			}
		})
	}
}

// A call without windows given up after posting is abandoned: its late
// reply is discarded, its credit comes back, and the transport goes on
// without a reset.
func TestCallGiveUpWithoutWindowsAbandons(t *testing.T) {
	var armed atomic.Bool
	s := newStack(t, stackOpts{server: xprttest.Config{Misbehave: xprttest.Misbehavior{
		Select: func(ci xprttest.CallInfo) bool { return ci.Proc == 1 && armed.Swap(false) }, Delay: 200 * time.Millisecond}}})
	fh, _ := s.file("f", 10)
	armed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := s.c.Getattr(ctx, fh); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GETATTR: %v", err)
	}
	waitFor(t, "the late reply to settle the abandoned call", func() bool {
		s.tr.mu.Lock()
		defer s.tr.mu.Unlock()
		return len(s.tr.calls) == 0
	})
	c := s.tr.Counters()
	if c.Abandoned != 1 || c.Disconnects != 0 {
		t.Fatalf("want one abandoned call and no reset: %s", c)
	}
	for i := 0; i < 100; i++ { // every credit is back: 100 calls in turn
		if _, err := s.c.Getattr(s.ctx(5*time.Second), fh); err != nil {
			t.Fatal(err)
		}
	}
	s.tr.mu.Lock()
	cn := s.tr.cn
	s.tr.mu.Unlock()
	cn.mu.Lock()
	out := cn.credits.Outstanding()
	cn.mu.Unlock()
	if out != 0 {
		t.Fatalf("%d credits outstanding with no call in flight", out)
	}
}

// A READ retransmitted with the same XID after its first attempt timed out
// (the soft-mount retry policy) gets the reply to its own attempt, sent on
// a new connection: the data of the file it read, never a stale or
// foreign buffer.
func TestCallRetransmissionGetsItsOwnReply(t *testing.T) {
	s := newStack(t, stackOpts{server: xprttest.Config{Misbehave: xprttest.Misbehavior{
		Select: isRead, OnCall: 0, Delay: 400 * time.Millisecond}}})
	fha, a := s.file("a", 32<<10)
	c, err := nfs3.NewClient(s.tr, &nfs3.ClientOptions{Rsize: 256 << 10, Wsize: 256 << 10,
		Retry: sunrpc.RetryPolicy{Timeout: 100 * time.Millisecond, Retrans: 5}})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(a))
	r, err := c.Read(s.ctx(20*time.Second), fha, 0, buf)
	if err != nil {
		t.Fatal(err)
	}
	if r.Count != len(a) || !bytes.Equal(buf, a) {
		t.Fatal("the retransmitted READ returned other data than its file's")
	}
	if ctr := s.tr.Counters(); ctr.AbandonResets == 0 {
		t.Fatalf("no retransmission on a new connection: %s", ctr)
	}
}

// The same XID cannot be in flight twice; once a call is settled it can be
// used again.
func TestCallXIDInUse(t *testing.T) {
	s := newStack(t, stackOpts{server: xprttest.Config{Misbehave: xprttest.Misbehavior{
		Select: func(ci xprttest.CallInfo) bool { return ci.Proc == 0 }, OnCall: 0, Delay: 300 * time.Millisecond}}})
	req := nullRequest(0x1234)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if r, err := s.tr.RoundTrip(s.ctx(10*time.Second), req); err == nil {
			r.Release()
		} else {
			t.Error(err)
		}
	}()
	waitFor(t, "the first call", func() bool {
		s.tr.mu.Lock()
		defer s.tr.mu.Unlock()
		return len(s.tr.calls) == 1
	})
	if _, err := s.tr.RoundTrip(s.ctx(10*time.Second), nullRequest(0x1234)); !errors.Is(err, sunrpc.ErrXIDInUse) {
		t.Fatalf("a second call with a live XID: %v", err)
	}
	wg.Wait()
	r, err := s.tr.RoundTrip(s.ctx(10*time.Second), nullRequest(0x1234))
	if err != nil {
		t.Fatal(err)
	}
	r.Release()
}

// nullRequest is an NFSv3 NULL call with the given XID.
func nullRequest(xid uint32) *sunrpc.Request {
	h := sunrpc.CallHeader{XID: xid, Prog: nfs3.Program, Vers: nfs3.Version, Proc: 0}
	return &sunrpc.Request{XID: xid, Head: sunrpc.AppendCall(nil, &h), MaxReply: sunrpc.MaxReplyHeader}
}

// With chunks split into many segments (MaxSegment far below MaxIO) the
// windows of one call are taken all at once: 16 concurrent READs of 16
// segments each, against 64 windows, all complete.
func TestCallWindowsTakenAllAtOnce(t *testing.T) {
	s := newStack(t, stackOpts{client: Config{MaxSegment: 16 << 10, IOBuffers: 16}})
	fh, data := s.file("f", 128<<10)
	errs := parallel(16, func(int) error {
		buf := make([]byte, len(data))
		r, err := s.c.Read(s.ctx(30*time.Second), fh, 0, buf)
		if err == nil && (r.Count != len(data) || !bytes.Equal(buf, data)) {
			err = errors.New("wrong data")
		}
		return err
	})
	noErrors(t, errs)
}

// Caller input never panics RoundTrip: the most segments a plan allows in
// both directions, and a long call sent at position zero that does not fit
// a buffer.
func TestCallInputBounds(t *testing.T) {
	s := newStack(t, stackOpts{client: Config{MaxIO: 64 << 10, MaxSegment: 8 << 10}})
	// 8 Read-chunk segments and 8 Write-chunk segments: 16 binds.
	h := sunrpc.CallHeader{XID: 77, Prog: nfs3.Program, Vers: nfs3.Version, Proc: 0}
	req := &sunrpc.Request{XID: 77, Head: sunrpc.AppendCall(nil, &h), Bulk: make([]byte, 64<<10),
		ReplyBulk: make([]byte, 64<<10), MaxReply: 64<<10 + 512}
	if r, err := s.tr.RoundTrip(s.ctx(10*time.Second), req); err == nil {
		r.Release()
	}
	// A position-zero call of 8 KiB of head and 64 KiB - 1 of bulk does
	// not fit one 68 KiB buffer: its pieces go in two, whole.
	s = newStack(t, stackOpts{client: Config{MaxIO: 64 << 10}})
	head := sunrpc.AppendCall(nil, &sunrpc.CallHeader{XID: 78, Prog: nfs3.Program, Vers: nfs3.Version, Proc: 0})
	head = append(head, make([]byte, 8<<10)...)
	req = &sunrpc.Request{XID: 78, Head: head, Bulk: make([]byte, 64<<10-1), MaxReply: 1024}
	if r, err := s.tr.RoundTrip(s.ctx(10*time.Second), req); err != nil {
		t.Fatalf("long call in two buffers: %v", err)
	} else {
		r.Release()
	}
	if c := s.tr.Counters(); c.PositionZero != 1 {
		t.Fatalf("not sent at position zero: %s", c)
	}
	// A head that no number of segments can carry is an error.
	head = append(sunrpc.AppendCall(nil, &sunrpc.CallHeader{XID: 80, Prog: nfs3.Program, Vers: nfs3.Version, Proc: 0}), make([]byte, 2<<20)...)
	if _, err := s.tr.RoundTrip(s.ctx(10*time.Second), &sunrpc.Request{XID: 80, Head: head, MaxReply: 1024}); err == nil {
		t.Fatal("a 2 MiB call was sent")
	}
	// The transport goes on.
	if r, err := s.tr.RoundTrip(s.ctx(10*time.Second), nullRequest(79)); err != nil {
		t.Fatal(err)
	} else {
		r.Release()
	}
}

// A closed transport reports sunrpc.ErrClosed, as TCP does.
func TestCallClosedIsSunrpcErrClosed(t *testing.T) {
	s := newStack(t, stackOpts{})
	s.tr.Close()
	if _, err := s.tr.RoundTrip(context.Background(), nullRequest(5)); !errors.Is(err, sunrpc.ErrClosed) {
		t.Fatalf("RoundTrip after Close: %v", err)
	}
}

// Every transition the code makes is drawn.
func TestCallStateTransitionsChecked(t *testing.T) {
	s := newStack(t, stackOpts{})
	fh, data := s.file("f", 200<<10)
	buf := make([]byte, len(data))
	if _, err := s.c.Read(s.ctx(10*time.Second), fh, 0, buf); err != nil {
		t.Fatal(err)
	}
	if n := s.tr.Counters().RefusedTransitions; n != 0 {
		t.Fatalf("%d refused transitions", n)
	}
	cl := &call{t: s.tr, req: nullRequest(1), doneCh: make(chan struct{}), wakeCh: make(chan struct{}, 1)}
	if cl.to(stPosted) || cl.state != stQueued {
		t.Fatal("queued → posted was allowed")
	}
	if s.tr.Counters().RefusedTransitions != 1 {
		t.Fatal("a refused transition was not counted")
	}
}

// Asynchronous device events that break the connection without completing
// any WR (a port going down, a fatal QP or device error) reset the
// connection; calls go on over the next one. Events for another QP do not.
func TestAsyncDeviceEventsResetTheConnection(t *testing.T) {
	for _, ev := range []verbs.AsyncEvent{
		{Type: verbs.AsyncPortError, Port: 1},
		{Type: verbs.AsyncDeviceFatal},
		{Type: verbs.AsyncQPFatal},
	} {
		t.Run(ev.Type.String(), func(t *testing.T) {
			s := newStack(t, stackOpts{})
			fh, data := s.file("f", 64<<10)
			other := ev
			other.QPNum = 0xdead
			if ev.Type == verbs.AsyncQPFatal {
				if !s.fab.InjectAsyncEvent("sim0", other) {
					t.Fatal("no device sim0")
				}
				waitFor(t, "the event", func() bool { return s.tr.Counters().AsyncEvents >= 1 })
				if c := s.tr.Counters(); c.Disconnects != 0 {
					t.Fatalf("an event for another QP reset the connection: %s", c)
				}
				ev.QPNum = s.clientQP().Num()
			}
			s.fab.InjectAsyncEvent("sim0", ev)
			waitFor(t, "the reset", func() bool { return s.tr.Counters().Disconnects == 1 })
			buf := make([]byte, len(data))
			r, err := s.c.Read(s.ctx(10*time.Second), fh, 0, buf)
			if err != nil || r.Count != len(data) || !bytes.Equal(buf, data) {
				t.Fatalf("READ after the event: %v", err)
			}
			if c := s.tr.Counters(); c.Reconnects != 1 {
				t.Fatalf("no reconnect: %s", c)
			}
		})
	}
}

// A retransmission of a call without windows (same XID, after the caller's
// try timed out) goes on a new connection, never beside its first attempt
// (RFC 8166 §4.5), and leaves no credit behind.
func TestCallRetransmissionOnNewConnection(t *testing.T) {
	var armed atomic.Bool
	s := newStack(t, stackOpts{server: xprttest.Config{Misbehave: xprttest.Misbehavior{
		Select: func(ci xprttest.CallInfo) bool { return ci.Proc == 1 && armed.Swap(false) }, Delay: 300 * time.Millisecond}}})
	fh, _ := s.file("f", 10)
	c, err := nfs3.NewClient(s.tr, &nfs3.ClientOptions{Retry: sunrpc.RetryPolicy{Timeout: 100 * time.Millisecond, Retrans: 3}})
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	if _, err := c.Getattr(s.ctx(10*time.Second), fh); err != nil {
		t.Fatal(err)
	}
	if st := s.srv.Stats(); st.Connections != 2 {
		t.Fatalf("the retransmission went on connection %d of the server's %d, want a new one", st.Connections, st.Connections)
	}
	if ctr := s.tr.Counters(); ctr.RetransmitResets != 1 {
		t.Fatalf("want one reset for the retransmission: %s", ctr)
	}
	waitFor(t, "no credit outstanding", func() bool {
		s.tr.mu.Lock()
		cn := s.tr.cn
		s.tr.mu.Unlock()
		if cn == nil {
			return false
		}
		cn.mu.Lock()
		defer cn.mu.Unlock()
		return cn.credits.Outstanding() == 0
	})
}

// A small READ whose reply comes inline, given up before the reply: the
// late reply is discarded, never copied into the caller's buffer.
func TestCallGiveUpInlineReadNoLateCopy(t *testing.T) {
	var armed atomic.Bool
	s := newStack(t, stackOpts{server: xprttest.Config{Misbehave: xprttest.Misbehavior{
		Select: func(ci xprttest.CallInfo) bool { return isRead(ci) && armed.Swap(false) }, Delay: 200 * time.Millisecond}}})
	fh, _ := s.file("f", 1024)
	buf := make([]byte, 1024)
	fill(buf, 0xee)
	armed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := s.c.Read(ctx, fh, 0, buf); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("READ: %v", err)
	}
	waitFor(t, "the late reply to settle the abandoned READ", func() bool {
		s.tr.mu.Lock()
		defer s.tr.mu.Unlock()
		return len(s.tr.calls) == 0
	})
	if !allBytes(buf, 0xee) {
		t.Fatal("the late inline reply was copied into the caller's buffer")
	}
	if c := s.tr.Counters(); c.Abandoned != 1 {
		t.Fatalf("the READ was not abandoned: %s", c)
	}
}

// Every counter has one name and one field of Counters, in the order of
// counterTable, and the counters' line names every counter once.
func TestCountersStringNamesEveryField(t *testing.T) {
	fields := reflect.VisibleFields(reflect.TypeFor[Counters]())
	if len(fields) != int(numCounters) {
		t.Fatalf("Counters has %d fields for %d counters (go generate ./xprt)", len(fields), numCounters)
	}
	names := map[string]bool{}
	for i, e := range counterTable {
		if e.name == "" || strings.ContainsAny(e.name, " \t") || names[e.name] {
			t.Errorf("counter %d (%s): name %q empty, with a space or taken", i, e.field, e.name)
		}
		names[e.name] = true
		if f := fields[i]; f.Name != e.field || f.Type.Kind() != reflect.Uint64 {
			t.Errorf("counter %d is %s, field %d of Counters %s %s (go generate ./xprt)", i, e.field, i, f.Name, f.Type)
		}
	}
	var c Counters
	c.Calls, c.AsyncEvents, c.PullUpBytes = 3, 5, 7
	s := c.String()
	for _, want := range []string{"calls 3 ", "pullup_bytes 7", "async_events 5"} {
		if !strings.Contains(s+" ", want) {
			t.Fatalf("%q lacks %q", s, want)
		}
	}
	if f := strings.Fields(s); len(f) != 2*int(numCounters) {
		t.Fatalf("%d words for %d counters: %q", len(f), numCounters, s)
	}
}

// counters_gen.go is what go generate makes of counterTable now.
func TestCountersGenerated(t *testing.T) {
	out := filepath.Join(t.TempDir(), "gen") // not ending in .go: go run would compile it
	if b, err := exec.Command("go", "run", "gencounters.go", out).CombinedOutput(); err != nil {
		t.Fatalf("go run gencounters.go: %v\n%s", err, b)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("counters_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("counters_gen.go is stale: go generate ./xprt")
	}
}

// A count added to a counter shows in its own field of the snapshot.
func TestCountersSnapshotByIndex(t *testing.T) {
	var ctr counters
	ctr[ctrCalls].Add(1)
	ctr[ctrMaxOutstanding].Store(9)
	ctr[ctrWindowsRetired].Add(4)
	if c := ctr.snapshot(); c.Calls != 1 || c.MaxOutstanding != 9 || c.WindowsRetired != 4 || c.Sends != 0 {
		t.Fatalf("snapshot %s", c)
	}
}
