package fusefs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nfsrdma/nfsrdma/nfs3"
)

// listNames lists dir through the mount, sorted.
func listNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	check(t, err)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	slices.Sort(out)
	return out
}

// TestListCache: a directory listed again soon after is listed from the
// kernel's copy, with no READDIRPLUS request or call (GNU rm -rf opens
// every directory twice); a change this mount makes is in the next listing
// at once, and once the copy is older than the listings' attributes stay
// trusted the next listing asks the server again and finds what another
// client made meanwhile.
func TestListCache(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	const n = 20
	oldDir(t, srv.Dir, n)
	var skew atomic.Int64
	m, _ := mountRecordedSetup(t, srv, nil, MountConfig{}, func(f *FS) {
		f.now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	})
	first := listNames(t, m.path("d"))
	if len(first) != n {
		t.Fatalf("listing: %d names, want %d", len(first), n)
	}
	d, before := opDeltas(m), fuseRequests(m)
	again := listNames(t, m.path("d"))
	if !slices.Equal(again, first) {
		t.Errorf("listed again: %v, want %v", again, first)
	}
	if rp, frp := d(nfs3.ProcReaddirplus), fuseRequests(m)["READDIRPLUS"]-before["READDIRPLUS"]; rp != 0 || frp != 0 {
		t.Errorf("listed again at once: %d READDIRPLUS calls and %d READDIRPLUS requests, want none", rp, frp)
	}
	check(t, os.WriteFile(m.path("d/mine"), nil, 0o644))
	if got := listNames(t, m.path("d")); !slices.Contains(got, "mine") || len(got) != n+1 {
		t.Errorf("after a create through the mount: %v, want mine among %d", got, n+1)
	}
	// Made by another client; the mount's clock moves past plusFresh.
	check(t, os.WriteFile(filepath.Join(srv.Dir, "d", "theirs"), nil, 0o644))
	skew.Add(int64(m.fsys.plusFresh() + time.Second))
	d = opDeltas(m)
	if got := listNames(t, m.path("d")); !slices.Contains(got, "theirs") {
		t.Errorf("a copy older than %v: %v, want theirs listed", m.fsys.plusFresh(), got)
	}
	if rp := d(nfs3.ProcReaddirplus); rp == 0 {
		t.Errorf("a copy older than %v: listed with no READDIRPLUS call", m.fsys.plusFresh())
	}
	// The entries of that listing came with their attributes: stat needs
	// no call.
	d = opDeltas(m)
	for i := range n {
		_, err := os.Stat(m.path(fmt.Sprintf("d/old%d", i)))
		check(t, err)
	}
	if g, l := d(nfs3.ProcGetattr), d(nfs3.ProcLookup); g+l != 0 {
		t.Errorf("stat of %d names just listed: %d GETATTR and %d LOOKUP calls, want none", n, g, l)
	}
}

// TestListCacheOff: with lookupcache=none or noac every listing asks the
// server.
func TestListCacheOff(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(*Options)
	}{
		{"lookupcache=none", func(o *Options) { o.LookupCache = LookupCacheNone }},
		{"noac", func(o *Options) { o.NoAC() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := startGoNFS(t, backendDisk)
			oldDir(t, srv.Dir, 5)
			o := DefaultOptions()
			c.set(&o)
			m := mountGoNFS(t, srv, &o)
			listNames(t, m.path("d"))
			d := opDeltas(m)
			listNames(t, m.path("d"))
			if rp := d(nfs3.ProcReaddirplus); rp == 0 {
				t.Errorf("listed again with %s: no READDIRPLUS call", c.name)
			}
		})
	}
}

// TestListCacheRootUnreadable: root's listing of a directory others may not
// read, on a shared mount whose server may squash root, is the server's
// each time: a squashed root would be refused there, and must not read the
// names another listing left in the kernel's copy.
func TestListCacheRootUnreadable(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	check(t, os.Chmod(srv.Dir, 0o755))
	check(t, os.Mkdir(filepath.Join(srv.Dir, "d"), 0o751))
	check(t, os.WriteFile(filepath.Join(srv.Dir, "d", "f"), nil, 0o644))
	m, _ := mountRecorded(t, srv, nil, MountConfig{AllowOther: true})
	listNames(t, m.path("d"))
	d := opDeltas(m)
	listNames(t, m.path("d"))
	if rp := d(nfs3.ProcReaddirplus); rp == 0 {
		t.Errorf("root listed a 0751 directory again from the kernel's copy, the server's squashing unknown")
	}
}

// TestListCacheSeek: a handle opened for the kernel's copy, asked for an
// offset it did not hand out (the copy's, after the copy was dropped under
// a reader), reads from the start to it and goes on with the entries a
// reader that far would get, under the same offsets; a handle not opened
// for the copy refuses such an offset.
func TestListCacheSeek(t *testing.T) {
	srv := startGoNFS(t, backendDisk)
	for i := range 12 {
		check(t, os.WriteFile(filepath.Join(srv.Dir, fmt.Sprintf("f%02d", i)), nil, 0o644))
	}
	m := mountGoNFS(t, srv, nil)
	ctx := context.Background()
	root := m.fsys.root
	read := func(h *dirHandle) map[uint64]string {
		out := map[uint64]string{}
		for {
			e, errno := h.Readdirent(ctx)
			if errno != 0 {
				t.Fatalf("Readdirent: %v", errno)
			}
			if e == nil {
				return out
			}
			out[e.Off] = e.Name
		}
	}
	fh, flags, errno := root.OpendirHandle(ctx, 0)
	if errno != 0 || flags != fuse.FOPEN_CACHE_DIR|fuse.FOPEN_KEEP_CACHE {
		t.Fatalf("OpendirHandle: flags %#x, %v; want CACHE_DIR|KEEP_CACHE", flags, errno)
	}
	all := read(fh.(*dirHandle))
	if len(all) < 12 {
		t.Fatalf("listing: %v", all)
	}
	fh2, _, _ := root.OpendirHandle(ctx, 0)
	h2 := fh2.(*dirHandle)
	const off = 7
	if errno := h2.Seekdir(ctx, off); errno != 0 {
		t.Fatalf("Seekdir(%d) on a fresh handle: %v", off, errno)
	}
	rest := read(h2)
	for o, name := range all {
		if o > off && rest[o] != name {
			t.Errorf("offset %d after the seek: %q, want %q", o, rest[o], name)
		}
		if o <= off && rest[o] != "" {
			t.Errorf("offset %d, before the seek's, listed after it: %q", o, rest[o])
		}
	}
	if len(rest) != len(all)-off {
		t.Errorf("after a seek to %d of %d entries: %d listed", off, len(all), len(rest))
	}
	plain := &dirHandle{n: root}
	if errno := plain.Seekdir(ctx, off); errno != syscall.EINVAL {
		t.Errorf("Seekdir(%d) on a fresh handle not opened for the copy: %v, want EINVAL", off, errno)
	}
}
