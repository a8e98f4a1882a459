package xprt

import (
	"bytes"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/verbs/sim"
)

// With per-I/O registration, small WRITEs and READs go through
// registrations made ahead (frwr.Registry.TakeReady): every WRITE's data
// reaches the server intact from memory that went round several calls,
// every READ returns its own data, and nothing stays registered.
func TestRegisteredAheadData(t *testing.T) {
	s := newStack(t, stackOpts{fabric: []sim.Option{sim.WithoutMemWindows()}})
	const n, writes = 8 << 10, 12
	fh, _ := s.file("f", n*writes)
	ctx := s.ctx(30 * time.Second)
	want := make([]byte, n*writes)
	for i := range writes {
		chunk := want[i*n : (i+1)*n]
		for j := range chunk {
			chunk[j] = byte(i*31 + j*7 + 1)
		}
		if _, err := s.c.Write(ctx, fh, uint64(i*n), chunk, nfs3.FileSync); err != nil {
			t.Fatalf("WRITE %d: %v", i, err)
		}
	}
	if got := s.serverContent("f"); !bytes.Equal(got, want) {
		t.Fatal("the server's file differs from what was written")
	}
	for i := writes - 1; i >= 0; i-- {
		buf := make([]byte, n)
		if r, err := s.c.Read(ctx, fh, uint64(i*n), buf); err != nil || r.Count != n || !bytes.Equal(buf, want[i*n:(i+1)*n]) {
			t.Fatalf("READ %d: %v", i, err)
		}
	}
	c := s.tr.Counters()
	// Two asks stock a size: the rest of each direction's calls use one.
	if c.ReadyRegistrations < 2*(writes-2) {
		t.Fatalf("%d calls used a registration made ahead, want at least %d: %s", c.ReadyRegistrations, 2*(writes-2), c)
	}
	rc := s.tr.reg.Counters()
	if rc.Registrations-rc.Deregistrations != uint64(rc.ReadyStocked) {
		t.Fatalf("registered and not made ahead: %d - %d - %d", rc.Registrations, rc.Deregistrations, rc.ReadyStocked)
	}
}
