package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// deafTransport leaves the calls of its deaf period unanswered (until
// their context ends), and answers the others at once.
type deafTransport struct {
	deaf  atomic.Bool
	delay time.Duration // before answering
}

func (d *deafTransport) RoundTrip(ctx context.Context, req *sunrpc.Request) (*sunrpc.Reply, error) {
	if d.deaf.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	time.Sleep(d.delay)
	return sunrpc.NewReply(sunrpc.AppendReply(nil, &sunrpc.ReplyHeader{XID: req.XID, Stat: sunrpc.MsgAccepted}), nil, nil), nil
}

func (d *deafTransport) Close() error { return nil }

// lockedBuffer is a log destination for several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The RPC client's "server not responding" is followed by one "server OK"
// when a reply comes again, and no more while the server answers.
func TestServerOKAfterNotResponding(t *testing.T) {
	var out lockedBuffer
	log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn}))
	tr := &deafTransport{}
	tr.deaf.Store(true)
	w := &serverWatch{t: tr, log: log, server: "srv"}
	c, err := sunrpc.NewClient(w, sunrpc.ClientConfig{Prog: 100003, Vers: 3, Logger: log,
		Retry: sunrpc.RetryPolicy{Timeout: 20 * time.Millisecond, Hard: true}})
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(70*time.Millisecond, func() { tr.deaf.Store(false) })
	for range 3 {
		if _, err := c.Call(context.Background(), 0, &sunrpc.Args{}); err != nil {
			t.Fatal(err)
		}
	}
	got := out.String()
	t.Logf("log:\n%s", got)
	nr, ok := strings.Index(got, "server not responding"), strings.Index(got, `msg="server OK" server=srv`)
	if nr < 0 || ok < nr {
		t.Errorf("want \"server not responding\", then \"server OK\":\n%s", got)
	}
	if n := strings.Count(got, "server OK"); n != 1 {
		t.Errorf("%d \"server OK\", want 1", n)
	}
	if strings.Contains(got[ok:], "not responding") {
		t.Errorf("not responding after OK:\n%s", got)
	}
}

// Where the transport retransmits by itself (a hard RDMA mount: the call
// just takes long), the watch says "not responding" after timeo, once, and
// "server OK" at the reply.
func TestServerWatchAnnounces(t *testing.T) {
	var out lockedBuffer
	log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn}))
	tr := &deafTransport{delay: 80 * time.Millisecond}
	w := &serverWatch{t: tr, log: log, server: "srv", announce: 20 * time.Millisecond}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := w.RoundTrip(context.Background(), &sunrpc.Request{XID: 1}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	tr.delay = 0
	w.RoundTrip(context.Background(), &sunrpc.Request{XID: 2})
	got := out.String()
	t.Logf("log:\n%s", got)
	if strings.Count(got, "server not responding, still trying") != 1 || strings.Count(got, "server OK") != 1 ||
		strings.Index(got, "server OK") < strings.Index(got, "not responding") {
		t.Errorf("want one \"not responding\", then one \"server OK\":\n%s", got)
	}
	// A server that answers within timeo: nothing logged.
	out.mu.Lock()
	out.b.Reset()
	out.mu.Unlock()
	tr.delay = 0
	w.RoundTrip(context.Background(), &sunrpc.Request{XID: 3})
	if s := out.String(); s != "" {
		t.Errorf("logged for a prompt reply: %s", s)
	}
}

// The watch's cost per call: a timer where it announces (hard RDMA mounts).
func BenchmarkServerWatch(b *testing.B) {
	for _, announce := range []time.Duration{0, time.Minute} {
		b.Run("announce="+announce.String(), func(b *testing.B) {
			w := &serverWatch{t: &deafTransport{}, log: slog.New(slog.DiscardHandler), announce: announce}
			req := &sunrpc.Request{XID: 1}
			b.ReportAllocs()
			for b.Loop() {
				w.RoundTrip(context.Background(), req)
			}
		})
	}
}
