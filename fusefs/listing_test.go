package fusefs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/nfs3"
	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// hookTransport runs before ahead of each NFS call it passes on.
type hookTransport struct {
	sunrpc.Transport
	before func(proc uint32)
}

func (h *hookTransport) RoundTrip(ctx context.Context, req *sunrpc.Request) (*sunrpc.Reply, error) {
	if c, ok := parseCall(req); ok && h.before != nil {
		h.before(c.proc)
	}
	return h.Transport.RoundTrip(ctx, req)
}

// serverDir makes a directory with files at the server (another client's
// doing): nfiles empty files named by name(i).
func serverDir(t *testing.T, root, dir string, nfiles int, name func(int) string) {
	t.Helper()
	check(t, os.Mkdir(filepath.Join(root, dir), 0o777))
	for i := range nfiles {
		check(t, os.WriteFile(filepath.Join(root, dir, name(i)), nil, 0o644))
	}
}

// TestListingForCreates: making names in a directory this mount did not
// make costs a LOOKUP of each only until those LOOKUPs cost what reading
// the directory would; then one READDIRPLUS answers every later missing
// name, and this mount's own creates keep that knowledge exact: a name it
// made is found, one it removed is missing. A name another client makes
// is found once the directory's attributes expire, as a cached negative
// entry would be. With lookupcache=pos (missing names not trusted) every
// create asks.
func TestListingForCreates(t *testing.T) {
	for _, lc := range []LookupCache{LookupCacheAll, LookupCachePositive} {
		t.Run(fmt.Sprint(lc), func(t *testing.T) {
			srv := startGoNFS(t, backendDisk)
			serverDir(t, srv.Dir, "d", 10, func(i int) string { return fmt.Sprintf("old%d", i) })
			o := DefaultOptions()
			o.LookupCache = lc
			o.AcDirMin, o.AcDirMax = 2*time.Second, 2*time.Second
			m := mountGoNFS(t, srv, &o)
			_, err := os.Stat(m.path("d"))
			check(t, err)
			d := opDeltas(m)
			const n = 30
			for i := range n {
				check(t, os.WriteFile(m.path(fmt.Sprintf("d/new%d", i)), []byte("x"), 0o644))
				check(t, os.Mkdir(m.path(fmt.Sprintf("d/dir%d", i)), 0o755))
			}
			check(t, os.Remove(m.path("d/new0")))
			l, rp := d(nfs3.ProcLookup), d(nfs3.ProcReaddirplus)
			if lc == LookupCacheAll && (l > 2 || rp != 1) {
				t.Errorf("%d creates and %d mkdirs: %d LOOKUP, %d READDIRPLUS; want at most 2, 1", n, n, l, rp)
			}
			if lc == LookupCachePositive && (l < 2*n || rp != 0) {
				t.Errorf("lookupcache=pos: %d creates and %d mkdirs: %d LOOKUP, %d READDIRPLUS; want %d, 0", n, n, l, rp, 2*n)
			}
			for i := range n {
				want := "x"
				if i == 0 {
					want = ""
				}
				if b, _ := os.ReadFile(filepath.Join(srv.Dir, "d", fmt.Sprintf("new%d", i))); string(b) != want {
					t.Errorf("new%d at the server: %q, want %q", i, b, want)
				}
			}
			if _, err := os.Stat(m.path("d/new1")); err != nil {
				t.Errorf("a name this mount made: %v", err)
			}
			if _, err := os.Stat(m.path("d/new0")); !os.IsNotExist(err) {
				t.Errorf("a name this mount removed: %v", err)
			}
			if _, err := os.Stat(m.path("d/old3")); err != nil {
				t.Errorf("a name the server had: %v", err)
			}
			// Another client's new name: found by the time the
			// directory's attributes are to be checked again.
			check(t, os.WriteFile(filepath.Join(srv.Dir, "d", "theirs"), nil, 0o644))
			deadline := time.Now().Add(5 * time.Second)
			for {
				_, err := os.Stat(m.path("d/theirs"))
				if err == nil {
					break
				}
				if !os.IsNotExist(err) || time.Now().After(deadline) {
					t.Fatalf("another client's new name, 5 s on: %v", err)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}

// TestListingChangedMidway: a listing during which the directory changes
// (here another client makes a name between its pages) does not stand as
// the directory's names: the new name is found, not answered missing from
// the listing.
func TestListingChangedMidway(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	long := strings.Repeat("n", 60)
	serverDir(t, srv.Dir, "d", 600, func(i int) string { return fmt.Sprintf("%s%04d", long, i) })
	var pages atomic.Int32
	hook := &hookTransport{}
	hook.before = func(proc uint32) {
		if proc == nfs3.ProcReaddirplus && pages.Add(1) == 2 {
			os.WriteFile(filepath.Join(srv.Dir, "d", "late"), nil, 0o644)
		}
	}
	o := DefaultOptions()
	m := mountGoNFSVia(t, srv, &o, func(tr sunrpc.Transport) sunrpc.Transport {
		hook.Transport = tr
		return hook
	})
	_, err := os.Stat(m.path("d"))
	check(t, err)
	for i := 0; pages.Load() == 0 && i < 100; i++ {
		if _, err := os.Stat(m.path(fmt.Sprintf("d/missing%d", i))); !os.IsNotExist(err) {
			t.Fatalf("missing%d: %v", i, err)
		}
	}
	if p := pages.Load(); p < 2 {
		t.Fatalf("the listing read %d pages; the test needs 2 or more", p)
	}
	if _, err := os.Stat(m.path("d/late")); err != nil {
		t.Errorf("a name made while the listing was read: %v", err)
	}
	if _, err := os.Stat(m.path("d/" + long + "0599")); err != nil {
		t.Errorf("a name the listing brought: %v", err)
	}
}

// TestListingRefused: a directory whose listing the server refuses (one
// its caller may search but not read) keeps working by LOOKUP, and the
// refused READDIRPLUS is not retried at every turn.
func TestListingRefused(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	serverDir(t, srv.Dir, "d", 3, func(i int) string { return fmt.Sprintf("old%d", i) })
	o := DefaultOptions()
	m, rec := mountRecorded(t, srv, &o, MountConfig{})
	rec.mu.Lock()
	rec.refuse = func(c sentCall) bool { return c.proc == nfs3.ProcReaddirplus }
	rec.mu.Unlock()
	_, err := os.Stat(m.path("d"))
	check(t, err)
	d := opDeltas(m)
	const n = 30
	for i := range n {
		check(t, os.WriteFile(m.path(fmt.Sprintf("d/new%d", i)), nil, 0o644))
	}
	if l, rp := d(nfs3.ProcLookup), d(nfs3.ProcReaddirplus); l != n || rp < 1 || rp > 4 {
		t.Errorf("%d creates, listing refused: %d LOOKUP, %d READDIRPLUS; want %d, 1 to 4", n, l, rp, n)
	}
	for i := range n {
		if _, err := os.Stat(filepath.Join(srv.Dir, "d", fmt.Sprintf("new%d", i))); err != nil {
			t.Error(err)
		}
	}
}
