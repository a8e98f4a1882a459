package nfs4

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nfsrdma/nfsrdma/sunrpc"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newTestClient(t *testing.T, s *fakeServer, opts *ClientOptions) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if opts == nil {
		opts = &ClientOptions{}
	}
	opts.AuthNone = true
	opts.DelayRetry = time.Millisecond
	c, err := NewClient(ctx, s, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSessionLifecycle: EXCHANGE_ID, CREATE_SESSION sized by MaxSlots,
// RECLAIM_COMPLETE and the lease at NewClient; DESTROY_SESSION and
// DESTROY_CLIENTID at Close, which is idempotent and leaves no goroutine.
func TestSessionLifecycle(t *testing.T) {
	s := newFakeServer(60, 8)
	c := newTestClient(t, s, &ClientOptions{MaxSlots: 4})
	if c.Lease() != 60*time.Second {
		t.Errorf("lease %v", c.Lease())
	}
	_, fore := c.Session()
	if fore.MaxRequests != 4 {
		t.Errorf("fore channel of %d slots, want the 4 asked", fore.MaxRequests)
	}
	if _, _, n := s.counts(); n != 1 {
		t.Errorf("%d sessions on the server", n)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if s.destroyed.sessions != 1 || s.destroyed.clients != 1 {
		t.Errorf("destroyed %d sessions and %d client IDs, want 1 and 1", s.destroyed.sessions, s.destroyed.clients)
	}
	if _, err := c.RootFH(context.Background()); !errors.Is(err, ErrClientClosed) {
		t.Errorf("call after Close: %v", err)
	}
	if _, _, err := c.LookupPath(context.Background(), nil, "a"); !errors.Is(err, ErrClientClosed) {
		t.Errorf("lookup after Close: %v", err)
	}
}

// creditTransport is a fakeServer whose transport reports a credit limit,
// as xprt does.
type creditTransport struct {
	*fakeServer
	credits int
}

func (c creditTransport) Credits() int { return c.credits }

// TestSlotsCappedByCredits: the session never asks for more slots than the
// transport's credits (RPC-over-RDMA flow control).
func TestSlotsCappedByCredits(t *testing.T) {
	s := newFakeServer(60, 64)
	ctx := context.Background()
	c, err := NewClient(ctx, creditTransport{s, 5}, &ClientOptions{AuthNone: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, fore := c.Session(); fore.MaxRequests != 5 {
		t.Errorf("%d slots over a transport granting 5 credits", fore.MaxRequests)
	}
}

// TestSlotsAreFlowControl: with 2 slots, at most 2 compounds are
// outstanding; the others wait, and all complete.
func TestSlotsAreFlowControl(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer(60, 2)
		gate := &gatedTransport{fakeServer: s, release: make(chan struct{})}
		c, err := NewClient(context.Background(), s, &ClientOptions{AuthNone: true})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// The gate goes in after establishment.
		c.rpc, _ = sunrpc.NewClient(gate, sunrpc.ClientConfig{Prog: Program, Vers: Version})
		var wg sync.WaitGroup
		for range 6 {
			wg.Go(func() {
				if _, err := c.RootFH(context.Background()); err != nil {
					t.Error(err)
				}
			})
		}
		synctest.Wait() // every caller sent or waits for a slot
		if w := gate.waiting(); w != 2 {
			t.Errorf("%d compounds outstanding on a session of 2 slots", w)
		}
		close(gate.release)
		wg.Wait()
		if gate.max != 2 {
			t.Errorf("at most %d outstanding, want 2", gate.max)
		}
	})
}

type gatedTransport struct {
	*fakeServer
	release chan struct{}
	mu      sync.Mutex
	n, max  int
}

func (g *gatedTransport) waiting() int { g.mu.Lock(); defer g.mu.Unlock(); return g.n }

func (g *gatedTransport) RoundTrip(ctx context.Context, req *sunrpc.Request) (*sunrpc.Reply, error) {
	g.mu.Lock()
	g.n++
	g.max = max(g.max, g.n)
	g.mu.Unlock()
	<-g.release
	g.mu.Lock()
	g.n--
	g.mu.Unlock()
	return g.fakeServer.RoundTrip(ctx, req)
}

// TestLeaseRenewal: an idle client sends SEQUENCE alone every half lease,
// and nothing after Close (in a synctest bubble: fake time).
func TestLeaseRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer(10, 4) // a 10 s lease: renewals every 5 s of idleness
		c := newTestClient(t, s, nil)
		time.Sleep(4 * time.Second)
		synctest.Wait()
		if n, _, _ := s.counts(); n != 0 {
			t.Errorf("%d renewals within half a lease", n)
		}
		time.Sleep(17 * time.Second) // 21 s idle: renewals at 5, 10, 15, 20
		synctest.Wait()
		seqOnly, _, _ := s.counts()
		if seqOnly != 4 || c.Renewals() != 4 {
			t.Errorf("%d SEQUENCE-only compounds (%d renewals counted) in 21 s of idleness with a 10 s lease, want 4", seqOnly, c.Renewals())
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if n, _, _ := s.counts(); n != seqOnly {
			t.Errorf("renewals after Close: %d → %d", seqOnly, n)
		}
	})
}

