package main

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/fusefs/fusefstest"
	"github.com/nfsrdma/nfsrdma/sunrpc/sunrpctest"
	"github.com/nfsrdma/nfsrdma/verbs/faulty"
	"github.com/nfsrdma/nfsrdma/verbs/sim"
	"github.com/nfsrdma/nfsrdma/xprt"
	"github.com/nfsrdma/nfsrdma/xprt/xprttest"
)

// The fault hook's actions on a decorated simulated fabric under the real
// transport: break-qps and fail-send each cost the connection and the
// calls go on; anything else, or no decorator, is an error.
func TestInjectInto(t *testing.T) {
	if got := injectInto(nil, "break-qps"); !strings.HasPrefix(got, "error: fault injection is not enabled") {
		t.Fatalf("without a decorator: %q", got)
	}
	h := sunrpctest.NewHandler()
	base := sim.NewFabric()
	defer base.Close()
	srv, err := xprttest.Start(xprttest.Config{Fabric: base, Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	defer h.Close()
	f := faulty.New(base)
	if got := injectInto(f, "break-qps"); !strings.Contains(got, "no live QP") {
		t.Fatalf("break-qps without a connection: %q", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := xprt.Dial(ctx, xprt.Config{Fabric: f, Addr: srv.Addr(), MaxIO: 64 << 10, IOBuffers: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	var xid atomic.Uint32
	read := func() error {
		x := xid.Add(1)
		rep, err := tr.RoundTrip(ctx, sunrpctest.ReadRequest(x, sunrpctest.Control{}, x, 32<<10, make([]byte, 32<<10)))
		if err == nil {
			err = sunrpctest.CheckRead(rep, x, x, 32<<10)
			rep.Release()
		}
		return err
	}
	if err := read(); err != nil {
		t.Fatal(err)
	}
	if got := injectInto(f, "break-qps"); got != "ok: 1 QPs moved to the error state\n" {
		t.Fatalf("break-qps: %q", got)
	}
	if err := read(); err != nil {
		t.Fatalf("READ after break-qps: %v", err)
	}
	// fail-send waits for the next SEND: a reader provides it.
	var wg sync.WaitGroup
	var stop atomic.Bool
	errc := make(chan error, 1)
	wg.Go(func() {
		for !stop.Load() {
			if err := read(); err != nil {
				errc <- err
				return
			}
		}
	})
	got := injectInto(f, "fail-send")
	stop.Store(true)
	wg.Wait()
	if got != "ok: a SEND post failed\n" {
		t.Fatalf("fail-send: %q", got)
	}
	select {
	case err := <-errc:
		t.Fatalf("READ across fail-send: %v", err)
	default:
	}
	if c := tr.Counters(); c.Reconnects < 2 || c.PostFailures != 1 {
		t.Fatalf("counters after both faults: %s", c)
	}
	if got := injectInto(f, "stats"); !strings.Contains(got, "broken 1") || !strings.Contains(got, "failed 1") {
		t.Fatalf("stats: %q", got)
	}
	// Nothing sends: fail-send gives up and disarms.
	failSendWait = 100 * time.Millisecond
	defer func() { failSendWait = time.Minute }()
	if got := injectInto(f, "fail-send"); !strings.Contains(got, "no SEND posted") {
		t.Fatalf("fail-send with nothing sent: %q", got)
	}
	if err := read(); err != nil {
		t.Fatalf("READ after a disarmed fail-send: %v", err)
	}
	if got := injectInto(f, "reboot"); !strings.Contains(got, "unknown fault") {
		t.Fatalf("an unknown action: %q", got)
	}
}

// The control socket takes "fault ACTION" only from a server with the hook.
func TestControlFaultCommand(t *testing.T) {
	dir := t.TempDir()
	stats := func(bool) string { return "stats\n" }
	unmount := func() error { return nil }
	s, err := listenControl(dir, stats, unmount, nil)
	if err != nil {
		t.Fatal(err)
	}
	reply, err := controlRequest(dir, "fault break-qps", 5*time.Second)
	s.Close()
	if err != nil || !strings.Contains(reply, `unknown command "fault break-qps"`) {
		t.Fatalf("fault without the hook: %q, %v", reply, err)
	}
	var asked string
	s, err = listenControl(dir, stats, unmount, func(action string) string { asked = action; return "ok: done\n" })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if reply, err := controlRequest(dir, "fault  fail-send ", 5*time.Second); err != nil || reply != "ok: done\n" || asked != "fail-send" {
		t.Fatalf("fault with the hook: %q, %v (asked %q)", reply, err, asked)
	}
	if code, out, errs := cli("nfsrdma-mount", "fault", "fail-send", dir); code != 0 || out != "ok: done\n" {
		t.Fatalf("nfsrdma-mount fault: %d %q %q", code, out, errs)
	}
}

// A mount server started without NFSRDMA_FAULT_INJECT refuses "fault".
func TestFaultCommandRefusedWithoutHook(t *testing.T) {
	requireFUSE(t)
	t.Setenv(faultInjectEnv, "")
	srv := fusefstest.Start(t, fusefstest.Mem)
	dir := t.TempDir()
	if code, _, errs := cli("nfsrdma-mount", "-o", tcpOpts(srv), "127.0.0.1:/", dir); code != 0 {
		t.Fatalf("mount: exit %d: %s", code, errs)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	code, _, errs := cli("nfsrdma-mount", "fault", "break-qps", dir)
	if code == 0 || !strings.Contains(errs, "unknown command") {
		t.Errorf("fault on a server without the hook: exit %d: %s", code, errs)
	}
	if code, _, errs := cli("nfsrdma-mount", "-u", dir); code != 0 {
		t.Fatalf("unmount: %d %s", code, errs)
	}
}
