//go:build integration

package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma/frwr"
	"github.com/nfsrdma/nfsrdma/rpcrdma"
	"github.com/nfsrdma/nfsrdma/sunrpc/sunrpctest"
	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/ibv"
	"github.com/nfsrdma/nfsrdma/verbs/sim"
	"github.com/nfsrdma/nfsrdma/verbs/verbstest"
	"github.com/nfsrdma/nfsrdma/xprt"
	"github.com/nfsrdma/nfsrdma/xprt/xprttest"
)

// The rogue-server suite (TestSecurity*): a hostile server built on
// xprttest, in this process, against the real client transport — over
// rxe0 in the guest and over the simulated fabric — in every registration
// mode the device allows. Each case asserts that nothing lands in the
// client's memory where the client did not grant access at that moment,
// that the client recovers (a READ afterwards works), and that the host
// survives (the process goes on). Each case gives a row of
// $NFSRDMA_SECURITY_OUT (default results/security.md under the working
// directory: the repository, /share, in the guest). A watchdog dumps the
// goroutines of a case that makes no progress for two minutes.

// secRow is one case's outcome.
type secRow struct {
	fabric, mode, name string
	tried, landed      int // hostile accesses (or invalidations) made; those that reached memory not granted then
	recovered          bool
	note               string
	pass               bool
}

type secTable struct {
	mu   sync.Mutex
	path string
	head string
	rows []secRow
}

var securityTable = &secTable{path: securityOut()}

func securityOut() string {
	if p := os.Getenv("NFSRDMA_SECURITY_OUT"); p != "" {
		return p
	}
	return filepath.Join("results", "security.md")
}

func (tb *secTable) add(t *testing.T, r secRow) {
	t.Helper()
	t.Logf("row: %+v", r)
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if tb.head == "" {
		var u unix.Utsname
		unix.Uname(&u)
		tb.head = fmt.Sprintf("Run of %s UTC, guest kernel %s. A row per case and registration mode: *tried* counts the hostile accesses or invalidations the server made, *landed* those that reached client memory not granted at that moment (or changed data a caller got back); *recovered*: a READ after the case worked.",
			time.Now().UTC().Format("2006-01-02 15:04"), unix.ByteSliceToString(u.Release[:]))
	}
	tb.rows = append(tb.rows, r)
	var b strings.Builder
	b.WriteString("# A hostile server against the client transport: nfsrdma over Soft-RoCE and the simulated fabric\n\n")
	b.WriteString(tb.head + "\n\n")
	b.WriteString("| fabric | registration | case | tried | landed | recovered | notes | result |\n|---|---|---|--:|--:|---|---|---|\n")
	for _, r := range tb.rows {
		res := "pass"
		if !r.pass {
			res = "FAIL"
		}
		rec := "yes"
		if !r.recovered {
			rec = "no"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %s | %s | %s |\n", r.fabric, r.mode, r.name, r.tried, r.landed, rec, r.note, res)
	}
	if err := os.MkdirAll(filepath.Dir(tb.path), 0o755); err == nil {
		err = os.WriteFile(tb.path, []byte(b.String()), 0o644)
		if err != nil {
			t.Errorf("results table: %v", err)
		}
	}
}

// watchdog dumps every goroutine's stack once when progress has not been
// called for d; stop ends it.
func watchdog(t *testing.T, name string, d time.Duration) (progress, stop func()) {
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(d / 8)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if time.Since(time.Unix(0, last.Load())) > d {
					buf := make([]byte, 8<<20)
					n := runtime.Stack(buf, true)
					fmt.Fprintf(os.Stderr, "watchdog: %s made no progress for %v; every goroutine:\n%s\n", name, d, buf[:n])
					return
				}
			}
		}
	}()
	return func() { last.Store(time.Now().UnixNano()) }, func() { close(done) }
}