// TestBusyClientSendsNoRenewals: SEQUENCE on ordinary compounds renews the
// lease, so a client busy more often than every half lease sends no extra
// SEQUENCE.
func TestBusyClientSendsNoRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer(10, 4)
		c := newTestClient(t, s, nil)
		defer c.Close()
		for range 60 {
			if _, err := c.RootFH(context.Background()); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
		}
		synctest.Wait()
		if n, _, _ := s.counts(); n != 0 {
			t.Errorf("%d SEQUENCE-only compounds from a client busy every second for a minute", n)
		}
	})
}

// TestRecoverBadSession: a session the server lost is replaced and the call
// retried on the new one.
func TestRecoverBadSession(t *testing.T) {
	s := newFakeServer(60, 4)
	c := newTestClient(t, s, nil)
	defer c.Close()
	old, _ := c.Session()
	s.killSessions()
	if _, err := c.RootFH(context.Background()); err != nil {
		t.Fatalf("call after the session was lost: %v", err)
	}
	if cur, _ := c.Session(); cur == old || c.Recoveries() != 1 {
		t.Errorf("session %x (was %x), %d recoveries", cur, old, c.Recoveries())
	}
}

// TestRecoverStaleClientID: a server that lost the client ID too (a
// restart) gets a new EXCHANGE_ID and session.
func TestRecoverStaleClientID(t *testing.T) {
	s := newFakeServer(60, 4)
	c := newTestClient(t, s, nil)
	defer c.Close()
	s.restart()
	if _, err := c.RootFH(context.Background()); err != nil {
		t.Fatalf("call after the server restarted: %v", err)
	}
	if c.Recoveries() != 1 {
		t.Errorf("%d recoveries", c.Recoveries())
	}
}

// TestUnknownOutcomeThenMisordered: a request whose reply is lost leaves
// its slot uncertain; the next use carries seq+1, which is right when the
// server executed it (as the fake did).
func TestUnknownOutcomeAdvancesSlot(t *testing.T) {
	s := newFakeServer(60, 1)
	c := newTestClient(t, s, nil)
	defer c.Close()
	s.mu.Lock()
	s.dropNext = true
	s.mu.Unlock()
	if _, err := c.RootFH(context.Background()); !errors.Is(err, errLost) {
		t.Fatalf("the lost reply: %v", err)
	}
	if _, err := c.RootFH(context.Background()); err != nil {
		t.Fatalf("the next call on the slot: %v", err)
	}
}

