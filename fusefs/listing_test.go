package fusefs

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/nfsrdma/nfsrdma/nfs3"
)

// oldDir makes directory d at the server (another client's doing), with
// n empty files old0, old1...
func oldDir(t *testing.T, root string, n int) {
	t.Helper()
	check(t, os.Mkdir(filepath.Join(root, "d"), 0o777))
	for i := range n {
		check(t, os.WriteFile(filepath.Join(root, "d", fmt.Sprintf("old%d", i)), nil, 0o644))
	}
}

// statOld stats d/old0, d/old1... through m: each a lookup of a name found.
func statOld(t *testing.T, m *mounted, n int) {
	t.Helper()
	for i := range n {
		if _, err := os.Stat(m.path(fmt.Sprintf("d/old%d", i))); err != nil {
			t.Fatal(err)
		}
	}
}

// TestListingForLookups: names found one by one in a directory this mount
// did not make cost a LOOKUP each only until those LOOKUPs cost what
// reading the directory would (listing.go: 2 for a small one); then one
// READDIRPLUS answers the found names that follow. It never answers a name
// missing: a name another client makes right after the listing is found at
// once, as on the kernel's client, and LOOKUPs that find nothing (the one
// before each create) neither use a listing nor lead to one.
func TestListingForLookups(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	const n = 30
	oldDir(t, srv.Dir, n)
	m := mountGoNFS(t, srv, nil)
	_, err := os.Stat(m.path("d"))
	check(t, err)
	d := opDeltas(m)
	statOld(t, m, n)
	if l, rp := d(nfs3.ProcLookup), d(nfs3.ProcReaddirplus); l != 2 || rp != 1 {
		t.Errorf("%d stats of names the server made: %d LOOKUP, %d READDIRPLUS; want 2, 1", n, l, rp)
	}
	// Another client's new name, right after the listing: found.
	check(t, os.WriteFile(filepath.Join(srv.Dir, "d", "theirs"), []byte("t"), 0o644))
	if b, err := os.ReadFile(m.path("d/theirs")); err != nil || string(b) != "t" {
		t.Errorf("another client's new name after the listing: %q, %v", b, err)
	}
	// Creates: a LOOKUP each, and no listing.
	d = opDeltas(m)
	for i := range n {
		check(t, os.WriteFile(m.path(fmt.Sprintf("d/new%d", i)), []byte("x"), 0o644))
	}
	if l, rp := d(nfs3.ProcLookup), d(nfs3.ProcReaddirplus); l != n || rp != 0 {
		t.Errorf("%d creates: %d LOOKUP, %d READDIRPLUS; want %d, 0", n, l, rp, n)
	}
	for i := range n {
		if b, _ := os.ReadFile(filepath.Join(srv.Dir, "d", fmt.Sprintf("new%d", i))); string(b) != "x" {
			t.Errorf("new%d at the server: %q", i, b)
		}
	}
}

// TestListingOff: with no attribute cache (noac) a listing would answer
// nothing, so none is read: every name is a LOOKUP.
func TestListingOff(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	const n = 10
	oldDir(t, srv.Dir, n)
	o := DefaultOptions()
	o.NoAC()
	m := mountGoNFS(t, srv, &o)
	d := opDeltas(m)
	statOld(t, m, n)
	if rp := d(nfs3.ProcReaddirplus); rp != 0 {
		t.Errorf("noac: %d READDIRPLUS for %d stats, want 0", rp, n)
	}
}

// TestListingRefused: a directory whose listing the server refuses (one
// its caller may search but not read) keeps working by LOOKUP, and the
// refused READDIRPLUS is not retried at every turn.
func TestListingRefused(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	const n = 30
	oldDir(t, srv.Dir, n)
	o := DefaultOptions()
	m, rec := mountRecorded(t, srv, &o, MountConfig{})
	rec.mu.Lock()
	rec.refuse = func(c sentCall) bool { return c.proc == nfs3.ProcReaddirplus }
	rec.mu.Unlock()
	_, err := os.Stat(m.path("d"))
	check(t, err)
	d := opDeltas(m)
	statOld(t, m, n)
	if l, rp := d(nfs3.ProcLookup), d(nfs3.ProcReaddirplus); l != n || rp < 1 || rp > 4 {
		t.Errorf("%d stats, listing refused: %d LOOKUP, %d READDIRPLUS; want %d, 1 to 4", n, l, rp, n)
	}
}
