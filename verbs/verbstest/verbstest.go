// Package verbstest is the conformance suite of the verbs interfaces,
// written once and run against every implementation: verbs/sim in its own
// tests, verbs/ibv on the test bed's rxe device. It checks the behaviour
// nfsrdma's transport depends on (ordering, queue depths, memory windows,
// invalidation, access errors, flushing, waiting without CPU) and states
// each place where a device departs from the specification (Quirks)
// instead of hiding it.
//
// The suite never issues a LOCAL_INV (or Send With Invalidate) of an rkey
// that is not currently valid: on rxe that panics the kernel. Double
// invalidation is tested by verbs/sim's own tests only.
//
// The helpers (Connect, NewPair, NewBuffer, Reap) are for other packages'
// tests too.
package verbstest

import (
	"net/netip"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/verbs"
)

// Env is what the suite runs against.
type Env struct {
	// Fabric is the implementation under test. It must execute work
	// asynchronously (verbs/sim without sim.Manual) and be used by nothing
	// else during the run: the suite checks that every resource it created
	// is released.
	Fabric verbs.Fabric
	// ListenAddr is where the suite's listeners bind; port 0 picks a free
	// port (10.99.0.1:0 in the test bed).
	ListenAddr netip.AddrPort
	// ConnectAddr is what clients connect to; port 0 means the listener's
	// port.
	ConnectAddr netip.AddrPort
	// Device is the device whose attributes are checked; "" means the
	// first one Devices lists.
	Device string
	// Quirks are the documented departures of the device.
	Quirks Quirks
	// Timeout bounds every blocking step; 0 means 10 s.
	Timeout time.Duration
}

func (e Env) timeout() time.Duration {
	if e.Timeout > 0 {
		return e.Timeout
	}
	return 10 * time.Second
}

// Quirks are the ways a device departs from the verbs specification that
// the suite can observe. The zero value is not the specification: use
// SpecQuirks or RXEQuirks.
type Quirks struct {
	// WindowBoundsEnforced: a window's rkey reaches only the window's
	// bytes. False on rxe, where only the underlying MR's end is checked
	// (rxe on kernel 6.1); the suite then logs the departure.
	WindowBoundsEnforced bool
	// DoubleLocalInvPanics: a LOCAL_INV of an rkey that is not valid
	// crashes the device's driver (rxe, defect 3). The suite never issues
	// one whatever this says; it is here so the run's log says why.
	DoubleLocalInvPanics bool
}

// SpecQuirks is a device that follows the specification (verbs/sim).
func SpecQuirks() Quirks { return Quirks{WindowBoundsEnforced: true} }

// RXEQuirks is Soft-RoCE (rdma_rxe) as measured on the test bed.
func RXEQuirks() Quirks { return Quirks{WindowBoundsEnforced: false, DoubleLocalInvPanics: true} }

// Run runs the suite. Each subtest builds its own connection(s) and
// releases them; after each one, and at the end, every resource count of
// the fabric must be back where it started (zero at the end).
func Run(t *testing.T, env Env) {
	if env.Fabric == nil {
		t.Fatal("verbstest.Run: Env.Fabric is nil")
	}
	if !env.ListenAddr.IsValid() || !env.ConnectAddr.IsValid() {
		t.Fatal("verbstest.Run: Env.ListenAddr and Env.ConnectAddr are required")
	}
	if !env.Fabric.Live().Zero() {
		t.Fatalf("verbstest.Run: the fabric already has live resources: %+v", env.Fabric.Live())
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, env) })
		if live := env.Fabric.Live(); !live.Zero() {
			t.Errorf("after %s: resources still live: %+v", c.name, live)
		}
	}
}

var cases = []struct {
	name string
	run  func(*testing.T, Env)
}{
	{"DeviceAttributes", testDeviceAttributes},
	{"BadInput", testBadInput},
	{"PrivateData", testPrivateData},
	{"SendRecv", testSendRecv},
	{"ReceiveTooSmall", testReceiveTooSmall},
	{"RDMAWriteRead", testRDMAWriteRead},
	{"WindowWriteInvalidate", testWindowWriteInvalidate},
	{"WindowBounds", testWindowBounds},
	{"WindowSendWithInvalidate", testWindowSendWithInvalidate},
	{"WindowRebind", testWindowRebind},
	{"WindowBindErrors", testWindowBindErrors},
	{"WindowTiedToQP", testWindowTiedToQP},
	{"DoubleInvalidation", testDoubleInvalidation},
	{"FlushOrder", testFlushOrder},
	{"SendQueueOverflow", testSendQueueOverflow},
	{"RecvQueueOverflow", testRecvQueueOverflow},
	{"WaitWokenByCompletion", testWaitWoken},
	{"IdleWaitUsesNoCPU", testIdleWait},
	{"Disconnect", testDisconnect},
}
