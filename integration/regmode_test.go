//go:build integration

package integration

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/frwr"
	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/verbs/ibv"
	"github.com/nfsrdma/nfsrdma/xprt"
)

// TestXprtRegistrationModesRXE moves the same data in each registration
// mode on rxe and prints what each costs.
func TestXprtRegistrationModesRXE(t *testing.T) {
	data := serverFile(t, "modes-8MiB", 8<<20)
	for _, tc := range []struct {
		name  string
		m     frwr.Mode
		ahead int
	}{{"windows", frwr.ModeWindows, 0}, {"register", frwr.ModeRegister, 0}, {"register-not-ahead", frwr.ModeRegister, -1}} {
		m := tc.m
		t.Run(tc.name, func(t *testing.T) {
			n := dialRDMA(t, xprt.Config{Registration: m, RegisterAhead: tc.ahead, UnsafeWindows: m == frwr.ModeWindows})
			ctx := ctxT(t, 120*time.Second)
			lr, err := n.c.Lookup(ctx, n.root, "modes-8MiB")
			if err != nil {
				t.Fatal(err)
			}
			small := make([]byte, 4096)
			start := time.Now()
			const nSmall = 400
			for range nSmall {
				off := uint64(rand.IntN(2048)) * 4096
				rr, err := n.c.Read(ctx, lr.FH, off, small)
				if err != nil || !bytes.Equal(small[:rr.Count], data[off:off+4096]) {
					t.Fatalf("READ 4 KiB at %d: %v", off, err)
				}
			}
			d4 := time.Since(start) / nSmall
			big := make([]byte, 1<<20)
			start = time.Now()
			const nBig = 24
			for i := range nBig {
				off := uint64(i%8) << 20
				rr, err := n.c.Read(ctx, lr.FH, off, big)
				if err != nil || !bytes.Equal(big[:rr.Count], data[off:off+1<<20]) {
					t.Fatalf("READ 1 MiB at %d: %v", off, err)
				}
			}
			dr := time.Since(start) / nBig
			cr, err := n.c.Create(ctx, n.root, "modes-w-"+m.String(), nfs3.CreateHow{Mode: nfs3.Unchecked})
			if err != nil {
				t.Fatal(err)
			}
			start = time.Now()
			for i := range nBig {
				if _, err := n.c.Write(ctx, cr.FH, uint64(i%8)<<20, data[(i%8)<<20:(i%8+1)<<20], nfs3.Unstable); err != nil {
					t.Fatal(err)
				}
			}
			dw := time.Since(start) / nBig
			// Small WRITEs (a Read chunk each) and READs of them back.
			const nw, wlen = 40, 8 << 10
			for i := range nw {
				off := i * wlen
				if _, err := n.c.Write(ctx, cr.FH, uint64(off), data[off:off+wlen], nfs3.FileSync); err != nil {
					t.Fatalf("WRITE 8 KiB at %d: %v", off, err)
				}
			}
			got := make([]byte, wlen)
			for i := range nw {
				off := i * wlen
				if rr, err := n.c.Read(ctx, cr.FH, uint64(off), got); err != nil || !bytes.Equal(got[:rr.Count], data[off:off+wlen]) {
					t.Fatalf("READ 8 KiB back at %d: %v", off, err)
				}
			}
			c := n.tr.Counters()
			switch {
			case m == frwr.ModeRegister && tc.ahead == 0 && c.RegisterAheadRefused != 0:
				// rxe on Linux 6.1 cannot add remote access to an MR in
				// place: nothing is made ahead, every segment is
				// registered at use.
				if c.ReadyRegistrations != 0 || c.RegisteredAhead != 0 {
					t.Errorf("registrations made ahead used (%d) or left (%d) on a device that refused them", c.ReadyRegistrations, c.RegisteredAhead)
				}
				t.Logf("the device cannot change an MR's access: registering at use")
			case m == frwr.ModeRegister && tc.ahead == 0 && c.ReadyRegistrations < nSmall+2*nw-6:
				t.Errorf("register mode: %d calls used a registration made ahead, want nearly all %d small ones", c.ReadyRegistrations, nSmall+2*nw)
			case (m != frwr.ModeRegister || tc.ahead < 0) && c.ReadyRegistrations != 0:
				t.Errorf("%d registrations made ahead used with %s", c.ReadyRegistrations, tc.name)
			}
			t.Logf("%s (mode %v): READ 4 KiB %v, READ 1 MiB %v (%.0f MiB/s), WRITE 1 MiB %v (%.0f MiB/s); %s", tc.name, n.tr.RegistrationMode(),
				d4, dr, float64(1<<20)/dr.Seconds()/(1<<20), dw, float64(1<<20)/dw.Seconds()/(1<<20), c)
		})
	}
}

// TestXprtForcedWindowsRefusedRXE: forcing memory windows on rxe (whose
// windows reach their whole MR, and where a peer's stale Send With
// Invalidate panics the kernel) fails with frwr.ErrUnsafeWindows unless
// the option that says it is unsafe is set.
func TestXprtForcedWindowsRefusedRXE(t *testing.T) {
	fab, err := ibv.Open()
	if err != nil {
		t.Fatal(err)
	}
	tr, err := xprt.Dial(ctxT(t, 30*time.Second), xprt.Config{Fabric: fab, Addr: nfsRDMA, Registration: frwr.ModeWindows})
	if err == nil {
		tr.Close()
		t.Fatal("windows forced on rxe without UnsafeWindows: Dial succeeded")
	}
	if !errors.Is(err, frwr.ErrUnsafeWindows) {
		t.Fatalf("Dial: %v, want frwr.ErrUnsafeWindows", err)
	}
	t.Logf("refused: %v", err)
}