// TestUnknownOutcomeNotExecuted: a request that never reached the server
// (cancelled before its turn) leaves the slot uncertain; the server answers
// SEQ_MISORDERED to seq+1 and the client retries with seq.
func TestUnknownOutcomeNotExecuted(t *testing.T) {
	s := newFakeServer(60, 1)
	c := newTestClient(t, s, nil)
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.RootFH(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	// acquire saw the cancelled context first: nothing was sent, slot intact.
	sl, _ := c.sess.table.Acquire()
	c.sess.table.Release(sl, Unknown) // as if sent and given up
	if _, err := c.RootFH(context.Background()); err != nil {
		t.Fatalf("call after an unknown outcome the server never saw: %v", err)
	}
}

// TestLongPathLookupSplits: a path longer than the session's
// ca_maxoperations allows in one compound is looked up in several.
func TestLongPathLookupSplits(t *testing.T) {
	s := newFakeServer(60, 4)
	c := newTestClient(t, s, &ClientOptions{Fore: &ChannelAttrs{MaxRequestSize: 1 << 20, MaxResponseSize: 1 << 20, MaxOperations: 6, MaxRequests: 4}})
	defer c.Close()
	_, before, _ := s.counts()
	names := []string{"a", "b", "c", "d", "e"}
	if _, _, err := c.LookupPath(context.Background(), nil, names...); err != nil {
		t.Fatal(err)
	}
	_, after, _ := s.counts()
	if after-before != 3 || s.mostOps > 6 {
		t.Errorf("5 lookups with ca_maxoperations 6: %d compounds, the largest of %d operations; want 3 of at most 6", after-before, s.mostOps)
	}
}

// TestMinorVersion: the client speaks 2 to a server of 4.2 and falls back to
// 1 when the server refuses 2 with MINOR_VERS_MISMATCH.
func TestMinorVersion(t *testing.T) {
	for _, tc := range []struct{ server, asked, want uint32 }{{1, 0, 1}, {2, 0, 2}, {2, 1, 1}} {
		s := newFakeServer(60, 4)
		s.maxMinor = tc.server
		c := newTestClient(t, s, &ClientOptions{MinorVersion: tc.asked})
		if got := c.MinorVersion(); got != tc.want {
			t.Errorf("server of 4.%d, asked %d: minor version %d, want %d", tc.server, tc.asked, got, tc.want)
		}
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}
}

// TestTargetCloseEndsOpens: Mount over a given transport looks the export
// up; Target.Close ends the opens of Files left open, so that
// DESTROY_CLIENTID, which a server refuses while the client ID holds state,
// succeeds; and a client whose files stay open reports that refusal.
func TestTargetCloseEndsOpens(t *testing.T) {
	s := newFakeServer(60, 4)
	ctx := context.Background()
	tg, err := Mount(ctx, "server", "/export", &MountOptions{Transport: s, Client: ClientOptions{AuthNone: true}})
	if err != nil {
		t.Fatal(err)
	}
	if string(tg.Root()) != "export" {
		t.Errorf("root handle %q, want the export's", tg.Root())
	}
	for _, name := range []string{"f1", "f2"} {
		if _, err := tg.OpenFileContext(ctx, name, os.O_RDONLY, 0); err != nil {
			t.Fatal(err)
		}
	}
	f3, err := tg.OpenFileContext(ctx, "f3", os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f3.Close(); err != nil {
		t.Fatal(err)
	}
	if s.opens != 2 {
		t.Fatalf("%d opens on the server, want 2", s.opens)
	}
	if err := tg.Close(); err != nil {
		t.Fatalf("Close with two files open: %v", err)
	}
	if s.opens != 0 || s.destroyed.clients != 1 {
		t.Errorf("after Close: %d opens, %d client IDs destroyed", s.opens, s.destroyed.clients)
	}

	// The handle API leaves opens to its caller: Close reports the refusal.
	s2 := newFakeServer(60, 4)
	c := newTestClient(t, s2, nil)
	if _, err := c.Open(ctx, FileHandle("root"), "f1", ShareAccessRead, ShareDenyNone, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); !errors.Is(err, ErrClientIDBusy) {
		t.Errorf("Close with an open left: %v, want NFS4ERR_CLIENTID_BUSY", err)
	}
}

// TestTargetReadDirAndRemoveAll: the path API lists a directory sorted,
// with each entry's handle from READDIR's filehandle attribute, and
// RemoveAll empties a tree depth first without looking entries up again.
func TestTargetReadDirAndRemoveAll(t *testing.T) {
	s := newFakeServer(60, 4)
	s.dirs["export"] = []string{"f2", "d1", "f1"}
	s.dirs["d1"] = []string{"f3", "d2"}
	s.dirs["d2"] = []string{"f4"}
	ctx := context.Background()
	tg, err := Mount(ctx, "server", "/export", &MountOptions{Transport: s, Client: ClientOptions{AuthNone: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	es, err := tg.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		fi, _ := e.Info()
		if string(fi.(*FileInfo).FH) != e.Name() {
			t.Errorf("%s: handle %q", e.Name(), fi.(*FileInfo).FH)
		}
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"d1", "f1", "f2"}) || !es[0].IsDir() || es[1].IsDir() {
		t.Errorf("ReadDir: %v", names)
	}
	_, before, _ := s.counts()
	if err := tg.RemoveAll(ctx, "d1"); err != nil {
		t.Fatal(err)
	}
	_, after, _ := s.counts()
	if want := []string{"f3", "f4", "d2", "d1"}; !slices.Equal(s.removed, want) {
		t.Errorf("removed %v, want %v (depth first)", s.removed, want)
	}
	// LOOKUP of d1, READDIR of d1 and d2, four REMOVEs: no LOOKUP per entry.
	if n := after - before; n != 7 {
		t.Errorf("%d compounds for RemoveAll of a tree of 4 entries, want 7", n)
	}
}
