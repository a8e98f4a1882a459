package xprt

import (
	"bytes"
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/frwr"
	"github.com/nfsrdma/nfsrdma/sunrpc/sunrpctest"
	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/sim"
	"github.com/nfsrdma/nfsrdma/xprt/xprttest"
)

// movingFabric is the simulated fabric as a client sees a device come and
// go: endpoints report the device under the name the test sets, the test
// can raise RDMA CM events on the current endpoint, and Resolve can be
// held (the device is absent).
type movingFabric struct {
	*sim.Fabric
	mu   sync.Mutex
	name string
	gate chan struct{}
	eps  []*movingEndpoint
}

func (f *movingFabric) Resolve(ctx context.Context, addr netip.AddrPort) (verbs.Endpoint, error) {
	f.mu.Lock()
	gate := f.gate
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	ep, err := f.Fabric.Resolve(ctx, addr)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	me := &movingEndpoint{Endpoint: ep, name: f.name, events: make(chan verbs.CMEvent, 8), inject: make(chan verbs.CMEvent, 1)}
	go me.forward()
	f.eps = append(f.eps, me)
	return me, nil
}

// raise delivers ev on the newest endpoint.
func (f *movingFabric) raise(ev verbs.CMEvent) {
	f.mu.Lock()
	me := f.eps[len(f.eps)-1]
	f.mu.Unlock()
	me.inject <- ev
}

type movingEndpoint struct {
	verbs.Endpoint
	name   string
	events chan verbs.CMEvent
	inject chan verbs.CMEvent
}

func (e *movingEndpoint) forward() {
	defer close(e.events)
	in := e.Endpoint.Events()
	for {
		select {
		case ev, ok := <-in:
			if !ok {
				return
			}
			e.events <- ev
		case ev := <-e.inject:
			e.events <- ev
		}
	}
}

func (e *movingEndpoint) Events() <-chan verbs.CMEvent { return e.events }
func (e *movingEndpoint) Device() verbs.Device         { return namedDevice{e.Endpoint.Device(), e.name} }

type namedDevice struct {
	verbs.Device
	name string
}

func (d namedDevice) Name() string { return d.name }
func (d namedDevice) Attr() verbs.DeviceAttr {
	a := d.Device.Attr()
	a.Name = d.name
	return a
}