// secEnv is a client transport and a hostile server on one fabric.
type secEnv struct {
	t      *testing.T
	fabric string
	mode   string
	fab    verbs.Fabric
	h      *sunrpctest.Handler
	srv    *xprttest.Server
	tr     *xprt.Transport
	armed  atomic.Int64
	xid    atomic.Uint32
	mu     sync.Mutex
	hdrs   map[uint32]rpcrdma.Header
}

func newSecEnv(t *testing.T, fabric string, fab verbs.Fabric, addr netip.AddrPort, mode string, cfg xprt.Config) *secEnv {
	t.Helper()
	e := &secEnv{t: t, fabric: fabric, mode: mode, fab: fab, h: sunrpctest.NewHandler(), hdrs: map[uint32]rpcrdma.Header{}}
	e.xid.Store(0x5000)
	var err error
	e.srv, err = xprttest.Start(xprttest.Config{Fabric: fab, Handler: e.h, Addr: addr, Observe: func(_ xprttest.CallInfo, h *rpcrdma.Header) {
		c := rpcrdma.Header{XID: h.XID, Reads: append([]rpcrdma.ReadSegment(nil), h.Reads...)}
		for _, w := range h.Writes {
			c.Writes = append(c.Writes, append(rpcrdma.WriteChunk(nil), w...))
		}
		e.mu.Lock()
		e.hdrs[h.XID] = c
		e.mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Fabric, cfg.Addr = fab, e.srv.Addr()
	cfg.MaxIO, cfg.IOBuffers, cfg.MaxSegment, cfg.Timeout = 256<<10, 16, 64<<10, 3*time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if e.tr, err = xprt.Dial(ctx, cfg); err != nil {
		e.srv.Close()
		t.Fatal(err)
	}
	return e
}

func (e *secEnv) close() {
	e.t.Logf("client: %s", e.tr.Counters())
	e.t.Logf("server: %+v", e.srv.Stats())
	e.tr.Close()
	e.h.Close()
	e.srv.Close()
}

// misbehave makes the next n calls misbehave as m.
func (e *secEnv) misbehave(n int, m xprttest.Misbehavior) {
	m.Select = func(xprttest.CallInfo) bool { return e.armed.Add(-1) >= 0 }
	e.srv.SetMisbehavior(m)
	e.armed.Store(int64(n))
}

// read READs n bytes into buf and checks them; it returns the xid.
func (e *secEnv) read(ctx context.Context, buf []byte) (uint32, error) {
	xid := e.xid.Add(1)
	rep, err := e.tr.RoundTrip(ctx, sunrpctest.ReadRequest(xid, sunrpctest.Control{}, xid, len(buf), buf))
	if err != nil {
		return xid, err
	}
	defer rep.Release()
	return xid, sunrpctest.CheckRead(rep, xid, xid, len(buf))
}

func (e *secEnv) header(xid uint32) (rpcrdma.Header, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	h, ok := e.hdrs[xid]
	return h, ok
}

// waitStats waits up to d for cond on the server's stats.
func (e *secEnv) waitStats(d time.Duration, cond func(xprttest.Stats) bool) xprttest.Stats {
	deadline := time.Now().Add(d)
	for {
		st := e.srv.Stats()
		if cond(st) || time.Now().After(deadline) {
			return st
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// secCase is one hostile behaviour: it returns what the server tried,
// what landed where the client did not grant it, and a note.
type secCase struct {
	name string
	run  func(ctx context.Context, e *secEnv, progress func()) (tried, landed int, note string, err error)
}

var secCases = []secCase{
	{"late write after return, 1 caller", func(ctx context.Context, e *secEnv, _ func()) (int, int, string, error) {
		before := e.srv.Stats()
		e.misbehave(1, xprttest.Misbehavior{LateWrite: true, LateWriteDelay: 50 * time.Millisecond})
		buf := make([]byte, 128<<10)
		xid, err := e.read(ctx, buf)
		if err != nil {
			return 0, 0, "", err
		}
		st := e.waitStats(20*time.Second, func(s xprttest.Stats) bool {
			return s.LateWritesFailed+s.LateWritesLanded > before.LateWritesFailed+before.LateWritesLanded
		})
		landed := int(st.LateWritesLanded - before.LateWritesLanded)
		if !bytes.Equal(buf, sunrpctest.Pattern(xid, len(buf))) {
			landed++
		}
		return int(st.LateWrites - before.LateWrites), landed, "", nil
	}},
	{"late write after return, 8 callers", func(ctx context.Context, e *secEnv, progress func()) (int, int, string, error) {
		before := e.srv.Stats()
		e.misbehave(8, xprttest.Misbehavior{LateWrite: true, LateWriteDelay: 20 * time.Millisecond})
		var wg sync.WaitGroup
		var changed atomic.Int64
		errs := make([]error, 8)
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, 64<<10)
				xid, err := e.read(ctx, buf)
				errs[i] = err
				if err == nil && !bytes.Equal(buf, sunrpctest.Pattern(xid, len(buf))) {
					changed.Add(1)
				}
				progress()
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return 0, 0, "", err
		}
		// The first refused write breaks the connection: the late writes
		// of the others then fail at the server's side, are flushed, or
		// are never posted. Wait until the server's counts stop moving.
		st := e.srv.Stats()
		for deadline, quiet := time.Now().Add(10*time.Second), 0; quiet < 3 && time.Now().Before(deadline); {
			time.Sleep(150 * time.Millisecond)
			now := e.srv.Stats()
			if now.LateWrites == st.LateWrites && now.LateWritesFailed == st.LateWritesFailed && now.LateWritesLanded == st.LateWritesLanded && now.LateWrites > before.LateWrites {
				quiet++
			} else {
				quiet = 0
			}
			st = now
		}
		return int(st.LateWrites - before.LateWrites), int(st.LateWritesLanded-before.LateWritesLanded) + int(changed.Load()),
			"the first refused access breaks the connection; the other late writes are not posted", nil
	}},
	{"caller gives up; its reply is written late", func(ctx context.Context, e *secEnv, _ func()) (int, int, string, error) {
		before := e.srv.Stats()
		e.misbehave(1, xprttest.Misbehavior{Delay: 400 * time.Millisecond, LateWrite: true})
		buf := bytes.Repeat([]byte{0x5a}, 64<<10)
		gctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, err := e.read(gctx, buf)
		cancel()
		if err == nil {
			return 0, 0, "", errors.New("the READ given up after 100 ms succeeded")
		}
		untouched := func() bool { return bytes.Count(buf, []byte{0x5a}) == len(buf) }
		landed := 0
		if !untouched() {
			landed++
		}
		// The held reply comes 400 ms after the call, on a connection
		// the client has torn down by then.
		time.Sleep(time.Second)
		st := e.srv.Stats()
		if !untouched() {
			landed++
		}
		return 1 + int(st.LateWrites-before.LateWrites), landed + int(st.LateWritesLanded-before.LateWritesLanded), fmt.Sprintf("returned %v", err), nil
	}},
	{"write past a 128 KiB segment (inside its I/O buffer)", oobCase(128 << 10)},
	{"write past a 4 KiB segment", oobCase(4 << 10)},
	{"read past a Read chunk segment", func(ctx context.Context, e *secEnv, _ func()) (int, int, string, error) {
		before := e.srv.Stats()
		e.misbehave(1, xprttest.Misbehavior{OutOfBounds: 64})
		data := sunrpctest.Pattern(0x51, 96<<10)
		xid := e.xid.Add(1)
		rep, err := e.tr.RoundTrip(ctx, sunrpctest.WriteRequest(xid, sunrpctest.Control{}, 0, 0x51, data, 0xfeed))
		if err != nil {
			return 0, 0, "", err
		}
		err = sunrpctest.CheckWrite(rep, xid, len(data), 0xfeed)
		rep.Release()
		st := e.srv.Stats()
		return int(st.OutOfBoundsTried - before.OutOfBoundsTried), int(st.OutOfBoundsLanded - before.OutOfBoundsLanded), "", err
	}},
	{"stale Send With Invalidate (a finished call's rkey)", func(ctx context.Context, e *secEnv, _ func()) (int, int, string, error) {
		if _, err := e.read(ctx, make([]byte, 64<<10)); err != nil {
			return 0, 0, "", err
		}
		before := e.srv.Stats()
		e.misbehave(1, xprttest.Misbehavior{StaleInvalidate: true})
		_, err := e.read(ctx, make([]byte, 64<<10))
		st := e.srv.Stats()
		return int(st.StaleInvalidates - before.StaleInvalidates), 0, "", err
	}},
	{"duplicate Send With Invalidate of a reply's rkey", func(ctx context.Context, e *secEnv, _ func()) (int, int, string, error) {
		before := e.srv.Stats()
		e.misbehave(1, xprttest.Misbehavior{SendWithInvUnasked: true, DuplicateInvalidate: true})
		_, err := e.read(ctx, make([]byte, 64<<10))
		st := e.srv.Stats()
		return int(st.DuplicateInvalidates-before.DuplicateInvalidates) + int(st.SendWithInv-before.SendWithInv), 0, "", err
	}},
	{"foreign Send With Invalidate (unknown xid, a window of an unanswered call) before the reply", func(ctx context.Context, e *secEnv, _ func()) (int, int, string, error) {
		before := e.srv.Stats()
		e.misbehave(1, xprttest.Misbehavior{UnknownXID: true, ThenReply: true, InvalidateUnknownXID: true})
		_, err := e.read(ctx, make([]byte, 128<<10))
		st := e.srv.Stats()
		return int(st.ForeignInvalidates - before.ForeignInvalidates), 0, "", err
	}},
	{"old rkeys tried after their calls", func(ctx context.Context, e *secEnv, progress func()) (int, int, string, error) {
		// The server keeps the segments of 8 finished READs and tries each
		// again at once: every one must have been taken back.
		var segs []rpcrdma.Segment
		for range 8 {
			xid, err := e.read(ctx, make([]byte, 4<<10))
			if err != nil {
				return 0, 0, "", err
			}
			if h, ok := e.header(xid); ok && len(h.Writes) > 0 {
				segs = append(segs, h.Writes[0]...)
			}
		}
		tried, landed := 0, 0
		for _, s := range segs {
			st, err := e.srv.Access(verbs.OpRDMAWrite, s.Offset, s.Handle, 64)
			if err != nil {
				break // the last failed access took the connection down: the client reconnects
			}
			tried++
			if st == verbs.StatusSuccess {
				landed++
			}
			progress()
			if err := waitConnected(ctx, e); err != nil {
				return tried, landed, "", err
			}
		}
		return tried, landed, "", nil
	}},
	{"keys guessed around a finished call's rkey", func(ctx context.Context, e *secEnv, progress func()) (int, int, string, error) {
		// Other key bytes on the same index (the window or MR the call
		// used, now invalid or bound again with a new key), and the same
		// key byte on the next indices (registrations made after it,
		// those made ahead included), at the call's address.
		xid, err := e.read(ctx, make([]byte, 4<<10))
		if err != nil {
			return 0, 0, "", err
		}
		h, ok := e.header(xid)
		if !ok || len(h.Writes) == 0 {
			return 0, 0, "", errors.New("no Write chunk seen")
		}
		seg := h.Writes[0][0]
		var guesses []uint32
		for k := uint32(1); k <= 8; k++ {
			guesses = append(guesses, seg.Handle&^0xff|(seg.Handle+k)&0xff)
		}
		for i := uint32(1); i <= 4; i++ {
			guesses = append(guesses, seg.Handle+i<<8)
		}
		tried, landed := 0, 0
		for _, g := range guesses {
			st, err := e.srv.Access(verbs.OpRDMAWrite, seg.Offset, g, 64)
			if err != nil {
				return tried, landed, "", err
			}
			tried++
			if st == verbs.StatusSuccess {
				landed++
			}
			progress()
			if err := waitConnected(ctx, e); err != nil {
				return tried, landed, "", err
			}
		}
		return tried, landed, "", nil
	}},
}

// waitConnected waits until the client has a connection again (a READ
// goes through).
func waitConnected(ctx context.Context, e *secEnv) error {
	_, err := e.read(ctx, make([]byte, 4096))
	return err
}

func oobCase(n int) func(ctx context.Context, e *secEnv, _ func()) (int, int, string, error) {
	return func(ctx context.Context, e *secEnv, _ func()) (int, int, string, error) {
		before := e.srv.Stats()
		e.misbehave(1, xprttest.Misbehavior{OutOfBounds: 64})
		buf := make([]byte, n)
		_, err := e.read(ctx, buf)
		st := e.srv.Stats()
		return int(st.OutOfBoundsTried - before.OutOfBoundsTried), int(st.OutOfBoundsLanded - before.OutOfBoundsLanded), "", err
	}
}

// secModes are the registration modes a fabric allows: on rxe only
// per-segment registration (windows are refused there: unbounded, and a
// stale Send With Invalidate panics the kernel).
func secModes(allowWindows bool) []struct {
	name string
	cfg  xprt.Config
} {
	modes := []struct {
		name string
		cfg  xprt.Config
	}{
		{"per-segment MRs, made ahead where the device allows", xprt.Config{Registration: frwr.ModeRegister}},
		{"per-segment MRs, at use", xprt.Config{Registration: frwr.ModeRegister, RegisterAhead: -1}},
	}
	if allowWindows {
		modes = append([]struct {
			name string
			cfg  xprt.Config
		}{{"memory windows", xprt.Config{Registration: frwr.ModeWindows}}}, modes...)
	}
	return modes
}

func runSecurity(t *testing.T, fabric string, fab verbs.Fabric, addr netip.AddrPort, allowWindows bool) {
	for _, m := range secModes(allowWindows) {
		t.Run(m.name, func(t *testing.T) {
			e := newSecEnv(t, fabric, fab, addr, m.name, m.cfg)
			defer e.close()
			for _, c := range secCases {
				t.Run(c.name, func(t *testing.T) {
					progress, stop := watchdog(t, fabric+"/"+m.name+"/"+c.name, 2*time.Minute)
					defer stop()
					ctx := ctxT(t, 3*time.Minute)
					tried, landed, note, err := c.run(ctx, e, progress)
					row := secRow{fabric: fabric, mode: m.name, name: c.name, tried: tried, landed: landed, note: note}
					if e.tr.Counters().RegisterAheadRefused != 0 {
						row.note = strings.TrimSpace(row.note + " (the device cannot add remote access in place: registered at use)")
					}
					if err != nil {
						row.note = strings.TrimSpace(row.note + " error: " + err.Error())
					}
					progress()
					_, rerr := e.read(ctx, make([]byte, 64<<10))
					row.recovered = rerr == nil
					row.pass = err == nil && landed == 0 && row.recovered && tried > 0
					securityTable.add(t, row)
					switch {
					case err != nil:
						t.Fatalf("%s: %v", c.name, err)
					case tried == 0:
						t.Fatalf("%s: the server tried nothing", c.name)
					case landed != 0:
						t.Fatalf("%s: %d hostile accesses landed", c.name, landed)
					case rerr != nil:
						t.Fatalf("%s: no recovery: %v", c.name, rerr)
					}
				})
			}
			if c := e.tr.Counters(); c.RefusedTransitions != 0 {
				t.Fatalf("refused transitions: %s", c)
			}
		})
	}
}

// TestSecurityRXE: the rogue-server suite over rxe0.
func TestSecurityRXE(t *testing.T) {
	fab, err := ibv.Open()
	if err != nil {
		t.Fatal(err)
	}
	// Windows are refused on rxe unless the option that says it is
	// unsafe is set: that is a row too.
	_, derr := xprt.Dial(ctxT(t, 30*time.Second), xprt.Config{Fabric: fab, Addr: netip.AddrPortFrom(serverAddr, 22050), Registration: frwr.ModeWindows})
	refused := errors.Is(derr, frwr.ErrUnsafeWindows)
	securityTable.add(t, secRow{fabric: "rxe", mode: "memory windows", name: "forcing windows without UnsafeWindows", recovered: true,
		note: fmt.Sprintf("refused: %v", refused), pass: refused})
	if !refused {
		t.Fatalf("windows forced on rxe: %v, want frwr.ErrUnsafeWindows", derr)
	}
	runSecurity(t, "rxe", fab, netip.AddrPortFrom(serverAddr, 22050), false)
	twoServers(t, "rxe", fab, netip.AddrPortFrom(serverAddr, 22051), netip.AddrPortFrom(serverAddr, 22052), false)
}

// TestSecuritySim: the same suite on the simulated fabric (windows
// allowed there: they are bounded, and a peer's Send With Invalidate of
// an invalid window is only an error completion), which counts every
// LOCAL_INV of a window that is not valid: the client must make none.
func TestSecuritySim(t *testing.T) {
	fab := sim.NewFabric()
	defer fab.Close()
	addr := netip.MustParseAddrPort("127.0.0.1:0")
	runSecurity(t, "sim", fab, addr, true)
	twoServers(t, "sim", fab, netip.MustParseAddrPort("127.0.0.1:0"), netip.MustParseAddrPort("127.0.0.1:0"), true)
	if a := fab.Anomalies(); a.DoubleLocalInvalidations != 0 {
		t.Fatalf("fabric anomalies: %+v", a)
	}
}

// twoServers: two servers on one device through one process; server A,
// knowing the exact address and rkey of a segment the client exposes to
// server B for a call in progress, cannot reach it.
func twoServers(t *testing.T, fabric string, fab verbs.Fabric, addrA, addrB netip.AddrPort, allowWindows bool) {
	for _, m := range secModes(allowWindows) {
		t.Run("two servers/"+m.name, func(t *testing.T) {
			_, stop := watchdog(t, fabric+"/two servers/"+m.name, 2*time.Minute)
			defer stop()
			a := newSecEnv(t, fabric, fab, addrA, m.name, m.cfg)
			defer a.close()
			b := newSecEnv(t, fabric, fab, addrB, m.name, m.cfg)
			defer b.close()
			ctx := ctxT(t, 2*time.Minute)
			for range 4 { // registrations made ahead in use
				if _, err := b.read(ctx, make([]byte, 4096)); err != nil {
					t.Fatal(err)
				}
			}
			tried, landed := 0, 0
			for _, n := range []int{4 << 10, 128 << 10} {
				xid := b.xid.Add(1)
				buf := make([]byte, n)
				done := make(chan error, 1)
				go func() {
					rep, err := b.tr.RoundTrip(ctx, sunrpctest.ReadRequest(xid, sunrpctest.Control{Tag: xid, Action: sunrpctest.Hold}, xid, n, buf))
					if err == nil {
						err = sunrpctest.CheckRead(rep, xid, xid, n)
						rep.Release()
					}
					done <- err
				}()
				if err := b.h.WaitArrival(ctx, xid, 1); err != nil {
					t.Fatal(err)
				}
				h, ok := b.header(xid)
				if !ok || len(h.Writes) == 0 {
					t.Fatalf("no Write chunk seen for xid %#x", xid)
				}
				seg := h.Writes[0][0]
				st, err := a.srv.Access(verbs.OpRDMAWrite, seg.Offset, seg.Handle, 64)
				if err != nil {
					t.Fatal(err)
				}
				tried++
				if st == verbs.StatusSuccess {
					landed++
				}
				b.h.Release(xid)
				if err := <-done; err != nil {
					landed++
					t.Errorf("B's READ: %v", err)
				}
				if err := waitConnected(ctx, a); err != nil {
					t.Fatal(err)
				}
			}
			row := secRow{fabric: fabric, mode: m.name, name: "two servers on one device: A writes into a segment exposed to B", tried: tried, landed: landed, recovered: true}
			row.pass = landed == 0
			securityTable.add(t, row)
			if landed != 0 {
				t.Fatalf("server A reached memory exposed to server B: %d", landed)
			}
		})
	}
}

// TestRegisterAheadRXE measures, on rxe0, what a registration made ahead
// without remote access costs at use (ibv_rereg_mr adding the remote
// right) against registering at use (ibv_reg_mr with it), and checks the
// mechanism: a peer using the MR's key before the right is added reaches
// nothing.
func TestRegisterAheadRXE(t *testing.T) {
	fab, err := ibv.Open()
	if err != nil {
		t.Fatal(err)
	}
	dev, err := fab.OpenDevice("rxe0")
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Close()
	m, err := verbs.Map(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	mem := m.Bytes()[:4096]
	const n = 300
	remote := verbs.AccessRemoteWrite | verbs.AccessLocalWrite
	var reg, dereg, rereg time.Duration
	for range n {
		t0 := time.Now()
		mr, err := pd.RegMR(mem, remote)
		if err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		if err := mr.Close(); err != nil {
			t.Fatal(err)
		}
		reg += t1.Sub(t0)
		dereg += time.Since(t1)
	}
	supported := true
	for i := range n {
		mr, err := pd.RegMR(mem, verbs.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		err = mr.(verbs.AccessChanger).ChangeAccess(remote)
		rereg += time.Since(t0)
		mr.Close()
		if err != nil {
			supported = false
			t.Logf("ibv_rereg_mr(IBV_REREG_MR_CHANGE_ACCESS) on rxe0: %v (after %d)", err, i)
			break
		}
	}
	perOp := func(d time.Duration) time.Duration { return d / n }
	t.Logf("rxe0, 4 KiB, %d each: ibv_reg_mr with REMOTE_WRITE %v, ibv_dereg_mr %v; rereg supported %v, rereg adding REMOTE_WRITE %v",
		n, perOp(reg), perOp(dereg), supported, perOp(rereg))
	securityTable.add(t, secRow{fabric: "rxe", mode: "per-segment MRs", name: "cost at use: register vs made ahead (ibv_rereg_mr)", tried: n, recovered: true, pass: true,
		note: fmt.Sprintf("ibv_reg_mr %v, ibv_dereg_mr %v, ibv_rereg_mr access change: supported %v, %v (per 4 KiB MR)", perOp(reg), perOp(dereg), supported, perOp(rereg))})
	if !supported {
		return
	}
	// The mechanism: a peer with the exact key and address before the
	// right is added, then after.
	p := verbstest.NewPair(t, verbstest.Env{Fabric: fab, ListenAddr: netip.AddrPortFrom(serverAddr, 0), ConnectAddr: netip.AddrPortFrom(serverAddr, 0),
		Device: "rxe0", Timeout: 20 * time.Second}, verbstest.PairConfig{ClientPD: pd})
	src := verbstest.MustBuffer(t, p.Server.PD, 64, verbs.AccessLocalWrite)
	mr, err := pd.RegMR(mem, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Close()
	write := func(rkey uint32) verbs.Status {
		if _, err := p.Server.QP.PostSend([]verbs.SendWR{{ID: 1, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 64)},
			RemoteAddr: mr.Addr(), RKey: rkey}}); err != nil {
			t.Fatal(err)
		}
		wcs, err := verbstest.Reap(ctxT(t, 20*time.Second), p.Server.SendCQ, 1)
		if err != nil {
			t.Fatal(err)
		}
		return wcs[0].Status
	}
	if st := write(mr.LKey()); st == verbs.StatusSuccess {
		t.Fatalf("rxe0 let a peer write into an MR registered without remote access (key %#x)", mr.LKey())
	}
	securityTable.add(t, secRow{fabric: "rxe", mode: "per-segment MRs", name: "key of an MR made ahead (no remote access yet), used by the peer", tried: 1, recovered: true, pass: true,
		note: "the exact key and address: refused"})
}