// TestDeviceRemovalMovesToNewDevice: RDMA CM DEVICE_REMOVAL during I/O.
// Everything the client holds on the old device is released before a new
// connection is tried (the device cannot go while it is held); the client
// then reconnects through the new device, registers the same buffer
// memory there (a borrowed buffer keeps its bytes and goes on moving data
// with no copy), and the calls caught by the removal complete.
func TestDeviceRemovalMovesToNewDevice(t *testing.T) {
	fab := sim.NewFabric(sim.PanicOnDoubleInvalidation())
	h := sunrpctest.NewHandler()
	srv, err := xprttest.Start(xprttest.Config{Fabric: fab, Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	serverOnly := fab.Live()
	mf := &movingFabric{Fabric: fab, name: "rxe0"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := Dial(ctx, Config{Fabric: mf, Addr: srv.Addr(), MaxIO: 256 << 10, IOBuffers: 8, Timeout: 10 * time.Second,
		MaxReconnectDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		tr.Close()
		h.Close()
		srv.Close()
		if a := fab.Anomalies(); a != (sim.Anomalies{}) {
			t.Errorf("fabric anomalies: %+v", a)
		}
		if live := fab.Live(); !live.Zero() {
			t.Errorf("resources left: %+v", live)
		}
		fab.Close()
	}()
	xid := uint32(0x100)
	read := func(n int, into []byte) error {
		xid++
		if into == nil {
			into = make([]byte, n)
		}
		rep, err := tr.RoundTrip(ctx, sunrpctest.ReadRequest(xid, sunrpctest.Control{}, xid, n, into))
		if err != nil {
			return err
		}
		defer rep.Release()
		return sunrpctest.CheckRead(rep, xid, xid, n)
	}
	if err := read(64<<10, nil); err != nil {
		t.Fatal(err)
	}
	lent, err := tr.Borrow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 128 << 10
	if err := read(n, lent.Bytes()[:n]); err != nil {
		t.Fatal(err)
	}
	kept := bytes.Clone(lent.Bytes()[:n])

	// Calls in flight when the device goes: held by the server.
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		xid++
		go func(x uint32) {
			defer wg.Done()
			rep, err := tr.RoundTrip(ctx, sunrpctest.ReadRequest(x, sunrpctest.Control{Tag: 7, Action: sunrpctest.Hold}, x, 32<<10, make([]byte, 32<<10)))
			if err == nil {
				err = sunrpctest.CheckRead(rep, x, x, 32<<10)
				rep.Release()
			}
			errs <- err
		}(xid)
	}
	if err := h.WaitArrival(ctx, 7, 4); err != nil {
		t.Fatal(err)
	}

	// The device goes: no new one until the test says so.
	gate := make(chan struct{})
	mf.mu.Lock()
	mf.gate, mf.name = gate, "rxe1"
	mf.mu.Unlock()
	mf.raise(verbs.CMEvent{Type: verbs.CMDeviceRemoval})
	h.Release(7) // the server's replies go nowhere: the connection is gone
	deadline := time.Now().Add(10 * time.Second)
	for {
		live := fab.Live()
		if live == serverOnly || time.Now().After(deadline) {
			if live.PDs != serverOnly.PDs || live.MRs != serverOnly.MRs || live.MWs != serverOnly.MWs || live.QPs > serverOnly.QPs || live.CQs > serverOnly.CQs {
				t.Fatalf("while the device is gone the client still holds %+v (the server alone holds %+v)", live, serverOnly)
			}
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !bytes.Equal(lent.Bytes()[:n], kept) {
		t.Fatal("the borrowed buffer's bytes changed while the device was gone")
	}

	close(gate) // the new device
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a call caught by the removal: %v", err)
		}
	}
	if err := read(n, lent.Bytes()[:n]); err != nil {
		t.Fatalf("zero-copy READ on the new device: %v", err)
	}
	lent.Release()
	c := tr.Counters()
	if c.DeviceRemovals != 1 || c.DeviceMoves != 1 || c.Reconnects == 0 || c.ZeroCopyReads < 2 {
		t.Fatalf("counters: %s", c)
	}
}

// TestStaleInvalidateSurvived: a server that answers with Send With
// Invalidate of an rkey of a call the client has finished. On a device
// where that crashes the driver (the simulated fabric panics, as rxe
// does) the client has already retired the window; the foreign
// invalidation resets the connection and the call is sent again.
func TestStaleInvalidateSurvived(t *testing.T) {
	attr := sim.DefaultDeviceAttr("sim0")
	attr.StaleInvalidatePanics = true
	h := sunrpctest.NewHandler()
	tr, srv, _ := simTarget(t, h, Config{Timeout: 5 * time.Second, Registration: frwr.ModeWindows, UnsafeWindows: true}, xprttest.Config{
		Misbehave: xprttest.Misbehavior{OnCall: 3, StaleInvalidate: true}}, sim.WithDevice(attr))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	readsVerified(ctx, t, tr, 5)
	c := tr.Counters()
	if st := srv.Stats(); st.StaleInvalidates != 1 {
		t.Fatalf("server: %+v", st)
	}
	if c.WindowsRetired < 4 || c.Reconnects != 1 {
		t.Fatalf("want every window retired and one reconnect: %s", c)
	}
}

// TestOutOfBoundsRefused: a server reaching past a segment through its
// rkey is refused by a device that enforces bounds; the connection is
// reset, the call sent again, and nothing past the segment changed.
func TestOutOfBoundsRefused(t *testing.T) {
	for _, opts := range [][]sim.Option{nil, {sim.WithoutMemWindows()}} {
		h := sunrpctest.NewHandler()
		tr, srv, _ := simTarget(t, h, Config{Timeout: 5 * time.Second}, xprttest.Config{
			Misbehave: xprttest.Misbehavior{OnCall: 2, OutOfBounds: 64}}, opts...)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for xid := uint32(1); xid <= 3; xid++ {
			buf := bytes.Repeat([]byte{0x77}, 96<<10)
			rep, err := tr.RoundTrip(ctx, sunrpctest.ReadRequest(xid, sunrpctest.Control{}, xid, 64<<10, buf[:64<<10]))
			if err != nil {
				t.Fatalf("READ %d: %v", xid, err)
			}
			err = sunrpctest.CheckRead(rep, xid, xid, 64<<10)
			rep.Release()
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Count(buf[64<<10:], []byte{0x77}) != 32<<10 {
				t.Fatal("bytes past the READ's buffer changed")
			}
		}
		if st := srv.Stats(); st.OutOfBoundsTried != 1 || st.OutOfBoundsLanded != 0 {
			t.Fatalf("%v: server: %+v", tr.RegistrationMode(), st)
		}
		if c := tr.Counters(); c.Reconnects != 1 {
			t.Fatalf("%v: want one reconnect: %s", tr.RegistrationMode(), c)
		}
	}
}
